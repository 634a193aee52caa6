// The kernel the epilogue tests build around a generated epilogue (codegen/epilogue_source.h):
// one element of D a thread, (m, n) = (blockIdx.x, threadIdx.x) of batch blockIdx.y, whose GEMM
// result is m + n (acc; a dual GEMM's second product, acc2, is m - n); D is f32, `ld` elements a
// row, batches gridDim.x rows apart; each reduction's value added into its output an element at a
// time. The compile tests
// compile it, the GPU tests run it against the double-precision evaluator.
#pragma once

#include <string>

#include "codegen/epilogue_source.h"
#include "codegen/kernel_source.h"

namespace gemmkit::testing {

inline constexpr const char* kEpilogueTestEntry = "gemmkit_epilogue_test";

inline std::string epilogue_test_source(const epilogue::Program& program, const codegen::EpilogueTypes& types) {
  return codegen::expand_includes(codegen::epilogue_source(program, types) + R"(
using namespace gemmkit::sm90;
extern "C" __global__ void gemmkit_epilogue_test(const __grid_constant__ EpilogueParams e, float* d, long long ld) {
  const i64 b = blockIdx.y, m = blockIdx.x, n = threadIdx.x;
  float aux[kEpilogueStores > 0 ? kEpilogueStores : 1], red[kEpilogueReductions > 0 ? kEpilogueReductions : 1];
  d[(b * gridDim.x + m) * ld + n] = epilogue_value(float(m + n), float(m - n), e, b, m, n, aux, red);
  epilogue_store(e, aux, b, m, n);
  for (int r = 0; r < kEpilogueReductions; ++r) epilogue_reduce(e, r, b, m, n, red[r]);
}
)",
                                  "");
}

}  // namespace gemmkit::testing
