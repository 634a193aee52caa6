// Types and conversions for device code compiled by NVRTC without any CUDA headers.
#pragma once

#include "codes.h"

namespace gemmkit::sm90 {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

__device__ __forceinline__ float bf16_to_float(u16 x) { return __uint_as_float(u32(x) << 16); }

__device__ __forceinline__ float f16_to_float(u16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
  return f;
}

// An e4m3 or e5m2 value (exact in f16, so in f32).
__device__ __forceinline__ float fp8_to_float(u8 x, int type) {
  u32 pair;
  const u16 bits = x;
  if (type == GEMMKIT_E4M3)
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(pair) : "h"(bits));
  else
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(pair) : "h"(bits));
  return f16_to_float(u16(pair));
}

// 2^(e - 127) for the exponent byte in e's low 8 bits; e = 255 is NaN, and e = 0 the subnormal
// 2^-127. Written as selects: the TMA kernel converts two per column pair and granule, where branches
// (and their convergence barriers) cost more than the arithmetic.
__device__ __forceinline__ float ue8m0_to_float(u32 e) {
  u32 bits = (e & 0xff) << 23;
  bits = (e & 0xff) == 0 ? 0x00400000u : bits;
  bits = (e & 0xff) == 0xff ? 0x7fffffffu : bits;
  return __uint_as_float(bits);
}

// 4-bit types (two elements to a byte, the even one in the low nibble).
__device__ __forceinline__ constexpr bool is_4bit_type(int type) { return type == GEMMKIT_U4 || type == GEMMKIT_E2M1; }

// The nibble of element `index` (>= 0) of a 4-bit buffer.
__device__ __forceinline__ u32 nibble_at(const void* base, i64 index) {
  const u32 byte = static_cast<const u8*>(base)[index >> 1];
  return (index & 1) != 0 ? byte >> 4 : byte & 15u;
}

// The value of an e2m1 code (sign, two exponent bits, one mantissa bit; exponent 0 is 0 or 0.5):
// from exponent 1 on, magnitude m (3 bits) is the float whose exponent and first mantissa bit
// are m + 252 shifted to bit 22 (2 -> 1.0, 3 -> 1.5, ..., 7 -> 6.0).
__device__ __forceinline__ float e2m1_to_float(u32 code) {
  const u32 magnitude = code & 7u;
  const float value = magnitude < 2 ? 0.5f * float(magnitude) : __uint_as_float((magnitude + 252u) << 22);
  return (code & 8u) != 0 ? -value : value;
}

// Reads element `index` of a buffer whose type is `type`, as float.
__device__ __forceinline__ float load_as_float(const void* base, int type, i64 index) {
  if (type == GEMMKIT_F32) return static_cast<const float*>(base)[index];
  if (type == GEMMKIT_E4M3 || type == GEMMKIT_E5M2) return fp8_to_float(static_cast<const u8*>(base)[index], type);
  if (type == GEMMKIT_UE8M0) return ue8m0_to_float(static_cast<const u8*>(base)[index]);
  u16 bits = static_cast<const u16*>(base)[index];
  return type == GEMMKIT_BF16 ? bf16_to_float(bits) : f16_to_float(bits);
}

// Rounds two floats to a packed pair of 16-bit values (lo in the low half), nearest-even.
__device__ __forceinline__ u32 pack_pair(int type, float lo, float hi) {
  u32 packed;
  if (type == GEMMKIT_BF16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}

// Rounds two floats to a packed pair of e4m3 or e5m2 codes (lo in the low byte), nearest-even,
// saturating at the largest finite value.
__device__ __forceinline__ u32 fp8_pair(int type, float lo, float hi) {
  u16 pair;
  if (type == GEMMKIT_E4M3)
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));
  return pair;
}

// Rounds a float to e4m3 or e5m2, nearest-even, saturating at the largest finite value.
__device__ __forceinline__ u8 float_to_fp8(float value, int type) { return u8(fp8_pair(type, value, 0.0f) & 0xffu); }

// Writes element `index` of a buffer whose type is `type`, rounding to nearest-even (ue8m0:
// down to a power of two).
__device__ __forceinline__ void store_from_float(void* base, int type, i64 index, float value) {
  if (type == GEMMKIT_F32) {
    static_cast<float*>(base)[index] = value;
  } else if (type == GEMMKIT_E4M3 || type == GEMMKIT_E5M2) {
    static_cast<u8*>(base)[index] = float_to_fp8(value, type);
  } else if (type == GEMMKIT_UE8M0) {
    static_cast<u8*>(base)[index] = u8(__float_as_uint(value) >> 23);
  } else {
    static_cast<u16*>(base)[index] = u16(pack_pair(type, value, 0.0f) & 0xffffu);
  }
}

// ---- Programmatic dependent launch -----------------------------------------------------------
// The kernels are launched so that they may start while the grid before them in the stream still
// runs (launch.cpp). Each lets the grid after it start likewise as soon as it is itself running,
// and waits for the grid before it to finish, its writes visible, before it touches any operand.
// Both are no-ops in a grid launched the ordinary way, and cost nothing measurable (H100,
// dense-decode and small.txt).

__device__ __forceinline__ void launch_dependent_grids() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

__device__ __forceinline__ void wait_for_prerequisite_grids() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

}  // namespace gemmkit::sm90
