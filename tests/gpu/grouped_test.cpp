// grouped_gemm (gemmkit/grouped.h) on the GPU: every group's rows against the double-precision
// reference of that group's GEMM, and every row no group owns left as it was (NaN-poisoned), or
// zero where the sizes ask for it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "api/prepare.h"
#include "api/validate.h"
#include "baseline/cublas_grouped.h"
#include "dispatch/cost_model.h"
#include "gemmkit/grouped.h"
#include "gpu_test.h"
#include "grouped_problem.h"
#include "reference/compare.h"
#include "reference/gpu_reference.h"
#include "runtime/driver.h"

namespace gemmkit {
namespace {

using reference::DeviceProblem;
using reference::ProblemSpec;
using testing::batched;
using testing::compare_with;
using testing::fresh_seed;
using testing::GroupedCase;
using testing::GroupedProblem;
using testing::kEdgeRows;
using testing::matrix_of;
using testing::Reference;
using testing::reference_of;
using testing::rows_of;

class GroupedGemm : public testing::GpuTest {
 protected:
  void expect_correct(const GroupedCase& c) { testing::expect_grouped_correct(c, "grouped_gemm"); }
};

// The weight gradient, d_g = x_g^T y_g + beta * C_g, on the buffers of a dense batched problem
// of P x Q x M_total laid out TN (or NN: x's tokens contiguous): batch 0 of its A (stored
// M_total x P) is x, of its B y; its D (and C) are d's groups, its scales (FP8) the groups' (one
// set a group). x's and y's rows past the groups hold NaN (where their rows are contiguous).
struct WgradCase {
  std::vector<int64_t> rows;
  int64_t p = 256, q = 384;
  DType out = DType::f32;
  float beta = 0.0f;
  bool c_is_d = false;
  int64_t extra_rows = 5;  // rows of x and y past the last group's end
  DType in = DType::bf16;
  std::optional<DType> in_y;  // y's type where it differs from x's (FP8)
  ScaleMode scales = ScaleMode::none;
  std::string layout = "TN";
};

class WgradProblem {
 public:
  explicit WgradProblem(const WgradCase& c) : case_(c), dense_(spec(c), fresh_seed()) {
    const TensorView a = matrix_of(dense_.a(), 0);  // A = x^T, P x M_total
    x_ = TensorView::matrix(a.data, a.dtype, a.cols(), a.rows(), a.col_stride(), a.row_stride());
    y_ = matrix_of(dense_.b(), 0);
    d_ = batched(dense_.d());
    options_ = dense_.options(nullptr);
    if (options_.c) options_.c = batched(*options_.c);
    if (c.scales != ScaleMode::none) {
      options_.scale_a.scales = batched(options_.scale_a.scales);
      options_.scale_b.scales = batched(options_.scale_b.scales);
    }
    std::vector<int64_t> ends(c.rows);
    std::partial_sum(ends.begin(), ends.end(), ends.begin());
    // NaN in the rows past the last group's end: the last K block reads them, and must zero them.
    for (const TensorView& t : {x_, y_}) {
      if (t.col_stride() != 1) continue;
      const size_t row_bytes = size_t(t.row_stride() * dtype_size(t.dtype));
      runtime::check(cudaMemset(static_cast<char*>(t.data) + size_t(ends.back()) * row_bytes, 0xff,
                                size_t(c.extra_rows) * row_bytes),
                     "poison x and y past the groups");
    }
    const size_t bytes = ends.size() * sizeof(int32_t);
    std::vector<int32_t> words(ends.begin(), ends.end());
    runtime::check(cudaMalloc(&sizes_, bytes), "cudaMalloc sizes");
    runtime::check(cudaMemcpy(sizes_, words.data(), bytes, cudaMemcpyHostToDevice), "copy sizes");
  }
  ~WgradProblem() { cudaFree(sizes_); }
  WgradProblem(const WgradProblem&) = delete;
  WgradProblem& operator=(const WgradProblem&) = delete;

  // Poisons D (or sets it to C), takes each group's reference (before the run, which may
  // overwrite C), runs grouped_gemm_wgrad and compares.
  void expect_correct(const std::string& what) {
    dense_.prepare_output(nullptr);
    std::vector<Problem> problems;
    std::vector<Reference> refs;
    int64_t first = 0;
    for (size_t g = 0; g < case_.rows.size(); ++g) {
      const int64_t count = case_.rows[g];
      GemmOptions o = options_;
      if (o.c) o.c = matrix_of(*o.c, int64_t(g));
      if (case_.scales != ScaleMode::none) {
        o.scale_a.scales = matrix_of(o.scale_a.scales, int64_t(g));
        o.scale_b.scales = matrix_of(o.scale_b.scales, int64_t(g));
      }
      if (count == 0) o.scale_a.mode = o.scale_b.mode = ScaleMode::none;  // no K for the scales to fit
      const TensorView a = rows_of(x_, first, count), y = rows_of(y_, first, count);
      problems.push_back(validate_gemm(TensorView::matrix(a.data, a.dtype, a.cols(), a.rows(), a.col_stride(), a.row_stride()),
                                       y, matrix_of(d_, int64_t(g)), o));
      refs.push_back(reference_of(problems.back()));
      first += count;
    }
    grouped_gemm_wgrad(x_, y_, d_, {GroupLayout::contiguous, sizes_, false, int64_t(case_.rows.size())}, options_);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    const std::vector<char> host = dense_.copy_output();
    for (size_t g = 0; g < problems.size(); ++g) {
      const reference::Comparison result =
          compare_with(refs[g], problems[g], host, static_cast<const char*>(dense_.d().data));
      EXPECT_TRUE(result.passed()) << what << ", group " << g << " (" << case_.rows[g] << " rows): " << result.summary();
    }
  }

 private:
  static ProblemSpec spec(const WgradCase& c) {
    ProblemSpec s;
    s.m = c.p;
    s.n = c.q;
    s.k = std::accumulate(c.rows.begin(), c.rows.end(), int64_t(0)) + c.extra_rows;
    s.batch = int64_t(c.rows.size());
    s.layout = c.layout;
    s.in = c.in;
    s.in_b = c.in_y;
    s.scale_a = s.scale_b = c.scales;
    s.out = c.out;
    s.beta = c.beta;
    s.c_is_d = c.c_is_d;
    return s;
  }

  WgradCase case_;
  DeviceProblem dense_;
  TensorView x_, y_, d_;
  GemmOptions options_;
  void* sizes_ = nullptr;
};

TEST_F(GroupedGemm, ContiguousForwardWithEmptyAndOddGroups) { expect_correct({.rows = kEdgeRows}); }

TEST_F(GroupedGemm, ContiguousInputGradientWithNMajorWeights) {
  expect_correct({.rows = kEdgeRows, .n = 200, .k = 136, .layout_ab = "NN"});
}

TEST_F(GroupedGemm, MaskedWithInt64Counts) {
  expect_correct({.layout = GroupLayout::masked, .rows = {200, 0, 1, 77}, .n = 384, .k = 256, .int64 = true});
}

TEST_F(GroupedGemm, AllTokensInOneGroupAndF32Output) {
  std::vector<int64_t> rows(16, 0);
  rows[9] = 777;
  expect_correct({.rows = rows, .n = 144, .k = 264, .out = DType::f32});
}

TEST_F(GroupedGemm, OneGroupAndManyGroups) {
  expect_correct({.rows = {1000}, .n = 520, .k = 128});
  std::mt19937 random{uint32_t(fresh_seed())};
  std::vector<int64_t> rows(256);
  for (int64_t& r : rows) r = std::uniform_int_distribution<int64_t>(0, 40)(random);
  expect_correct({.rows = rows, .n = 128, .k = 256, .int64 = true});
}

TEST_F(GroupedGemm, Fp8InEveryScaleMode) {
  for (ScaleMode mode : {ScaleMode::tensor, ScaleMode::rowwise, ScaleMode::block}) {
    expect_correct({.rows = kEdgeRows, .n = 384, .k = 640, .in = DType::e4m3, .scales = mode});
    expect_correct({.layout = GroupLayout::masked, .rows = {3, 130, 0, 64}, .n = 256, .k = 256, .in = DType::e4m3,
                    .scales = mode});
  }
}

// bench's baseline computes what grouped_gemm does, so that the two time the same work.
TEST_F(GroupedGemm, CublasBaselineComputesTheSameGroups) {
  baseline::CublasGrouped cublas;
  const GroupedCase cases[] = {{.rows = kEdgeRows},
                               {.rows = kEdgeRows, .n = 200, .k = 136, .layout_ab = "NN", .in = DType::f16, .out = DType::f16},
                               {.layout = GroupLayout::masked, .rows = {200, 0, 1, 77}, .n = 384, .k = 256}};
  for (const GroupedCase& c : cases) {
    GroupedProblem problem(c);
    problem.poison();
    problem.run_cublas(cublas);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.describe();
    problem.expect_correct(c.rows, "cuBLAS grouped baseline");
  }
}

// Every tile shape (clustered where it may be), forced.
TEST_F(GroupedGemm, EveryTileShape) {
  for (bool eight_bit : {false, true}) {
    GroupedCase c{.rows = kEdgeRows, .n = 272, .k = 384};
    if (eight_bit) {
      c.in = DType::e4m3;
      c.scales = ScaleMode::block;
    }
    GroupedProblem problem(c);
    const Problem p = problem.problem();
    const KernelConfig picked = choose_grouped_config(p, DeviceLimits{});
    for (TileShape tile : tile_shapes(eight_bit)) {
      if (!tile_takes_scales(tile, c.scales, c.scales) || !tile_takes_groups(tile, picked)) continue;
      for (int cluster : {1, 2}) {
        if (cluster > 1 && is_narrow(tile)) continue;
        KernelConfig config = with_tile(picked, tile);
        config.cluster_m = cluster;
        config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
        problem.poison();
        run_plan(make_plan(p, &config), p, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << config.name();
        problem.expect_correct(c.rows, config.name());
      }
    }
  }
}

// M_total x K past 2^31 elements, A and D past 4 GB each (int64 addressing): group 0's first and
// last rows and the last group's, whose elements lie past 2^31 in A and D, against the reference.
TEST_F(GroupedGemm, RowsPast2To31ElementsAndTensorsPast4GB) {
  const int64_t k = 128, n = 128, tail = 333;
  const int64_t total = (int64_t(1) << 31) / k + 4096;  // A and D: 2^31 + 2^19 elements, 4.3 GB each
  const GroupedCase c{.rows = {total - tail, tail}, .n = n, .k = k, .int64 = true, .extra_rows = 0};
  GroupedProblem problem(c);
  problem.poison();
  problem.run();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.describe();
  problem.expect_rows_correct(0, 0, 256, "first rows");
  problem.expect_rows_correct(0, total - tail - 256, 256, "group 0's last rows");
  problem.expect_rows_correct(1, total - tail, tail, "the last group");
}

// Captured once, replayed with other sizes written to the device array; with unowned rows zeroed
// too, each replay zeroing the rows its sizes leave unowned.
TEST_F(GroupedGemm, GraphReplaysWithNewSizes) {
  for (bool zero_unowned : {false, true}) {
    GroupedProblem problem(
        {.rows = {100, 50, 0, 200}, .n = 256, .k = 256, .extra_rows = 300, .zero_unowned = zero_unowned});
    testing::expect_graph_replays_correct(problem, {{0, 300, 250, 0}, {7, 1, 1, 1}},
                                          zero_unowned ? "graph replay, unowned rows zeroed" : "graph replay");
  }
}

// GroupSizes::zero_unowned (gradients): the rows past the last end, or past each group's count,
// come out zero (in a graph too: GraphReplaysWithNewSizes).
TEST_F(GroupedGemm, ZeroedUnownedRows) {
  for (const GroupedCase& c : {GroupedCase{.rows = kEdgeRows, .extra_rows = 40},
                               GroupedCase{.rows = {3, 0, 70}, .n = 136, .k = 128, .out = DType::f32},
                               GroupedCase{.rows = {100, 100}, .n = 128, .k = 128, .extra_rows = 0},
                               GroupedCase{.layout = GroupLayout::masked, .rows = {200, 0, 1, 77}, .n = 384,
                                           .k = 256, .int64 = true}}) {
    GroupedProblem problem(c);
    problem.zero_unowned();
    problem.poison();
    problem.run();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.describe();
    problem.expect_correct(c.rows, "zeroed unowned rows");
  }
}

// Ends that decrease or pass M_total are clamped: no write outside D, the groups as clamped right.
TEST_F(GroupedGemm, OutOfRangeEndsAreClamped) {
  GroupedCase c{.rows = {100, 100, 100}, .n = 128, .k = 128, .extra_rows = 0};
  GroupedProblem problem(c);
  problem.set_sizes({150, 120, 100000});  // rows as clamped: 150, 0, 150
  problem.poison();
  problem.run();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  problem.expect_correct({150, 0, 150}, "clamped ends");
}

TEST_F(GroupedGemm, WeightGradientWithEmptyAndOddGroups) {
  WgradProblem({.rows = kEdgeRows}).expect_correct("f32, beta 0");
  WgradProblem({.rows = kEdgeRows, .p = 136, .q = 200, .out = DType::bf16}).expect_correct("bf16 out");
  WgradProblem({.rows = {1000}, .p = 128, .q = 128}).expect_correct("one group");
}

// beta = 1 accumulates into d (C = d): an empty group leaves its d_g as it was.
TEST_F(GroupedGemm, WeightGradientAccumulatesInPlace) {
  WgradProblem({.rows = kEdgeRows, .p = 256, .q = 256, .beta = 1.0f, .c_is_d = true}).expect_correct("in place");
  WgradProblem({.rows = {0, 700, 3, 0}, .p = 384, .q = 128, .beta = 0.5f}).expect_correct("separate C");
}

// FP8: x and y staged K-major, each group's tokens padded to whole K blocks; tensor and rowwise
// scales one set a group; e5m2 gradients; x with its tokens contiguous (NN) too.
TEST_F(GroupedGemm, Fp8WeightGradient) {
  for (ScaleMode mode : {ScaleMode::tensor, ScaleMode::rowwise}) {
    WgradProblem({.rows = kEdgeRows, .p = 136, .q = 200, .in = DType::e4m3, .scales = mode})
        .expect_correct("e4m3 " + std::string(scale_mode_name(mode)));
  }
  WgradProblem({.rows = {0, 3, 1000, 128, 0}, .p = 256, .q = 384, .out = DType::bf16, .in = DType::e5m2,
                .in_y = DType::e4m3, .scales = ScaleMode::rowwise})
      .expect_correct("e5m2 x e4m3, bf16 out");
  WgradProblem({.rows = kEdgeRows, .p = 200, .q = 256, .in = DType::e4m3, .scales = ScaleMode::tensor, .layout = "NN"})
      .expect_correct("x's tokens contiguous");
  WgradProblem({.rows = kEdgeRows, .p = 256, .q = 256, .beta = 1.0f, .c_is_d = true, .in = DType::e4m3,
                .scales = ScaleMode::tensor})
      .expect_correct("e4m3, accumulated in place");
}

// FP8 input gradient with the weights as they lie (N-major for it): B is staged K-major per group.
TEST_F(GroupedGemm, Fp8InputGradientWithNMajorWeights) {
  for (ScaleMode mode : {ScaleMode::tensor, ScaleMode::rowwise, ScaleMode::block}) {
    expect_correct({.rows = kEdgeRows, .n = 384, .k = 256, .layout_ab = "NN", .in = DType::e4m3, .scales = mode});
  }
  expect_correct({.layout = GroupLayout::masked, .rows = {3, 130, 0, 64}, .n = 256, .k = 384, .layout_ab = "NN",
                  .in = DType::e4m3, .scales = ScaleMode::block});
}

// An SM budget: the plan runs on that many SMs, and the results are the same (a budget of one
// SM too, which no cluster of two fits).
TEST_F(GroupedGemm, SmBudgetCapsThePlanAndKeepsResults) {
  GroupedCase c{.rows = kEdgeRows, .n = 512, .k = 256};
  GroupedProblem problem(c);
  for (int budget : {1, 2, 16, 100000}) {
    Problem p = problem.problem();
    p.max_sms = budget;
    const Plan plan = make_plan(p);
    EXPECT_EQ(plan.sm_count, std::min(budget, runtime::device_info(0).sm_count));
    EXPECT_LE(plan.config.cluster_m, plan.sm_count) << plan.config.name();
    problem.poison();
    problem.run(nullptr, budget);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    problem.expect_correct(c.rows, "max_sms " + std::to_string(budget));
  }
}

// With sizes.check, sizes in range run as usual, and an end past M_total stops the kernel (in a
// process of its own: the trap loses the context).
TEST_F(GroupedGemm, CheckedSizesTrapWhenOutOfRange) {
  GroupedCase c{.rows = {100, 0, 28}, .n = 128, .k = 128, .extra_rows = 0};
  {
    GroupedProblem problem(c);
    problem.check_sizes();
    problem.poison();
    problem.run();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    problem.expect_correct(c.rows, "checked sizes");
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        GroupedProblem problem(c);
        problem.check_sizes();
        problem.set_sizes({100, 90, 128});  // an end below the one before
        problem.run();
        const cudaError_t status = cudaDeviceSynchronize();
        std::fprintf(stderr, "%s\n", cudaGetErrorName(status));
        std::exit(status == cudaSuccess ? 0 : 3);
      },
      ::testing::ExitedWithCode(3), "cudaError");
}

}  // namespace
}  // namespace gemmkit
