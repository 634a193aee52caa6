// FP8 scales: how each kernel finds the scale of an operand element (see GemmScale).
//
// Tensor and rowwise scales are the same for a whole output row or column, so the TMA kernel
// applies them once per output, in the epilogue (outer scales). Block and mx scales change
// along K (every 128 or 32 elements), so they are applied as the tensor cores' partial sums
// are added to the f32 accumulators (inner scales): a producer warp stages them in shared
// memory beside each K block's data, and the consumers multiply by them when they promote.
// The SIMT kernels and the reference dequantise element by element.
//
// kernel_config.cuh (generated) defines kScaleA and kScaleB (modes) and, for the TMA kernel,
// kScaleMNA and kScaleMNB: M (N) elements per block scale of A (B), 1 or 128.
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
  return load_as_float(s.data, mode == GEMMKIT_SCALE_MX ? GEMMKIT_UE8M0 : GEMMKIT_F32, index);
}

// The scale of element (row, col) of an operand, by the blocks the host gives (any mode).
__device__ __forceinline__ float element_scale(const GemmScale& s, int mode, i64 batch, i64 row, i64 col) {
  if (mode == GEMMKIT_SCALE_NONE) return 1.0f;
  return scale_at(s, mode, batch * s.batch_stride + (row / s.block_rows) * s.row_stride + (col / s.block_cols) * s.col_stride);
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
