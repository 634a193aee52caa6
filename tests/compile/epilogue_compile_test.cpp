// Generated epilogues (codegen/epilogue_source.h) compile with NVRTC for sm_90a without spills,
// for programs that use every operation, every tensor shape and element type, and auxiliary
// outputs, inside the test kernel (epilogue_test_kernel.h).
#include <gtest/gtest.h>

#include <string>

#include "../epilogue_test_kernel.h"
#include "clean_compile.h"
#include "epilogue/program.h"
#include "gemmkit/error.h"

namespace gemmkit {
namespace {

void expect_compiles(const std::string& text, const codegen::EpilogueTypes& types) {
  const epilogue::Program program = epilogue::parse(text);
  testing::expect_clean_compile(testing::epilogue_test_source(program, types), testing::kEpilogueTestEntry, text);
}

TEST(EpilogueSource, EveryOperationCompiles) {
  using DType::bf16, DType::f16, DType::f32;
  expect_compiles("acc", {});
  expect_compiles("silu(acc + bias[n]) * gate[m, n]", {{bf16, f16}, {}});
  expect_compiles("h = acc * scale[m] + bias[n]; pre[m, n] = h; out2[m, n] = bf16(h); gelu(h)",
                  {{f32, bf16}, {bf16, f32}});
  expect_compiles("relu(acc) + relu2(acc) + gelu_tanh(acc) + sigmoid(acc) + tanh(acc) + exp(-acc) + "
                  "log(abs(acc) + 1) + neg(acc) + square(acc) + sqrt(abs(acc)) + rsqrt(abs(acc) + 1e-6) + "
                  "identity(acc) - acc / 3",
                  {});
  expect_compiles("f16(clamp(max(acc, x[m, n]) - min(acc, 0.5), -7, 7)) * f32(acc)", {{f32}, {}});
  expect_compiles("clamp(acc, -7, 7) * 1.702", {});
}

TEST(EpilogueSource, NeedsOneTypeATensorAndAtMostEightTensors) {
  const epilogue::Program two = epilogue::parse("acc + a[n] + b[m]");
  EXPECT_THROW(codegen::epilogue_source(two, {{DType::bf16}, {}}), Error);
  const epilogue::Program nine =
      epilogue::parse("acc + a[n] + b[n] + c[n] + d[n] + f[n] + g[n] + h[n] + i[n] + j[n]");
  EXPECT_THROW(codegen::epilogue_source(nine, {std::vector<DType>(9, DType::f32), {}}), Error);
}

}  // namespace
}  // namespace gemmkit
