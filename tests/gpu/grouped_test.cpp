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
#include "reference/compare.h"
#include "reference/gpu_reference.h"
#include "runtime/driver.h"

namespace gemmkit {
namespace {

using reference::DeviceProblem;
using reference::ProblemSpec;
using testing::fresh_seed;

struct GroupedCase {
  GroupLayout layout = GroupLayout::contiguous;
  std::vector<int64_t> rows;  // each group's
  int64_t n = 256, k = 512;
  std::string layout_ab = "NT";  // NT: weights stored [G, N, K] (forward); NN: [G, K, N] (input gradient)
  DType in = DType::bf16, out = DType::bf16;
  ScaleMode scales = ScaleMode::none;  // FP8: A's and B's (block: A 1x128, B 128x128)
  bool int64 = false;
  int64_t extra_rows = 5;  // contiguous: rows of A and D past the last group's end; masked: max_m past the largest group

  int64_t groups() const { return int64_t(rows.size()); }
  int64_t total() const { return std::accumulate(rows.begin(), rows.end(), int64_t(0)); }
  std::string describe() const {
    std::string s = std::string(layout == GroupLayout::masked ? "masked" : "contiguous") + " G=" +
                    std::to_string(groups()) + " N=" + std::to_string(n) + " K=" + std::to_string(k) + " " + layout_ab +
                    " " + std::string(dtype_name(in)) + "->" + std::string(dtype_name(out)) + " scales " +
                    std::string(scale_mode_name(scales)) + " rows {";
    for (size_t g = 0; g < rows.size() && g < 12; ++g) s += (g ? "," : "") + std::to_string(rows[g]);
    return s + (rows.size() > 12 ? ",...}" : "}");
  }
};

// Matrix g of a [batch] view (a rank-2 view is its own only matrix).
TensorView matrix_of(const TensorView& t, int64_t g) {
  const int64_t offset = g * t.batch_stride() * dtype_size(t.dtype);
  return TensorView::matrix(static_cast<char*>(t.data) + offset, t.dtype, t.rows(), t.cols(), t.row_stride(),
                            t.col_stride());
}

// Rows [first, first + count) of a matrix view.
TensorView rows_of(const TensorView& t, int64_t first, int64_t count) {
  const int64_t offset = first * t.row_stride() * dtype_size(t.dtype);
  return TensorView::matrix(static_cast<char*>(t.data) + offset, t.dtype, count, t.cols(), t.row_stride(),
                            t.col_stride());
}

// The view as [batch, rows, cols], also where it is one matrix.
TensorView batched(const TensorView& t) {
  if (t.rank == 3) return t;
  return TensorView::batched(t.data, t.dtype, 1, t.rows(), t.cols(), t.rows() * t.cols(), t.row_stride(), t.col_stride());
}

// The double-precision reference of one group's GEMM: its values and the sums of |A||B| (and |C|).
struct Reference {
  std::vector<double> values, abs_values;
};

Reference reference_of(const Problem& p) {
  const int64_t count = p.m * p.n;
  double* ref = nullptr;
  runtime::check(cudaMalloc(reinterpret_cast<void**>(&ref), size_t(std::max<int64_t>(count, 1)) * 2 * sizeof(double)),
                 "cudaMalloc");
  Reference r{std::vector<double>(static_cast<size_t>(count)), std::vector<double>(static_cast<size_t>(count))};
  reference::gpu_gemm(p, ref, ref + count, nullptr);
  runtime::check(cudaMemcpy(r.values.data(), ref, count * sizeof(double), cudaMemcpyDeviceToHost), "copy ref");
  runtime::check(cudaMemcpy(r.abs_values.data(), ref + count, count * sizeof(double), cudaMemcpyDeviceToHost), "copy");
  cudaFree(ref);
  return r;
}

// D of problem p (its view into the buffer at `base`, whose host image is `host`) against `ref`.
reference::Comparison compare_with(const Reference& ref, const Problem& p, const std::vector<char>& host,
                                   const char* base) {
  const char* host_d = host.data() + (static_cast<const char*>(p.d.data) - base);
  return reference::compare(p, host_d, ref.values.data(), ref.abs_values.data());
}

// A grouped problem on the buffers of a dense batched one: A, B and D batched by group (masked),
// or batch 0 of A and D holding every group's rows (contiguous).
class GroupedProblem {
 public:
  explicit GroupedProblem(const GroupedCase& c) : case_(c), dense_(spec(c), fresh_seed()) {
    const bool masked = c.layout == GroupLayout::masked;
    a_ = masked ? batched(dense_.a()) : matrix_of(dense_.a(), 0);
    b_ = batched(dense_.b());
    d_ = masked ? batched(dense_.d()) : matrix_of(dense_.d(), 0);
    options_ = dense_.options(nullptr);
    if (!masked && c.scales != ScaleMode::none) options_.scale_a.scales = matrix_of(options_.scale_a.scales, 0);
    if (c.scales != ScaleMode::none) options_.scale_b.scales = batched(options_.scale_b.scales);
    if (masked && c.scales != ScaleMode::none) options_.scale_a.scales = batched(options_.scale_a.scales);
    std::vector<int64_t> sizes(c.rows);
    if (!masked) std::partial_sum(sizes.begin(), sizes.end(), sizes.begin());
    set_sizes(sizes);
  }
  ~GroupedProblem() { cudaFree(sizes_); }
  GroupedProblem(const GroupedProblem&) = delete;
  GroupedProblem& operator=(const GroupedProblem&) = delete;

  // The sizes array as the kernel reads it: contiguous ends or masked counts.
  void set_sizes(const std::vector<int64_t>& values, cudaStream_t stream = nullptr) {
    const size_t word = case_.int64 ? 8 : 4;
    if (!sizes_) runtime::check(cudaMalloc(&sizes_, values.size() * word), "cudaMalloc sizes");
    std::vector<char> bytes(values.size() * word);
    for (size_t g = 0; g < values.size(); ++g) {
      if (case_.int64) {
        std::memcpy(&bytes[g * 8], &values[g], 8);
      } else {
        const int32_t v = int32_t(values[g]);
        std::memcpy(&bytes[g * 4], &v, 4);
      }
    }
    runtime::check(cudaMemcpyAsync(sizes_, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream), "copy sizes");
    runtime::check(cudaStreamSynchronize(stream), "copy sizes");
  }

  GroupSizes sizes() const { return {case_.layout, sizes_, case_.int64, case_.groups(), check_, zero_unowned_}; }
  void run(cudaStream_t stream = nullptr, int max_sms = 0) {
    GemmOptions o = options_;
    o.stream = stream;
    o.max_sms = max_sms;
    grouped_gemm(a_, b_, d_, sizes(), o);
  }
  void check_sizes() { check_ = true; }
  void zero_unowned() { zero_unowned_ = true; }
  // cuBLAS's grouped GEMM on the same operands and the case's rows, as bench runs it.
  void run_cublas(baseline::CublasGrouped& cublas) const {
    std::string why;
    std::optional<baseline::CublasGrouped::Call> call =
        baseline::CublasGrouped::plan(a_, b_, d_, case_.layout, case_.rows, &why);
    ASSERT_TRUE(call) << case_.describe() << ": " << why;
    baseline::CublasGrouped::upload(*call);
    cublas.run(*call, nullptr);
  }
  // The problem as grouped_gemm plans it, for forced configs.
  Problem problem() const { return api::prepare_grouped(a_, b_, d_, sizes(), options_).problem; }
  void poison(cudaStream_t stream = nullptr) { dense_.prepare_output(stream); }

  // Each group's rows (`rows`, which may differ from the case's) against the reference of its
  // GEMM, every other element of D's view zero where the sizes zero unowned rows, and every other
  // element of D's buffer still all-ones bytes.
  void expect_correct(const std::vector<int64_t>& rows, const std::string& what) const {
    const std::vector<char> host = dense_.copy_output();
    const char* base = static_cast<const char*>(dense_.d().data);
    const size_t bytes = size_t(dtype_size(case_.out));
    std::vector<bool> owned(host.size() / bytes, false);
    int64_t first = 0;
    for (int64_t g = 0; g < case_.groups(); ++g) {
      const int64_t count = rows[size_t(g)];
      const int64_t start = case_.layout == GroupLayout::masked ? 0 : first;
      first += count;
      if (count == 0) continue;
      const Problem p = group_problem(g, start, count);
      const reference::Comparison result = compare_group(p, host, base);
      EXPECT_TRUE(result.passed()) << what << " " << case_.describe() << ", group " << g << " (" << count
                                   << " rows): " << result.summary();
      const int64_t at = (static_cast<const char*>(p.d.data) - base) / int64_t(bytes);
      for (int64_t r = 0; r < count; ++r) {
        for (int64_t j = 0; j < p.n; ++j) owned[size_t(at + r * p.d.row_stride + j)] = true;
      }
    }
    std::vector<bool> zeroed(owned.size(), false);
    const TensorView d = batched(d_);
    for (int64_t b = 0; zero_unowned_ && b < d.batch(); ++b) {
      for (int64_t r = 0; r < d.rows(); ++r) {
        for (int64_t j = 0; j < d.cols(); ++j) {
          const size_t i = size_t(b * d.batch_stride() + r * d.row_stride() + j * d.col_stride());
          zeroed[i] = !owned[i];
        }
      }
    }
    int64_t written = 0, not_zeroed = 0;
    for (size_t i = 0; i < owned.size(); ++i) {
      if (owned[i]) continue;
      for (size_t b = 0; b < bytes; ++b) {
        (zeroed[i] ? not_zeroed : written) += host[i * bytes + b] != (zeroed[i] ? char(0) : char(0xff)) ? 1 : 0;
      }
    }
    EXPECT_EQ(written, 0) << what << " " << case_.describe() << ": bytes written outside every group's rows";
    EXPECT_EQ(not_zeroed, 0) << what << " " << case_.describe() << ": bytes of rows no group owns not zeroed";
  }

  // Rows [start, start + count) of group g's matrix of D against the reference of that part of its
  // GEMM: for problems too large to check whole (contiguous groups; start counts from D's row 0).
  void expect_rows_correct(int64_t g, int64_t start, int64_t count, const std::string& what) const {
    const Problem p = group_problem(g, start, count);
    std::vector<char> host(size_t(count * p.d.row_stride) * dtype_size(case_.out));
    runtime::check(cudaMemcpy(host.data(), p.d.data, host.size(), cudaMemcpyDeviceToHost), "copy rows");
    const reference::Comparison result =
        compare_with(reference_of(p), p, host, static_cast<const char*>(p.d.data));
    EXPECT_TRUE(result.passed()) << what << " " << case_.describe() << ", group " << g << " rows " << start
                                 << " + " << count << ": " << result.summary();
  }

 private:
  static ProblemSpec spec(const GroupedCase& c) {
    ProblemSpec s;
    const int64_t largest = *std::max_element(c.rows.begin(), c.rows.end());
    s.m = (c.layout == GroupLayout::masked ? largest : c.total()) + c.extra_rows;
    s.n = c.n;
    s.k = c.k;
    s.batch = c.groups();
    s.layout = c.layout_ab;
    s.in = c.in;
    s.out = c.out;
    s.scale_a = s.scale_b = c.scales;
    s.scale_a_block_rows = 1;
    s.scale_b_block_cols = 128;
    return s;
  }

  // Group g's GEMM on its rows [start, start + count) of its matrix of A and D.
  Problem group_problem(int64_t g, int64_t start, int64_t count) const {
    const bool masked = case_.layout == GroupLayout::masked;
    const TensorView a = rows_of(matrix_of(a_, masked ? g : 0), start, count);
    const TensorView d = rows_of(matrix_of(d_, masked ? g : 0), start, count);
    GemmOptions o = options_;
    if (case_.scales != ScaleMode::none) {
      const TensorView sa = matrix_of(options_.scale_a.scales, masked ? g : 0);
      o.scale_a.scales = case_.scales == ScaleMode::tensor ? sa : rows_of(sa, start, count);
      o.scale_b.scales = matrix_of(options_.scale_b.scales, g);
    }
    return validate_gemm(a, matrix_of(b_, g), d, o);
  }

  static reference::Comparison compare_group(const Problem& p, const std::vector<char>& host, const char* base) {
    return compare_with(reference_of(p), p, host, base);
  }

  GroupedCase case_;
  DeviceProblem dense_;
  TensorView a_, b_, d_;
  GemmOptions options_;
  void* sizes_ = nullptr;
  bool check_ = false;
  bool zero_unowned_ = false;
};

class GroupedGemm : public testing::GpuTest {
 protected:
  void expect_correct(const GroupedCase& c) {
    GroupedProblem problem(c);
    problem.poison();
    problem.run();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.describe();
    problem.expect_correct(c.rows, "grouped_gemm");
  }
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

// Empty groups first, in the middle and last; one row; sizes off every tile multiple.
const std::vector<int64_t> kEdgeRows = {0, 1, 300, 0, 129, 64, 257, 0};

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
    GroupedCase c{.rows = {100, 50, 0, 200}, .n = 256, .k = 256, .extra_rows = 300};
    GroupedProblem problem(c);
    if (zero_unowned) problem.zero_unowned();
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    problem.run(stream);  // plans and compiles outside the capture
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    problem.run(stream);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (const std::vector<int64_t>& rows : {std::vector<int64_t>{0, 300, 250, 0}, std::vector<int64_t>{7, 1, 1, 1}}) {
      std::vector<int64_t> ends(rows);
      std::partial_sum(ends.begin(), ends.end(), ends.begin());
      problem.set_sizes(ends, stream);
      problem.poison(stream);
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      problem.expect_correct(rows, zero_unowned ? "graph replay, unowned rows zeroed" : "graph replay");
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
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
