// 4-bit weights in the TMA kernel (gemm.cuh): u4 codes with group scales (and zero points), or
// e2m1 values with ue8m0 scales, widened to the other operand's 16-bit type on their way from
// TMA to wgmma.
//
// The weights are the K-major operand whose type is 4-bit: A (a problem run transposed, the
// weights' rows along M) or B (their rows along N). Per stage, the TMA thread lands their packed
// rows (64 K elements, 32 bytes a row) and the scales of two K groups (the K block's first and
// the next, which 32-deep groups need; per-channel and deeper groups use the first) in the
// stage's landing slot, on its "landed" barrier. The producer's warps 1-3 then write each row's
// 16-bit values into the stage as TMA would have written a 16-bit K-major slice (128-byte
// swizzle), scales applied, and arrive on the full barrier; the consumers multiply the stage as
// any 16-bit one. A dequantised weight is rounded once, to the 16-bit type.
//
// kernel_config.cuh (generated) defines kAType, kBType and kZeros (u4 with zero points).
#pragma once

#include "common.cuh"
#include "kernel_config.cuh"
#include "params.h"
#include "scales.cuh"
#include "smem_layout.h"

namespace gemmkit::sm90 {

constexpr bool kWidenA = is_4bit_type(kAType), kWidenB = is_4bit_type(kBType), kWiden = kWidenA || kWidenB;
constexpr int kPackedType = kWidenA ? kAType : kBType;
constexpr int kWidenRows = !kWiden ? 0 : kWidenA ? kTileM : kTileN;  // the weights' rows a stage holds
constexpr int kWidenScaleBytes = kPackedType == GEMMKIT_U4 ? 2 : 1;
constexpr int kWidenWarps = 3;  // the producer warpgroup's warps 1-3
constexpr u32 kPackedBytes = u32(kWidenRows) * kPackedRowBytes;
constexpr u32 kWidenScalePart = widen_scale_part_bytes(kWidenRows, kWidenScaleBytes);
constexpr u32 kWidenLandingBytes = widen_landing_bytes(kWidenRows, kWidenScaleBytes, kZeros);
// TMA's bytes per landing: the packed rows and every scale (and zero point) of the two groups.
constexpr u32 kWidenTmaBytes = kPackedBytes + u32(2 * kWidenRows * kWidenScaleBytes) * (kZeros ? 2 : 1);
static_assert(!kWiden || (kTileK == 64 && kWidenRows % 16 == 0 && !kRealignA && !kRealignB && !kRowClasses &&
                          kClusterM == 1 && !kDual && !kGrouped && (kWidenA ? kAKMajor : kBKMajor)),
              "4-bit weights: 16-bit K blocks, K-major rows in whole 16-row boxes, read by TMA, unclustered, dense");

// log2 of the weights' K elements per scale: a power of two, 32 at least (validate.cpp).
__device__ __forceinline__ int widen_group_shift(const GemmParams& p) {
  return __ffsll(kWidenA ? p.scale_a.block_cols : p.scale_b.block_rows) - 1;
}

// By the TMA thread: K block `k` (its first K element) of the weights' rows from `row` (their
// matrix's batch `batch`) into the landing slot `landing`, on `landed`. The maps (launch.cpp) take
// the packed bytes as rows of ceil(K / 2) bytes, and the scales and zero points with the rows
// contiguous, by K group.
__device__ __forceinline__ void load_packed_stage(const GemmParams& p, const KernelMaps& maps, u8* landing, u64* landed,
                                                  int batch, i64 row, int k) {
  const int group = k >> widen_group_shift(p);
  mbarrier_arrive_expect_tx(landed, kWidenTmaBytes);
  tma_load_3d(landing, kWidenA ? &maps.a : &maps.b, landed, k / 2, int(row), batch);
  tma_load_3d(landing + kPackedBytes, kWidenA ? &maps.scale_a : &maps.scale_b, landed, int(row), group, batch);
  if (kZeros) tma_load_3d(landing + kPackedBytes + kWidenScalePart, &maps.zeros, landed, int(row), group, batch);
}

// A 16-bit scale or zero point in shared memory, as float.
__device__ __forceinline__ float wide_at(u32 address) {
  const u16 bits = u16(ld_shared_u16(address));
  return kGroupScaleType == GEMMKIT_BF16 ? bf16_to_float(bits) : f16_to_float(bits);
}

// Eight u4 codes (a word, the first in the low nibble) as four pairs of 16-bit values (q - zero) *
// scale. A code q becomes the float 2^23 + q by its bits (2^23's exponent over the code as
// mantissa), from which exact subtractions take 2^23 and the zero point (at once where it is 8).
__device__ __forceinline__ void widen_u4(u32 codes, float scale, float zero, u32 (&out)[4]) {
  constexpr u32 kMagic = 0x4b000000u;  // 2^23
  auto value = [&](int shift) {
    const float biased = __uint_as_float(((codes >> shift) & 15u) | kMagic);
    return (kZeros ? biased - 8388608.0f - zero : biased - 8388616.0f) * scale;
  };
#pragma unroll
  for (int q = 0; q < 4; ++q) out[q] = pack_pair(kGroupScaleType, value(8 * q), value(8 * q + 4));
}

// Eight e2m1 codes as four pairs of 16-bit values times the power of two `scale`.
__device__ __forceinline__ void widen_e2m1(u32 codes, float scale, u32 (&out)[4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    out[q] = pack_pair(kGroupScaleType, e2m1_to_float(codes >> (8 * q)) * scale, e2m1_to_float(codes >> (8 * q + 4)) * scale);
  }
}

// By the widening warps (`thread` 0 to kWidenThreads - 1), once the landing slot of K block `k`
// has landed: its rows widened into `stage`, 8 K elements of a row (4 bytes in, one 16-byte chunk
// out) at a time; then each warp arrives on `full`, its writes fenced for wgmma's reads. A thread
// takes chunk column thread % 8 (so one K group, one scale column) of every kWidenThreads / 8-th
// row, kBatch chunks at a time: their loads first, so that their latencies overlap.
constexpr int kWidenThreads = 32 * kWidenWarps;
constexpr int kWidenChunks = (kWidenRows * 8 + kWidenThreads - 1) / kWidenThreads;  // per thread, at most
constexpr int kWidenBatch = 4;
__device__ __forceinline__ void widen_stage(const GemmParams& p, const u8* landing, u8* stage, u64* full, int k,
                                            int thread) {
  const int c = thread % 8, shift = widen_group_shift(p);
  const int g = ((k + 8 * c) >> shift) - (k >> shift);  // the chunk column's group in the slot: 0 or 1
  const u32 codes_at = smem_u32(landing) + u32(c * 4), to = smem_u32(stage);
  const u32 scales_at = smem_u32(landing) + kPackedBytes + u32(g * kWidenRows * kWidenScaleBytes);
  const u32 zeros_at = scales_at + kWidenScalePart;
#pragma unroll
  for (int j0 = 0; j0 < kWidenChunks; j0 += kWidenBatch) {
    u32 codes[kWidenBatch];
    float scale[kWidenBatch], zero[kWidenBatch];
#pragma unroll
    for (int j = 0; j < kWidenBatch; ++j) {
      const int r = thread / 8 + (j0 + j) * (kWidenThreads / 8);
      if (j0 + j >= kWidenChunks || r >= kWidenRows) continue;
      codes[j] = ld_shared_u32(codes_at + u32(r) * kPackedRowBytes);
      if constexpr (kPackedType == GEMMKIT_U4) {
        scale[j] = wide_at(scales_at + u32(r) * 2);
        zero[j] = kZeros ? wide_at(zeros_at + u32(r) * 2) : 8.0f;
      } else {
        scale[j] = ue8m0_to_float(ld_shared_u8(scales_at + u32(r)));
      }
    }
#pragma unroll
    for (int j = 0; j < kWidenBatch; ++j) {
      const int r = thread / 8 + (j0 + j) * (kWidenThreads / 8);
      if (j0 + j >= kWidenChunks || r >= kWidenRows) continue;
      u32 out[4];
      if constexpr (kPackedType == GEMMKIT_U4) {
        widen_u4(codes[j], scale[j], zero[j], out);
      } else {
        widen_e2m1(codes[j], scale[j], out);
      }
      // The 128-byte swizzle XORs a row's 16-byte chunk index with the row's place in its 8-row atom.
      st_shared_v4(to + u32(r) * 128 + u32((c ^ (r % 8)) * 16), out);
    }
  }
  fence_async_shared();
  __syncwarp();
  if (thread % 32 == 0) mbarrier_arrive(full);
}

}  // namespace gemmkit::sm90
