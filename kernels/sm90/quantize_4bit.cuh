// Quantisation of bf16 / f16 / f32 weights into the 4-bit weights gemm() takes as B: u4 codes in
// groups along K with 16-bit scales (and zero points), or e2m1 (MXFP4) in blocks of 32 along K
// with ue8m0 scales. The rules are gemmkit/quantize.h's, and src/reference/lowbit.cpp's, which
// this kernel matches bit for bit:
//
//   int4, symmetric:   scale = round(2 amax / 15) to the scales' type (2 / 15 for all zeros);
//                      q = clamp(rne(x / scale) + 8, 0, 15)
//   int4, zero points: scale = round(max(hi - lo, 1e-5) / 15); zero = clamp(rne(-lo / scale), 0, 15);
//                      q = clamp(rne(x / scale) + zero, 0, 15)
//   MXFP4:             e = clamp(floor(log2(amax)) - 2, -127, 127) (0 for all zeros); scale byte
//                      e + 127; q = e2m1(x * 2^-e), to nearest, ties to even, saturating at 6
//
// every operation in f32, rounded to nearest. A block holding a NaN or an infinity gets a NaN
// scale: int4 the type's quiet NaN with zero point 8 and every code 8, MXFP4 0xFF and every code 0.
// A quotient x / scale that is NaN (0 / 0 where a scale rounds to 0) gives the zero point.
//
// B is K x N, its blocks run along K (the rows). One warp quantises one block (batch, column n,
// group g): a pass over the block's elements for its amax (or its min and max), reduced across the
// warp, then a pass over the block's bytes, each lane writing whole bytes (two codes, the even
// element in the low nibble), so that no two lanes write one byte. Blocks start on even elements
// (a group is even, or one group covers all of K), so no byte holds two blocks' codes. Where K is
// odd, the high nibble of a column's last byte is written 0. Warps take blocks in the order
// (batch, column, group), so neighbouring warps read neighbouring groups of a column.
//
// The first part (the parameter block) is plain C++, shared with the host; the device code reads
// from kernel_config.cuh (generated: src/api/quantize_4bit.cpp) kQ4WType (w's GEMMKIT_* code),
// kQ4Format (GEMMKIT_U4 or GEMMKIT_E2M1), kQ4ScaleType (GEMMKIT_BF16, GEMMKIT_F16 or
// GEMMKIT_UE8M0) and kQ4Zeros (u4 with zero points).
#pragma once

#define GEMMKIT_QUANTIZE_4BIT_THREADS 128

// Element (b, k, n) of an operand lives at data + b*batch_stride + k*k_stride + n*n_stride
// (elements; nibbles for q, whose k_stride is 1). For the scales and zero points, k counts groups.
struct Quantize4bitOperand {
  void* data;
  long long batch_stride;
  long long k_stride;
  long long n_stride;
};

struct Quantize4bitParams {
  Quantize4bitOperand w, q, scales, zeros;  // zeros: unused without zero points
  long long batch, k, n;                    // all > 0
  long long group;                          // K elements a block covers: even, or at least k
  long long groups;                         // ceil(k / group)
  long long blocks;                         // batch * n * groups
};

#ifdef __CUDACC_RTC__

#include "kernel_config.cuh"
#include "quant_rule.cuh"
#include "utility.cuh"

namespace gemmkit::sm90 {

constexpr bool kQ4Mx = kQ4Format == GEMMKIT_E2M1;

// ---- the rules ------------------------------------------------------------------------------

// What a pass over a block finds: max |x|, min x and max x (zero points), and whether every
// element is finite.
struct Q4Stats {
  float amax, lo, hi;
  bool finite;
};

__device__ __forceinline__ Q4Stats q4_reduce(Q4Stats s) {
#pragma unroll
  for (int d = 16; d >= 1; d >>= 1) {
    s.amax = fmaxf(s.amax, __shfl_xor_sync(0xffffffffu, s.amax, d));
    if (kQ4Zeros) {
      s.lo = fminf(s.lo, __shfl_xor_sync(0xffffffffu, s.lo, d));
      s.hi = fmaxf(s.hi, __shfl_xor_sync(0xffffffffu, s.hi, d));
    }
  }
  s.finite = __all_sync(0xffffffffu, s.finite);
  return s;
}

// An f32 rounded to the 16-bit scale type (to nearest, ties to even): its bits, and its value.
__device__ __forceinline__ u16 q4_scale_bits(float x) { return u16(pack_pair(kQ4ScaleType, x, 0.0f) & 0xffffu); }
__device__ __forceinline__ float q4_scale_value(u16 bits) {
  return kQ4ScaleType == GEMMKIT_BF16 ? bf16_to_float(bits) : f16_to_float(bits);
}
// The quiet NaN of the scale type, as the host writes it (src/reference/host_numeric.h).
constexpr u16 kQ4NanBits = kQ4ScaleType == GEMMKIT_BF16 ? u16(0x7fc0) : u16(0x7e00);

// An int4 group's scale (its bits) and zero point, from its reduced stats (finite).
struct Q4Int4Group {
  u16 scale_bits;
  float scale, zero;
};

__device__ __forceinline__ Q4Int4Group q4_int4_group(const Q4Stats& s) {
  Q4Int4Group g;
  float ratio;
  if (kQ4Zeros) {
    ratio = __fdiv_rn(fmaxf(__fsub_rn(s.hi, s.lo), 1e-5f), 15.0f);
  } else {
    ratio = s.amax > 0.0f ? __fdiv_rn(__fmul_rn(2.0f, s.amax), 15.0f) : __fdiv_rn(2.0f, 15.0f);
  }
  g.scale_bits = q4_scale_bits(ratio);
  g.scale = q4_scale_value(g.scale_bits);
  // (Through an integer, so that a zero point of -0 is stored as +0.)
  g.zero = kQ4Zeros ? float(u32(fminf(fmaxf(rintf(__fdiv_rn(-s.lo, g.scale)), 0.0f), 15.0f))) : 8.0f;
  return g;
}

// q = clamp(rne(x / scale) + zero, 0, 15); the zero point where x / scale is NaN.
__device__ __forceinline__ u32 q4_int4_code(float x, const Q4Int4Group& g) {
  float v = __fadd_rn(rintf(__fdiv_rn(x, g.scale)), g.zero);
  if (v != v) v = g.zero;
  return u32(fminf(fmaxf(v, 0.0f), 15.0f));
}

// An MXFP4 block's shared exponent e: floor(log2(amax)) - 2, clamped to [-127, 127] (every
// subnormal amax clamps to -127), 0 for an all-zero block. amax is finite.
__device__ __forceinline__ int q4_mx_exponent(float amax) {
  if (amax == 0.0f) return 0;
  const int e = int(__float_as_uint(amax) >> 23) - 127 - 2;
  return e < -127 ? -127 : e;  // at most 254 - 127 - 2 = 125
}

// e2m1 of y, to nearest, ties to the even code (mantissa bit 0), saturating at 6; the sign kept
// (-0 is code 8). The magnitude's code counts the midpoints below it, a tie counting where the
// code below it is odd: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0, 3.5 -> 4.0,
// 5 -> 4.0.
__device__ __forceinline__ u32 q4_e2m1_code(float y) {
  const float a = fabsf(y);
  const u32 code = u32(a > 0.25f) + u32(a >= 0.75f) + u32(a > 1.25f) + u32(a >= 1.75f) + u32(a > 2.5f) +
                   u32(a >= 3.5f) + u32(a > 5.0f);
  return code | ((__float_as_uint(y) >> 28) & 8u);
}

// ---- element access -------------------------------------------------------------------------

__device__ __forceinline__ float q4_load(const Quantize4bitParams& p, i64 base, i64 k) {
  return load_as_float(p.w.data, kQ4WType, base + k * p.w.k_stride);
}

// ---- the kernel -----------------------------------------------------------------------------

// Quantises block `block` ((batch, column, group) in that order, the group fastest).
__device__ __forceinline__ void q4_block(const Quantize4bitParams& p, i64 block) {
  const int lane = threadIdx.x & 31;
  const i64 g = block % p.groups, rest = block / p.groups;
  const i64 n = rest % p.n, b = rest / p.n;
  const i64 first = g * p.group, len = p.k - first < p.group ? p.k - first : p.group;
  const i64 w_base = b * p.w.batch_stride + n * p.w.n_stride + first * p.w.k_stride;

  Q4Stats s{0.0f, __uint_as_float(0x7f800000u), __uint_as_float(0xff800000u), true};
  for (i64 i = lane; i < len; i += 32) {
    const float x = q4_load(p, w_base, i);
    s.finite = s.finite && fabsf(x) < __uint_as_float(0x7f800000u);  // false for NaN and +-inf
    s.amax = fmaxf(s.amax, fabsf(x));
    s.lo = fminf(s.lo, x);
    s.hi = fmaxf(s.hi, x);
  }
  s = q4_reduce(s);

  // The block's scale (and zero point), and how a pair of elements becomes a byte.
  const i64 scale_index = b * p.scales.batch_stride + g * p.scales.k_stride + n * p.scales.n_stride;
  u8* const q = static_cast<u8*>(p.q.data) + ((b * p.q.batch_stride + n * p.q.n_stride + first) >> 1);
  const i64 bytes = (len + 1) >> 1;
  if (kQ4Mx) {
    const int e = s.finite ? q4_mx_exponent(s.amax) : 0;
    if (lane == 0) static_cast<u8*>(p.scales.data)[scale_index] = u8(s.finite ? e + 127 : 0xff);
    const float inverse = quant_pow2(-e);  // 2^-e, exact: e is in [-127, 125]
    for (i64 j = lane; j < bytes; j += 32) {
      u32 byte = 0;
      if (s.finite) {
        byte = q4_e2m1_code(__fmul_rn(q4_load(p, w_base, 2 * j), inverse));
        if (2 * j + 1 < len) byte |= q4_e2m1_code(__fmul_rn(q4_load(p, w_base, 2 * j + 1), inverse)) << 4;
      }
      q[j] = u8(byte);
    }
  } else {
    Q4Int4Group grp{kQ4NanBits, 0.0f, 8.0f};
    if (s.finite) grp = q4_int4_group(s);
    if (lane == 0) {
      static_cast<u16*>(p.scales.data)[scale_index] = grp.scale_bits;
      if (kQ4Zeros) {
        const i64 zero_index = b * p.zeros.batch_stride + g * p.zeros.k_stride + n * p.zeros.n_stride;
        static_cast<u16*>(p.zeros.data)[zero_index] = q4_scale_bits(grp.zero);
      }
    }
    for (i64 j = lane; j < bytes; j += 32) {
      u32 byte = 8u;
      if (s.finite) byte = q4_int4_code(q4_load(p, w_base, 2 * j), grp);
      if (2 * j + 1 < len) byte |= (s.finite ? q4_int4_code(q4_load(p, w_base, 2 * j + 1), grp) : 8u) << 4;
      q[j] = u8(byte);
    }
  }
}

// Each warp takes blocks blockIdx.x * warps + warp, then a grid's worth of warps further on.
extern "C" __global__ void __launch_bounds__(GEMMKIT_QUANTIZE_4BIT_THREADS)
    gemmkit_quantize_4bit(const Quantize4bitParams p) {
  constexpr int kWarps = GEMMKIT_QUANTIZE_4BIT_THREADS / 32;
  const i64 warp = i64(blockIdx.x) * kWarps + (threadIdx.x >> 5), warps = i64(gridDim.x) * kWarps;
  for (i64 block = warp; block < p.blocks; block += warps) q4_block(p, block);
}

}  // namespace gemmkit::sm90

#endif  // __CUDACC_RTC__
