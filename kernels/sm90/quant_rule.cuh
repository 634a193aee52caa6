// The rule by which a block of values becomes FP8 values and one scale, shared by
// gemmkit::quantize (quantize.cuh) and the GEMM kernels' FP8 outputs (epilogue.cuh), so that a
// block quantised either way gets the same bits (gemmkit/quantize.h states the rule):
//   scale = amax / max finite of the FP8 type (448 for e4m3, 57344 for e5m2), rounded to f32,
//           at least 2^-126, or (Pow2) the smallest power of two at or above it; 1 for an
//           all-zero block, NaN for a block holding a NaN or an infinity
//   q     = round_to_nearest_even_satfinite(x / scale), x / scale rounded to f32 first.
// Q is the FP8 type's GEMMKIT_* code. amax is passed as the bits of |x|'s maximum, which order
// like the values, NaN above Inf above every finite value (so one integer max finds it).
#pragma once

#include "codes.h"
#include "utility.cuh"

namespace gemmkit::sm90 {

template <int Q>
constexpr float kFp8Max = Q == GEMMKIT_E4M3 ? 448.0f : 57344.0f;
template <int Q>
constexpr float kFp8InvMax = 1.0f / kFp8Max<Q>;  // rounded to nearest by the compiler
constexpr u32 kQuantInfBits = 0x7f800000u;

// 2^e for e in [-127, 127] (2^-127 is subnormal).
__device__ __forceinline__ float quant_pow2(int e) {
  return e >= -126 ? __uint_as_float(u32(e + 127) << 23) : __uint_as_float(0x00400000u);
}

// The smallest e in [-127, 127] with 2^e * max >= amax (amax finite and > 0): an estimate from
// amax / max, then exact corrections (the products are exact).
template <int Q>
__device__ __forceinline__ int quant_exponent(float amax) {
  const u32 r = __float_as_uint(amax * kFp8InvMax<Q>);
  int e = r <= 0x00400000u ? -127 : r < 0x00800000u ? -126 : int(r >> 23) - 127 + ((r & 0x7fffffu) != 0u);
  while (e < 127 && quant_pow2(e) * kFp8Max<Q> < amax) ++e;
  while (e > -127 && quant_pow2(e - 1) * kFp8Max<Q> >= amax) --e;
  return e;
}

// amax / max rounded to nearest f32, at least 2^-126: the reciprocal product corrected once
// (Markstein), on amax scaled into a range where nothing underflows.
template <int Q>
__device__ __forceinline__ float quant_ratio(float amax) {
  const bool tiny = amax < 0x1p-60f;
  const float a = tiny ? amax * 0x1p64f : amax;
  const float q0 = a * kFp8InvMax<Q>;
  float q = __fmaf_rn(__fmaf_rn(-q0, kFp8Max<Q>, a), kFp8InvMax<Q>, q0);
  if (tiny) q *= 0x1p-64f;
  return fmaxf(q, 0x1p-126f);
}

// The scale of a block from the bits of its amax.
template <int Q, bool Pow2>
__device__ __forceinline__ float quant_scale(u32 amax_bits) {
  if (amax_bits >= kQuantInfBits) return __uint_as_float(0x7fffffffu);
  if (amax_bits == 0u) return 1.0f;
  const float amax = __uint_as_float(amax_bits);
  return Pow2 ? quant_pow2(quant_exponent<Q>(amax)) : quant_ratio<Q>(amax);
}

// What q = x / scale needs: the scale and its correctly rounded reciprocal.
struct QuantDivisor {
  float scale, inverse;
};

// 1 / scale rounded to nearest, for scales in [2^-126, 2^126) (and NaN), quant_ratio's: the approximate
// reciprocal and one Newton step (two FMAs), as __frcp_rn's fast path computes it, without its
// slow path for other inputs, a call whose saved registers gave the GEMM kernels a stack frame.
// QuantRule.ReciprocalIsCorrectlyRounded checks every f32 of the range against __frcp_rn.
__device__ __forceinline__ float quant_reciprocal(float scale) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(scale));
  return __fmaf_rn(__fmaf_rn(-scale, r, 1.0f), r, r);
}

// 1 / scale for a power of two 2^e, e in [-127, 127] (2^-127 is subnormal), or NaN: 2^-e, exact.
__device__ __forceinline__ float pow2_reciprocal(float scale) {
  const u32 bits = __float_as_uint(scale);
  if (bits > kQuantInfBits) return scale;
  return quant_pow2(bits == 0x00400000u ? 127 : 127 - int(bits >> 23));
}

template <int Q, bool Pow2>
__device__ __forceinline__ QuantDivisor quant_divisor(u32 amax_bits) {
  const float scale = quant_scale<Q, Pow2>(amax_bits);  // at most 2^128 / 448 < 2^120
  return {scale, Pow2 ? pow2_reciprocal(scale) : quant_reciprocal(scale)};
}

// x / scale rounded to f32. A power of two divides exactly as a product with its reciprocal;
// other scales take one correction step (Markstein): with 1 / scale correctly rounded, the
// product faithful and its remainder exact (an FMA), product + remainder / scale rounds
// correctly. The remainder is exact unless |x| < 2^-100 or so, where q is 0 or nearly.
template <bool Pow2>
__device__ __forceinline__ float quant_divide(float x, const QuantDivisor& d) {
  const float q0 = __fmul_rn(x, d.inverse);
  if (Pow2) return q0;
  return __fmaf_rn(__fmaf_rn(-q0, d.scale, x), d.inverse, q0);
}

}  // namespace gemmkit::sm90
