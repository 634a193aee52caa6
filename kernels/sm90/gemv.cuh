// The GEMV kernel for M = 1 (one token against a weight matrix): D[0, n] = alpha * A[0, :] .
// B[:, n] + beta * C[0, n], where B's K dimension is contiguous (B stored N x K, the decode
// layout). It is bound by reading B once, so it skips the TMA pipeline and shared memory: each
// group of kGemvLanes lanes takes an output column at a time and streams its row of B with
// 16-byte loads, several in flight, while A (1 x K) stays in L1/L2; a sum over the group gives
// the dot product. Rows shorter than a warp's round of loads (2 KB) share a warp among
// kGemvColumns columns, so that each lane still has kGemvUnroll loads in flight. FP8 inputs have
// their block and mx scales applied per 16-byte vector (a vector never straddles a 32-element
// scale block), and their tensor and rowwise scales once per output.
//
// kernel_config.cuh (generated) defines kAType, kBType, kOutType, kCType, kHasC, kScaleA,
// kScaleB and kGemvColumns (columns per warp: 1, 2 or 4).
#pragma once

#include "fuse.cuh"
#include "kernel_config.cuh"
#include "params.h"
#include "scales.cuh"
#include "utility.cuh"

namespace gemmkit::sm90 {

constexpr int kGemvWarps = 8;    // warps per block
constexpr int kGemvUnroll = 4;   // 16-byte loads of B in flight per lane
constexpr int kGemvLanes = 32 / kGemvColumns;  // lanes per column
static_assert(kGemvColumns == 1 || kGemvColumns == 2 || kGemvColumns == 4, "8 to 32 lanes a column");
constexpr bool kGemv8Bit = kAType == GEMMKIT_E4M3 || kAType == GEMMKIT_E5M2;
constexpr int kGemvBytes = kGemv8Bit ? 1 : 2;      // per element
constexpr int kGemvVector = 16 / kGemvBytes;       // elements per 16-byte load

// Two e4m3 or e5m2 values packed in 16 bits, as floats (exact).
__device__ __forceinline__ float2 fp8x2_to_float2(u32 bits, int type) {
  u32 pair;
  const u16 in = u16(bits);
  if (type == GEMMKIT_E4M3)
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(pair) : "h"(in));
  else
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(pair) : "h"(in));
  return make_float2(f16_to_float(u16(pair)), f16_to_float(u16(pair >> 16)));
}

// 16 bytes of A dotted with 16 bytes of B: eight 16-bit or sixteen 8-bit elements each.
__device__ __forceinline__ float dot_vector(uint4 x, uint4 y) {
  const u32 xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (kGemv8Bit) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float2 a = fp8x2_to_float2(xs[i] >> (16 * half), kAType), b = fp8x2_to_float2(ys[i] >> (16 * half), kBType);
        sum += a.x * b.x;
        sum += a.y * b.y;
      }
    } else if (kAType == GEMMKIT_BF16) {
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
  return (reinterpret_cast<u64>(p) | u64(stride_elements * kGemvBytes)) % 16 == 0;
}

// Where the inner (block, mx) scales of one output column start: A's of row 0 and B's of column
// n of one batch; K steps through them by the scales' K strides.
struct InnerScales {
  i64 a, b;  // element offsets into p.scale_a.data and p.scale_b.data
};

// The product of A's and B's inner scales at K index k (1 without inner scales).
__device__ __forceinline__ float inner_factor(const GemmParams& p, InnerScales at, i64 k) {
  float factor = 1.0f;
  if (is_inner_scale(kScaleA)) factor *= scale_at(p.scale_a, kScaleA, at.a + (k / scale_k_block(kScaleA)) * p.scale_a.col_stride);
  if (is_inner_scale(kScaleB)) factor *= scale_at(p.scale_b, kScaleB, at.b + (k / scale_k_block(kScaleB)) * p.scale_b.row_stride);
  return factor;
}

// With 128-deep block scales (and no mx), a round's kGemvLanes x kGemvUnroll 16-byte vectors of
// 8-bit elements span kGemvLanes / 2 blocks, vector v lying in block v / 8: the first
// kGemvLanes / 2 lanes of a group each look up one block's scale product and pass it to the lanes
// that need it, instead of every lane looking up both scales for each of its vectors.
constexpr bool kGemvBlockScales = kGemv8Bit && (kScaleA == GEMMKIT_SCALE_BLOCK || kScaleB == GEMMKIT_SCALE_BLOCK) &&
                                  kScaleA != GEMMKIT_SCALE_MX && kScaleB != GEMMKIT_SCALE_MX;
static_assert(!kGemvBlockScales || (kGemvVector == 16 && kGemvUnroll == 4), "a round spans kGemvLanes / 2 blocks of 8 vectors");

// This lane's share of A[0, :] . B[:, n] for one batch; `a` and `b` point at element k = 0, and
// `lane` is the lane's place in its column's group.
__device__ __forceinline__ float lane_dot(const GemmParams& p, const u8* a, long long a_step, const u8* b,
                                          InnerScales scales, int lane, bool vector) {
  const long long k = p.k;
  float sum = 0.0f;
  long long done = 0;
  if (vector) {  // kGemvVector elements per load, the group's lanes side by side, kGemvUnroll loads per round
    const uint4* a16 = reinterpret_cast<const uint4*>(a);
    const uint4* b16 = reinterpret_cast<const uint4*>(b);
    const long long vectors = k / kGemvVector;
    long long v = lane;
    // Whole rounds only, the same for every lane of the warp (its columns have the same K, and the
    // block scales' shuffles need the whole warp); the loop below takes what is left, lane by lane.
    for (; v - lane + kGemvLanes * kGemvUnroll <= vectors; v += kGemvLanes * kGemvUnroll) {
      uint4 bv[kGemvUnroll];
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) bv[u] = load_streaming(b16 + v + kGemvLanes * u);
      float factors[kGemvUnroll];
      if (kGemvBlockScales) {
        const float mine = lane < kGemvLanes / 2 ? inner_factor(p, scales, (v - lane + 8 * lane) * kGemvVector) : 0.0f;
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u) {
          factors[u] = __shfl_sync(0xffffffffu, mine, lane / 8 + kGemvLanes / 8 * u, kGemvLanes);
        }
      }
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        const float factor = kGemvBlockScales ? factors[u] : inner_factor(p, scales, (v + kGemvLanes * u) * kGemvVector);
        sum += dot_vector(a16[v + kGemvLanes * u], bv[u]) * factor;
      }
    }
    for (; v < vectors; v += kGemvLanes) {
      sum += dot_vector(a16[v], load_streaming(b16 + v)) * inner_factor(p, scales, v * kGemvVector);
    }
    done = vectors * kGemvVector;
  }
  for (long long kk = done + lane; kk < k; kk += kGemvLanes) {
    sum += load_as_float(a, kAType, kk * a_step) * load_as_float(b, kBType, kk) * inner_factor(p, scales, kk);
  }
  return sum;
}

// With a fused epilogue, ptxas left to itself kept the kernel to 40-48 registers and spilled (a
// gelu, a log); asked for 3 blocks an SM it takes up to 85 (72 used) and spills nothing. 0: as
// without (the same binary as no bound).
constexpr int kGemvMinBlocks = kEpilogue ? 3 : 0;

extern "C" __global__ void __launch_bounds__(32 * kGemvWarps, kGemvMinBlocks) gemmkit_gemv(const GemmParams p) {
  const int lane = threadIdx.x % kGemvLanes;
  const int group = threadIdx.x % 32 / kGemvLanes;  // the lane's column among its warp's
  const long long first = ((long long)(blockIdx.x) * kGemvWarps + threadIdx.x / 32) * kGemvColumns;
  const long long step = (long long)(gridDim.x) * kGemvWarps * kGemvColumns;
  launch_dependent_grids();
  wait_for_prerequisite_grids();
  for (int batch = blockIdx.y; batch < p.batch; batch += gridDim.y) {
    const u8* a = static_cast<const u8*>(p.a.data) + batch * p.a.batch_stride * kGemvBytes;
    const u8* b_batch = static_cast<const u8*>(p.b.data) + batch * p.b.batch_stride * kGemvBytes;
    // Uniform over the grid: 16-byte loads where A is contiguous too and every row start aligned.
    const bool vector = p.a.col_stride == 1 && aligned16(a, 0) && aligned16(b_batch, p.b.col_stride);
    // Every lane of a warp goes round as often as the warp's first column needs, for the
    // shuffles; a group whose column lies past N computes the last one and stores nothing.
    for (long long warp_n = first; warp_n < p.n; warp_n += step) {
      const long long own = warp_n + group;
      const bool inside = kGemvColumns == 1 || own < p.n;
      const long long n = inside ? own : p.n - 1;
      const InnerScales scales{batch * p.scale_a.batch_stride,
                               batch * p.scale_b.batch_stride + (n / p.scale_b.block_cols) * p.scale_b.col_stride};
      float sum = lane_dot(p, a, p.a.col_stride, b_batch + n * p.b.col_stride * kGemvBytes, scales, lane, vector);
#pragma unroll
      for (int offset = kGemvLanes / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      if (lane == 0 && inside) {
        float value = p.alpha * (sum * outer_scale_a(p, batch, 0) * outer_scale_b(p, batch, n));
        if (kHasC) value += p.beta * load_as_float(p.c.data, kCType, batch * p.c.batch_stride + n * p.c.col_stride);
        value = fused_element(value, 0.0f, p, batch, 0, n);
        store_from_float(p.d.data, kOutType, batch * p.d.batch_stride + n * p.d.col_stride, value);
      }
    }
  }
}

}  // namespace gemmkit::sm90
