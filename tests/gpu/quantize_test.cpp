// gemmkit::quantize against a host reference computed from the same input: every block shape
// of every ScaleMode, both fp8 types, every input type, f32 and ue8m0 (and power-of-two f32)
// scales, row- and column-major, padded and batched layouts, q transposed against x, uneven
// blocks and edges, NaN / Inf / zero / tiny blocks, the two-pass path, CUDA graph capture,
// and the pointer checks that need a device. Skips without an sm_90 device.
//
// Scales must match exactly. q must equal round-to-nearest-even-satfinite(x / scale), with
// x / scale rounded to f32, exactly, or one fp8 step off where rounding x / scale the other way
// to f32 would give that step. Dequantised, q * scale is within half an fp8 ulp of x (relative,
// or half the smallest subnormal step times the scale).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/kernel_source.h"
#include "gemmkit/error.h"
#include "gemmkit/quantize.h"
#include "gpu_test.h"
#include "reference/host_numeric.h"
#include "runtime/driver.h"

namespace gemmkit {
namespace {

using QuantizeBlocks = testing::GpuTest;
using QuantizeLayouts = testing::GpuTest;
using QuantizeValues = testing::GpuTest;
using QuantizeGraphs = testing::GpuTest;
using QuantizeDeviceErrors = testing::GpuTest;

// How a [batch,] rows x cols tensor lies in memory.
enum class Layout {
  row_major,
  col_major,
  padded,      // row-major, rows 5 elements apart beyond cols and batches 7 beyond: no vectors
  padded8,     // row-major, rows 8 elements beyond cols: vectors where cols allow
  col_padded,  // column-major, columns 3 elements beyond rows
};

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::row_major: return "row-major";
    case Layout::col_major: return "col-major";
    case Layout::padded: return "padded";
    case Layout::padded8: return "padded8";
    case Layout::col_padded: return "col-padded";
  }
  return "?";
}

// Values in x: random normals times 2^k, k drawn per row in [-spread, spread].
struct Spec {
  DType x = DType::bf16, q = DType::e4m3, scales = DType::f32;
  int64_t batch = 0;  // 0: a rank-2 x; else rank 3
  int64_t rows = 0, cols = 0, block_rows = 1, block_cols = 1;
  bool pow2 = false;
  Layout x_layout = Layout::row_major, q_layout = Layout::row_major, s_layout = Layout::row_major;
  int spread = 8;

  std::string describe() const {
    std::ostringstream s;
    s << dtype_name(x) << "->" << dtype_name(q) << " scales " << dtype_name(scales) << (pow2 ? " pow2" : "") << " ";
    if (batch > 0) s << batch << " x ";
    s << rows << " x " << cols << " blocks " << block_rows << " x " << block_cols << " x " << layout_name(x_layout)
      << " q " << layout_name(q_layout) << " scales " << layout_name(s_layout);
    return s.str();
  }
};

struct Strides {
  int64_t batch = 0, row = 0, col = 0, span = 0;  // span: elements from the first to past the last
};

Strides strides_of(Layout layout, int64_t batch, int64_t rows, int64_t cols) {
  Strides s;
  switch (layout) {
    case Layout::row_major: s.row = cols; s.col = 1; s.batch = rows * cols; break;
    case Layout::col_major: s.row = 1; s.col = rows; s.batch = rows * cols; break;
    case Layout::padded: s.row = cols + 5; s.col = 1; s.batch = rows * s.row + 7; break;
    case Layout::padded8: s.row = cols + 8; s.col = 1; s.batch = rows * s.row; break;
    case Layout::col_padded: s.row = 1; s.col = rows + 3; s.batch = cols * s.col; break;
  }
  s.span = (std::max<int64_t>(batch, 1) - 1) * s.batch + (rows - 1) * s.row + (cols - 1) * s.col + 1;
  if (rows == 0 || cols == 0) s.span = 0;
  return s;
}

TensorView view_of(void* data, DType dtype, int64_t batch, int64_t rows, int64_t cols, const Strides& s) {
  if (batch == 0) return TensorView::matrix(data, dtype, rows, cols, s.row, s.col);
  return TensorView::batched(data, dtype, batch, rows, cols, s.batch, s.row, s.col);
}

struct DeviceBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) { EXPECT_EQ(cudaMalloc(&data, std::max<size_t>(n, 1)), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

double fp8_max(DType t) { return t == DType::e4m3 ? 448.0 : 57344.0; }

// round-to-nearest-even, saturating at the largest finite value; NaN stays NaN.
float round_fp8(float v, DType t) {
  if (std::isnan(v)) return v;
  const double max = fp8_max(t);
  const int mantissa_bits = t == DType::e4m3 ? 3 : 2, min_exponent = t == DType::e4m3 ? -6 : -14;
  const double a = std::fabs(double(v));
  if (std::isinf(v) || a >= max) return float(std::copysign(max, double(v)));
  if (a == 0.0) return v;
  const int e = std::max(std::ilogb(a), min_exponent);
  const double quantum = std::ldexp(1.0, e - mantissa_bits);
  const double r = std::min(std::nearbyint(a / quantum) * quantum, max);
  return float(std::copysign(r, double(v)));
}

// The reference scale of a block: exponent (power of two) and value.
struct BlockScale {
  float value = 1.0f;
  int exponent = 0;  // power-of-two scales
  bool nan = false;
};

BlockScale reference_scale(uint32_t amax_bits, DType q, bool pow2) {
  BlockScale s;
  if (amax_bits >= 0x7f800000u) {
    s.nan = true;
    s.value = std::numeric_limits<float>::quiet_NaN();
    return s;
  }
  if (amax_bits == 0) return s;
  const float amax = std::bit_cast<float>(amax_bits);
  if (pow2) {
    int e = -127;
    while (e < 127 && std::ldexp(fp8_max(q), e) < double(amax)) ++e;
    s.exponent = e;
    s.value = std::ldexp(1.0f, e);
  } else {
    s.value = std::max(amax / float(fp8_max(q)), 0x1p-126f);
  }
  return s;
}

float decode_x(const std::vector<uint8_t>& bytes, DType t, int64_t index) {
  return float(reference::load_element(bytes.data(), t, index));
}

void encode_x(std::vector<uint8_t>& bytes, DType t, int64_t index, float v) {
  switch (t) {
    case DType::bf16: reinterpret_cast<uint16_t*>(bytes.data())[index] = reference::float_to_bf16(v); break;
    case DType::f16: reinterpret_cast<uint16_t*>(bytes.data())[index] = reference::float_to_f16(v); break;
    default: reinterpret_cast<float*>(bytes.data())[index] = v; break;
  }
}

// A filled input: `special` may overwrite chosen elements (batch, row, col) after the random fill.
struct Input {
  Spec spec;
  Strides xs, qs, ss;
  std::vector<uint8_t> x;  // host copy of x's memory
};

Input make_input(const Spec& spec, uint64_t seed) {
  Input in;
  in.spec = spec;
  const int64_t batch = std::max<int64_t>(spec.batch, 1);
  in.xs = strides_of(spec.x_layout, spec.batch, spec.rows, spec.cols);
  in.qs = strides_of(spec.q_layout, spec.batch, spec.rows, spec.cols);
  in.ss = strides_of(spec.s_layout, spec.batch, ceil_div(spec.rows, spec.block_rows),
                     ceil_div(spec.cols, spec.block_cols));
  in.x.assign(size_t(in.xs.span) * dtype_size(spec.x), 0);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-spec.spread, spec.spread);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < spec.rows; ++i) {
      const int e = exponent(rng);
      for (int64_t j = 0; j < spec.cols; ++j) {
        float v = std::ldexp(normal(rng), e);
        if (spec.x == DType::f16) v = std::clamp(v, -60000.0f, 60000.0f);
        encode_x(in.x, spec.x, b * in.xs.batch + i * in.xs.row + j * in.xs.col, v);
      }
    }
  }
  return in;
}

void set_x(Input& in, int64_t b, int64_t i, int64_t j, float v) {
  encode_x(in.x, in.spec.x, b * in.xs.batch + i * in.xs.row + j * in.xs.col, v);
}

// Runs quantize on `in` (q and scales poisoned with 0xFF) and checks everything against the host.
void run_and_check(const Input& in, cudaStream_t stream = nullptr) {
  const Spec& spec = in.spec;
  const std::string what = spec.describe();
  const int64_t batch = std::max<int64_t>(spec.batch, 1);
  const int64_t srows = ceil_div(spec.rows, spec.block_rows), scols = ceil_div(spec.cols, spec.block_cols);
  DeviceBuffer x(in.x.size()), q(size_t(in.qs.span)), s(size_t(in.ss.span) * dtype_size(spec.scales));
  ASSERT_EQ(cudaMemcpy(x.data, in.x.data(), in.x.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(q.data, 0xff, q.bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(s.data, 0xff, s.bytes), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // `stream` may not wait for the legacy stream
  const TensorView xv = view_of(x.data, spec.x, spec.batch, spec.rows, spec.cols, in.xs);
  const TensorView qv = view_of(q.data, spec.q, spec.batch, spec.rows, spec.cols, in.qs);
  const TensorView sv = view_of(s.data, spec.scales, spec.batch, srows, scols, in.ss);
  try {
    quantize(xv, qv, sv, spec.block_rows, spec.block_cols, {.power_of_two_scales = spec.pow2, .stream = stream});
  } catch (const std::exception& e) {
    FAIL() << what << ": " << e.what();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
  std::vector<uint8_t> q_host(q.bytes), s_host(s.bytes);
  ASSERT_EQ(cudaMemcpy(q_host.data(), q.data, q.bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(s_host.data(), s.data, s.bytes, cudaMemcpyDeviceToHost), cudaSuccess);

  const bool pow2 = spec.pow2 || spec.scales == DType::ue8m0;
  std::vector<uint8_t> q_written(q_host.size(), 0), s_written(s_host.size(), 0);
  int64_t scale_errors = 0, q_errors = 0, deq_errors = 0, near_ties = 0;
  std::string first_error;
  auto note = [&](int64_t& count, const std::string& message) {
    if (count++ == 0 && first_error.empty()) first_error = message;
  };
  const double u = reference::unit_roundoff(spec.q);
  const double min_step = spec.q == DType::e4m3 ? 0x1p-9 : 0x1p-16;  // the smallest subnormal
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t bi = 0; bi < srows; ++bi) {
      for (int64_t bj = 0; bj < scols; ++bj) {
        const int64_t r0 = bi * spec.block_rows, r1 = std::min(r0 + spec.block_rows, spec.rows);
        const int64_t c0 = bj * spec.block_cols, c1 = std::min(c0 + spec.block_cols, spec.cols);
        uint32_t amax_bits = 0;
        for (int64_t i = r0; i < r1; ++i) {
          for (int64_t j = c0; j < c1; ++j) {
            const float v = decode_x(in.x, spec.x, b * in.xs.batch + i * in.xs.row + j * in.xs.col);
            amax_bits = std::max(amax_bits, std::bit_cast<uint32_t>(v) & 0x7fffffffu);
          }
        }
        const BlockScale want = reference_scale(amax_bits, spec.q, pow2);
        const int64_t s_index = b * in.ss.batch + bi * in.ss.row + bj * in.ss.col;
        std::ostringstream where;
        where << "batch " << b << " block (" << bi << ", " << bj << ")";
        float got_scale;
        if (spec.scales == DType::ue8m0) {
          s_written[s_index] = 1;
          const uint8_t code = s_host[s_index];
          const uint8_t want_code = want.nan ? 0xff : uint8_t(want.exponent + 127);
          if (code != want_code) {
            note(scale_errors, where.str() + ": ue8m0 scale " + std::to_string(code) + ", expected " +
                                   std::to_string(want_code));
          }
          got_scale = reference::ue8m0_to_float(code);
        } else {
          std::memset(&s_written[s_index * 4], 1, 4);
          got_scale = reinterpret_cast<const float*>(s_host.data())[s_index];
          const bool same = want.nan ? std::isnan(got_scale)
                                     : std::bit_cast<uint32_t>(got_scale) == std::bit_cast<uint32_t>(want.value);
          if (!same) {
            std::ostringstream m;
            m << where.str() << ": scale " << got_scale << ", expected " << want.value << " (amax "
              << std::bit_cast<float>(amax_bits) << ")";
            note(scale_errors, m.str());
          }
        }
        for (int64_t i = r0; i < r1; ++i) {
          for (int64_t j = c0; j < c1; ++j) {
            const float xv_ = decode_x(in.x, spec.x, b * in.xs.batch + i * in.xs.row + j * in.xs.col);
            const int64_t q_index = b * in.qs.batch + i * in.qs.row + j * in.qs.col;
            q_written[q_index] = 1;
            const float got = reference::fp8_to_float(q_host[q_index], spec.q);
            const float ratio = want.nan ? std::numeric_limits<float>::quiet_NaN() : xv_ / want.value;
            const float expected = round_fp8(ratio, spec.q);
            const bool equal = (std::isnan(got) && std::isnan(expected)) || got == expected;
            if (!equal) {
              const float up = round_fp8(std::nextafter(ratio, INFINITY), spec.q);
              const float down = round_fp8(std::nextafter(ratio, -INFINITY), spec.q);
              if (got == up || got == down) {
                ++near_ties;
              } else {
                std::ostringstream m;
                m << where.str() << " element (" << i << ", " << j << "): x " << xv_ << " / scale " << want.value
                  << " gave q " << got << ", expected " << expected;
                note(q_errors, m.str());
              }
            }
            if (!want.nan && !std::isnan(got)) {
              const double deq = double(got) * double(got_scale);
              const double bound = u * std::fabs(double(xv_)) * (1 + 0x1p-20) + 0.5 * min_step * double(got_scale);
              if (std::fabs(deq - double(xv_)) > bound) {
                std::ostringstream m;
                m << where.str() << " element (" << i << ", " << j << "): q * scale = " << deq << " but x = " << xv_;
                note(deq_errors, m.str());
              }
            }
          }
        }
      }
    }
  }
  int64_t q_stray = 0, s_stray = 0;
  for (size_t i = 0; i < q_host.size(); ++i) q_stray += !q_written[i] && q_host[i] != 0xff;
  for (size_t i = 0; i < s_host.size(); ++i) s_stray += !s_written[i] && s_host[i] != 0xff;
  EXPECT_EQ(scale_errors, 0) << what << ": " << first_error;
  EXPECT_EQ(q_errors, 0) << what << ": " << first_error;
  EXPECT_EQ(deq_errors, 0) << what << ": " << first_error;
  EXPECT_EQ(q_stray + s_stray, 0) << what << ": bytes written outside q (" << q_stray << ") or scales (" << s_stray
                                  << ")";
  // Rounding x / scale to f32 is exact on both sides; a disagreement there would be a bug too.
  EXPECT_EQ(near_ties, 0) << what << ": q one step off at " << near_ties << " near-ties";
}

void check(const Spec& spec) { run_and_check(make_input(spec, testing::fresh_seed())); }

// (block_rows, block_cols) of every ScaleMode for A (M x K) and B (K x N), as gemm.h lists them.
struct ModeBlock {
  const char* name;
  int64_t rows, cols;  // 0: the whole dimension
  bool mx;
};

const ModeBlock kModeBlocks[] = {
    {"tensor", 0, 0, false},     {"rowwise A", 1, 0, false},   {"rowwise B", 0, 1, false},
    {"block 1x128", 1, 128, false}, {"block 128x128", 128, 128, false}, {"block 128x1", 128, 1, false},
    {"mx A", 1, 32, true},       {"mx B", 32, 1, true},
};

TEST_F(QuantizeBlocks, EveryModeEveryType) {
  for (const ModeBlock& mode : kModeBlocks) {
    for (DType x : {DType::bf16, DType::f16, DType::f32}) {
      for (DType q : {DType::e4m3, DType::e5m2}) {
        Spec spec{.x = x, .q = q, .rows = 300, .cols = 1000};
        spec.block_rows = mode.rows ? mode.rows : spec.rows;
        spec.block_cols = mode.cols ? mode.cols : spec.cols;
        spec.scales = mode.mx ? DType::ue8m0 : DType::f32;
        SCOPED_TRACE(mode.name);
        check(spec);
        if (!mode.mx) {
          spec.pow2 = true;
          check(spec);
        }
      }
    }
  }
}

// ue8m0 scales (and power-of-two f32 ones) with every block shape, not only MXFP8's.
TEST_F(QuantizeBlocks, PowerOfTwoScalesWithEveryBlock) {
  for (const ModeBlock& mode : kModeBlocks) {
    Spec spec{.x = DType::bf16, .q = DType::e4m3, .scales = DType::ue8m0, .rows = 256, .cols = 512};
    spec.block_rows = mode.rows ? mode.rows : spec.rows;
    spec.block_cols = mode.cols ? mode.cols : spec.cols;
    SCOPED_TRACE(mode.name);
    check(spec);
  }
}

// Edges: sizes prime or one off a block, uneven block shapes, 1 x 1 blocks, a single row or column.
TEST_F(QuantizeBlocks, EdgesAndUnevenBlocks) {
  const std::pair<int64_t, int64_t> shapes[] = {{257, 131}, {129, 264}, {1, 4096}, {4096, 1}, {7, 9}, {1, 1}};
  const std::pair<int64_t, int64_t> blocks[] = {{1, 128}, {128, 128}, {32, 1}, {1, 32}, {3, 100}, {100, 3},
                                                {7, 5},   {1, 1},     {2, 48}, {1, 24}, {1, 2},   {4, 4}};
  for (auto [rows, cols] : shapes) {
    for (auto [br, bc] : blocks) {
      for (Layout layout : {Layout::row_major, Layout::col_major}) {
        check({.x = DType::bf16, .q = DType::e4m3, .rows = rows, .cols = cols, .block_rows = br, .block_cols = bc,
               .x_layout = layout, .q_layout = layout});
      }
    }
  }
}

// Blocks too large for one tile take two launches; a long row, a long column and a big tensor.
TEST_F(QuantizeBlocks, LargeBlocksTakeTwoPasses) {
  check({.rows = 1024, .cols = 2048, .block_rows = 1024, .block_cols = 2048});                      // tensor
  check({.rows = 4096, .cols = 512, .block_rows = 4096, .block_cols = 1});                         // K x 1
  check({.rows = 8, .cols = 200000, .block_rows = 1, .block_cols = 200000});                       // 1 x K
  check({.x = DType::f32, .q = DType::e5m2, .rows = 3000, .cols = 700, .block_rows = 3000, .block_cols = 1});
  check({.rows = 2048, .cols = 96, .block_rows = 1024, .block_cols = 96, .x_layout = Layout::col_major});
  check({.x = DType::f16, .rows = 1000, .cols = 1000, .block_rows = 1000, .block_cols = 1000, .pow2 = true,
         .x_layout = Layout::padded});
}

// x row-major, column-major (transposed), padded (no vectors) and padded by 8; q laid out like x
// or the other way (a transposing quantisation); scales row- or column-major; batches.
TEST_F(QuantizeLayouts, StridedTransposedAndBatched) {
  const Layout layouts[] = {Layout::row_major, Layout::col_major, Layout::padded, Layout::padded8, Layout::col_padded};
  const std::pair<int64_t, int64_t> blocks[] = {{1, 128}, {128, 128}, {32, 1}, {1, 0}, {0, 1}};
  for (Layout xl : layouts) {
    for (Layout ql : {Layout::row_major, Layout::col_major, Layout::padded}) {
      for (auto [br, bc] : blocks) {
        for (int64_t batch : {int64_t(0), int64_t(3)}) {
          Spec spec{.x = DType::bf16, .q = DType::e4m3, .batch = batch, .rows = 192, .cols = 320};
          spec.block_rows = br ? br : spec.rows;
          spec.block_cols = bc ? bc : spec.cols;
          spec.x_layout = xl;
          spec.q_layout = ql;
          spec.s_layout = ql == Layout::row_major ? Layout::col_major : Layout::row_major;
          check(spec);
        }
      }
    }
  }
}

TEST_F(QuantizeLayouts, F32InputsVectorAndScalar) {
  for (Layout xl : {Layout::row_major, Layout::col_major, Layout::padded}) {
    for (auto [br, bc] : {std::pair<int64_t, int64_t>{1, 128}, {128, 1}, {32, 1}, {2, 2}}) {
      check({.x = DType::f32, .q = DType::e5m2, .scales = DType::ue8m0, .batch = 2, .rows = 160, .cols = 256,
             .block_rows = br, .block_cols = bc, .x_layout = xl, .q_layout = xl});
    }
  }
}

// NaN and Inf poison their block (NaN scale, NaN q); a zero block gets scale 1; tiny and huge
// blocks get scales near the ends of the range.
TEST_F(QuantizeValues, SpecialValuesAndExtremeRanges) {
  for (DType x : {DType::bf16, DType::f32}) {
    for (DType q : {DType::e4m3, DType::e5m2}) {
      for (DType scales : {DType::f32, DType::ue8m0}) {
        Spec spec{.x = x, .q = q, .scales = scales, .rows = 256, .cols = 512, .block_rows = 1, .block_cols = 128};
        Input in = make_input(spec, testing::fresh_seed());
        set_x(in, 0, 3, 5, std::numeric_limits<float>::quiet_NaN());
        set_x(in, 0, 4, 130, std::numeric_limits<float>::infinity());
        set_x(in, 0, 5, 300, -std::numeric_limits<float>::infinity());
        for (int64_t j = 0; j < 128; ++j) set_x(in, 0, 6, j, j % 2 ? 0.0f : -0.0f);
        for (int64_t j = 128; j < 256; ++j) set_x(in, 0, 7, j, std::ldexp(float(j), -125));      // tiny
        for (int64_t j = 256; j < 384; ++j) set_x(in, 0, 8, j, std::ldexp(float(j), x == DType::f32 ? 110 : 100));
        for (int64_t j = 0; j < 128; ++j) set_x(in, 0, 9, j, j == 7 ? 1e-30f : 0.0f);         // one tiny value
        run_and_check(in);
      }
    }
  }
}

// Blocks whose values span many binades, so that many land on fp8 subnormals and ties.
TEST_F(QuantizeValues, WideSpreadAndExactTies) {
  check({.x = DType::f32, .q = DType::e4m3, .rows = 512, .cols = 512, .block_rows = 128, .block_cols = 128,
         .spread = 30});
  Spec spec{.x = DType::f32, .q = DType::e5m2, .rows = 64, .cols = 256, .block_rows = 1, .block_cols = 256,
            .pow2 = true};
  Input in = make_input(spec, testing::fresh_seed());
  // Power-of-two scales keep x / scale exact: values halfway between fp8 neighbours must tie to even.
  for (int64_t i = 0; i < 64; ++i) {
    set_x(in, 0, i, 0, 57344.0f);  // amax: scale 1
    for (int64_t j = 1; j < 256; ++j) set_x(in, 0, i, j, float(j) * 1.125f);
  }
  run_and_check(in);
}

// A quantisation captured into a CUDA graph replays with whatever x holds at launch.
TEST_F(QuantizeGraphs, CapturedCallsReplay) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (auto [br, bc] : {std::pair<int64_t, int64_t>{1, 128}, {2048, 1}}) {  // one launch; two and scratch
    const int64_t rows = 2048, cols = 256;
    DeviceBuffer x(rows * cols * 2), q(rows * cols), s(ceil_div(rows, br) * ceil_div(cols, bc) * 4);
    DeviceBuffer q2(rows * cols), s2(s.bytes);
    const TensorView xv = TensorView::row_major(x.data, DType::bf16, rows, cols);
    const TensorView sv = TensorView::row_major(s.data, DType::f32, ceil_div(rows, br), ceil_div(cols, bc));
    const TensorView sv2 = TensorView::row_major(s2.data, DType::f32, ceil_div(rows, br), ceil_div(cols, bc));
    // An uncaptured call first: the first call of a configuration compiles and loads its kernel.
    quantize(xv, TensorView::row_major(q.data, DType::e4m3, rows, cols), sv, br, bc, {.stream = stream});
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaGraph_t graph;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    quantize(xv, TensorView::row_major(q.data, DType::e4m3, rows, cols), sv, br, bc, {.stream = stream});
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int round = 0; round < 3; ++round) {
      Input in = make_input({.rows = rows, .cols = cols, .block_rows = br, .block_cols = bc}, testing::fresh_seed());
      ASSERT_EQ(cudaMemcpy(x.data, in.x.data(), in.x.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the non-blocking stream does not wait for it
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      quantize(xv, TensorView::row_major(q2.data, DType::e4m3, rows, cols), sv2, br, bc, {.stream = stream});
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      std::vector<uint8_t> a(q.bytes), b(q.bytes), sa(s.bytes), sb(s.bytes);
      cudaMemcpy(a.data(), q.data, q.bytes, cudaMemcpyDeviceToHost);
      cudaMemcpy(b.data(), q2.data, q.bytes, cudaMemcpyDeviceToHost);
      cudaMemcpy(sa.data(), s.data, s.bytes, cudaMemcpyDeviceToHost);
      cudaMemcpy(sb.data(), s2.data, s.bytes, cudaMemcpyDeviceToHost);
      EXPECT_EQ(a, b) << "blocks " << br << " x " << bc << ", round " << round;
      EXPECT_EQ(sa, sb) << "blocks " << br << " x " << bc << ", round " << round;
      run_and_check(in, stream);  // and the direct call is right
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(stream);
}

void expect_rejected(const TensorView& x, const TensorView& q, const TensorView& s, const std::string& needle) {
  try {
    quantize(x, q, s, 1, 128);
    ADD_FAILURE() << "quantize accepted the arguments; expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST_F(QuantizeDeviceErrors, HostPointersAreRejected) {
  const int64_t rows = 64, cols = 256;
  DeviceBuffer x(rows * cols * 2), q(rows * cols), s(rows * 2 * 4);
  std::vector<uint8_t> host(rows * cols * 4);
  const TensorView xv = TensorView::row_major(x.data, DType::bf16, rows, cols);
  const TensorView qv = TensorView::row_major(q.data, DType::e4m3, rows, cols);
  const TensorView sv = TensorView::row_major(s.data, DType::f32, rows, 2);
  expect_rejected(TensorView::row_major(host.data(), DType::bf16, rows, cols), qv, sv, "x: ");
  expect_rejected(xv, TensorView::row_major(host.data(), DType::e4m3, rows, cols), sv, "q: ");
  expect_rejected(xv, qv, TensorView::row_major(host.data(), DType::f32, rows, 2), "scales: ");
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, rows * cols), cudaSuccess);
  expect_rejected(xv, TensorView::row_major(pinned, DType::e4m3, rows, cols), sv, "q: pointer");
  cudaFreeHost(pinned);
}

TEST_F(QuantizeDeviceErrors, EmptyTensorsTouchNothing) {
  // No element: no pointer is needed and nothing is launched.
  quantize(TensorView::row_major(nullptr, DType::bf16, 0, 256), TensorView::row_major(nullptr, DType::e4m3, 0, 256),
           TensorView::row_major(nullptr, DType::f32, 0, 2), 1, 128);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The quantisation rule's reciprocal (quant_rule.cuh, quant_reciprocal) against __frcp_rn for
// every f32 from 2^-126 to the largest below 2^126, the scales it is given: bit for bit.
TEST_F(QuantizeValues, ReciprocalIsCorrectlyRoundedOverEveryScale) {
  const std::string source = codegen::expand_includes(R"(#include "quant_rule.cuh"
extern "C" __global__ void gemmkit_reciprocal_test(unsigned first, unsigned long long count,
                                                   unsigned long long* wrong, unsigned* example) {
  using namespace gemmkit::sm90;
  const u64 step = u64(gridDim.x) * blockDim.x;
  for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    const float s = __uint_as_float(first + u32(i));
    if (__float_as_uint(quant_reciprocal(s)) != __float_as_uint(__frcp_rn(s))) {
      atomicAdd(wrong, 1ull);
      atomicExch(example, first + u32(i));
    }
  }
}
)", "");
  unsigned long long* wrong = nullptr;  // allocated first: it makes the device's context current
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&wrong), 16), cudaSuccess);
  const runtime::LoadedKernel& kernel = runtime::load_kernel(0, source, "gemmkit_reciprocal_test", 0);
  ASSERT_EQ(cudaMemset(wrong, 0, 16), cudaSuccess);
  unsigned first = std::bit_cast<unsigned>(0x1p-126f);
  unsigned long long count = std::bit_cast<unsigned>(0x1p126f) - first;
  unsigned* example = reinterpret_cast<unsigned*>(wrong + 1);
  void* args[] = {&first, &count, &wrong, &example};
  ASSERT_EQ(runtime::driver().launch_kernel(kernel.function, 132 * 16, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr),
            CUDA_SUCCESS);
  unsigned long long host[2] = {};
  ASSERT_EQ(cudaMemcpy(host, wrong, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(wrong);
  EXPECT_EQ(host[0], 0u) << "e.g. at " << std::bit_cast<float>(unsigned(host[1]));
}

}  // namespace
}  // namespace gemmkit
