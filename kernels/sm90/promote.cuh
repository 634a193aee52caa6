// Two-level accumulation for 8-bit inputs. The tensor cores sum FP8 products in less than f32
// precision, so the TMA kernel multiplies each K granule (a 128-deep K block, or 32 deep where
// an operand has mx scales) into a partial accumulator and adds that to the f32 accumulator,
// multiplied by the granule's inner scales (block, mx). A producer warp stages those scales in
// shared memory beside the K block's data, so the consumers find them there with it.
#pragma once

#include "common.cuh"
#include "epilogue.cuh"
#include "kernel_config.cuh"
#include "params.h"
#include "scales.cuh"
#include "smem_layout.h"

namespace gemmkit::sm90 {

constexpr bool k8Bit = kAType == GEMMKIT_E4M3 || kAType == GEMMKIT_E5M2;
constexpr bool kInnerA = is_inner_scale(kScaleA), kInnerB = is_inner_scale(kScaleB);
constexpr bool kInnerScales = kInnerA || kInnerB;
constexpr int kGranuleK = kScaleA == GEMMKIT_SCALE_MX || kScaleB == GEMMKIT_SCALE_MX ? 32 : 128;
constexpr int kGranules = 128 / kGranuleK;  // per K block of 128 8-bit elements
// Scales are staged in 4-byte words. A: one per tile row (a 1x128 block's f32, or the four mx
// exponents of the row's K block, packed), or one for the whole tile with 128x128 blocks (a
// tile never straddles one), padded to four. B, 16-byte aligned after them: one per tile column
// (a 128x1 block's f32; with mx, the tile's exponents of granule g fill kTileN bytes at
// g * kTileN), or with 128x128 blocks one per 128 block the tile touches. A dual GEMM's tile
// columns are B's, then B2's (b_column): with 128x128 blocks, the blocks of B's half come first.
constexpr bool kMxA = kScaleA == GEMMKIT_SCALE_MX, kMxB = kScaleB == GEMMKIT_SCALE_MX;
constexpr bool kBlockB = kInnerB && !kMxB && kScaleMNB > 1;  // B scales in 128x128 blocks
constexpr int kBlocksHalf = b_scale_blocks(kHalfN);  // 128-column blocks one operand's columns at any column touch
constexpr int kBlocksB = kDual ? 2 * kBlocksHalf : kBlocksHalf;
constexpr int kStageWordsA = stage_scale_words_a(kScaleA, kScaleMNA, kTileM);
constexpr int kStageWordsB = stage_scale_words_b(kScaleB, kScaleMNB, kTileN, kDual);
constexpr u32 kStageScaleBytes = stage_scale_bytes(kScaleA, kScaleMNA, kScaleB, kScaleMNB, kTileM, kTileN, kDual);
static_assert(!kDual || kHalfN % 8 == 0, "a dual tile's halves are whole 8-column groups");

// Stages word `i` of K block `k_block`'s scales for the tile at (batch, row, col) at shared
// address `dst`. Outside the operands the word is 0 (as TMA fills the data there with zeros).
// f32 scales and mx exponents that lie 4 to a word (GemmScale::word_copies) travel by cp.async;
// other mx exponents are read byte by byte. Returns whether it stored without cp.async.
__device__ __forceinline__ bool stage_scale_word(u32 dst, const GemmParams& p, int batch, int row, int col,
                                                 int k_block, int i) {
  const bool is_a = i < kStageWordsA;
  const int w = i - kStageWordsA;  // B's word
  // B's words are of one tile column, or with mx of four (a granule's), or with 128x128 blocks of
  // one block; a dual GEMM's lie in B's half or B2's.
  const BColumn b = !kBlockB ? b_column(col, kMxB ? 4 * (w % (kTileN / 4)) : w)
                             : BColumn{kDual && w >= kBlocksHalf, (col / 128 + w % kBlocksHalf) * i64(128)};
  const GemmScale& s = is_a ? p.scale_a : b_scale(p, b.second);
  const u8* base = static_cast<const u8*>(s.data);
  if (is_a ? !kMxA : !kMxB) {
    // One f32: A's of a row (or of the tile's 128-row block), B's of a column or 128-column block.
    i64 index;
    bool inside;
    if (is_a) {
      const int r = kScaleMNA == 1 ? row + i : row;
      inside = r < p.m && (kScaleMNA == 1 || i == 0);  // 128x128 blocks: words 1 to 3 are padding
      index = batch * s.batch_stride + (r / kScaleMNA) * s.row_stride + k_block * s.col_stride;
    } else {
      inside = b.col < p.n;
      index = batch * s.batch_stride + k_block * s.row_stride + (b.col / kScaleMNB) * s.col_stride;
    }
    cp_async_4(dst, inside ? base + 4 * index : base, inside ? 4 : 0);
    return false;
  }
  // Four mx exponents: A's of one row along K (granules 4 k_block .. + 3), B's of one granule
  // along N (four columns). The present ones are a prefix of the four.
  const int granules = int((p.k + 31) / 32);
  const u8* first;
  i64 step;
  int present;
  if (is_a) {
    const int r = row + i, g = 4 * k_block;
    present = r < p.m ? min(4, granules - g) : 0;
    first = base + batch * s.batch_stride + r * s.row_stride + g * s.col_stride;
    step = s.col_stride;
  } else {
    const int g = 4 * k_block + w / (kTileN / 4);
    present = g < granules ? max(0, min(4, int(p.n - b.col))) : 0;
    first = base + batch * s.batch_stride + g * s.row_stride + b.col * s.col_stride;
    step = s.col_stride;
  }
  if (s.word_copies) {
    cp_async_4(dst, present > 0 ? first : base, present);
    return false;
  }
  u32 word = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (e < present) word |= u32(first[e * step]) << (8 * e);
  }
  st_shared_u32(dst, word);
  return true;
}

// By one producer warp: stages the inner scales of one K block and arrives on the stage's full
// barrier, each lane once. Copies by cp.async let the warp move on to the next stage at once
// (the barrier completes when they land, as TMA's bytes do); stores need a release first.
__device__ __forceinline__ void load_stage_scales(u32 dst, const GemmParams& p, int batch, int row, int col, int k_block,
                                                  int lane, u64* full) {
  constexpr int kWords = kStageWordsA + kStageWordsB;
  bool stored = false;
#pragma unroll
  for (int first = 0; first < kWords; first += 32) {
    if (first + lane < kWords) stored |= stage_scale_word(dst + 4 * (first + lane), p, batch, row, col, k_block, first + lane);
  }
  if (stored) {
    cp_async_wait_all();
    mbarrier_arrive(full);
  } else {
    cp_async_arrive(full);
  }
}

// The scales of one K block that a consumer thread reads before its promotions: the A words of
// its two fragment rows and, with 128x128 B blocks, the values of the blocks the tile touches.
struct KBlockScales {
  u32 a[2];
  float b[kBlocksB];
};

__device__ __forceinline__ KBlockScales read_k_block_scales(u32 scales, int slice, int t) {
  KBlockScales k{};
  if (kInnerA) {
#pragma unroll
    for (int h = 0; h < 2; ++h) k.a[h] = ld_shared_u32(scales + 4 * (kScaleMNA == 1 ? slice * 64 + fragment_row(t, h) : 0));
  }
  if (kBlockB) {
#pragma unroll
    for (int q = 0; q < kBlocksB; ++q) k.b[q] = __uint_as_float(ld_shared_u32(scales + 4 * (kStageWordsA + q)));
  }
  return k;
}

// B's mx exponents, one per column and granule, would cost each thread two conversions per
// column pair and granule; instead each consumer warpgroup converts a K block's once, a word per
// thread, into floats in a buffer of its own (two, used by alternate K blocks), laid out as the
// bytes are: granule g's column c at g * kTileN + c.
constexpr u32 kMxFloatBytes = mx_float_bytes(kScaleB, kTileN);  // one K block's

// Whether promote() reads B's scales from the stage (else all it needs is in KBlockScales and
// the converted mx floats).
constexpr bool kPromoteReadsStage = kInnerB && !kMxB && kScaleMNB == 1;

// By each thread t of a consumer warpgroup: converts word t of the stage's B exponents (`scales`)
// into four floats at `floats`; the warpgroup meets at a barrier before reading them.
__device__ __forceinline__ void convert_mx_scales(u32 floats, u32 scales, int t) {
  static_assert(!kMxB || kStageWordsB <= 128, "a word per consumer thread");
  if (t >= kStageWordsB) return;
  const u32 word = ld_shared_u32(scales + 4 * (kStageWordsA + t));
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(floats + 16 * t), "f"(ue8m0_to_float(word)),
               "f"(ue8m0_to_float(word >> 8)), "f"(ue8m0_to_float(word >> 16)), "f"(ue8m0_to_float(word >> 24))
               : "memory");
}

// A's scale of fragment row h for granule g.
__device__ __forceinline__ float a_scale(const KBlockScales& k, int h, int g) {
  if (!kInnerA) return 1.0f;
  return kMxA ? ue8m0_to_float(k.a[h] >> (8 * g)) : __uint_as_float(k.a[h]);
}

// acc += partial * (A's scale of the row) * (B's scale of the column) for granule g of a K block
// whose scales are staged at shared address `scales` (B's mx ones converted at `mx_floats`).
// Without inner scales this is a plain sum.
// With 128x128 B blocks, which block a column group lies in depends only on the tile's first
// column modulo 128, kColInBlock: a multiple of kColStep, since tiles start at multiples of their
// width (tiles that divide 128 lie in one block, whichever it is, and other modes need no
// offset: kColStep = 128). A dual GEMM's halves each start at the tile's column, each in the
// blocks of its own operand. Callers compile their K loop once per possible value (gemm.cuh's
// multiply_8bit_at), so every group's block is known at compile time and the promotion is one
// FFMA per accumulator. (Block-scaled 128 x 176 tiles: 0.99x cuBLASLt so, 0.67x choosing each
// group's block at run time; H100.)
constexpr int kColStep = !kBlockB || 128 % kHalfN == 0 ? 128 : (kHalfN & -kHalfN);  // else gcd(kHalfN, 128)

template <int kColInBlock>
__device__ __forceinline__ void promote(float* acc, const float* partial, const KBlockScales& k, u32 scales,
                                        u32 mx_floats, int g, int t) {
  const float a0 = a_scale(k, 0, g), a1 = a_scale(k, 1, g);
  const u32 scales_b = scales + 4 * kStageWordsA;
#pragma unroll
  for (int j = 0; j < kTileN / 8; ++j) {
    // The scales of the thread's column pair and its two rows.
    float2 b = make_float2(1.0f, 1.0f);
    if (kInnerB && kMxB) b = ld_shared_f32x2(mx_floats + 4 * (g * kTileN + fragment_col(t, j)));
    if (kInnerB && !kMxB && kScaleMNB == 1) b = ld_shared_f32x2(scales_b + 4 * fragment_col(t, j));
    if (kBlockB) {
      const int half = j < kHalfN / 8 ? 0 : 1, jh = j - half * (kHalfN / 8);
      const float block = k.b[half * kBlocksHalf + (kColInBlock + 8 * jh) / 128];  // a group never straddles two
      b = make_float2(block, block);
    }
    acc[4 * j + 0] += partial[4 * j + 0] * (a0 * b.x);
    acc[4 * j + 1] += partial[4 * j + 1] * (a0 * b.y);
    acc[4 * j + 2] += partial[4 * j + 2] * (a1 * b.x);
    acc[4 * j + 3] += partial[4 * j + 3] * (a1 * b.y);
  }
}

}  // namespace gemmkit::sm90
