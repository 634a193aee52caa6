// Types and conversions for device code compiled by NVRTC without any CUDA headers.
#pragma once

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

// Element type codes, as the generated prelude sets kInType, kOutType and kCType.
#define GEMMKIT_BF16 0
#define GEMMKIT_F16 1
#define GEMMKIT_F32 2

__device__ __forceinline__ float bf16_to_float(u16 x) { return __uint_as_float(u32(x) << 16); }

__device__ __forceinline__ float f16_to_float(u16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
  return f;
}

// Reads element `index` of a buffer whose type is `type`, as float.
__device__ __forceinline__ float load_as_float(const void* base, int type, i64 index) {
  if (type == GEMMKIT_F32) return static_cast<const float*>(base)[index];
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

// Writes element `index` of a buffer whose type is `type`, rounding to nearest-even.
__device__ __forceinline__ void store_from_float(void* base, int type, i64 index, float value) {
  if (type == GEMMKIT_F32) {
    static_cast<float*>(base)[index] = value;
  } else {
    static_cast<u16*>(base)[index] = u16(pack_pair(type, value, 0.0f) & 0xffffu);
  }
}
