// Two-level accumulation for 8-bit inputs. The tensor cores sum FP8 products in less than f32
// precision, so the TMA kernel multiplies each K granule (a 128-deep K block, or 32 deep where
// an operand has mx scales) into a partial accumulator and adds that to the f32 accumulator,
// multiplied by the granule's inner scales (block, mx). A producer warp stages those scales in
// shared memory beside the K block's data, so the consumers find them there with it.
// promote.cuh follows common.cuh and epilogue.cuh (fragment layout) in the generated source.
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

// Where the staged scale `i` of K block `k_block` of the tile at (batch, row, col) lives: A's
// for tile row i % kTileM of granule i / kTileM, then B's for each tile column likewise; null
// outside the operands (where TMA fills the data with zeros too, and the scale staged is 0).
// Coordinates fit in 32 bits (the host picks this kernel only where TMA addresses the
// operands), which spares producer registers.
__device__ __forceinline__ const u8* stage_scale_address(const GemmParams& p, int batch, int row, int col, int k_block,
                                                         int i) {
  constexpr int kBytesA = kScaleA == GEMMKIT_SCALE_MX ? 1 : 4, kBytesB = kScaleB == GEMMKIT_SCALE_MX ? 1 : 4;
  if (kInnerA && i < kStageScalesA) {
    const int r = row + i % kTileM, k = k_block * 128 + (i / kTileM) * kGranuleK;
    if (r >= p.m || k >= p.k) return nullptr;
    const i64 index = batch * p.scale_a.batch_stride + (r / kScaleMNA) * p.scale_a.row_stride +
                      (k / scale_k_block(kInnerA ? kScaleA : GEMMKIT_SCALE_BLOCK)) * p.scale_a.col_stride;
    return static_cast<const u8*>(p.scale_a.data) + index * kBytesA;
  }
  i -= kStageScalesA;
  const int c = col + i % kTileN, k = k_block * 128 + (i / kTileN) * kGranuleK;
  if (c >= p.n || k >= p.k) return nullptr;
  const i64 index = batch * p.scale_b.batch_stride + (k / scale_k_block(kInnerB ? kScaleB : GEMMKIT_SCALE_BLOCK)) * p.scale_b.row_stride +
                    (c / kScaleMNB) * p.scale_b.col_stride;
  return static_cast<const u8*>(p.scale_b.data) + index * kBytesB;
}

// Copies 4 bytes from global to shared memory asynchronously (0 bytes read: zeros written).
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, u32 src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes) : "memory");
}

// Arrives on `bar` once this thread's earlier cp.async copies have landed (the barrier's count
// includes the arrival).
__device__ __forceinline__ void cp_async_arrive(u64* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// By one producer warp: stages the inner scales of one K block and arrives on the stage's full
// barrier, each lane once. f32 scales travel by cp.async, so the warp moves on to the next
// stage at once and the barrier completes when they land, as TMA's bytes do. mx scales are
// bytes, which cp.async cannot move one at a time: the lanes load and convert them, a few in
// flight at a time (the producer keeps few registers), then arrive.
__device__ __forceinline__ void load_stage_scales(float* dst, const GemmParams& p, int batch, int row, int col, int k_block,
                                                  int lane, u64* full) {
  constexpr int kTotal = kStageScalesA + kStageScalesB;
  if (kScaleA != GEMMKIT_SCALE_MX && kScaleB != GEMMKIT_SCALE_MX) {
    for (int i = lane; i < kTotal; i += 32) {
      const u8* src = stage_scale_address(p, batch, row, col, k_block, i);
      cp_async_4(dst + i, src ? src : static_cast<const u8*>(kInnerA ? p.scale_a.data : p.scale_b.data), src ? 4 : 0);
    }
    cp_async_arrive(full);
    return;
  }
  constexpr int kInFlight = 4;
  for (int first = 0; first < kTotal; first += 32 * kInFlight) {
    float v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int i = first + lane + 32 * u;
      const u8* src = i < kTotal ? stage_scale_address(p, batch, row, col, k_block, i) : nullptr;
      const bool mx = i < kStageScalesA ? kScaleA == GEMMKIT_SCALE_MX : kScaleB == GEMMKIT_SCALE_MX;
      v[u] = !src ? 0.0f : mx ? ue8m0_to_float(*src) : *reinterpret_cast<const float*>(src);
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      if (first + lane + 32 * u < kTotal) dst[first + lane + 32 * u] = v[u];
    }
  }
  mbarrier_arrive(full);
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
    // B's scales of a column pair: one value where a block scale covers 128 columns (an 8-column
    // group never straddles two), else one per column.
    float2 b = make_float2(1.0f, 1.0f);
    if (kInnerB && kScaleMNB > 1) b.x = b.y = scales_b[fragment_col(t, j)];
    if (kInnerB && kScaleMNB == 1) b = *reinterpret_cast<const float2*>(scales_b + fragment_col(t, j));
    const float s00 = a0 * b.x, s10 = a1 * b.x;
    const float s01 = kScaleMNB > 1 ? s00 : a0 * b.y, s11 = kScaleMNB > 1 ? s10 : a1 * b.y;
    acc[4 * j + 0] += partial[4 * j + 0] * s00;
    acc[4 * j + 1] += partial[4 * j + 1] * s01;
    acc[4 * j + 2] += partial[4 * j + 2] * s10;
    acc[4 * j + 3] += partial[4 * j + 3] * s11;
  }
}
