// The fallback GEMM: plain CUDA cores, any strides and any alignment. Used where TMA cannot
// address an input (a base or stride that is not 16-byte aligned, no unit stride) and for K = 0.
// Each 256-thread block computes a 64 x 64 tile of D, staging 16-deep K slices in shared memory.
//
// FP8 operands (any layout; wgmma's kernel takes only K-major ones) are dequantised as they
// are staged: each value times its scale. A dual GEMM (kDual) stages B2's slice beside B's and
// keeps a second accumulator for the epilogue's acc2.
//
// kernel_config.cuh (generated) defines kAType, kBType, kOutType, kCType, kHasC, kScaleA,
// kScaleB and kDual.
#pragma once

#include "fuse.cuh"
#include "kernel_config.cuh"
#include "params.h"
#include "scales.cuh"
#include "utility.cuh"

namespace gemmkit::sm90 {

constexpr int kFallbackTile = 64;
constexpr int kFallbackDepth = 16;

// 4-bit operands' values rounded to the other operand's 16-bit type, as the TMA kernel widens them;
// against an 8-bit one (W4A8), exact, as the TMA kernel scales its sums.
__device__ __forceinline__ float load_operand(const GemmMatrix& m, int type, const GemmScale& s, int mode, int batch,
                                              i64 row, i64 col) {
  const float value = operand_value(m, type, s, mode, batch, row, col);
  const int wide = is_4bit_type(kAType) ? kBType : kAType;
  if (!is_4bit_type(type) || wide == GEMMKIT_E4M3) return value;
  const u32 rounded = pack_pair(wide, value, 0.0f) & 0xffffu;
  return wide == GEMMKIT_BF16 ? bf16_to_float(u16(rounded)) : f16_to_float(u16(rounded));
}

extern "C" __global__ void __launch_bounds__(256) gemmkit_fallback(const GemmParams p) {
  __shared__ float a_tile[kFallbackDepth][kFallbackTile + 1];
  __shared__ float b_tile[kFallbackDepth][kFallbackTile + 1];
  __shared__ float b2_tile[kDual ? kFallbackDepth : 1][kFallbackTile + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  launch_dependent_grids();
  wait_for_prerequisite_grids();

  // Grid-stride over batches and row blocks: the grid's y and z sizes are limited to 65535.
  for (int batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
    for (i64 m0 = i64(blockIdx.y) * kFallbackTile; m0 < p.m; m0 += i64(gridDim.y) * kFallbackTile) {
      const i64 n0 = i64(blockIdx.x) * kFallbackTile;
      float acc[4][4] = {}, acc2[4][4] = {};
      for (i64 k0 = 0; k0 < p.k; k0 += kFallbackDepth) {
        for (int i = threadIdx.x; i < kFallbackTile * kFallbackDepth; i += 256) {
          const int r = i / kFallbackDepth, kk = i % kFallbackDepth;
          const bool k_in = k0 + kk < p.k;
          a_tile[kk][r] = (k_in && m0 + r < p.m) ? load_operand(p.a, kAType, p.scale_a, kScaleA, batch, m0 + r, k0 + kk) : 0.0f;
          const int c = i % kFallbackTile, kb = i / kFallbackTile;
          const bool b_in = k0 + kb < p.k && n0 + c < p.n;
          b_tile[kb][c] = b_in ? load_operand(p.b, kBType, p.scale_b, kScaleB, batch, k0 + kb, n0 + c) : 0.0f;
          if (kDual) b2_tile[kb][c] = b_in ? load_operand(p.b2, kBType, p.scale_b2, kScaleB, batch, k0 + kb, n0 + c) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kFallbackDepth; ++kk) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              acc[i][j] += a_tile[kk][ty + 16 * i] * b_tile[kk][tx + 16 * j];
              if (kDual) acc2[i][j] += a_tile[kk][ty + 16 * i] * b2_tile[kk][tx + 16 * j];
            }
          }
        }
        __syncthreads();
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const i64 row = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
          if (row >= p.m || col >= p.n) continue;
          float value = p.alpha * acc[i][j];
          if (kHasC) {
            value += p.beta * load_as_float(p.c.data, kCType,
                                            batch * p.c.batch_stride + row * p.c.row_stride + col * p.c.col_stride);
          }
          value = fused_element(value, p.alpha * acc2[i][j], p, batch, row, col);
          store_from_float(p.d.data, kOutType, batch * p.d.batch_stride + row * p.d.row_stride + col * p.d.col_stride,
                           value);
        }
      }
    }
  }
}

}  // namespace gemmkit::sm90
