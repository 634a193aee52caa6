// The GEMV kernel for M = 1 (one token against a weight matrix): D[0, n] = alpha * A[0, :] .
// B[:, n] + beta * C[0, n], where B's K dimension is contiguous (B stored N x K, the decode
// layout). It is bound by reading B once, so it skips the TMA pipeline and shared memory: each
// warp takes an output column at a time and streams its row of B with 16-byte loads, several
// in flight, while A (1 x K) stays in L1/L2; a warp sum gives the dot product.
//
// The generated prelude defines kInType, kOutType, kCType and kHasC.
#pragma once

constexpr int kGemvWarps = 8;    // warps per block
constexpr int kGemvUnroll = 4;   // 16-byte loads of B in flight per lane

// Eight 16-bit values packed in a uint4, as floats, dotted with eight others.
__device__ __forceinline__ float dot8(uint4 x, uint4 y) {
  const u32 xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (kInType == GEMMKIT_BF16) {
      sum += bf16_to_float(u16(xs[i])) * bf16_to_float(u16(ys[i]));
      sum += bf16_to_float(u16(xs[i] >> 16)) * bf16_to_float(u16(ys[i] >> 16));
    } else {
      sum += f16_to_float(u16(xs[i])) * f16_to_float(u16(ys[i]));
      sum += f16_to_float(u16(xs[i] >> 16)) * f16_to_float(u16(ys[i] >> 16));
    }
  }
  return sum;
}

// B is read once: keep it out of L1 so that A stays there.
__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ bool aligned16(const void* p, long long stride_elements) {
  return (reinterpret_cast<u64>(p) | u64(stride_elements * 2)) % 16 == 0;
}

// This lane's share of A[0, :] . B[:, n] for one batch; `a` and `b` point at element k = 0.
__device__ __forceinline__ float lane_dot(const u16* a, long long a_step, const u16* b, long long k, int lane,
                                          bool vector) {
  float sum = 0.0f;
  long long done = 0;
  if (vector) {  // 8 elements per load, 32 lanes side by side, kGemvUnroll loads per round
    const uint4* a8 = reinterpret_cast<const uint4*>(a);
    const uint4* b8 = reinterpret_cast<const uint4*>(b);
    const long long vectors = k / 8;
    long long v = lane;
    for (; v + 32 * (kGemvUnroll - 1) < vectors; v += 32 * kGemvUnroll) {
      uint4 bv[kGemvUnroll];
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) bv[u] = load_streaming(b8 + v + 32 * u);
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) sum += dot8(a8[v + 32 * u], bv[u]);
    }
    for (; v < vectors; v += 32) sum += dot8(a8[v], load_streaming(b8 + v));
    done = vectors * 8;
  }
  for (long long kk = done + lane; kk < k; kk += 32) {
    sum += load_as_float(a, kInType, kk * a_step) * load_as_float(b, kInType, kk);
  }
  return sum;
}

extern "C" __global__ void __launch_bounds__(32 * kGemvWarps) gemmkit_gemv(const GemmParams p) {
  const int lane = threadIdx.x % 32;
  const long long first = (long long)(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  const long long step = (long long)(gridDim.x) * kGemvWarps;
  for (int batch = blockIdx.y; batch < p.batch; batch += gridDim.y) {
    const u16* a = static_cast<const u16*>(p.a.data) + batch * p.a.batch_stride;
    const u16* b_batch = static_cast<const u16*>(p.b.data) + batch * p.b.batch_stride;
    // Uniform over the grid: 16-byte loads where A is contiguous too and every row start aligned.
    const bool vector = p.a.col_stride == 1 && aligned16(a, 0) && aligned16(b_batch, p.b.col_stride);
    for (long long n = first; n < p.n; n += step) {
      float sum = lane_dot(a, p.a.col_stride, b_batch + n * p.b.col_stride, p.k, lane, vector);
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      if (lane == 0) {
        float value = p.alpha * sum;
        if (kHasC) value += p.beta * load_as_float(p.c.data, kCType, batch * p.c.batch_stride + n * p.c.col_stride);
        store_from_float(p.d.data, kOutType, batch * p.d.batch_stride + n * p.d.col_stride, value);
      }
    }
  }
}
