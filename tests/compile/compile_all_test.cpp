// Every kernel configuration compiles with NVRTC for sm_90a, and ptxas reports no spills and
// no stack frame. Needs no GPU. The configurations are compile_cases.h's.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "codegen/kernel_source.h"
#include "dispatch/cost_model.h"
#include "dispatch/operand_access.h"
#include "clean_compile.h"
#include "compile_cases.h"
#include "sass.h"

namespace gemmkit {
namespace {

using testing::CompileCase;
using testing::expect_clean_compile;

void expect_clean_compiles(const std::vector<CompileCase>& cases) {
  for (const CompileCase& c : cases) {
    expect_clean_compile(codegen::gemm_source(c.config), codegen::gemm_kernel_name(c.config), c.what);
  }
}

class TmaKernelCompiles : public ::testing::TestWithParam<CompileCase> {};

TEST_P(TmaKernelCompiles, WithoutSpills) {
  const CompileCase& c = GetParam();
  expect_clean_compile(codegen::gemm_source(c.config), codegen::kGemmKernel, c.what);
}

std::string tile_case_name(const ::testing::TestParamInfo<CompileCase>& info) {
  const KernelConfig& c = info.param.config;
  return std::to_string(c.tile_m) + "x" + std::to_string(c.tile_n) + "_" + (c.a_k_major ? "K" : "M") +
         (c.b_k_major ? "K" : "N") + "_cluster" + std::to_string(c.cluster_m) + (c.splits > 1 ? "_splitK" : "");
}

INSTANTIATE_TEST_SUITE_P(AllTiles, TmaKernelCompiles, ::testing::ValuesIn(testing::tile_cases()), tile_case_name);

TEST(TmaKernelVariants, EveryTileWithCCompilesWithoutSpills) { expect_clean_compiles(testing::c_cases()); }

TEST(TmaKernelVariants, ColumnStoresCompileWithoutSpills) { expect_clean_compiles(testing::column_store_cases()); }

TEST(TmaKernelVariants, SplitKWithEveryEpilogueCompilesWithoutSpills) {
  expect_clean_compiles(testing::split_k_cases());
}

TEST(TmaKernelVariants, RealignedOperandsCompileWithoutSpills) { expect_clean_compiles(testing::realign_cases()); }

TEST(TmaKernelVariants, RowClassesCompileWithoutSpills) { expect_clean_compiles(testing::row_class_cases()); }

TEST(TmaKernelVariants, WidenedFourBitWeightsCompileWithoutSpills) { expect_clean_compiles(testing::widen_cases()); }

TEST(TmaKernelVariants, CompileWithoutSpills) { expect_clean_compiles(testing::type_cases()); }

TEST(TmaKernelVariants, EightBitTilesCompileWithoutSpillsInEveryMode) {
  expect_clean_compiles(testing::eight_bit_cases());
}

// The grouped kernel (grouped_scheduler.cuh) on every tile shape tile_takes_groups allows: 16-bit
// groups of rows contiguous and masked, each with a bf16 and an f32 D, clustered where the tile is
// not narrow, B N-major (the input gradient) on every other, direct stores once; groups along K
// (the weight gradient: A and B MN-major) on every tile that takes C, accumulating into an f32 D,
// with C on every other where the tile takes it; FP8 in the tensor, rowwise and block modes of
// MoE (tokens 1x128, weights 128x128) on every 8-bit tile; and FP8 along K.
std::vector<CompileCase> grouped_cases() {
  std::vector<CompileCase> cases;
  auto add = [&](KernelConfig config, const std::string& what) {
    config.group_capacity = 256;
    config.b_batched = !config.group_along_k;
    config.a_batched = config.group_layout == GroupLayout::masked;
    config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
    if (tile_takes_groups({config.tile_m, config.tile_n}, config)) cases.push_back({config, config.name() + what});
  };
  int i = 0;
  for (TileShape tile : tile_shapes()) {
    for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked}) {
      for (DType out : {DType::bf16, DType::f32}) {
        KernelConfig config = with_tile(KernelConfig{}, tile);
        config.group_layout = layout;
        config.out = out;
        config.cluster_m = is_narrow(tile) ? 1 : 2;
        config.b_k_major = is_narrow(tile) || i % 2 == 0;
        if (i == 2) config.tma_store = false;
        add(config, " " + std::string(dtype_name(out)));
        ++i;
      }
    }
  }
  i = 0;
  for (TileShape tile : tile_shapes()) {
    if (!tile_takes_c(tile) || is_narrow(tile)) continue;
    KernelConfig config = with_tile(KernelConfig{}, tile);
    config.group_along_k = true;
    config.a_k_major = config.b_k_major = false;
    config.cluster_m = 2;
    config.out = config.c = DType::f32;
    config.has_c = i++ % 2 == 0;
    if (!tile_takes_groups(tile, config)) config.has_c = false;
    add(config, config.has_c ? " with C" : "");
  }
  for (TileShape tile : tile_shapes(true)) {
    for (ScaleMode mode : {ScaleMode::tensor, ScaleMode::rowwise, ScaleMode::block}) {
      if (!tile_takes_scales(tile, mode, mode)) continue;
      KernelConfig config = with_tile(KernelConfig{}, tile);
      config.in = config.in_b = DType::e4m3;
      config.scale_a = config.scale_b = mode;
      config.scale_b_mn = mode == ScaleMode::block ? 128 : 1;
      config.cluster_m = is_narrow(tile) ? 1 : 2;
      add(config, " e4m3 scales " + std::string(scale_mode_name(mode)));
    }
  }
  // FP8 along K (the weight gradient, staged K-major): e5m2 x e4m3 with tensor and rowwise scales,
  // an f32 D, with C on every other tile.
  i = 0;
  for (TileShape tile : tile_shapes(true)) {
    if (!tile_takes_c(tile) || is_narrow(tile)) continue;
    for (ScaleMode mode : {ScaleMode::tensor, ScaleMode::rowwise}) {
      KernelConfig config = with_tile(KernelConfig{}, tile);
      config.group_along_k = true;
      config.in = DType::e5m2;
      config.in_b = DType::e4m3;
      config.scale_a = config.scale_b = mode;
      config.cluster_m = 2;
      config.out = config.c = DType::f32;
      config.has_c = i++ % 2 == 0 && tile_takes_groups(tile, config);
      add(config, std::string(" along K scales ") + std::string(scale_mode_name(mode)) + (config.has_c ? " with C" : ""));
    }
  }
  return cases;
}

TEST(TmaKernelVariants, GroupedCompilesWithoutSpills) { expect_clean_compiles(grouped_cases()); }

// Block-scaled 8-bit kernels read a K block's scales into registers before its first wgmma
// (promote.cuh), so that no shared-memory load sits between two wgmma instructions of a K block,
// where the tensor cores would wait for it: checked in the SASS of every block-scaled kernel
// eight_bit_cases and grouped_cases build (one and two partial accumulators, split, clustered,
// A or B in 128x128 blocks, B in 128x1 blocks, grouped rows). Skipped where no cuobjdump is found.
TEST(TmaKernelVariants, BlockScalesAreReadOutsideEachKBlocksWgmma) {
  const std::optional<std::string> cuobjdump = testing::find_cuobjdump();
  if (!cuobjdump) GTEST_SKIP() << "no cuobjdump (set GEMMKIT_CUOBJDUMP)";
  std::vector<CompileCase> cases;
  for (const std::vector<CompileCase>& from : {testing::eight_bit_cases(), grouped_cases()}) {
    for (const CompileCase& c : from) {
      if (c.config.scale_a == ScaleMode::block || c.config.scale_b == ScaleMode::block) cases.push_back(c);
    }
  }
  ASSERT_GT(cases.size(), 10u);
  for (const CompileCase& c : cases) {
    const runtime::CompiledKernel k = runtime::compile_kernel(codegen::gemm_source(c.config), codegen::kGemmKernel);
    const std::optional<std::string> sass = testing::disassemble(*cuobjdump, k.cubin, "gemmkit-sass-test");
    ASSERT_TRUE(sass) << c.what << ": " << *cuobjdump << " failed";
    const testing::WgmmaBatches b = testing::wgmma_batches(*sass);
    EXPECT_GT(b.batches, 0) << c.what << ": no wgmma batch found in the SASS";
    EXPECT_EQ(b.loads_among, 0) << c.what << ": " << b.first_load_among;
  }
}

TEST(SimtKernels, FallbackAndGemvCompileForEveryTypeCombination) { expect_clean_compiles(testing::simt_cases()); }

// NVRTC's own cache would hand back a program compiled before without ptxas' report.
TEST(TmaKernelVariants, CompilingTwiceReportsBothTimes) {
  KernelConfig config;
  config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
  for (int time = 0; time < 2; ++time) {
    expect_clean_compile(codegen::gemm_source(config), codegen::kGemmKernel, config.name() + ", time " + std::to_string(time));
  }
}

TEST(ReferenceKernel, Compiles) {
  expect_clean_compile(codegen::reference_source({.has_c = true}), codegen::kReferenceKernel,
                       "reference");
}

}  // namespace
}  // namespace gemmkit
