// The epilogue IR's operations on one f32 value (epilogue/program.h), which the generated
// epilogue (codegen/epilogue_source.h) calls; the double-precision reference
// (reference/epilogue_reference.cpp) holds them to the same formulas.
#pragma once

#include "utility.cuh"

namespace gemmkit::sm90 {

__device__ __forceinline__ float ep_relu(float x) { return fmaxf(x, 0.0f); }
__device__ __forceinline__ float ep_relu2(float x) { return fmaxf(x, 0.0f) * fmaxf(x, 0.0f); }
__device__ __forceinline__ float ep_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
// The logistic functions take the special-function unit's exponential (__expf: a few ulp of f32,
// far inside a 16-bit output's rounding) instead of expf: silu's code per element falls from 26
// instructions to 21, the division's slow path counted (docs/experiments.md, "Fused epilogues",
// fourth session). The division stays IEEE:
// __fdividef's shorter code let ptxas hoist loads of many elements ahead of their arithmetic, and
// wide tiles spilled. Its fast path takes divisors below 2^126: the exponent is held to 80
// (e^80 < 2^116), past which the quotient is already far below anything a 16-bit output or a
// tolerance sees. Unheld, gelu_tanh's cubic sent most large negative products to the slow path:
// fused gelu_tanh with a bias cost 1.79x the unfused GEMM on dense-large's M = 4096 half, against
// silu's 1.39x (H200, e8e7e6c).
// gelu_tanh is x sigmoid(2u), the same function as 0.5 x (1 + tanh(u)) without tanhf.
__device__ __forceinline__ float ep_exp_held(float x) { return __expf(fminf(x, 80.0f)); }
__device__ __forceinline__ float ep_sigmoid(float x) { return 1.0f / (1.0f + ep_exp_held(-x)); }
__device__ __forceinline__ float ep_silu(float x) { return x / (1.0f + ep_exp_held(-x)); }
__device__ __forceinline__ float ep_gelu_tanh(float x) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return x / (1.0f + ep_exp_held(-2.0f * u));
}
// Activations' slopes, for backward epilogues (the gradient times the slope at the saved
// pre-activation). gelu_tanh's uses 1 - tanh(u)^2 = 4 s (1 - s) with s = sigmoid(2u).
__device__ __forceinline__ float ep_dgelu(float x) {
  return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.39894228040143268f * __expf(-0.5f * x * x);
}
__device__ __forceinline__ float ep_dgelu_tanh(float x) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  const float s = 1.0f / (1.0f + ep_exp_held(-2.0f * u));
  return s + 2.0f * x * s * (1.0f - s) * 0.79788456080286536f * (1.0f + 0.134145f * x * x);
}
__device__ __forceinline__ float ep_dsilu(float x) {
  const float s = ep_sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}
__device__ __forceinline__ float ep_drelu(float x) { return x > 0.0f ? 1.0f : 0.0f; }
__device__ __forceinline__ float ep_dsigmoid(float x) {
  const float s = ep_sigmoid(x);
  return s * (1.0f - s);
}
__device__ __forceinline__ float ep_dtanh(float x) {
  const float t = tanhf(x);
  return 1.0f - t * t;
}
__device__ __forceinline__ float ep_clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }

// x rounded to bf16 or f16 (nearest-even) and widened back: what a store of that type keeps.
__device__ __forceinline__ float ep_round(float x, int type) {
  const u32 packed = pack_pair(type, x, 0.0f) & 0xffffu;
  return type == GEMMKIT_BF16 ? bf16_to_float(u16(packed)) : f16_to_float(u16(packed));
}

// A reduction (epilogue/program.h: name[n] = sum(x), name[m] = amax(x), ...): sum or amax, and
// which index of D its output keeps.
constexpr int kPerColumn = 0, kPerRow = 1, kPerBatch = 2;
struct EpilogueReduction {
  bool sum;
  int keeps;
};

// Partials of amax are |x| as f32 bits compared as integers: for non-negative floats the order is
// the same, and NaN's bits exceed infinity's, so a NaN anywhere wins (fmaxf would drop it).
__device__ __forceinline__ float amax_of(float a, float b) {
  return __uint_as_float(max(__float_as_uint(fabsf(a)), __float_as_uint(fabsf(b))));
}
__device__ __forceinline__ float combine(float a, float b, bool sum) { return sum ? a + b : amax_of(a, b); }

// Adds a partial into a reduction's output, which the host zeroed before the kernel.
__device__ __forceinline__ void reduce_into(float* out, float value, bool sum) {
  if (sum) {
    atomicAdd(out, value);
  } else {
    atomicMax(reinterpret_cast<unsigned*>(out), __float_as_uint(fabsf(value)));
  }
}

}  // namespace gemmkit::sm90
