// An e4m3 D quantised in 1x128 blocks (GemmOptions::scale_d) on the GPU: each block's scale and
// values against the same call with an f32 D (which fused_gemm_test checks against the double
// reference), quantised on the host by gemmkit::quantize's rule. Dense (TMA stores with partial
// last blocks and the shifted last tile row, direct stores, batches, split-K, FP8 inputs, scales
// M-major, a SwiGLU dual), the f32-then-quantize route (K = 0), and grouped (a SwiGLU dual over contiguous
// groups that end mid-tile, masked rows). D and the scales start as NaN; nothing outside them is
// written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "epilogue_tensors.h"
#include "gemmkit/grouped.h"
#include "gpu_test.h"
#include "reference/host_numeric.h"
#include "runtime/driver.h"

namespace gemmkit {
namespace quantized_output_test {

using reference::DeviceProblem;
using reference::ProblemSpec;

// A device buffer of `bytes`, every byte 0xFF (NaN as e4m3 and f32).
struct Buffer {
  void* data = nullptr;
  size_t bytes = 0;
  explicit Buffer(size_t n) : bytes(n) {
    runtime::check(cudaMalloc(&data, std::max<size_t>(n, 1)), "cudaMalloc");
    runtime::check(cudaMemset(data, 0xFF, n), "cudaMemset");
  }
  ~Buffer() { cudaFree(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::vector<char> copy() const {
    std::vector<char> host(bytes);
    runtime::check(cudaMemcpy(host.data(), data, bytes, cudaMemcpyDeviceToHost), "copy");
    return host;
  }
};

// [batch,] rows x cols f32 scales, row-major or M-major (rows contiguous), with `pad` elements
// past each leading dimension.
struct ScaleTensor {
  int64_t batch, rows, cols, ld, matrix;
  bool m_major;
  Buffer buffer;
  ScaleTensor(int64_t b, int64_t r, int64_t c, bool mm, int64_t pad)
      : batch(b), rows(r), cols(c), ld((mm ? r : c) + pad), matrix(ld * (mm ? c : r)), m_major(mm),
        buffer(size_t(b * matrix) * 4) {}
  int64_t offset(int64_t b, int64_t r, int64_t c) const { return b * matrix + (m_major ? c * ld + r : r * ld + c); }
  TensorView view(bool batched) const {
    const int64_t rs = m_major ? 1 : ld, cs = m_major ? ld : 1;
    return batched ? TensorView::batched(buffer.data, DType::f32, batch, rows, cols, matrix, rs, cs)
                   : TensorView::matrix(buffer.data, DType::f32, rows, cols, rs, cs);
  }
};

float f32_at(const std::vector<char>& bytes, int64_t i) {
  float f;
  std::memcpy(&f, &bytes[size_t(4 * i)], 4);
  return f;
}

// Rows [0, rows) of `batch` matrices: D's e4m3 bytes `q` (element (b, r, c) at q_at(b, r, c)) and
// scales against the f32 values `x` (at x_at), block by block: the scale within 1e-5 of
// amax / 448 (1 for an all-zero block), each q * scale within e4m3's rounding (2^-4 relative,
// 2^-10 of the scale absolute) and the runs' summation differences (2e-5 of amax) of x; `owned` rows only; every other byte of D and every other
// scale still NaN.
template <class QAt, class XAt, class Owned>
void expect_quantized(int64_t batch, int64_t rows, int64_t n, const std::vector<char>& q, QAt q_at,
                      const std::vector<char>& x, XAt x_at, const ScaleTensor& scales, Owned owned) {
  const std::vector<char> s = scales.buffer.copy();
  std::vector<bool> q_written(q.size(), false), s_written(s.size() / 4, false);
  int64_t wrong = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      if (!owned(b, r)) continue;
      for (int64_t block = 0; block * 128 < n; ++block) {
        const int64_t end = std::min(n, 128 * block + 128);
        double amax = 0;
        for (int64_t c = 128 * block; c < end; ++c) amax = std::max(amax, std::fabs(double(f32_at(x, x_at(b, r, c)))));
        const int64_t si = scales.offset(b, r, block);
        s_written[size_t(si)] = true;
        const double scale = f32_at(s, si), want = amax == 0 ? 1.0 : amax / 448;
        if (!(std::fabs(scale - want) <= 1e-5 * want) && ++wrong <= 5) {
          ADD_FAILURE() << "scale (" << b << ", " << r << ", " << block << ") is " << scale << ", expected " << want;
        }
        for (int64_t c = 128 * block; c < end; ++c) {
          const int64_t qi = q_at(b, r, c);
          q_written[size_t(qi)] = true;
          const double value = testing::read_back(q, DType::e4m3, qi) * scale, xv = f32_at(x, x_at(b, r, c));
          // e4m3's half step (relative, or absolute among subnormals), plus how far the two
          // runs' f32 sums may differ (another tile or split sums in another order).
          const double allowed = 0x1p-4 * std::fabs(xv) + 0x1p-10 * scale + 2e-5 * amax;
          if (!(std::fabs(value - xv) <= allowed) && ++wrong <= 5) {
            ADD_FAILURE() << "D (" << b << ", " << r << ", " << c << ") is " << value << " dequantised, expected " << xv;
          }
        }
      }
    }
  }
  EXPECT_EQ(wrong, 0);
  int64_t outside = 0;
  for (size_t i = 0; i < q.size(); ++i) outside += !q_written[i] && uint8_t(q[i]) != 0xFF;
  for (size_t i = 0; i < s_written.size(); ++i) outside += !s_written[i] && !std::isnan(f32_at(s, int64_t(i)));
  EXPECT_EQ(outside, 0) << "elements written outside D's and the scales' views";
}

struct DenseCase {
  ProblemSpec spec;  // out is e4m3
  std::string text;  // with a bias[n] (bf16) where it names one
  bool m_major = false;
  const KernelConfig* forced = nullptr;
  bool dual = false;  // B2 = B (the dual kernel's path; DualGemm tests tell the products apart)
};

// Runs the case with an e4m3 D and scales, and again into a dense f32 D, and compares.
void expect_dense(const DenseCase& c) {
  SCOPED_TRACE(c.spec.describe() + " [" + c.text + "]" + (c.m_major ? " scales M-major" : ""));
  DeviceProblem problem(c.spec, testing::fresh_seed());
  problem.prepare_output(nullptr);
  const int64_t batch = c.spec.batch, m = c.spec.m, n = c.spec.n;
  std::mt19937_64 draws(testing::fresh_seed());
  testing::EpilogueTestTensor bias = testing::make_epilogue_tensor(DType::bf16, epilogue::Shape::row_vector, 1, m, n, draws, false);
  ScaleTensor scales(batch, m, (n + 127) / 128, c.m_major, 3);
  GemmOptions options = problem.options(nullptr);
  options.scale_d = {};  // the f32 run's; the e4m3 run takes `scales` below
  if (!c.text.empty()) options.epilogue = {c.text, {{"bias", bias.view()}}};
  if (c.text.find("bias") == std::string::npos) options.epilogue.tensors.clear();
  if (c.dual) options.b2 = problem.b();
  GemmOptions quantized = options;
  quantized.scale_d = {ScaleMode::block, scales.view(batch > 1)};
  if (c.forced) {
    const Problem p = normalize(validate_gemm(problem.a(), problem.b(), problem.d(), quantized));
    KernelConfig config = problem_config(p);
    static_cast<KernelKnobs&>(config) = *c.forced;
    config = with_tile(config, {c.forced->tile_m, c.forced->tile_n});
    run_plan(make_plan(p, &config), p, nullptr);
  } else {
    gemm(problem.a(), problem.b(), problem.d(), quantized);
  }
  Buffer x(size_t(batch * m * n) * 4);
  const TensorView xv = batch > 1 ? TensorView::batched(x.data, DType::f32, batch, m, n, m * n, n, 1)
                                  : TensorView::row_major(x.data, DType::f32, m, n);
  gemm(problem.a(), problem.b(), xv, options);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const TensorView d = problem.d();
  expect_quantized(
      batch, m, n, problem.copy_output(),
      [&](int64_t b, int64_t r, int64_t col) { return b * d.batch_stride() + r * d.row_stride() + col * d.col_stride(); },
      x.copy(), [&](int64_t b, int64_t r, int64_t col) { return (b * m + r) * n + col; }, scales,
      [](int64_t, int64_t) { return true; });
  bias.free();
}

using QuantizedOutput = testing::GpuTest;

TEST_F(QuantizedOutput, DenseTilesStoresAndScaleLayouts) {
  using DType::e4m3;
  // TMA stores: a partial last block, the last tile row shifted up; N below one block.
  expect_dense({{.m = 333, .n = 517, .k = 256, .out = e4m3}, "silu(acc + bias[n])"});
  expect_dense({{.m = 200, .n = 100, .k = 64, .out = e4m3}, "", true});
  expect_dense({{.m = 1, .n = 4096, .k = 512, .out = e4m3}, "acc + bias[n]"});  // one row: no GEMV
  expect_dense({{.m = 130, .n = 384, .k = 128, .batch = 3, .out = e4m3}, "gelu(acc)", true});
  // D's rows off 16 bytes: direct stores; D column-major: not transposed, stored directly.
  expect_dense({{.m = 515, .n = 301, .k = 96, .out = e4m3, .pad_d = 3}, "acc * 4 + bias[n]"});
  expect_dense({{.m = 96, .n = 200, .k = 64, .out = e4m3, .d_col_major = true}, ""});
  expect_dense({{.m = 300, .n = 700, .k = 128, .out = e4m3}, "silu(acc) * acc2", false, nullptr, true});
  // FP8 inputs with block scales (the next layer's input, quantised as it takes it).
  expect_dense({{.m = 256, .n = 640, .k = 1024, .in = e4m3, .out = e4m3, .scale_a = ScaleMode::block,
                 .scale_b = ScaleMode::block},
                "silu(acc + bias[n])", true});
}

TEST_F(QuantizedOutput, SplitKAndTheRouteThroughF32) {
  using DType::e4m3;
  KernelConfig split;
  split.tile_m = 64;
  split.tile_n = 128;
  split.splits = 4;
  split.stages = 8;
  expect_dense({{.m = 100, .n = 300, .k = 4096, .out = e4m3}, "acc + bias[n]", false, &split});
  // K = 0: the fallback kernel's f32 values, then quantize (acc = 0: the bias alone), and an
  // all-zero D (scale 1).
  expect_dense({{.m = 70, .n = 300, .k = 0, .out = e4m3}, "acc + bias[n]"});
  expect_dense({{.m = 70, .n = 90, .k = 0, .batch = 2, .out = e4m3}, ""});
}

// The MoE up-projection: SwiGLU over each expert's rows, quantised for the down-projection's FP8
// input, [M_total, I] with [M_total, ceil(I/128)] scales; groups empty, of one row and ending
// mid-tile (their last warp's rows stored from shared memory); and masked rows.
TEST_F(QuantizedOutput, GroupedSwigluRows) {
  for (const GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked}) {
    SCOPED_TRACE(layout == GroupLayout::contiguous ? "contiguous" : "masked");
    const std::vector<int64_t> rows = {130, 0, 1, 257, 64, 200};
    const int64_t groups = int64_t(rows.size()), n = 384, k = 256;
    const int64_t max_m = 260, total = std::accumulate(rows.begin(), rows.end(), int64_t(0));
    const bool masked = layout == GroupLayout::masked;
    const int64_t a_rows = masked ? groups * max_m : total;
    // A [a_rows, K], gate and up [G, K, N] (N-contiguous rows of B as K x N), bf16 in [-1, 1).
    DeviceProblem a_src({.m = a_rows, .n = 8, .k = k, .layout = "NN"}, testing::fresh_seed());
    DeviceProblem w_src({.m = 8, .n = n, .k = k, .batch = groups, .layout = "NN"}, testing::fresh_seed());
    DeviceProblem u_src({.m = 8, .n = n, .k = k, .batch = groups, .layout = "NN"}, testing::fresh_seed());
    const TensorView a = masked ? TensorView::batched(a_src.a().data, DType::bf16, groups, max_m, k, max_m * k, k, 1)
                                : a_src.a();
    const int64_t d_rows = masked ? max_m : total;
    Buffer q(size_t(groups * max_m * n)), x(size_t(groups * max_m * n) * 4);
    ScaleTensor scales(masked ? groups : 1, d_rows, (n + 127) / 128, false, 0);
    const TensorView qv = masked ? TensorView::batched(q.data, DType::e4m3, groups, max_m, n, max_m * n, n, 1)
                                 : TensorView::row_major(q.data, DType::e4m3, total, n);
    const TensorView xv = masked ? TensorView::batched(x.data, DType::f32, groups, max_m, n, max_m * n, n, 1)
                                 : TensorView::row_major(x.data, DType::f32, total, n);
    std::vector<int32_t> sizes(rows.begin(), rows.end());
    if (!masked) std::partial_sum(sizes.begin(), sizes.end(), sizes.begin());
    Buffer sizes_d(sizes.size() * 4);
    runtime::check(cudaMemcpy(sizes_d.data, sizes.data(), sizes.size() * 4, cudaMemcpyHostToDevice), "copy");
    const GroupSizes group_sizes{layout, sizes_d.data, false, groups};
    GemmOptions options;
    options.b2 = u_src.b();
    GemmOptions quantized = options;
    quantized.scale_d = {ScaleMode::block, scales.view(masked)};
    grouped_gemm(a, w_src.b(), qv, group_sizes, quantized);
    grouped_gemm(a, w_src.b(), xv, group_sizes, options);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<int64_t> first(rows.size());
    std::exclusive_scan(rows.begin(), rows.end(), first.begin(), int64_t(0));
    // Contiguous rows are one batch; a row is owned where some group holds it.
    auto owned = [&](int64_t b, int64_t r) {
      if (masked) return r < rows[size_t(b)];
      return r < total;
    };
    auto at = [&](int64_t b, int64_t r, int64_t c) { return (b * d_rows + r) * n + c; };
    expect_quantized(masked ? groups : 1, d_rows, n, q.copy(), at, x.copy(), at, scales, owned);
  }
}

}  // namespace quantized_output_test
}  // namespace gemmkit
