// grouped_gemm's problems for the GPU tests (grouped_test.cpp, grouped_lowbit_test.cpp): a case
// (layout, each group's rows, shape, types, scales; 16-bit, FP8 or 4-bit weights), built on the
// buffers of a dense batched DeviceProblem with fresh random inputs, and checked group by group
// against the double-precision GPU reference of that group's GEMM (with the tolerance of
// reference/compare.h, the dense tests' for the same types), every row no group owns left as it
// was (NaN-poisoned), or zero where the sizes ask for it. With a fused epilogue (the case's
// text and its tensors' types), D and the epilogue's outputs against the epilogue evaluated in
// double on that reference (fused_tensors.h), as the fused GEMM tests check them; the outputs'
// elements no group owns stay NaN (sizes.zero_unowned zeroes D's rows alone).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "api/prepare.h"
#include "api/validate.h"
#include "baseline/cublas_grouped.h"
#include "epilogue_tensors.h"
#include "fused_tensors.h"
#include "gemmkit/grouped.h"
#include "gpu_test.h"
#include "reference/compare.h"
#include "reference/gpu_reference.h"
#include "runtime/driver.h"

namespace gemmkit::testing {

struct GroupedCase {
  GroupLayout layout = GroupLayout::contiguous;
  std::vector<int64_t> rows;  // each group's
  int64_t n = 256, k = 512;
  std::string layout_ab = "NT";  // NT: weights stored [G, N, K] (forward); NN: [G, K, N] (input gradient)
  DType in = DType::bf16, out = DType::bf16;
  // A's scales (FP8 A; block: 1x128), and B's too where B is FP8 (block: 128x128).
  ScaleMode scales = ScaleMode::none;
  bool int64 = false;
  int64_t extra_rows = 5;  // contiguous: rows of A and D past the last group's end; masked: max_m past the largest group
  // 4-bit weights B (layout NT: a checkpoint's [G, N, K/2] bytes): u4 with group scales
  // [G, ceil(K/group), N] (A's type against a 16-bit A; bf16 or group_scales against e4m3), and
  // zero points of their shape and type where `zeros`; or e2m1 with ue8m0 scales [G, ceil(K/32), N].
  std::optional<DType> weights;
  int64_t group = 128;                 // u4: K elements a scale covers (at least K: per-channel)
  bool zeros = false;                  // u4: zero points (AWQ's), else symmetric (8)
  std::optional<DType> group_scales;   // W4A8's u4 scales: unset bf16, or f16
  bool zero_unowned = false;           // GroupSizes::zero_unowned
  // A fused epilogue (GemmOptions::epilogue; none where empty) and its tensors' element types,
  // the program's inputs then its outputs, in its order. Its tensors are as grouped_gemm takes
  // them: row vectors and scalars one a group ([G, 1, N], [G, 1, 1]); along the rows, contiguous
  // one [M_total, ...] tensor of D's rows, masked [G, max_m, ...] (fused_tensors.h, Batches).
  std::string epilogue;
  std::vector<DType> epilogue_inputs, epilogue_stores;

  int64_t groups() const { return int64_t(rows.size()); }
  int64_t total() const { return std::accumulate(rows.begin(), rows.end(), int64_t(0)); }
  int64_t largest() const { return *std::max_element(rows.begin(), rows.end()); }
  bool scales_a() const { return scales != ScaleMode::none; }
  bool scales_b() const { return scales != ScaleMode::none || weights.has_value(); }
  std::string describe() const {
    std::string s = std::string(layout == GroupLayout::masked ? "masked" : "contiguous") + " G=" +
                    std::to_string(groups()) + " N=" + std::to_string(n) + " K=" + std::to_string(k) + " " + layout_ab +
                    " " + std::string(dtype_name(in));
    if (weights) {
      s += "*" + std::string(dtype_name(*weights));
      if (*weights == DType::u4) s += " group " + std::to_string(group) + (zeros ? " zeros" : "");
      if (group_scales) s += " " + std::string(dtype_name(*group_scales)) + " scales";
    }
    s += "->" + std::string(dtype_name(out)) + " scales " + std::string(scale_mode_name(scales)) +
         (zero_unowned ? " zero_unowned" : "") + (epilogue.empty() ? "" : " [" + epilogue + "]") + " rows {";
    for (size_t g = 0; g < rows.size() && g < 12; ++g) s += (g ? "," : "") + std::to_string(rows[g]);
    return s + (rows.size() > 12 ? ",...}" : "}");
  }
};

// gtest's name for a case, in failures of a table's rows.
inline void PrintTo(const GroupedCase& c, std::ostream* os) { *os << c.describe(); }

// Empty groups first, in the middle and last; one row; sizes off every tile multiple.
inline const std::vector<int64_t> kEdgeRows = {0, 1, 300, 0, 129, 64, 257, 0};

// Matrix g of a [batch] view (a rank-2 view is its own only matrix). Strides count elements: a
// 4-bit view's batch stride is two elements a byte.
inline TensorView matrix_of(const TensorView& t, int64_t g) {
  const int64_t offset = g * t.batch_stride() * dtype_bits(t.dtype) / 8;
  return TensorView::matrix(static_cast<char*>(t.data) + offset, t.dtype, t.rows(), t.cols(), t.row_stride(),
                            t.col_stride());
}

// Rows [first, first + count) of a matrix view (a 4-bit view's rows an even number of elements
// apart: two a byte).
inline TensorView rows_of(const TensorView& t, int64_t first, int64_t count) {
  const int64_t offset = first * t.row_stride() * dtype_bits(t.dtype) / 8;
  return TensorView::matrix(static_cast<char*>(t.data) + offset, t.dtype, count, t.cols(), t.row_stride(),
                            t.col_stride());
}

// The view as [batch, rows, cols], also where it is one matrix (its batch stride, never stepped,
// even for 4-bit views: two elements a byte).
inline TensorView batched(const TensorView& t) {
  if (t.rank == 3) return t;
  const int64_t span = t.rows() * t.cols();
  return TensorView::batched(t.data, t.dtype, 1, t.rows(), t.cols(), is_4bit(t.dtype) ? span + span % 2 : span,
                             t.row_stride(), t.col_stride());
}

// The double-precision reference of one group's GEMM: its values and the sums of |A||B| (and |C|).
struct Reference {
  std::vector<double> values, abs_values;
};

inline Reference reference_of(const Problem& p) {
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
inline reference::Comparison compare_with(const Reference& ref, const Problem& p, const std::vector<char>& host,
                                          const char* base) {
  const char* host_d = host.data() + (static_cast<const char*>(p.d.data) - base);
  return reference::compare(p, host_d, ref.values.data(), ref.abs_values.data());
}

// A grouped problem on the buffers of a dense batched one: A, B and D batched by group (masked),
// or batch 0 of A and D holding every group's rows (contiguous). A's rows are padded to 16 bytes
// where K leaves them short (grouped_gemm reads A by TMA).
class GroupedProblem {
 public:
  explicit GroupedProblem(const GroupedCase& c) : case_(c), dense_(spec(c), fresh_seed()) {
    const bool masked = c.layout == GroupLayout::masked;
    a_ = masked ? batched(dense_.a()) : matrix_of(dense_.a(), 0);
    b_ = batched(dense_.b());
    d_ = masked ? batched(dense_.d()) : matrix_of(dense_.d(), 0);
    options_ = dense_.options(nullptr);
    if (c.scales_a()) {
      options_.scale_a.scales = masked ? batched(options_.scale_a.scales) : matrix_of(options_.scale_a.scales, 0);
    }
    if (c.scales_b()) options_.scale_b.scales = batched(options_.scale_b.scales);
    if (options_.scale_b.zeros) options_.scale_b.zeros = batched(*options_.scale_b.zeros);
    zero_unowned_ = c.zero_unowned;
    if (!c.epilogue.empty()) {  // its tensors over D's rows (contiguous: all M_total of them)
      const int64_t g = c.groups();
      const Batches batches = masked ? Batches{g, g, g} : Batches{g, 1, 1};
      fused_ = std::make_unique<FusedTensors>(c.epilogue, c.epilogue_inputs, c.epilogue_stores, batches, d_.rows(), c.n);
      options_.epilogue = fused_->epilogue();
    }
    set_sizes(sizes_of(c.rows));
  }
  ~GroupedProblem() { cudaFree(sizes_); }
  GroupedProblem(const GroupedProblem&) = delete;
  GroupedProblem& operator=(const GroupedProblem&) = delete;

  // The sizes array's values for each group's `rows`: contiguous ends or masked counts.
  std::vector<int64_t> sizes_of(const std::vector<int64_t>& rows) const {
    std::vector<int64_t> sizes(rows);
    if (case_.layout == GroupLayout::contiguous) std::partial_sum(sizes.begin(), sizes.end(), sizes.begin());
    return sizes;
  }

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

  const TensorView& a() const { return a_; }
  const TensorView& b() const { return b_; }
  const TensorView& d() const { return d_; }
  const GemmOptions& options() const { return options_; }
  const reference::DeviceProblem& dense() const { return dense_; }
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
  // GEMM (through the epilogue, with its outputs, where the case has one), every other element
  // of D's view zero where the sizes zero unowned rows, and every other element of D's buffer
  // still all-ones bytes; the epilogue's reductions hold what the groups' elements give, and its
  // other outputs are NaN wherever no group owns the element. The outputs are poisoned once, when
  // the problem is made: one run to check.
  void expect_correct(const std::vector<int64_t>& rows, const std::string& what) const {
    const std::vector<char> host = dense_.copy_output();
    const char* base = static_cast<const char*>(dense_.d().data);
    const size_t bytes = size_t(dtype_size(case_.out));
    std::vector<bool> owned(host.size() / bytes, false);
    std::vector<bool> fused_owned;  // the epilogue's outputs' elements, [batches][D's rows][N]
    if (fused_) {
      fused_->copy_outputs();
      fused_owned.assign(size_t(batched(d_).batch() * d_.rows() * case_.n), false);
    }
    int64_t first = 0;
    for (int64_t g = 0; g < case_.groups(); ++g) {
      const int64_t count = rows[size_t(g)];
      const int64_t start = case_.layout == GroupLayout::masked ? 0 : first;
      first += count;
      if (count == 0) continue;
      const Problem p = group_problem(g, start, count);
      if (fused_) {
        check_fused(reference_of(p), p, host, base, g, start, fused_owned);
      } else {
        const reference::Comparison result = compare_with(reference_of(p), p, host, base);
        EXPECT_TRUE(result.passed()) << what << " " << case_.describe() << ", group " << g << " (" << count
                                     << " rows): " << result.summary();
      }
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
    if (fused_) {
      SCOPED_TRACE(what + " " + case_.describe());
      fused_->expect_reductions();
      EXPECT_EQ(fused_->wrong(), 0);
      fused_->expect_nothing_else_written(&fused_owned);
    }
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
  static reference::ProblemSpec spec(const GroupedCase& c) {
    reference::ProblemSpec s;
    s.m = (c.layout == GroupLayout::masked ? c.largest() : c.total()) + c.extra_rows;
    s.n = c.n;
    s.k = c.k;
    s.batch = c.groups();
    s.layout = c.layout_ab;
    s.in = c.in;
    s.out = c.out;
    s.scale_a = s.scale_b = c.scales;
    s.scale_a_block_rows = 1;
    s.scale_b_block_cols = 128;
    if (c.weights) {
      s.in_b = c.weights;
      s.scale_b = *c.weights == DType::u4 ? ScaleMode::group : ScaleMode::mx;
      s.group = c.group;
      s.zeros = c.zeros;
      s.group_scale_type = c.group_scales;
    }
    if (c.layout_ab[0] == 'N' && !is_4bit(c.in)) {  // A's rows K apart: padded to a multiple of 16 bytes
      // (MXFP4 activations are widened into a copy first, which TMA reads)
      const int64_t per_16_bytes = 16 / dtype_size(c.in);
      s.pad_a = (per_16_bytes - c.k % per_16_bytes) % per_16_bytes;
    }
    return s;
  }

  // Group g's GEMM on its rows [start, start + count) of its matrix of A and D.
  Problem group_problem(int64_t g, int64_t start, int64_t count) const {
    const bool masked = case_.layout == GroupLayout::masked;
    const TensorView a = rows_of(matrix_of(a_, masked ? g : 0), start, count);
    const TensorView d = rows_of(matrix_of(d_, masked ? g : 0), start, count);
    GemmOptions o = options_;
    if (case_.scales_a()) {
      const TensorView sa = matrix_of(options_.scale_a.scales, masked ? g : 0);
      o.scale_a.scales = case_.scales == ScaleMode::tensor ? sa : rows_of(sa, start, count);
    }
    if (case_.scales_b()) o.scale_b.scales = matrix_of(options_.scale_b.scales, g);
    if (o.scale_b.zeros) o.scale_b.zeros = matrix_of(*options_.scale_b.zeros, g);
    o.epilogue = {};  // the GEMM alone: the reference's
    return validate_gemm(a, matrix_of(b_, g), d, o);
  }

  // Group g's rows of D (p: its GEMM on rows [start, start + count) of its matrix, held in `host`,
  // the image of D's buffer at `base`) and of the epilogue's outputs against the epilogue of the
  // reference `ref`, at the epilogue's (g, start + r, j), allowed the accumulation tolerance of
  // p's types as the epilogue moves it; marks the elements in `owned`.
  void check_fused(const Reference& ref, const Problem& p, const std::vector<char>& host, const char* base, int64_t g,
                   int64_t start, std::vector<bool>& owned) const {
    const int64_t at = (static_cast<const char*>(p.d.data) - base) / int64_t(dtype_size(case_.out));
    const int64_t held = case_.layout == GroupLayout::masked ? g : 0;  // the matrix holding the rows
    const double accumulation = reference::accumulation_tolerance(p);
    for (int64_t r = 0; r < p.m; ++r) {
      for (int64_t j = 0; j < p.n; ++j) {
        const size_t i = size_t(r * p.n + j);
        const double got = read_back(host, case_.out, at + r * p.d.row_stride + j * p.d.col_stride);
        const double tol = accumulation * ref.abs_values[i] + 1e-6 * std::fabs(ref.values[i]);
        fused_->check(g, start + r, j, ref.values[i], tol, got, case_.out);
        owned[size_t((held * d_.rows() + start + r) * p.n + j)] = true;
      }
    }
  }

  GroupedCase case_;
  reference::DeviceProblem dense_;
  TensorView a_, b_, d_;
  GemmOptions options_;
  void* sizes_ = nullptr;
  bool check_ = false;
  bool zero_unowned_ = false;
  std::unique_ptr<FusedTensors> fused_;  // the case's epilogue's tensors, or none
};

// Poisons D, runs grouped_gemm on the case, and expects every group right and every other row
// untouched (or zero).
inline void expect_grouped_correct(const GroupedCase& c, const std::string& what) {
  GroupedProblem problem(c);
  problem.poison();
  problem.run();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what << " " << c.describe();
  problem.expect_correct(c.rows, what);
}

// Runs `problem` once (which plans and compiles outside the capture), captures one call in a CUDA
// graph, and replays it with each of `replays` (each group's rows) written to the device sizes
// array, D poisoned before each replay: every replay's groups against the reference, the rows its
// sizes leave unowned as they were (or zero).
inline void expect_graph_replays_correct(GroupedProblem& problem, const std::vector<std::vector<int64_t>>& replays,
                                         const std::string& what) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  problem.run(stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << what;
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  problem.run(stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (const std::vector<int64_t>& rows : replays) {
    problem.set_sizes(problem.sizes_of(rows), stream);
    problem.poison(stream);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << what;
    problem.expect_correct(rows, what);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace gemmkit::testing
