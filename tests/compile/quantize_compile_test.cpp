// The quantisation kernels compile with NVRTC for sm_90a, and ptxas reports no spills and no
// stack frame: the FP8 quantiser with every input, fp8 and scale type, and every vector width
// with and without sub-lane blocks; the 4-bit quantiser with every weight type, format (u4 with
// bf16 or f16 scales, with and without zero points; e2m1 with ue8m0 scales). Needs no GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/quantize.h"
#include "api/quantize_4bit.h"
#include "clean_compile.h"

namespace gemmkit {
namespace {

class QuantizeKernelCompiles : public ::testing::TestWithParam<QuantizeVariant> {};

TEST_P(QuantizeKernelCompiles, WithoutSpills) {
  const QuantizeVariant v = GetParam();
  const std::string what = std::string(dtype_name(v.x)) + "->" + std::string(dtype_name(v.q)) + " scales " +
                           std::string(dtype_name(v.scales)) + (v.power_of_two ? " pow2" : "") + " vec " +
                           std::to_string(v.vec) + (v.sub_lane ? " sub-lane" : "");
  testing::expect_clean_compile(quantize_source(v), kQuantizeKernel, what);
}

// Every type combination at the widest vector of its input, and every vector width (with and
// without sub-lane blocks) for one 16-bit and the 32-bit input.
std::vector<QuantizeVariant> variants() {
  std::vector<QuantizeVariant> all;
  for (DType x : {DType::bf16, DType::f16, DType::f32}) {
    const int widest = x == DType::f32 ? 4 : 8;
    for (DType q : {DType::e4m3, DType::e5m2}) {
      all.push_back({x, q, DType::f32, false, widest, false});
      all.push_back({x, q, DType::f32, true, widest, false});
      all.push_back({x, q, DType::ue8m0, true, widest, true});
    }
  }
  for (DType x : {DType::bf16, DType::f32}) {
    for (bool pow2 : {false, true}) {
      all.push_back({x, DType::e4m3, DType::f32, pow2, 1, false});
      all.push_back({x, DType::e4m3, DType::f32, pow2, 4, true});
      if (x != DType::f32) {
        all.push_back({x, DType::e4m3, DType::f32, pow2, 4, false});
        all.push_back({x, DType::e4m3, DType::f32, pow2, 8, true});
      }
    }
  }
  return all;
}

std::string variant_name(const ::testing::TestParamInfo<QuantizeVariant>& info) {
  const QuantizeVariant& v = info.param;
  return std::string(dtype_name(v.x)) + "_" + std::string(dtype_name(v.q)) + "_" + std::string(dtype_name(v.scales)) +
         (v.power_of_two && v.scales != DType::ue8m0 ? "_pow2" : "") + "_vec" + std::to_string(v.vec) +
         (v.sub_lane ? "_sub" : "");
}

INSTANTIATE_TEST_SUITE_P(Variants, QuantizeKernelCompiles, ::testing::ValuesIn(variants()), variant_name);

class Quantize4bitKernelCompiles : public ::testing::TestWithParam<Quantize4bitVariant> {};

TEST_P(Quantize4bitKernelCompiles, WithoutSpills) {
  const Quantize4bitVariant v = GetParam();
  const std::string what = std::string(dtype_name(v.w)) + "->" + std::string(dtype_name(v.q)) + " scales " +
                           std::string(dtype_name(v.scales)) + (v.zeros ? " zeros" : "");
  testing::expect_clean_compile(quantize_4bit_source(v), kQuantize4bitKernel, what);
}

// Every combination quantize_int4 and quantize_mxfp4 can run: 3 weight types x (u4 with bf16 or
// f16 scales, with or without zero points, and e2m1 with ue8m0 scales).
std::vector<Quantize4bitVariant> variants_4bit() {
  std::vector<Quantize4bitVariant> all;
  for (DType w : {DType::bf16, DType::f16, DType::f32}) {
    for (DType scales : {DType::bf16, DType::f16}) {
      for (bool zeros : {false, true}) all.push_back({w, DType::u4, scales, zeros});
    }
    all.push_back({w, DType::e2m1, DType::ue8m0, false});
  }
  return all;
}

std::string variant_4bit_name(const ::testing::TestParamInfo<Quantize4bitVariant>& info) {
  const Quantize4bitVariant& v = info.param;
  return std::string(dtype_name(v.w)) + "_" + std::string(dtype_name(v.q)) + "_" + std::string(dtype_name(v.scales)) +
         (v.zeros ? "_zeros" : "");
}

INSTANTIATE_TEST_SUITE_P(Variants, Quantize4bitKernelCompiles, ::testing::ValuesIn(variants_4bit()), variant_4bit_name);

}  // namespace
}  // namespace gemmkit
