// A fused epilogue (codegen/epilogue_source.h) at one element of D, for the GEMM kernels' store
// paths. kernel_config.cuh (generated) defines kEpilogue, kEpilogueTransposed, kEpilogueStores,
// kEpilogueReductions, epilogue_value, epilogue_store and epilogue_reduce; without an epilogue
// the value passes through unchanged.
#pragma once

#include "kernel_config.cuh"
#include "params.h"

namespace gemmkit::sm90 {

constexpr int kReductionSlots = kEpilogueReductions > 0 ? kEpilogueReductions : 1;

// D's value from the GEMM's `value` (alpha A B + beta C) at the kernel's element (b, m, n), inside
// the kernel's problem, and a dual GEMM's second product `value2` (alpha A B2; else unused); with
// `store`, the epilogue's auxiliary outputs there are written too, and its reductions' values
// are put in red[0, kEpilogueReductions) (zeros without: no element counts twice). Where the
// plan transposed the problem, the kernel's rows are D's columns: the epilogue, which indexes D,
// takes them swapped.
__device__ __forceinline__ float fused_value(float value, float value2, const GemmParams& p, i64 b, i64 m, i64 n,
                                             bool store, float* red) {
  if (!kEpilogue) return value;
  float aux[kEpilogueStores > 0 ? kEpilogueStores : 1];
  const i64 row = kEpilogueTransposed ? n : m, col = kEpilogueTransposed ? m : n;
  const float result = epilogue_value(value, value2, p.epilogue, b, row, col, aux, red);
  if (kEpilogueStores > 0 && store) epilogue_store(p.epilogue, aux, b, row, col);
#pragma unroll
  for (int r = 0; r < kEpilogueReductions; ++r) red[r] = store ? red[r] : 0.0f;
  return result;
}

// fused_value at an element inside D that a kernel stores on its own (the GEMV's, the
// fallback's), each reduction's value added into its output at once.
__device__ __forceinline__ float fused_element(float value, float value2, const GemmParams& p, i64 b, i64 m, i64 n) {
  float red[kReductionSlots];
  const float result = fused_value(value, value2, p, b, m, n, true, red);
#pragma unroll
  for (int r = 0; r < kEpilogueReductions; ++r) {
    epilogue_reduce(p.epilogue, r, b, kEpilogueTransposed ? n : m, kEpilogueTransposed ? m : n, red[r]);
  }
  return result;
}

}  // namespace gemmkit::sm90
