// Exact host-side conversions for the element types gemmkit reads and writes, without CUDA headers.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "gemmkit/tensor.h"

namespace gemmkit::reference {

// bf16 is the top half of an f32, so widening is a shift.
inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  // Rounding could carry a NaN's payload into the exponent; keep it a (quiet) NaN instead.
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x0040);
  // Round to nearest even: add just under half an ulp, plus one when the kept lsb is odd.
  const uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

inline float f16_to_float(uint16_t h) {
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  float magnitude;
  if (exponent == 0x1F) {
    magnitude = mantissa ? std::numeric_limits<float>::quiet_NaN()
                         : std::numeric_limits<float>::infinity();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // subnormal: mantissa * 2^-24
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  return (h & 0x8000u) ? -magnitude : magnitude;
}

inline uint16_t float_to_f16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const float magnitude = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7E00;
  // 65520 is halfway between the largest f16 (65504) and 2^16; the tie rounds to even, i.e. up to inf.
  if (magnitude >= 65520.0f) return sign | 0x7C00;
  if (magnitude < 0x1p-14f) {
    // Subnormal range: count units of 2^-24. Scaling by a power of two is exact, and
    // nearbyint rounds ties to even in the default rounding mode.
    return sign | static_cast<uint16_t>(std::nearbyint(magnitude * 0x1p24f));
  }
  // Normal range: round the 23-bit mantissa to 10 bits (ties to even), then rebias the exponent
  // from 127 to 15. A carry out of the mantissa correctly bumps the exponent.
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  const uint32_t rounded = (abs_bits + 0xFFFu + ((abs_bits >> 13) & 1u)) >> 13;
  return sign | static_cast<uint16_t>(rounded - ((127u - 15u) << 10));
}

// e4m3: 4 exponent bits (bias 7), 3 mantissa bits, no infinities, S.1111.111 is NaN.
// e5m2: 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like infinities and NaNs.
inline float fp8_to_float(uint8_t x, DType dtype) {
  const bool e4m3 = dtype == DType::e4m3;
  const int mantissa_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const uint32_t exponent = (x & 0x7Fu) >> mantissa_bits, mantissa = x & ((1u << mantissa_bits) - 1);
  const uint32_t max_exponent = e4m3 ? 15 : 31;
  float magnitude;
  if (e4m3 && (x & 0x7Fu) == 0x7Fu) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (!e4m3 && exponent == max_exponent) {
    magnitude = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (exponent == 0) {
    magnitude = std::ldexp(float(mantissa), 1 - bias - mantissa_bits);
  } else {
    magnitude = std::ldexp(float(mantissa | (1u << mantissa_bits)), int(exponent) - bias - mantissa_bits);
  }
  return (x & 0x80u) ? -magnitude : magnitude;
}

// 2^(e - 127); 255 is NaN.
inline float ue8m0_to_float(uint8_t e) {
  return e == 0xFF ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, int(e) - 127);
}

// The value of an e2m1 code (OCP MX FP4: sign, 2 exponent bits of bias 1, 1 mantissa bit).
inline float fp4_e2m1_value(uint8_t code) {
  static constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (code & 8u) ? -kMagnitudes[code & 7u] : kMagnitudes[code & 7u];
}

// Element `index` of a buffer of `dtype`. A 4-bit buffer's index counts elements, two a byte, the
// even one in the low nibble; a u4 element reads as its code q (0..15), unscaled, an e2m1 one as
// its value, unscaled.
inline double load_element(const void* base, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::u4:
    case DType::e2m1: {
      const uint8_t byte = static_cast<const uint8_t*>(base)[index / 2];
      const uint8_t code = index % 2 ? byte >> 4 : byte & 0xFu;
      return dtype == DType::u4 ? double(code) : double(fp4_e2m1_value(code));
    }
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::f32: return static_cast<const float*>(base)[index];
    case DType::e4m3:
    case DType::e5m2: return fp8_to_float(static_cast<const uint8_t*>(base)[index], dtype);
    case DType::ue8m0: return ue8m0_to_float(static_cast<const uint8_t*>(base)[index]);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// Rounds to f32 "to odd": an inexact result keeps an odd last bit, so that rounding it again to a
// type at least two bits narrower gives the same result as rounding the double directly.
inline float round_to_odd_float(double value) {
  const float f = static_cast<float>(value);
  if (!std::isfinite(f) || f == value || (std::bit_cast<uint32_t>(f) & 1u)) return f;
  return std::nextafter(f, value > f ? std::numeric_limits<float>::infinity()
                                     : -std::numeric_limits<float>::infinity());
}

inline void store_element(void* base, DType dtype, int64_t index, double value) {
  switch (dtype) {
    case DType::bf16:
      static_cast<uint16_t*>(base)[index] = float_to_bf16(round_to_odd_float(value));
      break;
    case DType::f16:
      static_cast<uint16_t*>(base)[index] = float_to_f16(round_to_odd_float(value));
      break;
    case DType::f32: static_cast<float*>(base)[index] = static_cast<float>(value); break;
    case DType::e4m3:
    case DType::e5m2:
    case DType::ue8m0:
    case DType::u4:
    case DType::e2m1: break;  // never an output
  }
}

// Half an ulp of 1.0: the relative error of one rounding to `dtype`.
inline double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 0x1p-8;
    case DType::f16: return 0x1p-11;
    case DType::f32: return 0x1p-24;
    case DType::e4m3: return 0x1p-4;
    case DType::e5m2: return 0x1p-3;
    case DType::ue8m0: return 0.5;
    case DType::u4: return 0.5;     // integers: a value of at least 1 moves by at most half of it
    case DType::e2m1: return 0x1p-2;  // one mantissa bit (normal range)
  }
  return 0;
}

}  // namespace gemmkit::reference
