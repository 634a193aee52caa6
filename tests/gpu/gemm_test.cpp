// gemmkit::gemm against the double-precision GPU reference: shapes, layouts, types, batches,
// beta, unaligned operands, and every tile shape forced. Skips without an sm_90 device.
#include <gtest/gtest.h>

#include <vector>

#include "gemmkit/gemm.h"
#include "gpu_test.h"
#include "runtime/utility_kernels.h"

namespace gemmkit {
namespace {

using GemmBatch = testing::GpuTest;
using GemmBeta = testing::GpuTest;
using GemmChains = testing::GpuTest;
using GemmDecode = testing::GpuTest;
using GemmDeterminism = testing::GpuTest;
using GemmEdges = testing::GpuTest;
using GemmGemv = testing::GpuTest;
using GemmOrientation = testing::GpuTest;
using GemmRepeats = testing::GpuTest;
using GemmSplitK = testing::GpuTest;
using GemmTiles = testing::GpuTest;
using GemmTypes = testing::GpuTest;
using GemmUnaligned = testing::GpuTest;

using reference::ProblemSpec;
using testing::expect_correct;

const std::vector<int64_t> kSizes = {1, 2, 7, 8, 63, 64, 65, 127, 128, 129, 255, 256, 1000, 4097};
const char* const kLayouts[] = {"NN", "NT", "TN", "TT"};

// Every (M, N) pair of kSizes, with K walking kSizes too so each K meets many (M, N).
struct ShapeRow {
  const char* layout;
  size_t m_index;
};

class ShapeCross : public testing::GpuTest, public ::testing::WithParamInterface<ShapeRow> {};

TEST_P(ShapeCross, MatchesReference) {
  const ShapeRow row = GetParam();
  for (size_t j = 0; j < kSizes.size(); ++j) {
    ProblemSpec spec;
    spec.m = kSizes[row.m_index];
    spec.n = kSizes[j];
    spec.k = kSizes[(row.m_index * 5 + j * 3) % kSizes.size()];
    spec.layout = row.layout;
    // Half the shapes get 16-byte-aligned leading dimensions, so odd M, N and K also run
    // through the TMA kernel rather than only through the fallback.
    spec.align_leading = j % 2 == 0;
    expect_correct(spec);
  }
}

std::vector<ShapeRow> shape_rows() {
  std::vector<ShapeRow> rows;
  for (const char* layout : kLayouts) {
    for (size_t i = 0; i < kSizes.size(); ++i) rows.push_back({layout, i});
  }
  return rows;
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, ShapeCross, ::testing::ValuesIn(shape_rows()),
                         [](const ::testing::TestParamInfo<ShapeRow>& info) {
                           return std::string(info.param.layout) + "_M" + std::to_string(kSizes[info.param.m_index]);
                         });

TEST_F(GemmTypes, EveryInputAndOutputType) {
  for (DType in : {DType::bf16, DType::f16}) {
    for (DType out : {DType::bf16, DType::f16, DType::f32}) {
      for (const char* layout : kLayouts) {
        for (auto [m, n, k] : {std::tuple{129, 255, 65}, std::tuple{1000, 1000, 1000}}) {
          ProblemSpec spec{.m = m, .n = n, .k = k, .layout = layout, .in = in, .out = out};
          expect_correct(spec);
        }
      }
    }
  }
}

TEST_F(GemmBatch, StridedBatches) {
  for (const char* layout : kLayouts) {
    for (auto [m, n, k, batch] : {std::tuple{65, 129, 255, 3}, std::tuple{256, 256, 64, 7}, std::tuple{1, 1000, 127, 5}}) {
      expect_correct({.m = m, .n = n, .k = k, .batch = batch, .layout = layout});
    }
  }
}

TEST_F(GemmBatch, BroadcastOperand) {
  // One B (a rank-2 weight) shared by a batch of A.
  reference::DeviceProblem problem({.m = 130, .n = 200, .k = 96, .batch = 4}, testing::fresh_seed());
  TensorView b = problem.b();
  TensorView b_shared = TensorView::matrix(b.data, b.dtype, b.rows(), b.cols(), b.row_stride(), b.col_stride());
  problem.prepare_output(nullptr);
  gemm(problem.a(), b_shared, problem.d(), problem.options(nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Problem p = validate_gemm(problem.a(), b_shared, problem.d(), problem.options(nullptr));
  EXPECT_EQ(p.b.batch_stride, 0);
  const reference::Comparison result = problem.check_against(p, nullptr);
  EXPECT_TRUE(result.passed()) << result.summary();
}

// A call that repeats the thread's last one launches it again as it was (runtime/launch.cpp): each
// change must be seen. The same buffers again, with another alpha, through views of A and B that
// end K early; other buffers of the same shape; then the first call again.
TEST_F(GemmRepeats, ChangedCallsAreNotRepeated) {
  const reference::ProblemSpec spec{.m = 300, .n = 200, .k = 128};
  reference::DeviceProblem first(spec, testing::fresh_seed()), second(spec, testing::fresh_seed());
  const auto run = [](reference::DeviceProblem& problem, float alpha, int64_t k) {
    problem.prepare_output(nullptr);
    GemmOptions options = problem.options(nullptr);
    options.alpha = alpha;
    const TensorView a = problem.a(), b = problem.b();
    const TensorView a_view = TensorView::matrix(a.data, a.dtype, a.rows(), k, a.row_stride(), a.col_stride());
    const TensorView b_view = TensorView::matrix(b.data, b.dtype, k, b.cols(), b.row_stride(), b.col_stride());
    gemm(a_view, b_view, problem.d(), options);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const Problem p = validate_gemm(a_view, b_view, problem.d(), options);
    const reference::Comparison result = problem.check_against(p, nullptr);
    EXPECT_TRUE(result.passed()) << "alpha " << alpha << ", K " << k << ": " << result.summary();
  };
  run(first, 1.0f, 128);
  run(first, 1.0f, 128);
  run(first, -2.0f, 128);
  run(first, 1.0f, 64);
  run(second, 1.0f, 128);
  run(first, 1.0f, 128);
}

TEST_F(GemmBeta, SeparateCAndInPlace) {
  for (const char* layout : kLayouts) {
    for (DType out : {DType::bf16, DType::f32}) {
      for (bool in_place : {false, true}) {
        expect_correct({.m = 300, .n = 257, .k = 129, .layout = layout, .out = out, .alpha = 0.75f, .beta = -1.5f,
                        .c_is_d = in_place});
      }
    }
  }
}

TEST_F(GemmEdges, EmptyContractionGivesBetaC) {
  expect_correct({.m = 65, .n = 130, .k = 0, .beta = 2.0f});
  expect_correct({.m = 65, .n = 130, .k = 0});  // D = 0
}

// Operands TMA cannot read as they are (odd leading dimensions, misaligned bases, odd K) are
// staged (copied into aligned scratch, then multiplied by the TMA kernel), or where larger than
// L2, realigned by the kernel, or decode weights read as row classes (the next test): each plan,
// and realigned ones staged too. The
// fallback kernel, which runs staged ones where the scratch cannot grow (a first call inside a
// graph capture), is checked on the same problems. D unaligned: direct stores.
TEST_F(GemmUnaligned, RealignedOrStagedOperandsFallbackAndDirectStores) {
  for (const char* layout : kLayouts) {
    const ProblemSpec staged[] = {
        {.m = 129, .n = 77, .k = 91, .layout = layout, .pad_a = 1, .pad_b = 3},
        {.m = 200, .n = 136, .k = 72, .layout = layout, .offset_a = 1, .offset_b = 5},
        {.m = 300, .n = 201, .k = 4097, .layout = layout, .out = DType::f32, .beta = 0.5f},
        {.m = 65, .n = 33, .k = 130, .batch = 3, .layout = layout, .in = DType::f16, .out = DType::f16, .pad_a = 3},
        {.m = 2, .n = 7, .k = 5, .layout = layout, .pad_b = 1},
        {.m = 8, .n = 7000, .k = 4097, .layout = layout, .pad_b = 1},  // 57 MB of weights: realigned
    };
    for (const ProblemSpec& spec : staged) {
      reference::DeviceProblem problem(spec, 1);
      const Problem p = validate_gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
      const KernelConfig config = make_plan(normalize(p)).config;
      EXPECT_EQ(config.kind, KernelKind::tma) << spec.describe();
      EXPECT_TRUE(config.stage_a || config.stage_b || config.realign_a || config.realign_b || config.row_classes)
          << spec.describe() << " [" << config.name() << "]";
      expect_correct(spec);
      if (config.realign_a || config.realign_b) {  // and staged, on a 128 x 128 tile
        KernelConfig staged = with_tile(config, {128, 128});
        staged.stages = max_stages(staged, runtime::device_info(0).smem_per_block_optin);
        expect_correct(spec, &staged);
      }
      const KernelConfig fallback = fallback_config(config);
      expect_correct(spec, &fallback);
    }
    // Aligned inputs, D unaligned: TMA loads, D stored without TMA.
    expect_correct({.m = 200, .n = 131, .k = 160, .layout = layout, .pad_d = 1});
    expect_correct({.m = 200, .n = 136, .k = 160, .layout = layout, .out = DType::f32, .offset_d = 1});
    // D's rows aligned, but not a whole number of 16-byte pieces (which TMA would store whole,
    // over the padding after them): the same.
    expect_correct({.m = 200, .n = 131, .k = 160, .layout = layout, .align_leading = true});
    expect_correct({.m = 70, .n = 130, .k = 64, .batch = 3, .layout = layout, .out = DType::f32, .align_leading = true});
    // Column-major D: computed as the transpose.
    expect_correct({.m = 190, .n = 260, .k = 100, .layout = layout, .d_col_major = true});
    expect_correct({.m = 190, .n = 260, .k = 100, .layout = layout, .d_col_major = true, .pad_d = 1});
  }
}

// Staged rows at every offset past a 16-byte boundary (8 for 16-bit elements), shorter than 16
// bytes and several warps' 512-byte segments long, batched, with NaN outside the views: the
// staging copy reads inside each row only, and zeros pad it. (More than 128 rows of A: fewer
// would be the tokens of row classes, whose shifted copies the decode test checks.)
TEST_F(GemmUnaligned, StagedRowsAtEveryOffset) {
  std::vector<ProblemSpec> specs;
  for (int64_t offset = 0; offset < 8; ++offset) {
    for (int64_t k : {5, 13, 1031, 2600}) {
      specs.push_back({.m = 150, .n = 200, .k = k, .layout = "NT", .pad_a = 2, .offset_a = offset, .offset_b = 7 - offset});
    }
  }
  specs.push_back({.m = 33, .n = 150, .k = 777, .batch = 3, .layout = "NN", .pad_a = 3, .pad_b = 1});
  for (ProblemSpec spec : specs) {
    spec.nan_outside = true;
    reference::DeviceProblem problem(spec, 1);
    const Problem p = normalize(validate_gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr)));
    EXPECT_TRUE(make_plan(p).config.stage_a) << spec.describe();
    expect_correct(spec);
  }
}

// M = 1 against B stored N x K where narrow tiles do not take it (B unaligned and not read as
// row classes, B aligned and N above 16384, N below 128), and N = 1 against A stored M x K, run the GEMV kernel: 16-byte loads where the rows
// are aligned, element loads where K is odd or a base is off; batches, C and every output type.
TEST_F(GemmGemv, OneRowAgainstNxKWeights) {
  const ProblemSpec specs[] = {
      {.m = 1, .n = 20000, .k = 2048, .layout = "NT"},
      {.m = 1, .n = 1001, .k = 4097, .layout = "NT"},  // N not a multiple of 8: not row classes
      {.m = 1, .n = 33, .k = 129, .layout = "TT", .offset_b = 1},
      {.m = 1, .n = 257, .k = 1001, .batch = 3, .layout = "NT", .out = DType::f32, .beta = 0.5f},
      {.m = 1, .n = 300, .k = 520, .layout = "NT", .in = DType::f16, .out = DType::f16, .beta = -1.0f, .c_is_d = true,
       .pad_b = 1},
      {.m = 1, .n = 1, .k = 1, .layout = "NT"},
      // N = 1 with A stored M x K: computed transposed, as one row against A.
      {.m = 2112, .n = 1, .k = 7168, .layout = "NN"},
      {.m = 999, .n = 1, .k = 1001, .batch = 2, .layout = "NT", .out = DType::f32, .beta = 2.0f},
  };
  for (const ProblemSpec& spec : specs) {
    reference::DeviceProblem problem(spec, 1);
    const Problem p = validate_gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
    EXPECT_EQ(make_plan(normalize(p)).config.kind, KernelKind::gemv) << spec.describe();
    expect_correct(spec);
  }
}

// 1 to 32 rows against K-major B (decode) run transposed on narrow tiles (plan.h): each tile
// width, split and unsplit, with C (separate and in place), f32 and f16 outputs, batches, odd N,
// K of less than one block and odd K (both operands staged; one row then runs the GEMV).
TEST_F(GemmDecode, FewRowsRunTransposedOnNarrowTiles) {
  const ProblemSpec specs[] = {
      {.m = 1, .n = 1280, .k = 8192},
      {.m = 1, .n = 4096, .k = 1000, .batch = 2, .out = DType::f32, .beta = 2.0f},
      {.m = 2, .n = 1280, .k = 8192},
      {.m = 8, .n = 4096, .k = 4096},
      {.m = 9, .n = 1000, .k = 3000, .out = DType::f32, .beta = 0.5f},
      {.m = 16, .n = 2112, .k = 7168, .in = DType::f16, .out = DType::f16, .beta = -1.0f, .c_is_d = true},
      {.m = 17, .n = 129, .k = 64},
      {.m = 32, .n = 1280, .k = 8192, .alpha = 0.5f},
      {.m = 5, .n = 300, .k = 1000, .batch = 3},
      {.m = 8, .n = 777, .k = 4097},
      {.m = 3, .n = 128, .k = 8},
      // D padded, unaligned, or by columns (then the transposed problem's D' is row-major).
      {.m = 8, .n = 1000, .k = 512, .pad_d = 3},
      {.m = 12, .n = 520, .k = 640, .out = DType::f32, .offset_d = 1},
      {.m = 8, .n = 1000, .k = 512, .beta = 1.0f, .d_col_major = true},
  };
  for (const ProblemSpec& spec : specs) {
    reference::DeviceProblem problem(spec, 1);
    const Problem p = validate_gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
    const KernelConfig config = make_plan(normalize(p)).config;
    EXPECT_TRUE(is_narrow({config.tile_m, config.tile_n})) << spec.describe() << " [" << config.name() << "]";
    expect_correct(spec);
  }
}

// Decode (1 to 128 tokens) against weights TMA cannot address (odd K, leading dimensions off 8
// elements, bases off 16 bytes), their rows a multiple of 8: the weights read as row classes
// (row_classes.cuh), with NaN around every row of both operands, which must not reach D. As
// planned, in 2 and 3 parts, and as the realigning kernel that runs where B's copies can have no
// scratch.
TEST_F(GemmUnaligned, DecodeWeightsReadAsRowClasses) {
  const ProblemSpec specs[] = {
      {.m = 1, .n = 4096, .k = 4097},
      {.m = 1, .n = 1280, .k = 8191, .pad_b = 2},
      {.m = 1, .n = 20480, .k = 1001},  // wider than the GEMV's 16384 for aligned B
      {.m = 8, .n = 4096, .k = 4097},
      {.m = 16, .n = 520, .k = 1001, .pad_b = 3},  // leading dimension 1004: two shifts among the classes
      {.m = 2, .n = 1280, .k = 8191},
      {.m = 32, .n = 128, .k = 65, .pad_b = 7, .offset_b = 3},  // rows 72 apart, the base off
      {.m = 5, .n = 1000, .k = 3},
      {.m = 17, .n = 4104, .k = 4090, .out = DType::f32, .beta = 0.5f},  // a class's last K block all outside
      {.m = 12, .n = 2048, .k = 3000, .in = DType::f16, .out = DType::f16, .offset_b = 1},
      {.m = 3, .n = 7000, .k = 4097, .beta = -1.0f, .c_is_d = true},
      // 33 to 128 tokens, on 64 x 64 and 64 x 128 tiles.
      {.m = 40, .n = 520, .k = 1001, .pad_b = 3},
      {.m = 64, .n = 2048, .k = 3001, .out = DType::f32, .beta = 0.5f},
      {.m = 128, .n = 4096, .k = 4097},
      {.m = 100, .n = 1024, .k = 129, .offset_b = 5},
  };
  for (ProblemSpec spec : specs) {
    spec.nan_outside = true;
    reference::DeviceProblem problem(spec, 1);
    const Problem p = normalize(validate_gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr)));
    const KernelConfig config = make_plan(p).config;
    EXPECT_TRUE(config.row_classes) << spec.describe() << " [" << config.name() << "]";
    expect_correct(spec);
    for (int splits : {2, 3}) {
      KernelConfig split = config;
      split.splits = splits;
      expect_correct(spec, &split);
    }
    const KernelConfig realigned = realigned_instead(p, config);
    expect_correct(spec, &realigned);
  }
}

// Calls queued back to back on one stream, each reading what the one before wrote, see it whole:
// each kernel may start before the one before it ends (programmatic dependent launch), and must
// wait for it before loading. Chains of GEMMs (activations through weights of their own, as a
// model's layers; the first input and some weights unaligned) run so, their outputs poisoned
// first, match the same chains run with the stream drained after every call, bit for bit.
TEST_F(GemmChains, DependentCallsSeeTheCallBeforeWhole) {
  const std::vector<int64_t> widths = {4097, 4096, 1000, 2048, 777, 1536};  // the input's K, then each layer's N
  for (const int64_t m : {1, 8, 300}) {
    std::vector<void*> activations(widths.size()), weights(widths.size() - 1);
    for (size_t i = 0; i < widths.size(); ++i) {
      ASSERT_EQ(cudaMalloc(&activations[i], size_t(m * widths[i] * 2)), cudaSuccess);
      if (i + 1 < widths.size()) ASSERT_EQ(cudaMalloc(&weights[i], size_t(widths[i + 1] * widths[i] * 2)), cudaSuccess);
    }
    const uint64_t seed = testing::fresh_seed();
    runtime::fill_random(activations[0], DType::bf16, m * widths[0], seed, -1.0f, 1.0f, nullptr);
    for (size_t i = 0; i < weights.size(); ++i) {
      runtime::fill_random(weights[i], DType::bf16, widths[i + 1] * widths[i], seed + 1 + i, -0.05f, 0.05f, nullptr);
    }
    auto run_chain = [&](bool drain) {
      for (size_t i = 1; i < widths.size(); ++i) {
        ASSERT_EQ(cudaMemset(activations[i], 0xff, size_t(m * widths[i] * 2)), cudaSuccess);
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (size_t i = 0; i + 1 < widths.size(); ++i) {
        const int64_t k = widths[i], n = widths[i + 1];
        gemm(TensorView::matrix(activations[i], DType::bf16, m, k, k, 1),
             TensorView::matrix(weights[i], DType::bf16, k, n, 1, k),  // N x K, as nn.Linear keeps it
             TensorView::matrix(activations[i + 1], DType::bf16, m, n, n, 1));
        if (drain) ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    };
    auto outputs = [&] {
      std::vector<std::vector<char>> out;
      for (size_t i = 1; i < widths.size(); ++i) {
        out.emplace_back(size_t(m * widths[i] * 2));
        EXPECT_EQ(cudaMemcpy(out.back().data(), activations[i], out.back().size(), cudaMemcpyDeviceToHost), cudaSuccess);
      }
      return out;
    };
    run_chain(true);
    const std::vector<std::vector<char>> drained = outputs();
    for (int round = 0; round < 3; ++round) {
      run_chain(false);
      EXPECT_EQ(outputs(), drained) << "M = " << m << ", round " << round;
    }
    for (void* p : activations) cudaFree(p);
    for (void* p : weights) cudaFree(p);
  }
}

// Each tile shape, forced, alone and in a cluster of two, on shapes with partial tiles in
// every dimension (and clusters whose second tile lies wholly below D). Narrow tiles take B
// K-major only, unclustered and with direct stores.
TEST_F(GemmTiles, EveryTileShapeForced) {
  const runtime::DeviceInfo& info = runtime::device_info(0);
  for (TileShape tile : tile_shapes()) {
    for (const char* layout : kLayouts) {
      for (bool direct : {false, true}) {
        for (int cluster : {1, 2}) {
          if (is_narrow(tile) && (layout[1] != 'T' || !direct || cluster > 1)) continue;
          KernelConfig config;
          config.tile_m = tile.m;
          config.tile_n = tile.n;
          config.cluster_m = cluster;
          config.a_k_major = layout[0] == 'N';
          config.b_k_major = layout[1] == 'T';
          config.tma_store = !direct;
          config.stages = max_stages(config, info.smem_per_block_optin);
          for (auto [m, n, k] : {std::tuple{tile.m + 1, tile.n - 1, 1000}, std::tuple{3 * tile.m - 5, 2 * tile.n + 7, 64},
                                 std::tuple{1, 1, 1}}) {
            expect_correct({.m = m, .n = n, .k = k, .layout = layout, .align_leading = true}, &config);
          }
        }
      }
    }
  }
}

// Where TMA cannot store D, tiles of 128 rows or more write it through shared memory a row at a
// time (store_tile_rows), on partial tiles in both dimensions: 16-bit D's rows
// alternately on and off 4-byte words (an odd leading dimension), an f32 D (with C in place,
// batched) and an f16 one with C whose rows all start off a word (an odd base). expect_correct
// also fails any write outside D's view.
TEST_F(GemmTiles, RowStoresOnEveryTile) {
  const runtime::DeviceInfo& info = runtime::device_info(0);
  const auto config = [&](TileShape tile, const char* layout, DType out, bool has_c, bool batched) {
    KernelConfig c;
    c.tile_m = tile.m;
    c.tile_n = tile.n;
    c.a_k_major = layout[0] == 'N';
    c.b_k_major = layout[1] == 'T';
    c.a_batched = c.b_batched = batched;
    c.tma_store = false;
    c.out = c.c = out;
    c.has_c = has_c;
    c.stages = max_stages(c, info.smem_per_block_optin);
    EXPECT_TRUE(c.row_store()) << c.name();
    return c;
  };
  for (TileShape tile : tile_shapes()) {
    if (tile.m < 128) continue;
    const KernelConfig plain = config(tile, "NT", DType::bf16, false, false);
    expect_correct({.m = 2 * tile.m + 3, .n = 2 * tile.n + 5, .k = 200, .layout = "NT", .pad_d = 1, .align_leading = true},
                   &plain);
    if (!tile_takes_c(tile)) continue;
    const KernelConfig wide = config(tile, "TN", DType::f32, true, true);
    expect_correct({.m = tile.m - 1, .n = tile.n + 33, .k = 64, .batch = 2, .layout = "TN", .out = DType::f32,
                    .beta = -1.5f, .c_is_d = true, .pad_d = 1, .align_leading = true},
                   &wide);
  }
  const KernelConfig with_c = config({128, 128}, "NN", DType::f16, true, false);
  expect_correct({.m = 300, .n = 250, .k = 100, .layout = "NN", .out = DType::f16, .alpha = 0.5f, .beta = 2.0f,
                  .pad_d = 2, .offset_d = 1, .align_leading = true},
                 &with_c);
}

// D stored by columns (a problem transposed, as plans that transpose run it): each tile shape but
// the narrow ones, forced, alone and in a cluster of two, TMA storing each tile transposed in
// boxes of as many columns as divide its width; with partial tiles in both dimensions, an f32 D
// with C in place, and a batch. expect_correct also fails any write outside D's view.
TEST_F(GemmTiles, ColumnStoresOnEveryTile) {
  const runtime::DeviceInfo& info = runtime::device_info(0);
  for (TileShape tile : tile_shapes()) {
    if (is_narrow(tile)) continue;
    for (int cluster : {1, 2}) {
      KernelConfig config = with_tile(KernelConfig{}, tile);
      config.cluster_m = cluster;
      config.stages = max_stages(config, info.smem_per_block_optin);
      // Transposed: M' = N (a multiple of 8, so that TMA stores whole columns), N' = M.
      expect_correct({.m = 2 * tile.n + 7, .n = 2 * tile.m + 24, .k = 200, .layout = "NT"}, &config, true);
      if (cluster > 1 || !tile_takes_c(tile)) continue;
      config.out = config.c = DType::f32;
      config.has_c = config.a_batched = config.b_batched = true;
      config.stages = max_stages(config, info.smem_per_block_optin);
      expect_correct({.m = tile.n + 33, .n = tile.m + 4, .k = 96, .batch = 2, .layout = "NT", .out = DType::f32,
                      .beta = -1.5f, .c_is_d = true},
                     &config, true);
    }
  }
}

// The tile row that reaches past M moves up to end within 15 rows of it, and stores only the rows
// the tile row above does not (epilogue.cuh): with C in place, where a row stored twice would hold
// alpha * AB + beta * (alpha * AB + beta * C), through TMA and row or direct stores, 1 to
// tile_m - 1 rows past two tile rows, alone and in a cluster of two (whose second tile may lie
// wholly below D).
TEST_F(GemmTiles, LastTileRowMovedUpStoresOnlyItsOwnRows) {
  const runtime::DeviceInfo& info = runtime::device_info(0);
  for (TileShape tile : {TileShape{128, 128}, TileShape{64, 128}}) {
    for (bool tma : {true, false}) {
      for (int cluster : {1, 2}) {
        KernelConfig config = with_tile(KernelConfig{}, tile);
        config.cluster_m = cluster;
        config.tma_store = tma;
        config.has_c = true;
        config.stages = max_stages(config, info.smem_per_block_optin);
        for (int past : {1, 15, 16, 17, tile.m - 1}) {
          expect_correct({.m = 2 * tile.m + past, .n = 200, .k = 96, .layout = "NT", .alpha = 0.75f, .beta = 0.5f,
                          .c_is_d = true, .align_leading = true},
                         &config);
        }
      }
    }
  }
}

// Likewise the tile column that reaches past N moves left and stores only the columns the tile
// column to its left does not (epilogue.cuh, kShiftLastCol): with C in place, through TMA boxes
// of 128 bytes (128x128) and narrower ones (128x144, 64x208), row stores and direct stores, with
// B K-major and N-major, and D stored by columns; 1 to tile_n - 1 columns past two tile columns.
TEST_F(GemmTiles, LastTileColumnMovedLeftStoresOnlyItsOwnColumns) {
  const runtime::DeviceInfo& info = runtime::device_info(0);
  for (TileShape tile : {TileShape{128, 128}, TileShape{128, 144}, TileShape{64, 208}}) {
    for (const char* layout : {"NT", "NN"}) {
      for (bool tma : {true, false}) {
        KernelConfig config = with_tile(KernelConfig{}, tile);
        config.b_k_major = layout[1] == 'T';
        config.tma_store = tma;
        config.has_c = true;
        config.stages = max_stages(config, info.smem_per_block_optin);
        for (int past : {1, 8, 16, 17, 40, tile.n - 8, tile.n - 1}) {  // TMA stores D's rows where N is a multiple of 8
          expect_correct({.m = 150, .n = 2 * tile.n + past, .k = 96, .layout = layout, .alpha = 0.75f, .beta = 0.5f,
                          .c_is_d = true, .align_leading = true},
                         &config);
        }
      }
    }
    // Transposed, N' = M.
    KernelConfig config = with_tile(KernelConfig{}, tile);
    config.has_c = true;
    config.stages = max_stages(config, info.smem_per_block_optin);
    for (int past : {1, 17, tile.n - 1}) {
      expect_correct({.m = 2 * tile.n + past, .n = 200, .k = 96, .layout = "NT", .alpha = 0.75f, .beta = 0.5f,
                      .c_is_d = true},
                     &config, true);
    }
  }
}

// Tiles whose row of D is not a multiple of 128 bytes store through 32- or 64-byte boxes (and an
// N-major B slice ends in a partial 64-column box): each output type, with C, at odd sizes.
TEST_F(GemmTiles, NarrowStoreBoxes) {
  const runtime::DeviceInfo& info = runtime::device_info(0);
  for (int tile_n : {144, 160, 176}) {
    for (DType out : {DType::bf16, DType::f16, DType::f32}) {
      for (const char* layout : {"NT", "NN"}) {
        KernelConfig config;
        config.tile_m = 128;
        config.tile_n = tile_n;
        config.b_k_major = layout[1] == 'T';
        config.out = config.c = out;
        config.has_c = true;
        config.cluster_m = 2;
        config.stages = max_stages(config, info.smem_per_block_optin);
        expect_correct({.m = 300, .n = 3 * tile_n - 8, .k = 520, .layout = layout, .out = out, .beta = 0.5f,
                        .align_leading = true},
                       &config);
      }
    }
  }
}

KernelConfig split_config(TileShape tile, const char* layout, int cluster, int splits) {
  KernelConfig config = with_tile(KernelConfig{}, tile);
  config.cluster_m = cluster;
  config.splits = splits;
  config.a_k_major = layout[0] == 'N';
  config.b_k_major = layout[1] == 'T';
  config.stages = max_stages(config, runtime::device_info(0).smem_per_block_optin);
  return config;
}

// Split-K, forced: each tile that can be split, every layout, alone and in a cluster (narrow
// tiles as they can run), with uneven parts (K not a multiple of 64 or of the split count),
// partial tiles, rows below D, and more parts asked for than K has blocks (the launch uses fewer).
TEST_F(GemmSplitK, EveryTileLayoutAndClusterForced) {
  for (TileShape tile : tile_shapes()) {
    if (tile.n > kMaxSplitTileN) continue;
    for (const char* layout : kLayouts) {
      for (int cluster : {1, 2}) {
        if (is_narrow(tile) && (layout[1] != 'T' || cluster > 1)) continue;
        for (int splits : {2, 3, 7}) {
          const KernelConfig config = split_config(tile, layout, cluster, splits);
          for (auto [m, n, k] : {std::tuple{1, 2 * tile.n + 7, 1000}, std::tuple{tile.m + 17, tile.n - 1, 4097},
                                 std::tuple{33, 300, 130}}) {
            expect_correct({.m = m, .n = n, .k = k, .layout = layout, .align_leading = true}, &config);
          }
        }
      }
    }
  }
}

// The reduction feeds every epilogue: each output type, C (separate and in place), direct
// stores, and batches.
TEST_F(GemmSplitK, EpiloguesAndBatches) {
  for (DType out : {DType::bf16, DType::f16, DType::f32}) {
    KernelConfig config = split_config({64, 128}, "NT", 1, 5);
    config.out = config.c = out;
    config.has_c = true;
    for (bool in_place : {false, true}) {
      expect_correct({.m = 33, .n = 520, .k = 2000, .layout = "NT", .out = out, .alpha = 0.5f, .beta = -2.0f,
                      .c_is_d = in_place, .align_leading = true},
                     &config);
    }
  }
  KernelConfig direct = split_config({128, 128}, "NN", 1, 4);
  direct.tma_store = false;
  expect_correct({.m = 130, .n = 131, .k = 1500, .layout = "NN", .pad_d = 1, .align_leading = true}, &direct);
  KernelConfig batched = split_config({64, 128}, "TT", 2, 3);
  batched.a_batched = batched.b_batched = true;
  expect_correct({.m = 100, .n = 250, .k = 900, .batch = 3, .layout = "TT", .align_leading = true}, &batched);
}

// Unaligned 16-bit operands realigned by the kernel's producer warps (realign.cuh), forced on
// every tile that realigns (narrow ones with B K-major), every layout, A, B or both, unsplit and
// split: rows at odd strides and offsets, partial tiles in every dimension, K tails, batches.
TEST_F(GemmUnaligned, RealignedOperandsOnEveryTileThatRealigns) {
  for (TileShape tile : tile_shapes()) {
    if (!realigns_on(tile)) continue;
    for (const char* layout : kLayouts) {
      if (is_narrow(tile) && layout[1] != 'T') continue;
      for (auto [realign_a, realign_b] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
        for (int splits : {1, 3}) {
          if (splits > 1 && tile.n > kMaxSplitTileN) continue;
          KernelConfig config = split_config(tile, layout, 1, splits);
          config.realign_a = realign_a;
          config.realign_b = realign_b;
          config.a_batched = config.b_batched = true;
          config.stages = max_stages(config, runtime::device_info(0).smem_per_block_optin);
          const int64_t pad_a = realign_a ? 1 : 0, pad_b = realign_b ? 3 : 0;
          for (auto [m, n, k, batch] : {std::tuple{81, 2 * tile.n + 7, 1001, 1}, std::tuple{187, tile.n + 1, 64, 1},
                                        std::tuple{33, tile.n + 3, 130, 3}}) {
            expect_correct({.m = m, .n = n, .k = k, .batch = batch, .layout = layout, .pad_a = pad_a,
                            .pad_b = pad_b, .offset_a = 3 * pad_a, .offset_b = pad_b / 3, .align_leading = true},
                           &config);
          }
        }
      }
    }
  }
}

// M just past a multiple of a tile's rows against wide weights runs transposed (transposing_pays),
// D stored by columns: through gemm(), every output type, with C in place; and batched, however
// the plan runs that.
TEST_F(GemmOrientation, PlansThatTransposeMatchTheReference) {
  for (DType out : {DType::bf16, DType::f16, DType::f32}) {
    for (auto [m, n, k, batch, in_place] : {std::tuple{1025, 4096, 512, 1, false}, std::tuple{769, 8192, 256, 1, true},
                                            std::tuple{513, 8192, 512, 2, false}}) {
      const ProblemSpec spec{.m = m, .n = n, .k = k, .batch = batch, .layout = "NT", .out = out,
                             .beta = in_place ? 0.5f : 0.0f, .c_is_d = in_place};
      reference::DeviceProblem problem(spec, testing::fresh_seed());
      const Problem p = normalize(validate_gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr)));
      const Plan plan = make_plan(p);
      if (batch == 1) EXPECT_TRUE(plan.transposed && plan.config.d_by_columns) << spec.describe() << ": " << plan.config.name();
      expect_correct(spec);
    }
  }
}

// The same inputs twice must give bit-identical D: a difference means a race.
TEST_F(GemmDeterminism, RepeatedRunsAreIdentical) {
  for (const char* layout : kLayouts) {
    reference::DeviceProblem problem({.m = 1000, .n = 1000, .k = 4097, .layout = layout}, testing::fresh_seed());
    std::vector<std::vector<char>> results;
    for (int run = 0; run < 3; ++run) {
      problem.prepare_output(nullptr);
      gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      results.push_back(problem.copy_output());
    }
    EXPECT_EQ(results[0], results[1]) << layout;
    EXPECT_EQ(results[0], results[2]) << layout;
  }
}

// Split-K sums its parts in a fixed order whichever finishes last: D is bit-identical run to run,
// on a wide tile and on a narrow one (16 rows, transposed, normalize).
TEST_F(GemmDeterminism, SplitKRunsAreIdentical) {
  for (auto [m, tile] : {std::pair{48, TileShape{64, 128}}, std::pair{16, TileShape{64, 16}}}) {
    reference::DeviceProblem problem({.m = m, .n = 2112, .k = 7168, .layout = "NT"}, testing::fresh_seed());
    const KernelConfig config = split_config(tile, "NT", 1, 7);
    Problem p = validate_gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
    const Plan plan = make_plan(normalize(p), &config);
    std::vector<std::vector<char>> results;
    for (int run = 0; run < 5; ++run) {
      problem.prepare_output(nullptr);
      run_plan(plan, normalize(p), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      results.push_back(problem.copy_output());
    }
    for (int run = 1; run < 5; ++run) EXPECT_EQ(results[0], results[run]) << config.name() << ", run " << run;
    const reference::Comparison result = problem.check(nullptr);
    EXPECT_TRUE(result.passed()) << config.name() << ": " << result.summary();
  }
}

}  // namespace
}  // namespace gemmkit
