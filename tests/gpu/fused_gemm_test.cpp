// Fused epilogues (GemmOptions::epilogue) in gemmkit's GEMM kernels on the GPU: D and every
// auxiliary output against the double-precision reference GEMM with the epilogue evaluated in
// double on the host (reference/epilogue_reference.h), on every store path and kind of kernel
// (TMA through shared memory, by columns for a transposed plan, by rows, direct; split-K; narrow
// decode tiles; the GEMV; the fallback), batched with per-batch and shared tensors, with C, with
// FP8 inputs, and grouped (contiguous with per-group vectors, masked, along K). Outputs start as
// NaN, and no output is written outside its view.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/prepare.h"
#include "api/validate.h"
#include "dispatch/cost_model.h"
#include "dispatch/operand_access.h"
#include "dispatch/plan.h"
#include "epilogue_tensors.h"
#include "fused_tensors.h"
#include "gemmkit/grouped.h"
#include "gpu_test.h"
#include "reference/compare.h"
#include "reference/gpu_reference.h"
#include "runtime/driver.h"

namespace gemmkit {
namespace {

using reference::DeviceProblem;
using reference::ProblemSpec;
using testing::Batches;
using testing::FusedTensors;

// The double-precision GEMM of p on the GPU: values and sums of |A||B| (and |C|), [batch][m][n].
struct Reference {
  std::vector<double> values, abs_values;
};
Reference reference_of(const Problem& p) {
  const int64_t count = p.batch * p.m * p.n;
  double* ref = nullptr;
  runtime::check(cudaMalloc(reinterpret_cast<void**>(&ref), size_t(std::max<int64_t>(count, 1)) * 2 * sizeof(double)),
                 "cudaMalloc");
  Reference r{std::vector<double>(size_t(count)), std::vector<double>(size_t(count))};
  reference::gpu_gemm(p, ref, ref + count, nullptr);
  runtime::check(cudaMemcpy(r.values.data(), ref, size_t(count) * sizeof(double), cudaMemcpyDeviceToHost), "copy");
  runtime::check(cudaMemcpy(r.abs_values.data(), ref + count, size_t(count) * sizeof(double), cudaMemcpyDeviceToHost),
                 "copy");
  cudaFree(ref);
  return r;
}

// The memory of a device view from its first element to its last, copied to the host.
std::vector<char> copy_back(const TensorView& t) {
  if (t.batch() == 0 || t.rows() == 0 || t.cols() == 0) return {};
  const int64_t last =
      (t.batch() - 1) * t.batch_stride() + (t.rows() - 1) * t.row_stride() + (t.cols() - 1) * t.col_stride();
  std::vector<char> bytes(size_t(last + 1) * dtype_size(t.dtype));
  runtime::check(cudaMemcpy(bytes.data(), t.data, bytes.size(), cudaMemcpyDeviceToHost), "copy back");
  return bytes;
}

// What a GEMM left in D's memory (`d`, a view of all of it) and, where D is e4m3, in its scales'
// (`scale_d`, likewise), copied back after the run, and read through views into that memory.
class StoredD {
 public:
  StoredD(const TensorView& d, const Scale& scale_d)
      : d_(d), scales_(scale_d.scales), d_bytes_(copy_back(d)),
        scale_bytes_(scale_d.mode == ScaleMode::none ? std::vector<char>() : copy_back(scale_d.scales)) {}
  // Element (r, c) of `v`, a view into D's memory, as its bits read.
  double raw(const TensorView& v, int64_t r, int64_t c) const {
    return testing::read_back(d_bytes_, v.dtype, offset(d_, v) + r * v.row_stride() + c * v.col_stride());
  }
  // Element (r, c) of `v` as the value it stands for, an e4m3 D's times its 1x128 block's scale
  // (element (r, c / 128) of `scales`, a view into the scales' memory); and the absolute error
  // rounding to e4m3 adds beside its relative unit, half its subnormal step (2^-10 of the
  // scale). Other types: the element, and 0.
  std::pair<double, double> value(const TensorView& v, const TensorView& scales, int64_t r, int64_t c) const {
    const double x = raw(v, r, c);
    if (v.dtype != DType::e4m3) return {x, 0.0};
    const double scale = testing::read_back(
        scale_bytes_, DType::f32, offset(scales_, scales) + r * scales.row_stride() + c / 128 * scales.col_stride());
    return {x * scale, 0x1p-10 * scale};
  }

 private:
  static int64_t offset(const TensorView& whole, const TensorView& part) {
    return (static_cast<const char*>(part.data) - static_cast<const char*>(whole.data)) / dtype_size(part.dtype);
  }
  TensorView d_, scales_;
  std::vector<char> d_bytes_, scale_bytes_;
};

struct FusedCase {
  ProblemSpec gemm;
  std::string text;
  std::vector<DType> inputs, stores;  // the element types of the program's tensors, in its order
  bool shared = false;                // rank-2 inputs, one for every batch
};

// Runs gemmkit::gemm with the epilogue (or, `forced`, that config on the normalised problem, or
// `transposed`, on that transposed) and checks every element of D and of each output. Returns the
// plan gemm() ran.
Plan expect_fused_correct(const FusedCase& c, const KernelConfig* forced = nullptr, bool transposed = false) {
  SCOPED_TRACE(c.gemm.describe() + " [" + c.text + "]");
  DeviceProblem problem(c.gemm, testing::fresh_seed());
  problem.prepare_output(nullptr);
  const int64_t inputs = c.shared ? 1 : c.gemm.batch;
  FusedTensors tensors(c.text, c.inputs, c.stores, {inputs, inputs, c.gemm.batch}, c.gemm.m, c.gemm.n);
  GemmOptions options = problem.options(nullptr);
  options.epilogue = tensors.epilogue();
  if (forced) {
    const Problem p = validate_gemm(problem.a(), problem.b(), problem.d(), options);
    const Problem run = transposed ? transposed_problem(normalize(p)) : normalize(p);
    // The problem's facts (types, store path, epilogue) with the forced knobs.
    KernelConfig config = problem_config(run);
    static_cast<KernelKnobs&>(config) = *forced;
    config = with_tile(config, {forced->tile_m, forced->tile_n});
    run_plan(make_plan(run, &config), run, nullptr);
  } else {
    gemm(problem.a(), problem.b(), problem.d(), options);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const Plan plan = make_plan(normalize(validate_gemm(problem.a(), problem.b(), problem.d(), options)));

  GemmOptions plain = problem.options(nullptr);  // the GEMM alone, from the original C
  const Problem p = validate_gemm(problem.a(), problem.b(), problem.d(), plain);
  const Reference ref = reference_of(p);
  const double accumulation = reference::accumulation_tolerance(p);
  const std::vector<char> d = problem.copy_output();
  tensors.copy_outputs();
  const TensorView dv = problem.d();
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t m = 0; m < p.m; ++m) {
      for (int64_t n = 0; n < p.n; ++n) {
        const size_t i = size_t((b * p.m + m) * p.n + n);
        const double got = testing::read_back(d, dv.dtype, b * dv.batch_stride() + m * dv.row_stride() + n * dv.col_stride());
        const double tol = accumulation * ref.abs_values[i] + 1e-6 * std::fabs(ref.values[i]);
        tensors.check(b, m, n, ref.values[i], tol, got, dv.dtype);
      }
    }
  }
  tensors.expect_reductions();
  EXPECT_EQ(tensors.wrong(), 0);
  tensors.expect_nothing_else_written();
  return plan;
}

constexpr const char* kSwish = "h = acc + bias[n]; pre[m, n] = h; silu(h) * gate[m, n]";

using FusedGemm = testing::GpuTest;

TEST_F(FusedGemm, TmaStoresWithTheLastTileRowAndColumnShifted) {
  using DType::bf16, DType::f16, DType::f32;
  ProblemSpec s{.m = 333, .n = 517, .k = 256};
  expect_fused_correct({s, kSwish, {bf16, bf16}, {bf16}});
  s.out = f32;
  expect_fused_correct({s, "acc * scale[m] + bias[n]", {f32, f16}, {}});
  s = {.m = 1000, .n = 4096, .k = 192};  // unfused, 128 x 256 tiles; fused, 224 wide at most
  expect_fused_correct({s, "gelu(acc + bias[n]) * scale[m]", {bf16, f32}, {}});
}

// gelu with a row scale, a bias and a residual spills beside 128 x 224 tiles' accumulators: the
// plan sets that kernel aside for a narrower tile's (plan.cpp), and no kernel it runs spills.
TEST_F(FusedGemm, APlanWhoseKernelSpillsTakesANarrowerTile) {
  using DType::bf16, DType::f32;
  const Plan plan = expect_fused_correct(
      {{.m = 2048, .n = 7168, .k = 512}, "gelu(acc * scale[m] + bias[n]) + r[m, n]", {f32, bf16, bf16}, {}});
  ASSERT_NE(plan.kernel, nullptr);
  EXPECT_EQ(plan.kernel->local_bytes, 0) << plan.config.name();
  EXPECT_LE(plan.config.tile_n, 224) << plan.config.name();
  std::printf("plan: %s\n", plan.config.name().c_str());
}

TEST_F(FusedGemm, TransposedPlanHandsTheEpilogueDsRowsAndColumns) {
  using DType::bf16, DType::f32;
  // D column-major: the plan runs D^T = B^T A^T and stores it by columns.
  ProblemSpec s{.m = 300, .n = 200, .k = 128, .d_col_major = true};
  expect_fused_correct({s, kSwish, {f32, bf16}, {f32}});
  // Decode: 8 tokens against 4096 weights runs transposed on narrow tiles.
  s = {.m = 8, .n = 4096, .k = 1024};
  expect_fused_correct({s, "silu(acc * scale[m]) * gate[m, n] + bias[n]", {f32, bf16, bf16}, {}});
}

TEST_F(FusedGemm, RowAndDirectStores) {
  using DType::bf16, DType::f32;
  // D's rows 2 bytes off 16-byte alignment: stored by rows (128-row tiles) or directly.
  ProblemSpec s{.m = 515, .n = 301, .k = 96, .pad_d = 1};
  expect_fused_correct({s, kSwish, {bf16, f32}, {bf16}});
  s = {.m = 70, .n = 301, .k = 96, .pad_d = 3};
  expect_fused_correct({s, "relu2(acc) - r[m, n]", {bf16}, {}});
}

TEST_F(FusedGemm, SplitKRunsTheEpilogueOnceAfterTheSum) {
  using DType::bf16;
  KernelConfig split;
  split.tile_m = split.tile_n = 128;
  split.splits = 4;
  expect_fused_correct({{.m = 200, .n = 384, .k = 4096}, kSwish, {bf16, bf16}, {bf16}}, &split);
  split.tile_m = 64;
  split.stages = 8;
  expect_fused_correct({{.m = 64, .n = 256, .k = 2048, .out = DType::f32}, "acc * x[m, n]", {bf16}, {}}, &split);
}

TEST_F(FusedGemm, GemvAndFallbackKernels) {
  using DType::bf16, DType::f32;
  expect_fused_correct({{.m = 1, .n = 3000, .k = 1024}, kSwish, {bf16, bf16}, {f32}});
  // N = 1 with A's K contiguous: the GEMV on the transposed problem.
  expect_fused_correct({{.m = 2000, .n = 1, .k = 512, .layout = "NN"}, "acc * scale[m] + r[m, n]", {f32, bf16}, {}});
  // K = 0: the fallback kernel, acc = 0 (beta C included).
  expect_fused_correct({{.m = 70, .n = 90, .k = 0}, "acc + bias[n] * scale[m]", {bf16, f32}, {}});
  expect_fused_correct({{.m = 70, .n = 90, .k = 0, .beta = 0.5f}, "tanh(acc) * g[m, n]", {bf16}, {}});
}

TEST_F(FusedGemm, BatchesWithPerBatchAndSharedTensors) {
  using DType::bf16, DType::f32;
  ProblemSpec s{.m = 130, .n = 264, .k = 64, .batch = 3};
  expect_fused_correct({s, kSwish, {bf16, bf16}, {bf16}});
  expect_fused_correct({s, "acc * scale[m] + bias[n] + g[m, n]", {f32, bf16, bf16}, {}, /*shared=*/true});
}

TEST_F(FusedGemm, WithCAndFp8Inputs) {
  using DType::bf16, DType::f32;
  ProblemSpec s{.m = 257, .n = 320, .k = 512, .beta = 0.75f};
  expect_fused_correct({s, "sigmoid(acc) * g[m, n]", {bf16}, {}});
  s = {.m = 256, .n = 512, .k = 1024, .in = DType::e4m3, .scale_a = ScaleMode::block, .scale_b = ScaleMode::block};
  expect_fused_correct({s, "pre[m, n] = acc; silu(acc * scale[m] + bias[n])", {f32, bf16}, {bf16}});
}

// A backward epilogue: the gradient times gelu's slope at the saved pre-activation, its column
// sums (the bias gradient), and its largest |x| a row and over the whole (FP8 scaling).
constexpr const char* kBackward = "dh = acc * dgelu(pre[m, n]); db[n] = sum(dh); ra[m] = amax(dh); ta[] = amax(dh); dh";

// Reductions on every store path and kind of kernel: each element of D counted once (the shifted
// last tile row and column, split-K's parts, a transposed plan's rows and columns, the GEMV's
// and the fallback's elements one at a time), per batch and over all batches. The outputs start
// as NaN: the library zeroes them.
TEST_F(FusedGemm, ReductionsCountEachElementOnce) {
  using DType::bf16, DType::f32;
  const std::vector<DType> outs{f32, f32, f32};
  expect_fused_correct({{.m = 333, .n = 517, .k = 256}, kBackward, {bf16}, outs});
  expect_fused_correct({{.m = 300, .n = 200, .k = 128, .d_col_major = true}, kBackward, {bf16}, outs});
  expect_fused_correct({{.m = 8, .n = 4096, .k = 1024}, kBackward, {bf16}, outs});
  expect_fused_correct({{.m = 515, .n = 301, .k = 96, .pad_d = 1}, kBackward, {bf16}, outs});
  expect_fused_correct({{.m = 70, .n = 301, .k = 96, .pad_d = 3}, kBackward, {bf16}, outs});
  expect_fused_correct({{.m = 1, .n = 3000, .k = 1024}, kBackward, {bf16}, outs});
  expect_fused_correct({{.m = 2000, .n = 1, .k = 512, .layout = "NN"}, kBackward, {bf16}, outs});
  expect_fused_correct({{.m = 70, .n = 90, .k = 0, .beta = 0.5f}, kBackward, {bf16}, outs});
  KernelConfig split;
  split.tile_m = split.tile_n = 128;
  split.splits = 4;
  expect_fused_correct({{.m = 200, .n = 384, .k = 4096}, kBackward, {bf16}, outs}, &split);
  const ProblemSpec batched{.m = 130, .n = 264, .k = 64, .batch = 3};
  expect_fused_correct({batched, kBackward, {bf16}, outs});
  expect_fused_correct({batched, "s[n] = sum(acc); c[m] = sum(acc * k[]); t[] = amax(acc); acc", {f32}, outs, true});
}

// A view of `t` with other data, shape and strides (elements).
TensorView view_of(const TensorView& t, int64_t offset, int64_t rows, int64_t cols, int64_t row_stride,
                   int64_t col_stride) {
  return TensorView::matrix(static_cast<char*>(t.data) + offset * dtype_size(t.dtype), t.dtype, rows, cols, row_stride,
                            col_stride);
}

// How a dual GEMM's B and B2 (K x N each) lie: in one K x 2N operand W, as its two halves of
// columns (a concatenated [2N, K] weight) or its even and odd columns (interleaved); or as the
// first N columns of W and of another problem's W, of the same spec and another seed (separate).
// FP8 scales are viewed as the columns are: B's and B2's columns starting on a scale block of
// W's, and each column with a scale of its own where interleaved.
enum class DualForm { halves, interleaved, separate };

const char* form_name(DualForm form) {
  return form == DualForm::halves ? "halves" : form == DualForm::interleaved ? "interleaved" : "separate";
}

// The scales of the n columns first, first + step, ... of a K x wide.n B whose scales (in
// wide's mode, B's blocks) are `s`: a view of s (tensor: s itself).
Scale scales_of_columns(const ProblemSpec& wide, const Scale& s, int64_t first, int64_t step, int64_t n) {
  if (s.mode == ScaleMode::none || s.mode == ScaleMode::tensor) return s;
  const int64_t block = reference::scale_blocks(wide, /*is_a=*/false).second;
  EXPECT_TRUE(first % block == 0 && (step == 1 || block == 1))
      << "columns from " << first << " every " << step << " do not have scales of their own in blocks of " << block;
  const TensorView& t = s.scales;
  return {s.mode, view_of(t, first / block * t.col_stride(), t.rows(), (n + block - 1) / block, t.row_stride(),
                          step * t.col_stride())};
}

// An e4m3 D's scales (`s`, for D's wide columns) for its first n columns; none stays none.
Scale scales_of_first_columns_of_d(const Scale& s, int64_t n) {
  if (s.mode == ScaleMode::none) return s;
  const TensorView& t = s.scales;
  return {s.mode, view_of(t, 0, t.rows(), (n + 127) / 128, t.row_stride(), t.col_stride())};
}

// A dual GEMM (GemmOptions::b2) with the epilogue `text` (empty: the default SwiGLU): D (the
// first N = wide.n / 2 columns of the spec's M x 2N D, whose others must stay NaN) and its outputs
// against the epilogue of the double-precision references of A B and A B2, where B and B2 (and
// FP8 scales: scale_b and scale_b2) are views as `form` says. The spec's types and scale modes
// hold for both products: A's scales are the spec's, B's its W's, B2's as W2 is. An e4m3 D (out
// e4m3) is read through its 1x128 scales (the spec's, for D's first N columns). Returns the plan
// gemm() ran (or `forced`).
Plan expect_dual_correct(const ProblemSpec& wide, const std::string& text, const std::vector<DType>& inputs,
                         DualForm form, const KernelConfig* forced = nullptr) {
  SCOPED_TRACE(wide.describe() + " " + form_name(form) + " [" + text + "]");
  const std::string program_text = text.empty() ? "silu(acc) * acc2" : text;
  DeviceProblem problem(wide, testing::fresh_seed());
  problem.prepare_output(nullptr);
  std::optional<DeviceProblem> other;  // separate: W2's
  if (form == DualForm::separate) other.emplace(wide, testing::fresh_seed());
  const int64_t n = wide.n / 2;
  const GemmOptions given = problem.options(nullptr);
  const TensorView w = problem.b(), w2 = other ? other->b() : w, wide_d = problem.d();
  const Scale w2_scales = other ? other->options(nullptr).scale_b : given.scale_b;
  const int64_t step = form == DualForm::interleaved ? 2 : 1;  // between B's (B2's) columns in W (W2)
  const int64_t first2 = form == DualForm::halves ? n : form == DualForm::interleaved ? 1 : 0;  // B2's first in W2
  const TensorView b = view_of(w, 0, w.rows(), n, w.row_stride(), step * w.col_stride());
  const TensorView b2 = view_of(w2, first2 * w2.col_stride(), w2.rows(), n, w2.row_stride(), step * w2.col_stride());
  const TensorView d = view_of(wide_d, 0, wide_d.rows(), n, wide_d.row_stride(), wide_d.col_stride());
  // The GEMM alone, A B: the first reference's options, and the dual's without B2.
  GemmOptions plain = given;
  plain.scale_b = scales_of_columns(wide, given.scale_b, 0, step, n);
  plain.scale_d = scales_of_first_columns_of_d(given.scale_d, n);
  FusedTensors tensors(program_text, inputs, {}, {}, wide.m, n);
  GemmOptions options = plain;
  options.b2 = b2;
  options.scale_b2 = scales_of_columns(wide, w2_scales, first2, step, n);
  options.epilogue = tensors.epilogue();
  if (text.empty()) options.epilogue.text.clear();
  const Problem p = validate_gemm(problem.a(), b, d, options);
  if (forced) {
    KernelConfig config = problem_config(p);
    static_cast<KernelKnobs&>(config) = *forced;
    config = forced->kind == KernelKind::fallback ? fallback_config(config) : with_tile(config, {forced->tile_m, forced->tile_n});
    run_plan(make_plan(p, &config), p, nullptr);
  } else {
    gemm(problem.a(), b, d, options);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const Plan plan = forced ? Plan{} : make_plan(normalize(p));

  // The second product: A's scales and B2's.
  GemmOptions plain2 = plain;
  plain2.scale_b = options.scale_b2;
  const Problem first = validate_gemm(problem.a(), b, d, plain), second = validate_gemm(problem.a(), b2, d, plain2);
  const Reference ref = reference_of(first), ref2 = reference_of(second);
  const double accumulation = reference::accumulation_tolerance(first);
  const StoredD stored(wide_d, given.scale_d);
  tensors.copy_outputs();
  int64_t outside = 0;  // D's other N columns, which must stay NaN
  for (int64_t m = 0; m < wide.m; ++m) {
    for (int64_t c = 0; c < wide.n; ++c) {
      if (c >= n) {
        outside += !std::isnan(stored.raw(wide_d, m, c));
        continue;
      }
      const auto [got, rounding] = stored.value(d, plain.scale_d.scales, m, c);
      const size_t i = size_t(m * n + c);
      const double tol = accumulation * ref.abs_values[i] + 1e-6 * std::fabs(ref.values[i]);
      const double tol2 = accumulation * ref2.abs_values[i] + 1e-6 * std::fabs(ref2.values[i]);
      tensors.check(0, m, c, ref.values[i], tol, got, d.dtype, ref2.values[i], tol2, rounding);
    }
  }
  tensors.expect_reductions();
  EXPECT_EQ(tensors.wrong(), 0);
  EXPECT_EQ(outside, 0) << "elements of D's buffer written past its N columns";
  return plan;
}

using DualGemm = testing::GpuTest;

// SwiGLU's up-projection shapes: N a multiple of the tile's half and not (13652 = 7 x 1950 + 2,
// Llama-2's 13824 / 2 + ...), the last tile column moved left; M prime; K not a multiple of 64.
TEST_F(DualGemm, SwigluMatchesTheTwoProductsOnTmaStores) {
  using DType::bf16, DType::f32;
  const Plan plan = expect_dual_correct({.m = 257, .n = 2 * 13652, .k = 320}, "", {}, DualForm::halves);
  EXPECT_TRUE(plan.config.dual && plan.config.kind == KernelKind::tma) << plan.config.name();
  EXPECT_EQ(plan.kernel ? plan.kernel->local_bytes : -1, 0) << plan.config.name();
  std::printf("plan: %s\n", plan.config.name().c_str());
  expect_dual_correct({.m = 1, .n = 2 * 4096, .k = 1024}, "", {}, DualForm::halves);
  expect_dual_correct({.m = 4097, .n = 2 * 257, .k = 67, .align_leading = true}, "", {}, DualForm::interleaved);
  expect_dual_correct({.m = 129, .n = 2 * 1000, .k = 512, .out = f32}, "silu(acc + bias[n]) * (acc2 + bias2[n])",
                      {bf16, f32}, DualForm::halves);
}

// gpt-oss's variant: the gate clamped above, the up projection on both sides, alpha 1.702.
TEST_F(DualGemm, ClampedGptOssVariantAndResidual) {
  using DType::bf16, DType::f16;
  constexpr const char* kGptOss = "g = min(acc, 7); g * sigmoid(1.702 * g) * (clamp(acc2, -7, 7) + 1)";
  ProblemSpec s{.m = 384, .n = 2 * 2880, .k = 512, .input_lo = -1.0f, .alpha = 8.0f};  // alpha: products past 7
  expect_dual_correct(s, kGptOss, {}, DualForm::interleaved);
  s = {.m = 200, .n = 2 * 768, .k = 256, .in = DType::f16, .out = DType::f16};
  expect_dual_correct(s, "silu(acc) * acc2 * scale[m] + r[m, n]", {f16, f16}, DualForm::halves);
}

// Every class of dual kernel: each tile width it takes, clustered and not, one and two consumer
// warpgroups, B N-major, D stored by rows or directly, operands staged (B2 not readable by TMA:
// an interleaved N-major B; A's and B's rows off 16 bytes: an odd K), and the fallback kernel.
TEST_F(DualGemm, EveryTileAndStorePath) {
  using DType::bf16;
  for (int tile_n : {128, 160, 192, 224, 256}) {
    for (int cluster : {1, 2}) {
      KernelConfig knobs;
      knobs.tile_m = 128;
      knobs.tile_n = tile_n;
      knobs.cluster_m = cluster;
      knobs.stages = 3;
      expect_dual_correct({.m = 300, .n = 2 * 700, .k = 192}, "", {}, DualForm::halves, &knobs);
    }
  }
  KernelConfig half_height;
  half_height.tile_m = 64;
  half_height.tile_n = 256;
  half_height.stages = 4;
  expect_dual_correct({.m = 70, .n = 2 * 600, .k = 128}, "", {}, DualForm::halves, &half_height);
  expect_dual_correct({.m = 130, .n = 2 * 640, .k = 256, .layout = "NN"}, "", {}, DualForm::halves);  // B N-major
  expect_dual_correct({.m = 515, .n = 2 * 301, .k = 96, .pad_d = 1}, "", {}, DualForm::halves);  // D by rows
  expect_dual_correct({.m = 70, .n = 2 * 301, .k = 96, .pad_d = 3}, "", {}, DualForm::halves);   // D directly
  expect_dual_correct({.m = 100, .n = 2 * 300, .k = 64, .d_col_major = true}, "", {}, DualForm::halves);
  const Plan staged = expect_dual_correct({.m = 96, .n = 2 * 200, .k = 64, .layout = "NN"}, "", {}, DualForm::interleaved);
  EXPECT_TRUE(staged.config.stage_b && staged.config.kind == KernelKind::tma) << staged.config.name();
  const Plan odd_k = expect_dual_correct({.m = 200, .n = 2 * 384, .k = 301}, "", {}, DualForm::halves);
  EXPECT_TRUE(odd_k.config.stage_a && odd_k.config.stage_b) << odd_k.config.name();
  KernelConfig fallback;
  fallback.kind = KernelKind::fallback;
  expect_dual_correct({.m = 77, .n = 2 * 130, .k = 96}, "silu(acc) * acc2 + acc", {}, DualForm::halves, &fallback);
  expect_dual_correct({.m = 50, .n = 2 * 90, .k = 0}, "acc2 - acc", {}, DualForm::halves);  // K = 0: fallback
}

// FP8 dual GEMMs: scale modes as ProblemSpec gives them, with block's pairs of blocks (A's rows,
// B's columns): A 1x128 with B 128x128 (DeepSeek-V3's), with B 128x1, and A 128x128 with B 128x128.
struct Fp8Scales {
  ScaleMode mode;
  int64_t a_block_rows = 1, b_block_cols = 128;
};
const Fp8Scales kFp8Scales[] = {{ScaleMode::tensor},         {ScaleMode::rowwise},         {ScaleMode::block, 1, 128},
                                {ScaleMode::block, 1, 1},     {ScaleMode::block, 128, 128}, {ScaleMode::mx}};

// e4m3 A and B, K-major ("NT", as wgmma reads 8-bit operands), with scales `scales` of A and of
// B (and of B2 likewise), for expect_dual_correct: D M x n of a spec 2n wide.
ProblemSpec fp8_dual(int64_t m, int64_t n, int64_t k, const Fp8Scales& scales) {
  ProblemSpec s{.m = m, .n = 2 * n, .k = k, .in = DType::e4m3, .scale_a = scales.mode, .scale_b = scales.mode};
  s.scale_a_block_rows = scales.a_block_rows;
  s.scale_b_block_cols = scales.b_block_cols;
  return s;
}

// SwiGLU of FP8 products, B2 and its scales apart from B's (DualForm::separate), in every scale
// mode: N odd and off the 128-column scale blocks; K off the 128-deep ones (320: two blocks and a
// half; 200, whose rows TMA cannot read as they lie; 96, less than one); M one token, prime, and
// past two tiles. The plan's kernel is a dual TMA kernel of a width FP8 dual tiles take, and
// spills nothing.
TEST_F(DualGemm, Fp8EveryScaleModeWithTails) {
  for (size_t i = 0; i < std::size(kFp8Scales); ++i) {
    const Fp8Scales& scales = kFp8Scales[i];
    const Plan plan = expect_dual_correct(fp8_dual(257, 301, 320, scales), "", {}, DualForm::separate);
    EXPECT_TRUE(plan.config.dual && plan.config.kind == KernelKind::tma) << plan.config.name();
    EXPECT_TRUE(plan.config.tile_n == 128 || plan.config.tile_n == 160) << plan.config.name();
    EXPECT_EQ(plan.kernel ? plan.kernel->local_bytes : -1, 0) << plan.config.name();
    std::printf("plan: %s\n", plan.config.name().c_str());
    if (i % 2 == 0) {
      expect_dual_correct(fp8_dual(1, 700, 200, scales), "", {}, DualForm::separate);
    } else {
      expect_dual_correct(fp8_dual(300, 301, 96, scales), "", {}, DualForm::separate);
    }
  }
  // The epilogue's own tensors beside the two products, into an f32 D.
  ProblemSpec f32_out = fp8_dual(129, 700, 320, {ScaleMode::block});
  f32_out.out = DType::f32;
  expect_dual_correct(f32_out, "silu(acc + bias[n]) * (acc2 + bias2[n])", {DType::bf16, DType::f32},
                      DualForm::separate);
}

// Each tile an FP8 dual TMA kernel takes, 64 and 128 rows by 128 and 160 accumulator columns (B's
// half, then B2's), forced: every tile with DeepSeek-V3's blocks, two (one of each height and
// width) with each other mode where it takes them (mx: 128 wide at most, tile_takes_scales), 128 x
// 160 clustered; and the fallback kernel in every mode, on K that TMA could not read.
TEST_F(DualGemm, Fp8EveryTileAndTheFallback) {
  const TileShape all[] = {{64, 128}, {128, 128}, {64, 160}, {128, 160}};
  for (size_t i = 0; i < std::size(kFp8Scales); ++i) {
    const Fp8Scales& scales = kFp8Scales[i];
    const bool deepseek = scales.mode == ScaleMode::block && scales.a_block_rows == 1 && scales.b_block_cols == 128;
    for (size_t t = 0; t < std::size(all); ++t) {
      const TileShape tile = all[t];
      const bool paired = (t == 0 || t == 3) == (i % 2 == 0);  // 64 x 128 and 128 x 160, or the other two
      if (!deepseek && !paired && scales.mode != ScaleMode::mx) continue;
      if (!tile_takes_scales(tile, scales.mode, scales.mode)) continue;
      KernelConfig knobs;
      knobs.tile_m = tile.m;
      knobs.tile_n = tile.n;
      knobs.cluster_m = tile.m == 128 && tile.n == 160 ? 2 : 1;
      knobs.stages = 3;
      SCOPED_TRACE("forced " + std::to_string(tile.m) + "x" + std::to_string(tile.n));
      expect_dual_correct(fp8_dual(300, 301, 320, scales), "", {}, DualForm::separate, &knobs);
    }
    KernelConfig fallback;
    fallback.kind = KernelKind::fallback;
    expect_dual_correct(fp8_dual(77, 130, 200, scales), "silu(acc) * acc2 + acc", {}, DualForm::separate, &fallback);
  }
}

// e4m3 A against e5m2 weights (B and B2 alike); an e4m3 D (quantised in 1x128 blocks from an f32
// D, which no dual TMA kernel quantises) after the dual product, in block and rowwise modes and
// for one token with tensor scales.
TEST_F(DualGemm, Fp8MixedTypesAndAnE4m3Output) {
  ProblemSpec mixed = fp8_dual(257, 700, 320, {ScaleMode::block});
  mixed.in_b = DType::e5m2;
  expect_dual_correct(mixed, "", {}, DualForm::separate);
  for (const Fp8Scales& scales : {Fp8Scales{ScaleMode::block}, Fp8Scales{ScaleMode::rowwise}}) {
    ProblemSpec quantized = fp8_dual(300, 301, 320, scales);
    quantized.out = DType::e4m3;
    expect_dual_correct(quantized, "", {}, DualForm::separate);
  }
  ProblemSpec token = fp8_dual(1, 700, 96, {ScaleMode::tensor});
  token.out = DType::e4m3;
  expect_dual_correct(token, "silu(acc) * acc2 * 4", {}, DualForm::separate);
}

// B and B2 as views of one FP8 weight and their scales as views of its scale tensor: a
// concatenated [2N, K] weight whose halves start on a 128x128 block (N = 384) or share its one
// scale; an interleaved one, whose columns' scales (rowwise, block 128x1, mx) interleave too.
TEST_F(DualGemm, Fp8WeightsSharingOneScaleTensor) {
  expect_dual_correct(fp8_dual(257, 384, 320, {ScaleMode::block}), "", {}, DualForm::halves);
  expect_dual_correct(fp8_dual(257, 384, 320, {ScaleMode::tensor}), "", {}, DualForm::halves);
  for (const Fp8Scales& scales : {Fp8Scales{ScaleMode::rowwise}, Fp8Scales{ScaleMode::block, 1, 1},
                                  Fp8Scales{ScaleMode::mx}}) {
    expect_dual_correct(fp8_dual(130, 301, 320, scales), "", {}, DualForm::interleaved);
  }
}

// Matrix g of a [batch] view, and rows [first, first + count) of a matrix view.
TensorView matrix_of(const TensorView& t, int64_t g) {
  return TensorView::matrix(static_cast<char*>(t.data) + g * t.batch_stride() * dtype_size(t.dtype), t.dtype, t.rows(),
                            t.cols(), t.row_stride(), t.col_stride());
}
TensorView rows_of(const TensorView& t, int64_t first, int64_t count) {
  return TensorView::matrix(static_cast<char*>(t.data) + first * t.row_stride() * dtype_size(t.dtype), t.dtype, count,
                            t.cols(), t.row_stride(), t.col_stride());
}

// The sizes as the kernels read them, int32, on the device.
struct DeviceSizes {
  explicit DeviceSizes(const std::vector<int64_t>& values) {
    std::vector<int32_t> words(values.begin(), values.end());
    runtime::check(cudaMalloc(&data, words.size() * 4), "cudaMalloc sizes");
    runtime::check(cudaMemcpy(data, words.data(), words.size() * 4, cudaMemcpyHostToDevice), "copy sizes");
  }
  ~DeviceSizes() { cudaFree(data); }
  void* data = nullptr;
};

// The scales `s` of rows [first, first + count) of matrix g of a [batch] operand whose scale
// blocks are one row (A's: rowwise, block 1x128, mx; an e4m3 D's), or (tensor) of all of it.
Scale scales_of_rows(const Scale& s, int64_t g, int64_t first, int64_t count) {
  if (s.mode == ScaleMode::none) return s;
  const TensorView t = matrix_of(s.scales, g);
  return {s.mode, s.mode == ScaleMode::tensor ? t : rows_of(t, first, count)};
}
// The scales `s` of matrix g of a [batch] operand (B's, a group's).
Scale scales_of_matrix(const Scale& s, int64_t g) {
  return s.mode == ScaleMode::none ? s : Scale{s.mode, matrix_of(s.scales, g)};
}

// grouped_gemm with the epilogue over groups of `rows`, of the spec's N, K, types and scale modes
// (its M and batch follow from the groups), contiguous (A and D M_total x ..., 5 rows past the
// groups) or masked (A and D [G, max_m + 3, ...]): each group's rows against its GEMM's
// reference, b = the group, m = D's row (contiguous: of M_total). FP8: A's scales (and an e4m3
// D's) cover A's (D's) rows as A (D) does, B's are one set a group ([G, ...]); a dual GEMM's B2
// and scale_b2 are another problem's B and scale_b, of the same spec and another seed.
void expect_grouped_fused_correct(GroupLayout layout, const std::vector<int64_t>& rows, ProblemSpec spec,
                                  const std::string& text, const std::vector<DType>& inputs,
                                  const std::vector<DType>& stores, bool dual = false) {
  const bool masked = layout == GroupLayout::masked;
  const int64_t groups = int64_t(rows.size());
  const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t(0));
  spec.m = masked ? *std::max_element(rows.begin(), rows.end()) + 3 : total + 5;
  spec.batch = groups;
  SCOPED_TRACE(std::string(masked ? "masked " : "contiguous ") + spec.describe() + (dual ? " dual" : "") + " [" + text +
               "]");
  ASSERT_TRUE(spec.scale_a != ScaleMode::block || spec.scale_a_block_rows == 1) << "A's scale blocks would span groups";
  DeviceProblem dense(spec, testing::fresh_seed());
  dense.prepare_output(nullptr);
  std::optional<DeviceProblem> second;  // a dual GEMM's B2 [G, K, N] and its scales: another problem's B
  if (dual) second.emplace(spec, testing::fresh_seed());
  const GemmOptions given = dense.options(nullptr);  // scales batched [G, ...]
  // The matrices holding the groups' rows: contiguous, matrix 0 of A, D and their scales.
  auto along_rows = [&](const TensorView& t) { return masked ? t : matrix_of(t, 0); };
  const TensorView a = along_rows(dense.a()), b = dense.b(), d = along_rows(dense.d());
  std::vector<int64_t> sizes(rows);
  if (!masked) std::partial_sum(sizes.begin(), sizes.end(), sizes.begin());
  const DeviceSizes device_sizes(sizes);
  // Contiguous groups: per-group row vectors, everything along the rows one M_total-row tensor.
  const Batches batches = masked ? Batches{groups, groups, groups} : Batches{groups, 1, 1};
  FusedTensors tensors(text, inputs, stores, batches, spec.m, spec.n);
  GemmOptions options = given;
  if (given.scale_a.mode != ScaleMode::none) options.scale_a.scales = along_rows(given.scale_a.scales);
  if (given.scale_d.mode != ScaleMode::none) options.scale_d.scales = along_rows(given.scale_d.scales);
  options.epilogue = tensors.epilogue();
  if (dual) {
    options.b2 = second->b();
    options.scale_b2 = second->options(nullptr).scale_b;
  }
  grouped_gemm(a, b, d, {layout, device_sizes.data, false, groups}, options);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const StoredD stored(dense.d(), given.scale_d);
  tensors.copy_outputs();
  const int64_t n = spec.n;
  std::vector<bool> owned(size_t(batches.outputs * spec.m * n), false);
  int64_t start = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t count = rows[size_t(g)], first = masked ? 0 : start;
    start += count;
    if (count == 0) continue;
    const int64_t held = masked ? g : 0;  // the matrix of A, D and their scales holding the group's rows
    const TensorView ag = rows_of(matrix_of(a, held), first, count), dg = rows_of(matrix_of(d, held), first, count);
    // The group's GEMM alone, on its rows' scales and its B's; then (dual) its B2's.
    GemmOptions plain = given;
    plain.scale_a = scales_of_rows(options.scale_a, held, first, count);
    plain.scale_d = scales_of_rows(options.scale_d, held, first, count);
    plain.scale_b = scales_of_matrix(given.scale_b, g);
    const Problem p = validate_gemm(ag, matrix_of(b, g), dg, plain);
    const Reference ref = reference_of(p);
    Reference ref2;
    if (dual) {
      plain.scale_b = scales_of_matrix(options.scale_b2, g);
      ref2 = reference_of(validate_gemm(ag, matrix_of(*options.b2, g), dg, plain));
    }
    const double accumulation = reference::accumulation_tolerance(p);
    for (int64_t r = 0; r < count; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        const size_t i = size_t(r * n + j);
        const auto [got, rounding] = stored.value(dg, plain.scale_d.scales, r, j);
        const double tol = accumulation * ref.abs_values[i] + 1e-6 * std::fabs(ref.values[i]);
        const double ref2_value = dual ? ref2.values[i] : 0.0;
        const double tol2 = dual ? accumulation * ref2.abs_values[i] + 1e-6 * std::fabs(ref2_value) : 0.0;
        tensors.check(g, first + r, j, ref.values[i], tol, got, dg.dtype, ref2_value, tol2, rounding);
        owned[size_t(((masked ? g : 0) * spec.m + first + r) * n + j)] = true;
      }
    }
  }
  tensors.expect_reductions();
  EXPECT_EQ(tensors.wrong(), 0);
  tensors.expect_nothing_else_written(&owned);
}

TEST_F(FusedGemm, GroupedRowsWithPerGroupVectors) {
  using DType::bf16, DType::f32;
  // An MoE down-projection's router weights (one a row) and a per-expert bias, with empty, odd
  // and tile-crossing groups; the pre-activation saved for the rows groups own.
  expect_grouped_fused_correct(GroupLayout::contiguous, {130, 0, 1, 257, 64, 200}, {.n = 320, .k = 256},
                               "h = acc + bias[n]; pre[m, n] = h; h * weight[m]", {bf16, f32}, {bf16});
  expect_grouped_fused_correct(GroupLayout::contiguous, {300, 77, 0, 500}, {.n = 4096, .k = 256},
                               "silu(acc + bias[n]) * weight[m]", {bf16, f32}, {});
  expect_grouped_fused_correct(GroupLayout::masked, {64, 0, 129, 7}, {.n = 264, .k = 256},
                               "gelu(acc) * gate[m, n] + bias[n]", {bf16, bf16}, {});
  // Per-expert bias gradients and maxima: only the rows each group owns count.
  expect_grouped_fused_correct(GroupLayout::contiguous, {130, 0, 1, 257, 64, 200}, {.n = 320, .k = 256}, kBackward,
                               {bf16}, {f32, f32, f32});
  expect_grouped_fused_correct(GroupLayout::masked, {64, 0, 129, 7}, {.n = 264, .k = 256}, kBackward, {bf16},
                               {f32, f32, f32});
}

// The MoE up-projection as one dual grouped GEMM: each expert's gate and up weights, [G, K, N]
// each; empty, one-row and tile-crossing groups; a per-expert bias on the up product.
TEST_F(DualGemm, GroupedRowsContiguousAndMasked) {
  using DType::bf16;
  expect_grouped_fused_correct(GroupLayout::contiguous, {130, 0, 1, 257, 64, 200}, {.n = 1000, .k = 256},
                               "silu(acc) * acc2", {}, {}, true);
  expect_grouped_fused_correct(GroupLayout::contiguous, {300, 77, 0, 500}, {.n = 2048, .k = 256},
                               "silu(acc) * (acc2 + bias[n])", {bf16}, {}, true);
  expect_grouped_fused_correct(GroupLayout::masked, {64, 0, 129, 7}, {.n = 768, .k = 256},
                               "silu(acc) * acc2 * weight[m]", {DType::f32}, {}, true);
  // SwiGLU's output with its largest |x| a token and an expert (FP8 scaling of the next GEMM's input).
  expect_grouped_fused_correct(GroupLayout::contiguous, {300, 77, 0, 500}, {.n = 2048, .k = 256},
                               "y = silu(acc) * acc2; ya[m] = amax(y); ga[] = amax(y); y", {}, {DType::f32, DType::f32},
                               true);
}

// FP8 MoE up-projections: e4m3 tokens with their scales (rowwise: one a token; block: 1x128,
// covering the tokens' rows as A does) against each expert's gate and up weights with scales of
// their own ([G, ...] each; block: 128x128, and 128x1 once), N and K off the scale blocks;
// contiguous groups (empty, one-row, tile-crossing, rows past the last) and masked ones; an e4m3
// D (its 1x128 scales along the tokens' rows) once.
TEST_F(DualGemm, Fp8GroupedRowsWithPerGroupScales) {
  using DType::e4m3, DType::f32;
  for (ScaleMode mode : {ScaleMode::rowwise, ScaleMode::block}) {
    const ProblemSpec s{.n = 1000, .k = 320, .in = e4m3, .scale_a = mode, .scale_b = mode};
    expect_grouped_fused_correct(GroupLayout::contiguous, {130, 0, 1, 257, 64, 200}, s, "silu(acc) * acc2", {}, {},
                                 true);
    ProblemSpec masked = s;
    masked.n = 264;
    expect_grouped_fused_correct(GroupLayout::masked, {64, 0, 129, 7}, masked, "silu(acc) * acc2 * weight[m]", {f32},
                                 {}, true);
  }
  ProblemSpec columns{.n = 1000, .k = 320, .in = e4m3, .scale_a = ScaleMode::block, .scale_b = ScaleMode::block};
  columns.scale_b_block_cols = 1;
  expect_grouped_fused_correct(GroupLayout::contiguous, {300, 77, 0, 500}, columns, "silu(acc) * (acc2 + bias[n])",
                               {DType::bf16}, {}, true);
  ProblemSpec quantized{.n = 1000, .k = 320, .in = e4m3, .out = e4m3, .scale_a = ScaleMode::block,
                        .scale_b = ScaleMode::block};
  expect_grouped_fused_correct(GroupLayout::contiguous, {130, 0, 1, 257, 64, 200}, quantized, "silu(acc) * acc2", {},
                               {}, true);
}

TEST_F(FusedGemm, GroupedWeightGradient) {
  using DType::f32;
  // d_g [G, P, Q] = x_g^T y_g, then a per-group bias along Q and a row scale along P shared by
  // the groups.
  const std::vector<int64_t> rows = {100, 0, 257, 33};
  const int64_t groups = int64_t(rows.size()), p_dim = 192, q_dim = 320;
  const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t(0)) + 5;
  DeviceProblem dense({.m = p_dim, .n = q_dim, .k = total, .batch = groups, .layout = "TN", .out = f32},
                      testing::fresh_seed());
  dense.prepare_output(nullptr);
  const TensorView at = matrix_of(dense.a(), 0);  // x^T, P x M_total
  const TensorView x = TensorView::matrix(at.data, at.dtype, at.cols(), at.rows(), at.col_stride(), at.row_stride());
  const TensorView y = matrix_of(dense.b(), 0);
  std::vector<int64_t> ends(rows);
  std::partial_sum(ends.begin(), ends.end(), ends.begin());
  const DeviceSizes sizes(ends);
  const std::string text = "out[m, n] = acc; acc * scale[m] + bias[n]";
  FusedTensors tensors(text, {f32, f32}, {f32}, {groups, 1, groups}, p_dim, q_dim);
  GemmOptions options;
  options.epilogue = tensors.epilogue();
  grouped_gemm_wgrad(x, y, dense.d(), {GroupLayout::contiguous, sizes.data, false, groups}, options);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<char> host_d = dense.copy_output();
  tensors.copy_outputs();
  int64_t first = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const TensorView xg = rows_of(x, first, rows[size_t(g)]), yg = rows_of(y, first, rows[size_t(g)]);
    first += rows[size_t(g)];
    const TensorView dg = matrix_of(dense.d(), g);
    const Problem p = validate_gemm(
        TensorView::matrix(xg.data, xg.dtype, xg.cols(), xg.rows(), xg.col_stride(), xg.row_stride()), yg, dg, {});
    const Reference ref = reference_of(p);
    const double accumulation = reference::accumulation_tolerance(p);
    for (int64_t i = 0; i < p_dim; ++i) {
      for (int64_t j = 0; j < q_dim; ++j) {
        const size_t r = size_t(i * q_dim + j);
        const double got = testing::read_back(host_d, f32, g * dense.d().batch_stride() + i * dg.row_stride() + j);
        tensors.check(g, i, j, ref.values[r], accumulation * ref.abs_values[r] + 1e-6 * std::fabs(ref.values[r]), got, f32);
      }
    }
  }
  tensors.expect_reductions();
  EXPECT_EQ(tensors.wrong(), 0);
  tensors.expect_nothing_else_written();
}

}  // namespace
}  // namespace gemmkit
