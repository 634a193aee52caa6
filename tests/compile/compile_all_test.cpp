// Every kernel configuration compiles with NVRTC for sm_90a, and ptxas reports no spills and
// no stack frame. Needs no GPU.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_source.h"
#include "dispatch/config.h"
#include "clean_compile.h"

namespace gemmkit {
namespace {

using testing::expect_clean_compile;

// The TMA kernel: every tile shape with every operand majorness, alone and in a cluster of
// two, at the most stages that fit; tiles up to kMaxSplitTileN wide also with split-K. Narrow
// tiles as they run: B K-major, unclustered, with direct stores.
struct TmaCase {
  TileShape tile;
  bool a_k_major, b_k_major;
  int cluster_m;
  int splits;
};

std::vector<TmaCase> tma_cases() {
  std::vector<TmaCase> cases;
  for (TileShape tile : tile_shapes()) {
    for (bool a_k : {true, false}) {
      for (bool b_k : {true, false}) {
        for (int cluster : {1, 2}) {
          if (is_narrow(tile) && (!b_k || cluster > 1)) continue;
          cases.push_back({tile, a_k, b_k, cluster, 1});
          if (tile.n <= kMaxSplitTileN) cases.push_back({tile, a_k, b_k, cluster, 2});
        }
      }
    }
  }
  return cases;
}

class TmaKernelCompiles : public ::testing::TestWithParam<TmaCase> {};

TEST_P(TmaKernelCompiles, WithoutSpills) {
  const TmaCase c = GetParam();
  KernelConfig config = with_tile(KernelConfig{}, c.tile);
  config.a_k_major = c.a_k_major;
  config.b_k_major = c.b_k_major;
  config.cluster_m = c.cluster_m;
  config.splits = c.splits;
  config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
  expect_clean_compile(codegen::gemm_source(config), codegen::kGemmKernel, config.name());
}

std::string tma_case_name(const ::testing::TestParamInfo<TmaCase>& info) {
  const TmaCase& c = info.param;
  return std::to_string(c.tile.m) + "x" + std::to_string(c.tile.n) + "_" + (c.a_k_major ? "K" : "M") +
         (c.b_k_major ? "K" : "N") + "_cluster" + std::to_string(c.cluster_m) + (c.splits > 1 ? "_splitK" : "");
}

INSTANTIATE_TEST_SUITE_P(AllTiles, TmaKernelCompiles, ::testing::ValuesIn(tma_cases()), tma_case_name);

// C on every tile that takes it, alone and in a cluster, with 16-bit and f32 outputs, through
// TMA and direct stores (narrow tiles: unclustered and direct), and through the split-K
// reduction on the tiles it is built for.
TEST(TmaKernelVariants, EveryTileWithCCompilesWithoutSpills) {
  for (TileShape tile : tile_shapes()) {
    if (!tile_takes_c(tile)) continue;
    for (DType out : {DType::bf16, DType::f32}) {
      for (bool direct : {false, true}) {
        for (int cluster : {1, 2}) {
          if (is_narrow(tile) && (!direct || cluster > 1)) continue;
          for (int splits : {1, 2}) {
            if (splits > 1 && tile.n > kMaxSplitTileN) continue;
            KernelConfig config;
            config.tile_m = tile.m;
            config.tile_n = tile.n;
            config.cluster_m = cluster;
            config.splits = splits;
            config.tma_store = !direct;
            config.out = config.c = out;
            config.has_c = true;
            config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
            expect_clean_compile(codegen::gemm_source(config), codegen::kGemmKernel,
                                 config.name() + " ->" + std::string(dtype_name(out)) + " with C");
          }
        }
      }
    }
  }
}

// D stored by columns (problems the plan transposes) on every tile that stores through TMA: 16-bit
// D in a cluster of two, f32 D with C alone, and through the split-K reduction where it is built.
TEST(TmaKernelVariants, ColumnStoresCompileWithoutSpills) {
  for (TileShape tile : tile_shapes()) {
    if (is_narrow(tile)) continue;
    for (DType out : {DType::bf16, DType::f32}) {
      for (int splits : {1, 2}) {
        if (splits > 1 && tile.n > kMaxSplitTileN) continue;
        KernelConfig config = with_tile(KernelConfig{}, tile);
        config.d_by_columns = true;
        config.splits = splits;
        config.cluster_m = out == DType::f32 ? 1 : 2;
        config.out = config.c = out;
        config.has_c = out == DType::f32 && tile_takes_c(tile);
        config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
        expect_clean_compile(codegen::gemm_source(config), codegen::kGemmKernel,
                             config.name() + " ->" + std::string(dtype_name(out)));
      }
    }
  }
}

// The split-K reduction with every epilogue: each output type, with and without C, through TMA
// and direct stores (narrow tiles: direct), batched or not, on the 16-bit tiles it is built for.
TEST(TmaKernelVariants, SplitKWithEveryEpilogueCompilesWithoutSpills) {
  for (TileShape tile : tile_shapes()) {
    if (tile.n > kMaxSplitTileN) continue;
    for (DType out : {DType::bf16, DType::f16, DType::f32}) {
      for (bool has_c : {false, true}) {
        for (bool direct : {false, true}) {
          if (is_narrow(tile) && !direct) continue;
          for (bool batched : {false, true}) {
            KernelConfig config;
            config.tile_m = tile.m;
            config.tile_n = tile.n;
            config.splits = 2;
            config.tma_store = !direct;
            config.out = config.c = out;
            config.has_c = has_c;
            config.a_batched = config.b_batched = batched;
            config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
            expect_clean_compile(codegen::gemm_source(config), codegen::kGemmKernel,
                                 config.name() + " ->" + std::string(dtype_name(out)) + (has_c ? " with C" : "") +
                                     (batched ? " batched" : ""));
          }
        }
      }
    }
  }
}

// Realigned operands (A, B or both) on every tile that realigns and operand majorness,
// unclustered, split or not, batched, as max_stages fits them beside their landing rows.
TEST(TmaKernelVariants, RealignedOperandsCompileWithoutSpills) {
  for (TileShape tile : tile_shapes()) {
    if (!realigns_on(tile)) continue;
    for (bool a_k : {true, false}) {
      for (bool b_k : {true, false}) {
        if (is_narrow(tile) && !b_k) continue;
        for (auto [realign_a, realign_b] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
          KernelConfig config = with_tile(KernelConfig{}, tile);
          config.a_k_major = a_k;
          config.b_k_major = b_k;
          config.realign_a = realign_a;
          config.realign_b = realign_b;
          config.splits = tile.n <= kMaxSplitTileN && a_k ? 2 : 1;
          config.a_batched = config.b_batched = !b_k;
          config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
          if (config.stages < 2) continue;
          expect_clean_compile(codegen::gemm_source(config), codegen::kGemmKernel, config.name());
        }
      }
    }
  }
}

// Row classes on every 64-row tile up to kRowClassesMaxN wide, split or not, with C and an f32 D.
TEST(TmaKernelVariants, RowClassesCompileWithoutSpills) {
  for (TileShape tile : tile_shapes()) {
    if (tile.m != 64 || tile.n > kRowClassesMaxN) continue;
    for (int splits : {1, 2}) {
      for (bool c : {false, true}) {
        KernelConfig config = KernelConfig{};
        config.row_classes = true;
        config = with_tile(config, tile);
        config.splits = splits;
        config.has_c = c;
        config.out = config.c = c ? DType::f32 : DType::bf16;
        config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
        expect_clean_compile(codegen::gemm_source(config), codegen::kGemmKernel, config.name());
      }
    }
  }
}

// Element types, C, batching and the direct-store epilogue on the largest tile, where
// registers are tightest; and 192 x 176's row store.
TEST(TmaKernelVariants, CompileWithoutSpills) {
  for (DType in : {DType::bf16, DType::f16}) {
    for (DType out : {DType::bf16, DType::f16, DType::f32}) {
      for (bool direct : {false, true}) {
        KernelConfig config;
        config.tile_m = 128;
        config.tile_n = 256;
        config.tma_store = !direct;
        config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
        config.in = config.in_b = in;
        config.out = out;
        config.has_c = true;
        config.c = out;
        config.a_batched = config.b_batched = true;
        expect_clean_compile(codegen::gemm_source(config), codegen::kGemmKernel,
                             config.name() + " " + std::string(dtype_name(in)) + "->" + std::string(dtype_name(out)));
      }
    }
  }
  // Three consumer warpgroups (152 registers each) storing rows, in every layout and alone or in
  // a cluster: the tightest row store, which leaves last tile rows where they are (epilogue.cuh).
  for (int layout = 0; layout < 4; ++layout) {
    for (int cluster : {1, 2}) {
      KernelConfig config = with_tile(KernelConfig{}, {192, 176});
      config.a_k_major = layout % 2 == 0;
      config.b_k_major = layout / 2 == 0;
      config.cluster_m = cluster;
      config.tma_store = false;
      config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
      expect_clean_compile(codegen::gemm_source(config), codegen::kGemmKernel, config.name());
    }
  }
}

// 8-bit inputs: every tile the modes allow with each scaling mode (block as DeepSeek-V3's
// 1x128 and 128x128, and once the other way round, as a transposed problem has them), in a
// cluster of two, split where the tile allows it, and with C and an f32 output; e4m3 x e5m2 once.
TEST(TmaKernelVariants, EightBitTilesCompileWithoutSpillsInEveryMode) {
  for (TileShape tile : tile_shapes(true)) {
    for (ScaleMode mode : {ScaleMode::tensor, ScaleMode::rowwise, ScaleMode::block, ScaleMode::mx}) {
      if (!tile_takes_scales(tile, mode, mode)) continue;
      // Block variants 4 and 5: both operands' blocks along K only (A 1x128, B 128x1), alone and in a
      // cluster.
      for (int variant = 0; variant < (mode == ScaleMode::block ? 6 : 3); ++variant) {
        KernelConfig config;
        config.in = config.in_b = DType::e4m3;
        config.scale_a = config.scale_b = mode;
        config.scale_b_mn = mode == ScaleMode::block && variant < 3 ? 128 : 1;
        if (variant == 3) config.scale_a_mn = 128;
        if (variant == 5) config.cluster_m = 2;
        config.tile_m = tile.m;
        config.tile_n = tile.n;
        if (variant < 5) config.cluster_m = variant == 0 ? 2 : 1;
        config.splits = variant == 1 && tile.n <= kMaxSplitTileN ? 2 : 1;
        if (variant == 2) {
          config.in_b = DType::e5m2;
          config.out = config.c = DType::f32;
          config.has_c = true;
        }
        config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
        expect_clean_compile(codegen::gemm_source(config), codegen::kGemmKernel,
                             config.name() + " e4m3 scales " + std::to_string(int(mode)) + " variant " + std::to_string(variant));
      }
    }
  }
}

// 8-bit tiles split, with D stored without TMA (a row at a time, or element by element where
// KernelConfig::row_store says), in every mode the tile takes.
TEST(TmaKernelVariants, EightBitSplitTilesStoredWithoutTmaCompileWithoutSpills) {
  for (TileShape tile : tile_shapes(true)) {
    if (tile.n > kMaxSplitTileN) continue;
    for (ScaleMode mode : {ScaleMode::tensor, ScaleMode::rowwise, ScaleMode::block, ScaleMode::mx}) {
      if (!tile_takes_scales(tile, mode, mode)) continue;
      KernelConfig config;
      config.in = config.in_b = DType::e4m3;
      config.scale_a = config.scale_b = mode;
      config.tile_m = tile.m;
      config.tile_n = tile.n;
      config.splits = 2;
      config.tma_store = false;
      config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
      expect_clean_compile(codegen::gemm_source(config), codegen::kGemmKernel,
                           config.name() + " e4m3 scales " + std::to_string(int(mode)));
    }
  }
}

TEST(SimtKernels, FallbackAndGemvCompileForEveryTypeCombination) {
  for (KernelKind kind : {KernelKind::fallback, KernelKind::gemv}) {
    for (DType in : {DType::bf16, DType::f16}) {
      for (DType out : {DType::bf16, DType::f16, DType::f32}) {
        KernelConfig config;
        config.kind = kind;
        config.tile_n = 8;
        config.in = config.in_b = in;
        config.out = out;
        config.has_c = true;
        config.c = out;
        expect_clean_compile(codegen::gemm_source(config), codegen::gemm_kernel_name(config),
                             config.name() + " " + std::string(dtype_name(in)) + "->" + std::string(dtype_name(out)));
      }
    }
    // 8-bit inputs with each scaling mode; the GEMV with 1, 2 and 4 columns a warp.
    for (ScaleMode mode : {ScaleMode::none, ScaleMode::tensor, ScaleMode::rowwise, ScaleMode::block, ScaleMode::mx}) {
      for (int columns : {1, 2, 4}) {
        if (kind != KernelKind::gemv && columns > 1) continue;
        KernelConfig config;
        config.kind = kind;
        config.tile_n = 8 * columns;
        config.in = DType::e4m3;
        config.in_b = DType::e5m2;
        config.scale_a = config.scale_b = mode;
        config.out = DType::bf16;
        expect_clean_compile(codegen::gemm_source(config), codegen::gemm_kernel_name(config),
                             config.name() + " e4m3 x e5m2 scales " + std::to_string(int(mode)));
      }
    }
  }
}

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
