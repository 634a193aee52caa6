// FP8 scales: how each kernel finds the scale of an operand element (see GemmScale).
//
// Tensor and rowwise scales are the same for a whole output row or column, so the TMA kernel
// applies them once per output, in the epilogue (outer scales). Block and mx scales change
// along K (every 128 or 32 elements), so they are applied as the tensor cores' partial sums
// are added to the f32 accumulators (inner scales): a producer warp stages them in shared
// memory beside each K block's data, and the consumers multiply by them when they promote.
// The SIMT kernels and the reference dequantise element by element.
//
// kernel_config.cuh (generated) defines kScaleA and kScaleB (modes), kGroupScaleType (a u4
// operand's group scales' and zero points' type: bf16 or f16) and, for the TMA kernel, kScaleMNA
// and kScaleMNB: M (N) elements per block scale of A (B), 1 or 128.
#pragma once

#include "kernel_config.cuh"
#include "params.h"
#include "utility.cuh"

namespace gemmkit::sm90 {

__device__ __forceinline__ constexpr bool is_inner_scale(int mode) {
  return mode == GEMMKIT_SCALE_BLOCK || mode == GEMMKIT_SCALE_MX;
}

// K elements per inner scale (0 for the other modes).
__device__ __forceinline__ constexpr int scale_k_block(int mode) {
  return mode == GEMMKIT_SCALE_BLOCK ? 128 : mode == GEMMKIT_SCALE_MX ? 32 : 0;
}

__device__ __forceinline__ float scale_at(const GemmScale& s, int mode, i64 index) {
  return load_as_float(s.data, mode == GEMMKIT_SCALE_MX ? GEMMKIT_UE8M0 : mode == GEMMKIT_SCALE_GROUP ? kGroupScaleType : GEMMKIT_F32,
                       index);
}

// The scale of element (row, col) of an operand, by the blocks the host gives (any mode).
__device__ __forceinline__ float element_scale(const GemmScale& s, int mode, i64 batch, i64 row, i64 col) {
  if (mode == GEMMKIT_SCALE_NONE) return 1.0f;
  return scale_at(s, mode, batch * s.batch_stride + (row / s.block_rows) * s.row_stride + (col / s.block_cols) * s.col_stride);
}

// Element (row, col) of an operand as the GEMM multiplies it, its scale applied: a 16-bit or FP8
// value times its scale, a u4 code q as (q - zero) * scale (zero 8 where there are no zero
// points), an e2m1 value times its power of two. Exact in f32 for 4-bit operands (at most 24
// significant bits), which the kernels then round to the 16-bit type they multiply in.
__device__ __forceinline__ float operand_value(const GemmMatrix& m, int type, const GemmScale& s, int mode, i64 batch,
                                               i64 row, i64 col) {
  const i64 index = batch * m.batch_stride + row * m.row_stride + col * m.col_stride;
  if (type == GEMMKIT_U4) {
    const GemmMatrix& z = s.zeros;
    const float zero = z.data == nullptr ? 8.0f
                                         : load_as_float(z.data, kGroupScaleType,
                                                         batch * z.batch_stride + (row / s.block_rows) * z.row_stride +
                                                             (col / s.block_cols) * z.col_stride);
    return (float(nibble_at(m.data, index)) - zero) * element_scale(s, mode, batch, row, col);
  }
  const float value = type == GEMMKIT_E2M1 ? e2m1_to_float(nibble_at(m.data, index)) : load_as_float(m.data, type, index);
  return mode == GEMMKIT_SCALE_NONE ? value : value * element_scale(s, mode, batch, row, col);
}

// An operand's outer scale for output row (A) or column (B) `mn`: 1 unless tensor or rowwise.
__device__ __forceinline__ float outer_scale_a(const GemmParams& p, i64 batch, i64 row) {
  if (kScaleA == GEMMKIT_SCALE_TENSOR) return scale_at(p.scale_a, kScaleA, batch * p.scale_a.batch_stride);
  if (kScaleA == GEMMKIT_SCALE_ROWWISE) return scale_at(p.scale_a, kScaleA, batch * p.scale_a.batch_stride + row * p.scale_a.row_stride);
  return 1.0f;
}

__device__ __forceinline__ float outer_scale_b(const GemmParams& p, i64 batch, i64 col) {
  if (kScaleB == GEMMKIT_SCALE_TENSOR) return scale_at(p.scale_b, kScaleB, batch * p.scale_b.batch_stride);
  if (kScaleB == GEMMKIT_SCALE_ROWWISE) return scale_at(p.scale_b, kScaleB, batch * p.scale_b.batch_stride + col * p.scale_b.col_stride);
  return 1.0f;
}

}  // namespace gemmkit::sm90
