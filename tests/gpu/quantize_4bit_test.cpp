// The GPU's 4-bit quantisers (quantize_int4, quantize_mxfp4) against the host reference
// (src/reference/lowbit.h), byte for byte: the codes, the scales' bits and the zero points' bits.
// A table of cases: weights bf16, f16 and f32; scales bf16 and f16, with and without zero points;
// groups 32, 48, 64, 128 and per-channel (K itself, odd, and past K); K a multiple of the group,
// not one, odd, and 1; weights stored [N, K] (a checkpoint's), [K, N] and padded (with NaN in the
// padding, which must not be read); the bytes padded (the padding must stay as it was); scales
// [K/group, N] and transposed (gpt-oss's [N, K/32]); batches. Every case's rows mix random
// values with edge cases: blocks of zeros (and -0), ties of every rounding (int4 codes, zero
// points, e2m1 midpoints), a NaN, an infinity, tiny values (scales that round to 0 in f16,
// subnormals), huge ones (scales that overflow to inf) and a wide dynamic range.
// Then a round trip: weights quantised on the GPU, multiplied by gemm() with a bf16 or f16 A,
// against the double-precision product with the reference's dequantised weights.
// Skips without an sm_90 device.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gemmkit/quantize.h"
#include "gpu_test.h"
#include "reference/compare.h"
#include "reference/host_numeric.h"
#include "reference/lowbit.h"
#include "runtime/driver.h"

namespace gemmkit {
namespace {

using reference::bf16_to_float;
using reference::f16_to_float;
using reference::float_to_bf16;
using reference::float_to_f16;

// ---- host helpers -------------------------------------------------------------------------------

// A device buffer of `bytes`, filled with `fill`.
struct DeviceBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t size, int fill = 0) : bytes(size) {
    runtime::check(cudaMalloc(&data, std::max<size_t>(bytes, 1)), "cudaMalloc");
    runtime::check(cudaMemset(data, fill, std::max<size_t>(bytes, 1)), "cudaMemset");
  }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <class T>
  void upload(const std::vector<T>& host) {
    runtime::check(cudaMemcpy(data, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> host(bytes / sizeof(T));
    runtime::check(cudaMemcpy(host.data(), data, host.size() * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return host;
  }
};

// x rounded to `type` (bf16, f16 or f32), as a float.
float round_to(float x, DType type) {
  if (type == DType::bf16) return bf16_to_float(float_to_bf16(x));
  if (type == DType::f16) return f16_to_float(float_to_f16(x));
  return x;
}

// The bits of x (exactly a value of `type`) in `type`.
uint32_t bits_of(float x, DType type) {
  if (type == DType::bf16) return float_to_bf16(x);
  if (type == DType::f16) return float_to_f16(x);
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return bits;
}

// Host images of a [rows, cols] matrix of `type` with rows `pitch` elements apart, the rest
// `pad` (as a float): bytes to upload.
std::vector<uint8_t> image(const std::vector<float>& values, int64_t rows, int64_t cols, int64_t pitch, DType type,
                           float pad, int64_t batch = 1) {
  const int size = dtype_size(type);
  std::vector<uint8_t> bytes(size_t(batch * rows * pitch * size));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < pitch; ++c) {
        const float v = c < cols ? values[size_t((b * rows + r) * cols + c)] : pad;
        const uint32_t bits = bits_of(round_to(v, type), type);
        std::memcpy(&bytes[size_t(((b * rows + r) * pitch + c) * size)], &bits, size_t(size));
      }
    }
  }
  return bytes;
}

// ---- the cases ----------------------------------------------------------------------------------

struct Case {
  DType w = DType::bf16;
  DType format = DType::u4;  // u4 (quantize_int4) or e2m1 (quantize_mxfp4)
  DType scales = DType::bf16;
  bool zeros = false;
  int64_t k = 256, n = 16, group = 128;  // group: u4 only
  int64_t batch = 1;
  bool w_kn = false;          // w stored [K, N] (N contiguous) rather than [N, K]
  int64_t w_pad = 0;          // elements past each stored row of w (NaN)
  int64_t q_pad = 0;          // bytes past each column's ceil(K/2) (poison, kept)
  bool scales_t = false;      // scales (and zeros) stored [N, groups], the weights' orientation

  bool mx() const { return format == DType::e2m1; }
  int64_t block() const { return mx() ? 32 : group; }
  int64_t groups() const { return (k + block() - 1) / block(); }

  std::string name() const {
    std::string text = mx() ? "mxfp4" : "int4_g" + std::to_string(group) + (zeros ? "_zeros" : "") + "_scales_" +
                                            std::string(dtype_name(scales));
    text += "_w_" + std::string(dtype_name(w)) + "_k" + std::to_string(k) + "_n" + std::to_string(n);
    if (batch > 1) text += "_batch" + std::to_string(batch);
    if (w_kn) text += "_w_kn";
    if (w_pad) text += "_wpad" + std::to_string(w_pad);
    if (q_pad) text += "_qpad" + std::to_string(q_pad);
    if (scales_t) text += "_scales_t";
    return text;
  }
};

constexpr DType bf16 = DType::bf16, f16 = DType::f16, f32 = DType::f32, u4 = DType::u4, e2m1 = DType::e2m1,
                ue8m0 = DType::ue8m0;

const std::vector<Case> kCases = {
    // int4: every weight type and scale type, symmetric and with zero points.
    {.w = bf16, .scales = bf16, .k = 4096, .n = 64, .group = 128},
    {.w = bf16, .scales = bf16, .zeros = true, .k = 4160, .n = 33, .group = 128},  // 32.5 groups
    {.w = f16, .scales = f16, .k = 1001, .n = 17, .group = 32, .q_pad = 3},        // odd K
    {.w = f16, .scales = f16, .zeros = true, .k = 1000, .n = 31, .group = 64, .scales_t = true},
    {.w = f32, .scales = f16, .zeros = true, .k = 777, .n = 40, .group = 777, .w_kn = true},  // per channel, odd
    {.w = f32, .scales = bf16, .k = 300, .n = 50, .group = 4096, .w_pad = 5},  // a group past K
    {.w = f32, .scales = bf16, .zeros = true, .k = 96, .n = 20, .group = 48, .batch = 3},  // not a power of two
    {.w = bf16, .scales = f16, .k = 1, .n = 5, .group = 32},  // one element of K: half a byte
    {.w = bf16, .scales = f16, .zeros = true, .k = 257, .n = 300, .group = 128, .w_pad = 7, .q_pad = 1,
     .scales_t = true},
    {.w = f16, .scales = bf16, .k = 130, .n = 24, .group = 64, .batch = 2, .w_kn = true},
    {.w = f32, .scales = f16, .k = 512, .n = 24, .group = 32, .scales_t = true},
    // MXFP4: every weight type, gpt-oss's layout (scales [N, K/32]), odd K, a single short block.
    {.w = bf16, .format = e2m1, .scales = ue8m0, .k = 4096, .n = 64},
    {.w = f16, .format = e2m1, .scales = ue8m0, .k = 1001, .n = 17, .scales_t = true},
    {.w = f32, .format = e2m1, .scales = ue8m0, .k = 77, .n = 40, .w_kn = true, .q_pad = 2},
    {.w = bf16, .format = e2m1, .scales = ue8m0, .k = 2880, .n = 33, .batch = 2, .scales_t = true},
    {.w = f32, .format = e2m1, .scales = ue8m0, .k = 31, .n = 3, .w_pad = 1},
    {.w = f16, .format = e2m1, .scales = ue8m0, .k = 160, .n = 200, .batch = 3, .w_kn = true},
};

// Weights [batch][N][K], each exactly a value of c.w, row n's pattern chosen by n % 9 (each
// edge case in the first block of the row, or a later one where there is one).
std::vector<float> make_weights(const Case& c, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const int64_t k = c.k, block = std::min(c.block(), k);
  std::vector<float> w(size_t(c.batch * c.n * k));
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t n = 0; n < c.n; ++n) {
      float* row = &w[size_t((b * c.n + n) * k)];
      const float magnitude = std::ldexp(1.0f, int(uniform(rng) * 16) - 8);
      for (int64_t i = 0; i < k; ++i) row[i] = magnitude * normal(rng);
      const int64_t later = k > block ? block : 0;  // the first element of the second block, if any
      const int64_t in_block = std::min(block, k - later);
      switch ((b + n) % 9) {
        case 0: break;  // random
        case 1:         // a block of zeros, some negative
          for (int64_t i = 0; i < block; ++i) row[i] = i % 3 == 0 ? -0.0f : 0.0f;
          break;
        case 2: {  // ties
          if (c.mx()) {
            // amax 6 * 2^-4: e = -4, and x * 2^4 on every midpoint of e2m1's grid (and its codes).
            static const float kTies[] = {6.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.5f, 3.0f};
            for (int64_t i = 0; i < block; ++i) row[i] = (i % 2 ? -1.0f : 1.0f) * kTies[i % 10] * 0x1p-4f;
            row[0] = 6.0f * 0x1p-4f;
          } else if (!c.zeros) {
            // amax 7.5 / 8: scale 2 * 7.5 / 8 / 15 = 1/8 exactly; x / scale = j + 0.5.
            for (int64_t i = 0; i < block; ++i) row[i] = (float(i % 16) - 7.5f) * 0.125f;
            row[0] = 7.5f * 0.125f;
          } else {
            // lo -2.5 / 8, hi 12.5 / 8: scale (15 / 8) / 15 = 1/8, zero rne(2.5) = 2; x / scale = j + 0.5.
            for (int64_t i = 0; i < block; ++i) row[i] = (float(i % 15) - 2.5f) * 0.125f;
            row[0] = -2.5f * 0.125f;
            if (block > 1) row[1] = 12.5f * 0.125f;
          }
          break;
        }
        case 3:  // a NaN
          row[later + int64_t(uniform(rng) * float(in_block)) % in_block] = std::numeric_limits<float>::quiet_NaN();
          break;
        case 4:  // an infinity
          row[later + int64_t(uniform(rng) * float(in_block)) % in_block] = (n % 2 ? -inf : inf);
          break;
        case 5:  // tiny: scales that round to 0 in f16 (0 / 0 codes) and subnormals of every type
          for (int64_t i = 0; i < k; ++i) row[i] = (i % 4 == 0 ? 0.0f : normal(rng)) * 1e-9f;
          if (k > 1) row[1] = 1e-40f;  // an f32 subnormal
          break;
        case 6:  // huge: scales past f16's range (inf) and 2 amax past f32's
          for (int64_t i = 0; i < k; ++i) row[i] = normal(rng) * 1e30f;
          row[0] = 3e38f;
          break;
        case 7:  // a wide dynamic range
          for (int64_t i = 0; i < k; ++i) row[i] = normal(rng) * std::ldexp(1.0f, int(uniform(rng) * 60) - 30);
          break;
        case 8:  // one value in a block of zeros (the others flush to a code of 0)
          for (int64_t i = 0; i < block; ++i) row[i] = 0.0f;
          row[block / 2] = -magnitude;
          break;
      }
      for (int64_t i = 0; i < k; ++i) row[i] = round_to(row[i], c.w);
    }
  }
  return w;
}

// The device tensors of a case, laid out as it says.
struct DeviceCase {
  DeviceBuffer w, q, scales, zeros;
  TensorView w_view, q_view, scales_view;
  std::optional<TensorView> zeros_view;
  int64_t q_pitch = 0;  // bytes a column

  static constexpr int kPoison = 0xA5;

  DeviceCase(const Case& c, const std::vector<float>& weights)
      : w(size_t(c.batch * (c.w_kn ? c.k * (c.n + c.w_pad) : c.n * (c.k + c.w_pad))) * size_t(dtype_size(c.w))),
        q(size_t(c.batch * c.n * ((c.k + 1) / 2 + c.q_pad)), kPoison),
        scales(size_t(c.batch * c.groups() * c.n) * size_t(dtype_size(c.scales)), 0xFF),
        zeros(size_t(c.batch * c.groups() * c.n) * size_t(dtype_size(c.scales)), 0xFF) {
    const int64_t k = c.k, n = c.n, batch = c.batch, groups = c.groups();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    auto view = [&](void* data, DType type, int64_t rows, int64_t cols, int64_t bs, int64_t rs, int64_t cs) {
      return batch == 1 ? TensorView::matrix(data, type, rows, cols, rs, cs)
                        : TensorView::batched(data, type, batch, rows, cols, bs, rs, cs);
    };
    if (c.w_kn) {  // [batch][K][N + pad]
      std::vector<float> kn(weights.size());
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t i = 0; i < k; ++i) kn[size_t((b * k + i) * n + r)] = weights[size_t((b * n + r) * k + i)];
        }
      }
      w.upload(image(kn, k, n, n + c.w_pad, c.w, nan, batch));
      w_view = view(w.data, c.w, k, n, k * (n + c.w_pad), n + c.w_pad, 1);
    } else {  // [batch][N][K + pad]
      w.upload(image(weights, n, k, k + c.w_pad, c.w, nan, batch));
      w_view = view(w.data, c.w, k, n, n * (k + c.w_pad), 1, k + c.w_pad);
    }
    q_pitch = (k + 1) / 2 + c.q_pad;
    q_view = view(q.data, c.format, k, n, 2 * n * q_pitch, 1, 2 * q_pitch);
    // Scales [batch][groups][N], or [batch][N][groups].
    auto scale_view = [&](void* data) {
      return c.scales_t ? view(data, c.scales, groups, n, groups * n, 1, groups)
                        : view(data, c.scales, groups, n, groups * n, n, 1);
    };
    scales_view = scale_view(scales.data);
    if (c.zeros) zeros_view = scale_view(zeros.data);
  }

  // Where scale (b, g, n) lies in the scales' (and zeros') buffer, in elements.
  int64_t scale_index(const Case& c, int64_t b, int64_t g, int64_t n) const {
    return b * c.groups() * c.n + (c.scales_t ? n * c.groups() + g : g * c.n + n);
  }
};

void quantize_case(const Case& c, DeviceCase& d) {
  if (c.mx()) {
    quantize_mxfp4(d.w_view, d.q_view, d.scales_view);
  } else {
    quantize_int4(d.w_view, d.q_view, d.scales_view, d.zeros_view, c.group);
  }
}

// The weights of byte j of column n (batch b), for messages.
std::string weights_text(const Case& c, const std::vector<float>& w, int64_t b, int64_t n, int64_t j) {
  std::ostringstream s;
  s.precision(9);
  const float* row = &w[size_t((b * c.n + n) * c.k)];
  s << "w[" << 2 * j << "] = " << row[2 * j];
  if (2 * j + 1 < c.k) s << ", w[" << 2 * j + 1 << "] = " << row[2 * j + 1];
  return s.str();
}

class Quantize4bit : public testing::GpuTest, public ::testing::WithParamInterface<Case> {};

TEST_P(Quantize4bit, MatchesTheHostReferenceByteForByte) {
  const Case& c = GetParam();
  const uint32_t seed = uint32_t(testing::fresh_seed());
  std::mt19937 rng(seed);
  const std::vector<float> weights = make_weights(c, rng);
  DeviceCase d(c, weights);
  quantize_case(c, d);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.name();

  const std::vector<uint8_t> q = d.q.download<uint8_t>();
  const int scale_bytes = dtype_size(c.scales);
  const std::vector<uint8_t> scales = d.scales.download<uint8_t>(), zeros = d.zeros.download<uint8_t>();
  auto element_bits = [&](const std::vector<uint8_t>& buffer, int64_t index) {
    uint32_t bits = 0;
    std::memcpy(&bits, &buffer[size_t(index * scale_bytes)], size_t(scale_bytes));
    return bits;
  };
  const int64_t row_bytes = (c.k + 1) / 2, groups = c.groups();
  int failures = 0;
  auto fail = [&](const std::string& what) {
    if (++failures <= 12) ADD_FAILURE() << c.name() << " (seed " << seed << "): " << what;
  };
  for (int64_t b = 0; b < c.batch; ++b) {
    const float* w = &weights[size_t(b * c.n * c.k)];
    std::vector<uint8_t> values;
    std::vector<uint32_t> want_scales, want_zeros;
    if (c.mx()) {
      const reference::Mxfp4Weights r = reference::quantize_mxfp4(w, c.n, c.k);
      values = r.values;
      for (uint8_t s : r.scales) want_scales.push_back(s);
    } else {
      const reference::Int4Weights r = reference::quantize_int4(w, c.n, c.k, c.group, c.zeros, c.scales);
      values = r.values;
      for (float s : r.scales) want_scales.push_back(bits_of(s, c.scales));
      for (uint8_t z : r.zeros) want_zeros.push_back(bits_of(float(z), c.scales));
    }
    for (int64_t n = 0; n < c.n; ++n) {
      for (int64_t j = 0; j < d.q_pitch; ++j) {
        const uint8_t got = q[size_t((b * c.n + n) * d.q_pitch + j)];
        const uint8_t want = j < row_bytes ? values[size_t(n * row_bytes + j)] : uint8_t(DeviceCase::kPoison);
        if (got != want) {
          std::ostringstream s;
          s << std::hex << "batch " << b << " column " << n << " byte " << std::dec << j << ": got 0x" << std::hex
            << int(got) << ", expected 0x" << int(want) << std::dec << " ("
            << (j < row_bytes ? weights_text(c, weights, b, n, j) : std::string("padding")) << ")";
          fail(s.str());
        }
      }
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t at = d.scale_index(c, b, g, n);
        const uint32_t got = element_bits(scales, at), want = want_scales[size_t(n * groups + g)];
        if (got != want) {
          std::ostringstream s;
          s << "batch " << b << " column " << n << " group " << g << ": scale 0x" << std::hex << got << ", expected 0x"
            << want;
          fail(s.str());
        }
        if (c.zeros && element_bits(zeros, at) != want_zeros[size_t(n * groups + g)]) {
          std::ostringstream s;
          s << "batch " << b << " column " << n << " group " << g << ": zero point 0x" << std::hex
            << element_bits(zeros, at) << ", expected 0x" << want_zeros[size_t(n * groups + g)];
          fail(s.str());
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << c.name() << ": " << failures << " mismatches";
}

INSTANTIATE_TEST_SUITE_P(Cases, Quantize4bit, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name(); });

// ---- round trip ---------------------------------------------------------------------------------

struct RoundTrip {
  DType a;  // A's type, and the int4 scales'
  DType format;
  bool zeros = false;
  int64_t group = 128;
  int64_t m = 16, n = 96, k = 512;
  DType w = DType::f32;
  bool scales_t = false;

  std::string name() const {
    return (format == DType::e2m1 ? std::string("mxfp4") : "int4_g" + std::to_string(group) + (zeros ? "_zeros" : "")) +
           "_a_" + std::string(dtype_name(a)) + "_w_" + std::string(dtype_name(w)) + "_" + std::to_string(m) + "x" +
           std::to_string(n) + "x" + std::to_string(k) + (scales_t ? "_scales_t" : "");
  }
};

class Quantize4bitRoundTrip : public testing::GpuTest, public ::testing::WithParamInterface<RoundTrip> {};

// The quantiser's outputs, passed to gemm() as they are, give the product with the weights the
// reference dequantises (within the 4-bit GEMM's allowance: each weight rounded to A's type).
TEST_P(Quantize4bitRoundTrip, GemmOnQuantisedWeightsMatchesTheDequantisedReference) {
  const RoundTrip& t = GetParam();
  Case c{.w = t.w, .format = t.format, .scales = t.format == DType::e2m1 ? DType::ue8m0 : t.a, .zeros = t.zeros,
         .k = t.k, .n = t.n, .group = t.group, .scales_t = t.scales_t};
  std::mt19937 rng(uint32_t(testing::fresh_seed()));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> weights(size_t(t.n * t.k)), x(size_t(t.m * t.k));
  for (float& v : weights) v = round_to(normal(rng) * 0.05f, t.w);
  for (float& v : x) v = round_to(normal(rng), t.a);
  DeviceCase d(c, weights);
  quantize_case(c, d);

  DeviceBuffer a_buffer(x.size() * 2), out(size_t(t.m * t.n) * 4, 0xFF);
  a_buffer.upload(image(x, t.m, t.k, t.k, t.a, 0.0f));
  const TensorView a = TensorView::row_major(a_buffer.data, t.a, t.m, t.k);
  const TensorView dv = TensorView::row_major(out.data, DType::f32, t.m, t.n);
  GemmOptions options;
  if (c.mx()) {
    options.scale_b = {ScaleMode::mx, d.scales_view};
  } else {
    options.scale_b = {ScaleMode::group, d.scales_view, t.group, d.zeros_view};
  }
  gemm(a, d.q_view, dv, options);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << t.name();

  // The reference's dequantised weights; the quantiser's bytes are the reference's (checked here
  // too, so that a failure below is the GEMM's or the layout's).
  std::vector<double> deq(size_t(t.n * t.k));
  std::vector<uint8_t> values;
  if (c.mx()) {
    const reference::Mxfp4Weights r = reference::quantize_mxfp4(weights.data(), t.n, t.k);
    for (int64_t j = 0; j < t.n; ++j) {
      for (int64_t i = 0; i < t.k; ++i) deq[size_t(j * t.k + i)] = reference::mxfp4_value(r, j, i);
    }
    values = r.values;
  } else {
    const reference::Int4Weights r = reference::quantize_int4(weights.data(), t.n, t.k, t.group, t.zeros, c.scales);
    for (int64_t j = 0; j < t.n; ++j) {
      for (int64_t i = 0; i < t.k; ++i) deq[size_t(j * t.k + i)] = reference::int4_value(r, j, i);
    }
    values = r.values;
  }
  ASSERT_EQ(d.q.download<uint8_t>(), values) << t.name() << ": the quantised bytes differ from the reference's";

  std::vector<double> ref(size_t(t.m * t.n)), ref_abs(size_t(t.m * t.n));
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < t.n; ++j) {
      double sum = 0, sum_abs = 0;
      for (int64_t l = 0; l < t.k; ++l) {
        const double p = double(x[size_t(i * t.k + l)]) * deq[size_t(j * t.k + l)];
        sum += p;
        sum_abs += std::fabs(p);
      }
      ref[size_t(i * t.n + j)] = sum;
      ref_abs[size_t(i * t.n + j)] = sum_abs;
    }
  }
  const std::vector<float> host_d = out.download<float>();
  const Problem p = validate_gemm(a, d.q_view, dv, options);
  const reference::Comparison result = reference::compare(p, host_d.data(), ref.data(), ref_abs.data());
  EXPECT_TRUE(result.passed()) << t.name() << ": " << result.summary();
}

const std::vector<RoundTrip> kRoundTrips = {
    {.a = bf16, .format = u4, .zeros = true, .group = 128},
    {.a = bf16, .format = u4, .group = 64, .m = 1, .w = DType::bf16},
    {.a = f16, .format = u4, .group = 32, .n = 80, .k = 1000, .scales_t = true},
    {.a = f16, .format = u4, .zeros = true, .group = 1000, .k = 1000},  // per channel
    {.a = bf16, .format = e2m1, .w = DType::bf16},
    {.a = f16, .format = e2m1, .m = 33, .k = 1000, .scales_t = true},  // gpt-oss's scales, a short last block
};

INSTANTIATE_TEST_SUITE_P(Cases, Quantize4bitRoundTrip, ::testing::ValuesIn(kRoundTrips),
                         [](const ::testing::TestParamInfo<RoundTrip>& info) { return info.param.name(); });

}  // namespace
}  // namespace gemmkit
