// Kernel source generation: the wgmma wrapper, the generated prelude and the kernel entry points.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "codegen/kernel_source.h"

namespace gemmkit::codegen {
namespace {

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

TEST(KernelSourceWgmma, OperandsMatchTileWidthTypeAndMajorness) {
  for (int n : {128, 192, 256}) {
    for (DType type : {DType::bf16, DType::f16}) {
      for (bool a_k : {true, false}) {
        for (bool b_k : {true, false}) {
          const std::string text = wgmma_function(n, type, type, a_k, b_k);
          SCOPED_TRACE(text);
          const std::string name(dtype_name(type)), other(dtype_name(type == DType::bf16 ? DType::f16 : DType::bf16));
          const int registers = n / 2;
          EXPECT_TRUE(contains(text, "m64n" + std::to_string(n) + "k16"));
          EXPECT_EQ(count(text, "." + name), 2u);
          EXPECT_EQ(count(text, "." + other), 0u);
          EXPECT_EQ(count(text, "\"+f\""), size_t(registers));
          EXPECT_TRUE(contains(text, "d[" + std::to_string(registers - 1) + "]"));
          EXPECT_FALSE(contains(text, "d[" + std::to_string(registers) + "]"));
          // Descriptors follow the accumulators; then scale-d, two scales, and the A, B transposes.
          EXPECT_TRUE(contains(text, "}, %" + std::to_string(registers) + ", %" + std::to_string(registers + 1) +
                                         ", p, 1, 1, " + (a_k ? "0" : "1") + ", " + (b_k ? "0" : "1") + ";"));
          EXPECT_TRUE(contains(text, "setp.ne.b32 p, %" + std::to_string(registers + 2) + ","));
        }
      }
    }
  }
}

KernelConfig tma_config() {
  KernelConfig c;
  c.tile_m = 64;
  c.tile_n = 192;
  c.stages = 5;
  c.a_k_major = false;
  c.b_k_major = true;
  c.tma_store = false;
  c.in = c.in_b = DType::f16;
  return c;
}

TEST(KernelSource, GemmSourceCarriesTheConfig) {
  const KernelConfig c = tma_config();
  const std::string source = gemm_source(c);
  EXPECT_TRUE(contains(source, "constexpr int kTileM = " + std::to_string(c.tile_m) + ";"));
  EXPECT_TRUE(contains(source, "constexpr int kTileN = " + std::to_string(c.tile_n) + ";"));
  EXPECT_TRUE(contains(source, "constexpr int kStages = " + std::to_string(c.stages) + ";"));
  EXPECT_TRUE(contains(source, "constexpr bool kAKMajor = false;"));
  EXPECT_TRUE(contains(source, "constexpr bool kBKMajor = true;"));
  EXPECT_TRUE(contains(source, "constexpr bool kTmaStore = false;"));
  EXPECT_TRUE(contains(source, "constexpr unsigned kSmemBytes = " + std::to_string(c.smem_bytes()) + ";"));
  EXPECT_TRUE(contains(source, wgmma_function(c.tile_n, c.in, c.in_b, c.a_k_major, c.b_k_major)));
  EXPECT_TRUE(contains(source, kGemmKernel));
  EXPECT_STREQ(gemm_kernel_name(c), kGemmKernel);
  EXPECT_FALSE(contains(source, "#pragma once"));

  KernelConfig flipped = c;
  flipped.a_k_major = true;
  flipped.tma_store = true;
  const std::string flipped_source = gemm_source(flipped);
  EXPECT_TRUE(contains(flipped_source, "constexpr bool kAKMajor = true;"));
  EXPECT_TRUE(contains(flipped_source, "constexpr bool kTmaStore = true;"));
}

TEST(KernelSource, FallbackSourceHasOnlyTheFallbackKernel) {
  KernelConfig c;
  c.kind = KernelKind::fallback;
  const std::string source = gemm_source(c);
  EXPECT_TRUE(contains(source, kFallbackKernel));
  EXPECT_FALSE(contains(source, kGemmKernel));
  EXPECT_FALSE(contains(source, "#pragma once"));
  EXPECT_STREQ(gemm_kernel_name(c), kFallbackKernel);
}

TEST(KernelSource, SourceIsDeterministicPerConfig) {
  const KernelConfig c = tma_config();
  KernelConfig other = c;
  other.stages = 4;
  EXPECT_EQ(gemm_source(c), gemm_source(c));
  EXPECT_NE(gemm_source(c), gemm_source(other));
}

// The split count is a launch parameter: one source (so one binary) for every count above 1.
TEST(KernelSource, SplitKSourceIsSharedByEverySplitCount) {
  KernelConfig two = tma_config(), nine = tma_config();
  two.splits = 2;
  nine.splits = 9;
  EXPECT_EQ(gemm_source(two), gemm_source(nine));
  EXPECT_TRUE(contains(gemm_source(two), "constexpr bool kSplitK = true;"));
  EXPECT_TRUE(contains(gemm_source(tma_config()), "constexpr bool kSplitK = false;"));
}

// Every #include of a kernel file is expanded where it first appears, and only there.
TEST(KernelSource, IncludesExpandOnceInPlace) {
  const std::string text = expand_includes("#include \"common.cuh\"\n#include \"utility.cuh\"\n// end\n", "");
  EXPECT_EQ(count(text, "// ---- common.cuh\n"), 1u);
  EXPECT_EQ(count(text, "// ---- utility.cuh\n"), 1u);
  EXPECT_LT(text.find("// ---- utility.cuh"), text.find("__device__ __forceinline__ u32 smem_u32"));
  EXPECT_FALSE(contains(text, "#include \""));
  EXPECT_EQ(text.substr(text.size() - 7), "// end\n");
  EXPECT_THROW(expand_includes("#include \"missing.cuh\"\n", ""), std::logic_error);
}

TEST(KernelSource, EveryKernelSourceIsSelfContained) {
  KernelConfig gemv;
  gemv.kind = KernelKind::gemv;
  gemv.tile_n = 8;
  for (const std::string& source : {gemm_source(tma_config()), gemm_source(gemv), reference_source({})}) {
    EXPECT_EQ(source.rfind("// gemmkit ", 0), 0u);
    EXPECT_FALSE(contains(source, "#include \""));
    EXPECT_EQ(count(source, "// ---- " + std::string(kConfigHeader) + "\n"), 1u);
    EXPECT_EQ(count(source, "// ---- utility.cuh\n"), 1u);
  }
  EXPECT_TRUE(contains(gemm_source(gemv), "constexpr int kGemvColumns = 1;"));
}

TEST(KernelSource, ReferenceSourceHasTheReferenceKernel) {
  const std::string source = reference_source({.has_c = true});
  EXPECT_TRUE(contains(source, kReferenceKernel));
  EXPECT_TRUE(contains(source, "constexpr bool kHasC = true;"));
  EXPECT_FALSE(contains(source, kGemmKernel));
  EXPECT_FALSE(contains(source, "#pragma once"));
  EXPECT_NE(source, reference_source({}));
}

// W4A8's group scales may be bf16 or f16 whatever A is: the reference kernel for each reads its
// own type, so the two sources (the kernel cache's keys) differ.
TEST(KernelSource, ReferenceSourceDependsOnTheGroupScalesType) {
  const OperandTypes bf16_scales{.a = DType::e4m3, .b = DType::u4, .scale_b = ScaleMode::group};
  OperandTypes f16_scales = bf16_scales;
  f16_scales.group_scale = DType::f16;
  EXPECT_EQ(bf16_scales.group_scale, DType::bf16);
  EXPECT_FALSE(reference_source(bf16_scales) == reference_source(f16_scales)) << "the same source for both types";
}

}  // namespace
}  // namespace gemmkit::codegen
