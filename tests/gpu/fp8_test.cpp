// FP8 GEMMs against the double-precision reference, which dequantises every value (q times its
// scale) first: every scaling mode, both 8-bit types and their mixes, every M from 1 to past a
// tile, K tails (partial 128-deep blocks), every layout, batches, C, forced tiles, clusters and
// split-K, and bit-identical repeats. Skips without an sm_90 device.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "baseline/cublaslt.h"
#include "gemmkit/error.h"
#include "reference/quantized_gemm.h"
#include "gpu_test.h"

namespace gemmkit {
namespace {

using Fp8Modes = testing::GpuTest;
using Fp8Shapes = testing::GpuTest;
using Fp8Layouts = testing::GpuTest;
using Fp8Tiles = testing::GpuTest;
using Fp8Accuracy = testing::GpuTest;
using Fp8Determinism = testing::GpuTest;

using reference::ProblemSpec;
using testing::expect_correct;

const ScaleMode kModes[] = {ScaleMode::tensor, ScaleMode::rowwise, ScaleMode::block, ScaleMode::mx};

ProblemSpec fp8(int64_t m, int64_t n, int64_t k, ScaleMode mode, const char* layout = "NT") {
  return {.m = m, .n = n, .k = k, .layout = layout, .in = DType::e4m3, .scale_a = mode, .scale_b = mode};
}

TEST_F(Fp8Modes, EveryModeTypePairAndOutput) {
  for (ScaleMode mode : kModes) {
    for (auto [a, b] : {std::pair{DType::e4m3, DType::e4m3}, std::pair{DType::e4m3, DType::e5m2},
                        std::pair{DType::e5m2, DType::e4m3}, std::pair{DType::e5m2, DType::e5m2}}) {
      for (DType out : {DType::bf16, DType::f16, DType::f32}) {
        ProblemSpec spec = fp8(300, 272, 1040, mode);
        spec.in = a;
        spec.in_b = b;
        spec.out = out;
        expect_correct(spec);
      }
    }
  }
}

// Block scales of A over 128 x 128 (weights on the left) and of B over 128 x 1; modes mixed
// between the operands; scales stored column-major or with padded rows (mx exponents then copied
// four at a time for A, whose last word is partial, byte by byte for B); no scales at all.
TEST_F(Fp8Modes, OtherBlocksMixedModesAndScaleLayouts) {
  ProblemSpec coarse_a = fp8(400, 300, 1000, ScaleMode::block);
  coarse_a.scale_a_block_rows = 128;
  expect_correct(coarse_a);
  ProblemSpec fine_b = fp8(400, 300, 1000, ScaleMode::block);
  fine_b.scale_b_block_cols = 1;
  expect_correct(fine_b);
  for (auto [a, b] : {std::pair{ScaleMode::block, ScaleMode::tensor}, std::pair{ScaleMode::rowwise, ScaleMode::block},
                      std::pair{ScaleMode::none, ScaleMode::rowwise}, std::pair{ScaleMode::mx, ScaleMode::block},
                      std::pair{ScaleMode::none, ScaleMode::none}}) {
    ProblemSpec spec = fp8(257, 320, 800, a);
    spec.scale_b = b;
    expect_correct(spec);
  }
  // The layouts torch, cuBLASLt and DeepGEMM take, which the TMA kernel reads as they are (the
  // others it stages first): A's 1x128 scales M-major and B's 128x128 ones K-major, strides
  // 16-byte aligned; B's 128x1 ones N-major.
  ProblemSpec direct = fp8(200, 264, 1024, ScaleMode::block);
  direct.scales_col_major = true;
  expect_correct(direct);
  ProblemSpec direct_fine_b = fp8(400, 304, 1000, ScaleMode::block);
  direct_fine_b.scale_b_block_cols = 1;
  expect_correct(direct_fine_b);
  for (ScaleMode mode : kModes) {
    ProblemSpec spec = fp8(200, 264, 656, mode);
    spec.scales_col_major = true;
    expect_correct(spec);
    ProblemSpec padded = fp8(200, 264, 1040, mode);
    padded.pad_scales = 3;
    expect_correct(padded);
  }
}

// M from 1 to past a tile with N and K tails: K = 1040 ends in a 16-deep block, 528 in a
// 16-deep one with mx's 32-deep granules cut too; at M = 1, K = 3840 leaves the GEMV a part of a
// round of 128 16-byte vectors per warp.
TEST_F(Fp8Shapes, EveryMWithTails) {
  for (ScaleMode mode : kModes) {
    for (int64_t m : {1, 2, 16, 64, 127, 128, 129, 4096, 4097}) {
      expect_correct(fp8(m, 200, m >= 4096 ? 528 : 1040, mode));
    }
    expect_correct(fp8(77, 2112, 7168, mode));
    expect_correct(fp8(1, 1, 16, mode));
    expect_correct(fp8(1, 300, 3840, mode));  // the GEMV: whole rounds of a warp, then 112 vectors
    expect_correct(fp8(1, 203, 640, mode));   // four columns a warp: a round of 32 vectors, then 8
  }
}

// 8-bit wgmma reads K-major operands only: the other layouts (staged K-major first), D
// column-major (computed transposed, with A's and B's scales swapped), K not a multiple of 16
// (rows TMA cannot address: staged too), batches (scales per batch) and beta * C.
TEST_F(Fp8Layouts, LayoutsBatchesAndC) {
  for (ScaleMode mode : kModes) {
    for (const char* layout : {"NN", "TN", "TT"}) {
      expect_correct(fp8(130, 90, 300, mode, layout));
      ProblemSpec batched = fp8(70, 200, 1000, mode, layout);
      batched.batch = 2;
      expect_correct(batched);
    }
    ProblemSpec col_d = fp8(190, 260, 512, mode);
    col_d.d_col_major = true;
    expect_correct(col_d);
    expect_correct(fp8(129, 65, 1001, mode));
    ProblemSpec batched = fp8(100, 136, 640, mode);
    batched.batch = 3;
    expect_correct(batched);
    ProblemSpec with_c = fp8(300, 257, 512, mode);
    with_c.out = DType::f32;
    with_c.alpha = 0.75f;
    with_c.beta = -1.5f;
    expect_correct(with_c);
    with_c.c_is_d = true;
    expect_correct(with_c);
  }
}

// Which operands are staged; and that a staged problem captured into a CUDA graph before any
// uncaptured call on its stream (no scratch yet, and none can be allocated while capturing) runs
// the fallback kernel, one node, and after one uncaptured call the staging copies (of both
// operands, in one launch) and the TMA kernel, all replaying right.
TEST_F(Fp8Layouts, MnMajorAndUnalignedOperandsAreStaged) {
  const struct {
    const char* layout;
    int64_t k;
    bool stage_a, stage_b;
  } cases[] = {{"NT", 1024, false, false}, {"NN", 1024, false, true}, {"TT", 1024, true, false},
               {"TN", 1024, true, true},   {"NT", 1001, true, true}};
  for (const auto& c : cases) {
    reference::DeviceProblem problem(fp8(300, 200, c.k, ScaleMode::block, c.layout), 1);
    const Problem p = validate_gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
    const KernelConfig config = make_plan(normalize(p)).config;
    EXPECT_EQ(config.kind, KernelKind::tma) << c.layout << " K " << c.k;
    EXPECT_EQ(config.stage_a, c.stage_a) << c.layout << " K " << c.k;
    EXPECT_EQ(config.stage_b, c.stage_b) << c.layout << " K " << c.k;
  }
  reference::DeviceProblem problem(fp8(300, 200, 4096, ScaleMode::tensor, "TN"), 1);
  for (bool uncaptured_first : {false, true}) {
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    if (uncaptured_first) gemm(problem.a(), problem.b(), problem.d(), problem.options(stream));
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    gemm(problem.a(), problem.b(), problem.d(), problem.options(stream));
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    size_t nodes = 0;
    ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
    EXPECT_EQ(nodes, uncaptured_first ? 2u : 1u) << "the staging copies and the TMA kernel, or the fallback kernel";
    testing::expect_replay_correct(problem, graph, stream);
    cudaStreamDestroy(stream);
  }
}

KernelConfig fp8_config(ScaleMode mode, TileShape tile, int cluster, int splits) {
  KernelConfig config;
  config.in = config.in_b = DType::e4m3;
  config.scale_a = config.scale_b = mode;
  config.scale_b_mn = mode == ScaleMode::block ? 128 : 1;
  config.tile_m = tile.m;
  config.tile_n = tile.n;
  config.cluster_m = cluster;
  config.splits = splits;
  const int smem = runtime::device_info(0).smem_per_block_optin;
  config.store_buffers = store_buffers_for(config, smem);
  config.stages = max_stages(config, smem);
  return config;
}

// Every 8-bit tile the modes allow, alone and in a cluster, and split-K, on partial tiles.
TEST_F(Fp8Tiles, EveryTileClusterAndSplitForced) {
  for (ScaleMode mode : kModes) {
    for (TileShape tile : tile_shapes(true)) {
      if (!tile_takes_scales(tile, mode, mode)) continue;
      for (int cluster : {1, 2}) {
        for (int splits : {1, 3}) {
          if (splits > 1 && tile.n > kMaxSplitTileN) continue;
          const KernelConfig config = fp8_config(mode, tile, cluster, splits);
          for (auto [m, n, k] : {std::tuple{tile.m + 1, tile.n - 16, 1040}, std::tuple{3 * tile.m - 5, 2 * tile.n + 16, 128},
                                 std::tuple{1, 16, 16}}) {
            expect_correct(fp8(m, n, k, mode), &config);
          }
        }
      }
    }
  }
}

// D unaligned (an odd leading dimension) on the 8-bit tiles that store it a row at a time.
TEST_F(Fp8Tiles, RowStores) {
  for (ScaleMode mode : {ScaleMode::tensor, ScaleMode::block}) {
    for (TileShape tile : tile_shapes(true)) {
      if (tile.m < 128 || !tile_takes_scales(tile, mode, mode)) continue;
      KernelConfig config = fp8_config(mode, tile, 1, 1);
      config.tma_store = false;
      config.stages = max_stages(config, runtime::device_info(0).smem_per_block_optin);
      ProblemSpec spec = fp8(tile.m + 1, 2 * tile.n - 16, 1040, mode);
      spec.pad_d = 1;
      expect_correct(spec, &config);
    }
  }
}

// Block-scaled tiles wider than 128 columns straddle B's 128-column scale blocks where their first
// column modulo 128 puts the boundary; promote() has a copy of its loop for each such offset.
// Nine tiles across N put tiles at every offset a width allows (176: 0, 48, 96, 16, 64, 112,
// 32, 80), the last one partial.
TEST_F(Fp8Tiles, BlockScaledWideTilesAtEveryColumnOffset) {
  for (TileShape tile : tile_shapes(true)) {
    if (tile.n <= 128 || !tile_takes_scales(tile, ScaleMode::block, ScaleMode::block)) continue;
    const KernelConfig config = fp8_config(ScaleMode::block, tile, 1, 1);
    SCOPED_TRACE(config.name());
    expect_correct(fp8(130, 8 * tile.n + 40, 1040, ScaleMode::block), &config);
  }
}

// On more tiles than SMs, so that CTAs take several, in every mode: 128x128 tiles (block: two
// partial accumulators) alone and in clusters, 64x128 tiles (two partials, but mx's four
// granules keep one) unsplit and split three ways, and per-tensor and rowwise 192x128 tiles
// (three consumers). The last tile row leaves the last warpgroup's slice wholly below D, N a
// partial last tile whose rows TMA can store. K takes 9, 11 and 4 K blocks: with two partials,
// runs of 1 + 4 + 4, 1 + 2 + 4 + 4 and 4 (multiply_8bit_runs).
TEST_F(Fp8Tiles, SeveralTilesPerCta) {
  for (ScaleMode mode : kModes) {
    const struct {
      TileShape tile;
      int cluster, splits;
    } configs[] = {{{128, 128}, 1, 1}, {{128, 128}, 2, 1}, {{64, 128}, 1, 1}, {{64, 128}, 1, 3}, {{192, 128}, 1, 1}};
    for (const auto& c : configs) {
      if (!tile_takes_scales(c.tile, mode, mode)) continue;
      const KernelConfig config = fp8_config(mode, c.tile, c.cluster, c.splits);
      SCOPED_TRACE(config.name());
      for (int64_t k : {1040, 1408, 512}) expect_correct(fp8(20 * c.tile.m - 100, 17 * c.tile.n + 8, k, mode), &config);
    }
  }
}

// Positive inputs make every product's rounding error of one sign: summed over all of
// K = 16384 in the tensor cores' FP8 sums, the error would grow with the running sum, far past
// the 2^-10 of sum |A||B| the comparison allows (compare.h); promoted every 128 (or 32) of K it
// stays within it.
TEST_F(Fp8Accuracy, LongPositiveSumsStayWithinTheTwoLevelBound) {
  for (ScaleMode mode : kModes) {
    ProblemSpec spec = fp8(256, 256, 16384, mode);
    spec.input_lo = 0.0f;
    spec.out = DType::f32;
    expect_correct(spec);
  }
}

// What the two-level bound guards against: on the same kind of data cuBLASLt with fast
// accumulation, which keeps the sums in the tensor cores over all of K (single-level), misses it.
TEST_F(Fp8Accuracy, SingleLevelAccumulationMissesTheTwoLevelBound) {
  ProblemSpec spec = fp8(256, 256, 16384, ScaleMode::tensor);
  spec.input_lo = 0.0f;  // every product positive, so the narrower sums' errors add up
  spec.out = DType::f32;
  reference::DeviceProblem problem(spec, testing::fresh_seed());
  Problem p = validate_gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
  p.device = 0;
  baseline::CublasLt single_level(0, /*fast_fp8_accumulation=*/true);
  problem.prepare_output(nullptr);
  single_level.run(p, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const reference::Comparison result = problem.check(nullptr);
  EXPECT_FALSE(result.passed()) << "single-level accumulation stayed within the two-level bound: " << result.summary();
  expect_correct(spec);
}

// Random bf16 data quantised by gemmkit::quantize in each mode and type, multiplied in FP8,
// within what FP8's rounding allows of the bf16 product (quantized_gemm.h), batched and
// transposed too.
TEST_F(Fp8Accuracy, QuantisedInputsStayWithinFp8ErrorOfTheBf16Gemm) {
  for (ScaleMode mode : kModes) {
    for (auto [a, b] : {std::pair{DType::e4m3, DType::e4m3}, std::pair{DType::e5m2, DType::e4m3}}) {
      ProblemSpec spec = fp8(256, 384, 1024, mode);
      spec.in = a;
      spec.in_b = b;
      spec.out = DType::f32;
      const reference::QuantizedComparison result = reference::quantized_gemm_check(spec, testing::fresh_seed());
      EXPECT_TRUE(result.passed()) << spec.describe() << ": " << result.summary();
    }
    ProblemSpec other = fp8(130, 200, 520, mode, "TN");
    other.batch = 2;
    const reference::QuantizedComparison result = reference::quantized_gemm_check(other, testing::fresh_seed());
    EXPECT_TRUE(result.passed()) << other.describe() << ": " << result.summary();
  }
}

TEST_F(Fp8Determinism, RepeatedRunsAreIdentical) {
  for (ScaleMode mode : kModes) {
    for (int64_t m : {1, 16, 1000}) {
      reference::DeviceProblem problem(fp8(m, 1000, 4096, mode), testing::fresh_seed());
      std::vector<std::vector<char>> results;
      for (int run = 0; run < 3; ++run) {
        problem.prepare_output(nullptr);
        gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        results.push_back(problem.copy_output());
      }
      EXPECT_EQ(results[0], results[1]) << problem.spec().describe();
      EXPECT_EQ(results[0], results[2]) << problem.spec().describe();
    }
  }
}

}  // namespace
}  // namespace gemmkit
