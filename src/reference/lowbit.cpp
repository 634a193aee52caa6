#include "reference/lowbit.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/host_numeric.h"

namespace gemmkit::reference {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

uint8_t nibble(const std::vector<uint8_t>& bytes, int64_t row_bytes, int64_t row, int64_t col) {
  return (bytes[size_t(row * row_bytes + col / 2)] >> (4 * (col % 2))) & 0xF;
}

void set_nibble(std::vector<uint8_t>& bytes, int64_t row_bytes, int64_t row, int64_t col, uint8_t value) {
  uint8_t& byte = bytes[size_t(row * row_bytes + col / 2)];
  const int shift = 4 * int(col % 2);
  byte = uint8_t((byte & ~(0xF << shift)) | ((value & 0xF) << shift));
}

// x rounded to an integer, ties to even (the default rounding mode).
float rne(float x) { return std::nearbyint(x); }

// x rounded to the 16-bit scale type (to nearest, ties to even).
float round_scale(float x, DType type) {
  return type == DType::bf16 ? bf16_to_float(float_to_bf16(x)) : f16_to_float(float_to_f16(x));
}

}  // namespace

float e2m1_to_float(uint8_t code) {
  static constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float magnitude = kMagnitudes[code & 7];
  return code & 8 ? -magnitude : magnitude;
}

uint8_t float_to_e2m1(float x) {
  const uint8_t sign = std::signbit(x) ? 8 : 0;
  const float a = std::fabs(x);
  // Midpoints between neighbouring codes; at a tie the even code (mantissa bit 0) wins: 0.25 -> 0,
  // 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0, 3.5 -> 4.0, 5 -> 4.0.
  static constexpr float kUpper[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  uint8_t code = 0;
  while (code < 7 && (a > kUpper[code] || (a == kUpper[code] && code % 2 == 1))) ++code;
  return sign | code;
}

Mxfp4Weights quantize_mxfp4(const float* w, int64_t n, int64_t k) {
  Mxfp4Weights q;
  q.n = n;
  q.k = k;
  const int64_t row_bytes = ceil_div(k, 2), blocks = ceil_div(k, kMxBlock);
  q.values.assign(size_t(n * row_bytes), 0);
  q.scales.assign(size_t(n * blocks), 0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t first = b * kMxBlock, last = std::min(k, first + kMxBlock);
      float amax = 0.0f;
      bool finite = true;
      for (int64_t c = first; c < last; ++c) {
        const float x = w[r * k + c];
        finite = finite && std::isfinite(x);
        amax = std::max(amax, std::fabs(x));
      }
      uint8_t& scale = q.scales[size_t(r * blocks + b)];
      if (!finite) {
        scale = 0xFF;
        continue;
      }
      // floor(log2(amax)) is frexp's exponent less one; e2m1's largest exponent is 2.
      int exponent = 0;
      if (amax > 0.0f) {
        std::frexp(amax, &exponent);
        exponent = std::clamp(exponent - 1 - 2, -127, 127);
      }
      scale = uint8_t(exponent + 127);
      for (int64_t c = first; c < last; ++c) {
        set_nibble(q.values, row_bytes, r, c, float_to_e2m1(std::ldexp(w[r * k + c], -exponent)));
      }
    }
  }
  return q;
}

double mxfp4_value(const Mxfp4Weights& w, int64_t row, int64_t col) {
  const uint8_t scale = w.scales[size_t(row * ceil_div(w.k, kMxBlock) + col / kMxBlock)];
  if (scale == 0xFF) return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(double(e2m1_to_float(nibble(w.values, ceil_div(w.k, 2), row, col))), int(scale) - 127);
}

Int4Weights quantize_int4(const float* w, int64_t n, int64_t k, int64_t group, bool zero_points, DType scale_type) {
  Int4Weights q;
  q.n = n;
  q.k = k;
  q.group = group;
  q.zero_points = zero_points;
  q.scale_type = scale_type;
  const int64_t row_bytes = ceil_div(k, 2), groups = ceil_div(k, group);
  q.values.assign(size_t(n * row_bytes), 0);
  q.scales.assign(size_t(n * groups), 0.0f);
  q.zeros.assign(size_t(n * groups), 8);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t first = g * group, last = std::min(k, first + group);
      float lo = std::numeric_limits<float>::infinity(), hi = -lo, amax = 0.0f;
      bool finite = true;
      for (int64_t c = first; c < last; ++c) {
        const float x = w[r * k + c];
        finite = finite && std::isfinite(x);
        lo = std::min(lo, x);
        hi = std::max(hi, x);
        amax = std::max(amax, std::fabs(x));
      }
      if (!finite) {  // a NaN scale, zero point 8 and every q 8
        q.scales[size_t(r * groups + g)] = std::numeric_limits<float>::quiet_NaN();
        for (int64_t c = first; c < last; ++c) set_nibble(q.values, row_bytes, r, c, 8);
        continue;
      }
      float scale, zero = 8.0f;
      if (zero_points) {
        scale = round_scale(std::max(hi - lo, 1e-5f) / 15.0f, scale_type);
        zero = std::clamp(rne(-lo / scale), 0.0f, 15.0f);
      } else {
        scale = round_scale(amax > 0.0f ? 2.0f * amax / 15.0f : 2.0f / 15.0f, scale_type);
      }
      q.scales[size_t(r * groups + g)] = scale;
      q.zeros[size_t(r * groups + g)] = uint8_t(zero);
      for (int64_t c = first; c < last; ++c) {
        float value = rne(w[r * k + c] / scale) + zero;
        if (std::isnan(value)) value = zero;  // 0 / 0: a scale that rounded to 0
        set_nibble(q.values, row_bytes, r, c, uint8_t(std::clamp(value, 0.0f, 15.0f)));
      }
    }
  }
  return q;
}

double int4_value(const Int4Weights& w, int64_t row, int64_t col) {
  const size_t g = size_t(row * ceil_div(w.k, w.group) + col / w.group);
  const int q = nibble(w.values, ceil_div(w.k, 2), row, col);
  return (q - int(w.zeros[g])) * double(w.scales[g]);
}

std::vector<int32_t> pack_gptq_qweight(const Int4Weights& w) {
  const int64_t words = ceil_div(w.k, 8), row_bytes = ceil_div(w.k, 2);
  std::vector<int32_t> packed(size_t(words * w.n), 0);
  for (int64_t i = 0; i < words; ++i) {
    for (int64_t col = 0; col < w.n; ++col) {
      uint32_t word = 0;
      for (int j = 0; j < 8 && 8 * i + j < w.k; ++j) word |= uint32_t(nibble(w.values, row_bytes, col, 8 * i + j)) << (4 * j);
      packed[size_t(i * w.n + col)] = int32_t(word);
    }
  }
  return packed;
}

namespace {

// Zero points packed 8 a word along N, [ceil(K/g), ceil(N/8)], in `order`, less `offset`.
std::vector<int32_t> pack_zeros(const Int4Weights& w, const int* order, int offset) {
  const int64_t groups = ceil_div(w.k, w.group), words = ceil_div(w.n, 8);
  std::vector<int32_t> packed(size_t(groups * words), 0);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t j = 0; j < words; ++j) {
      uint32_t word = 0;
      for (int t = 0; t < 8; ++t) {
        const int64_t col = 8 * j + order[t];
        if (col < w.n) word |= (uint32_t(w.zeros[size_t(col * groups + g)] - offset) & 0xF) << (4 * t);
      }
      packed[size_t(g * words + j)] = int32_t(word);
    }
  }
  return packed;
}

std::vector<float> scales_by_row(const std::vector<float>& scales_kn, int64_t n, int64_t groups) {
  std::vector<float> scales(size_t(n * groups));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t col = 0; col < n; ++col) scales[size_t(col * groups + g)] = scales_kn[size_t(g * n + col)];
  }
  return scales;
}

Int4Weights unpacked_shell(int64_t n, int64_t k, int64_t group) {
  Int4Weights w;
  w.n = n;
  w.k = k;
  w.group = group;
  w.zero_points = true;
  w.values.assign(size_t(n * ceil_div(k, 2)), 0);
  w.zeros.assign(size_t(n * ceil_div(k, group)), 0);
  return w;
}

void unpack_zeros(Int4Weights& w, const std::vector<int32_t>& qzeros, const int* order, int offset) {
  const int64_t groups = ceil_div(w.k, w.group), words = ceil_div(w.n, 8);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t j = 0; j < words; ++j) {
      const uint32_t word = uint32_t(qzeros[size_t(g * words + j)]);
      for (int t = 0; t < 8; ++t) {
        const int64_t col = 8 * j + order[t];
        if (col < w.n) w.zeros[size_t(col * groups + g)] = uint8_t(((word >> (4 * t)) + offset) & 0xF);
      }
    }
  }
}

constexpr int kInOrder[8] = {0, 1, 2, 3, 4, 5, 6, 7};

}  // namespace

std::vector<int32_t> pack_gptq_qzeros(const Int4Weights& w) { return pack_zeros(w, kInOrder, 1); }

std::vector<int32_t> pack_awq_qweight(const Int4Weights& w) {
  const int64_t words = ceil_div(w.n, 8), row_bytes = ceil_div(w.k, 2);
  std::vector<int32_t> packed(size_t(w.k * words), 0);
  for (int64_t kk = 0; kk < w.k; ++kk) {
    for (int64_t j = 0; j < words; ++j) {
      uint32_t word = 0;
      for (int t = 0; t < 8; ++t) {
        const int64_t col = 8 * j + kAwqOrder[t];
        if (col < w.n) word |= uint32_t(nibble(w.values, row_bytes, col, kk)) << (4 * t);
      }
      packed[size_t(kk * words + j)] = int32_t(word);
    }
  }
  return packed;
}

std::vector<int32_t> pack_awq_qzeros(const Int4Weights& w) { return pack_zeros(w, kAwqOrder, 0); }

Int4Weights unpack_gptq(const std::vector<int32_t>& qweight, const std::vector<int32_t>& qzeros,
                        const std::vector<float>& scales_kn, int64_t n, int64_t k, int64_t group) {
  Int4Weights w = unpacked_shell(n, k, group);
  const int64_t row_bytes = ceil_div(k, 2);
  for (int64_t i = 0; i < ceil_div(k, 8); ++i) {
    for (int64_t col = 0; col < n; ++col) {
      const uint32_t word = uint32_t(qweight[size_t(i * n + col)]);
      for (int j = 0; j < 8 && 8 * i + j < k; ++j) set_nibble(w.values, row_bytes, col, 8 * i + j, (word >> (4 * j)) & 0xF);
    }
  }
  unpack_zeros(w, qzeros, kInOrder, 1);
  w.scales = scales_by_row(scales_kn, n, ceil_div(k, group));
  return w;
}

Int4Weights unpack_awq(const std::vector<int32_t>& qweight, const std::vector<int32_t>& qzeros,
                       const std::vector<float>& scales_kn, int64_t n, int64_t k, int64_t group) {
  Int4Weights w = unpacked_shell(n, k, group);
  const int64_t row_bytes = ceil_div(k, 2), words = ceil_div(n, 8);
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t j = 0; j < words; ++j) {
      const uint32_t word = uint32_t(qweight[size_t(kk * words + j)]);
      for (int t = 0; t < 8; ++t) {
        const int64_t col = 8 * j + kAwqOrder[t];
        if (col < n) set_nibble(w.values, row_bytes, col, kk, (word >> (4 * t)) & 0xF);
      }
    }
  }
  unpack_zeros(w, qzeros, kAwqOrder, 0);
  w.scales = scales_by_row(scales_kn, n, ceil_div(k, group));
  return w;
}

}  // namespace gemmkit::reference
