// Two-level accumulation for 8-bit inputs. The tensor cores sum FP8 products in less than f32
// precision, so the TMA kernel multiplies each K granule (a 128-deep K block, or 32 deep where
// an operand has mx scales) into a partial accumulator and adds that to the f32 accumulator,
// multiplied by the granule's inner scales (block, mx). A producer warp stages those scales in
// shared memory beside the K block's data, so the consumers find them there with it.
#pragma once

constexpr bool k8Bit = kAType == GEMMKIT_E4M3 || kAType == GEMMKIT_E5M2;
constexpr bool kInnerA = is_inner_scale(kScaleA), kInnerB = is_inner_scale(kScaleB);
constexpr bool kInnerScales = kInnerA || kInnerB;
constexpr int kGranuleK = kScaleA == GEMMKIT_SCALE_MX || kScaleB == GEMMKIT_SCALE_MX ? 32 : 128;
constexpr int kGranules = 128 / kGranuleK;  // per K block of 128 8-bit elements
// Floats staged per stage: per granule, A's scale of each tile row, B's of each tile column.
constexpr int kStageScalesA = kInnerA ? kGranules * kTileM : 0;
constexpr int kStageScalesB = kInnerB ? kGranules * kTileN : 0;
constexpr u32 kStageScaleBytes = (kStageScalesA + kStageScalesB) * 4;

// The staged scale `i` of K block `k_block` of the tile at (batch, row, col): A's for tile row
// i % kTileM of granule i / kTileM, then B's for each tile column likewise; 0 outside the
// operands (where TMA fills the data with zeros too). Coordinates fit in 32 bits (the host
// picks this kernel only where TMA addresses the operands), which spares producer registers.
__device__ __forceinline__ float stage_scale(const GemmParams& p, int batch, int row, int col, int k_block, int i) {
  if (kInnerA && i < kStageScalesA) {
    const int r = row + i % kTileM, k = k_block * 128 + (i / kTileM) * kGranuleK;
    if (r >= p.m || k >= p.k) return 0.0f;
    return scale_at(p.scale_a, kScaleA, batch * p.scale_a.batch_stride + (r / kScaleMNA) * p.scale_a.row_stride +
                                            (k / scale_k_block(kInnerA ? kScaleA : GEMMKIT_SCALE_BLOCK)) * p.scale_a.col_stride);
  }
  i -= kStageScalesA;
  const int c = col + i % kTileN, k = k_block * 128 + (i / kTileN) * kGranuleK;
  if (c >= p.n || k >= p.k) return 0.0f;
  return scale_at(p.scale_b, kScaleB, batch * p.scale_b.batch_stride +
                                          (k / scale_k_block(kInnerB ? kScaleB : GEMMKIT_SCALE_BLOCK)) * p.scale_b.row_stride +
                                          (c / kScaleMNB) * p.scale_b.col_stride);
}

// By one producer warp: stages the inner scales of one K block, a few loads in flight per lane
// at a time (the producer keeps few registers).
__device__ __forceinline__ void load_stage_scales(float* dst, const GemmParams& p, int batch, int row, int col,
                                                  int k_block, int lane) {
  constexpr int kTotal = kStageScalesA + kStageScalesB, kInFlight = 4;
  for (int first = 0; first < kTotal; first += 32 * kInFlight) {
    float v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int i = first + lane + 32 * u;
      v[u] = i < kTotal ? stage_scale(p, batch, row, col, k_block, i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      if (first + lane + 32 * u < kTotal) dst[first + lane + 32 * u] = v[u];
    }
  }
}

// acc += partial * (A's scale of the row) * (B's scale of the column) for one granule whose
// scales are staged at `scales_a` (this slice's 64 rows) and `scales_b` (the tile's columns).
// Without inner scales this is a plain sum.
__device__ __forceinline__ void promote(float* acc, const float* partial, const float* scales_a, const float* scales_b,
                                        int t) {
  const float a0 = kInnerA ? scales_a[fragment_row(t, 0)] : 1.0f;
  const float a1 = kInnerA ? scales_a[fragment_row(t, 1)] : 1.0f;
#pragma unroll
  for (int j = 0; j < kTileN / 8; ++j) {
    float2 b = make_float2(1.0f, 1.0f);
    if (kInnerB) asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(b.x), "=f"(b.y) : "r"(smem_u32(scales_b + fragment_col(t, j))));
    acc[4 * j + 0] += partial[4 * j + 0] * (a0 * b.x);
    acc[4 * j + 1] += partial[4 * j + 1] * (a0 * b.y);
    acc[4 * j + 2] += partial[4 * j + 2] * (a1 * b.x);
    acc[4 * j + 3] += partial[4 * j + 3] * (a1 * b.y);
  }
}
