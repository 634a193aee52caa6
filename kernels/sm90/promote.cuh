// Two-level accumulation for 8-bit inputs. The tensor cores sum FP8 products in less than f32
// precision, so the TMA kernel multiplies each K granule (a 128-deep K block, or 32 deep where
// an operand has mx scales) into a partial accumulator and adds that to the f32 accumulator,
// multiplied by the granule's inner scales (block, mx). The TMA thread stages those in shared
// memory beside the K block's data, a box per operand on the same full barrier, and the
// consumers read a K block's scales into registers before its first wgmma, so that no
// shared-memory load sits among the wgmma instructions.
#pragma once

#include "common.cuh"
#include "epilogue.cuh"
#include "kernel_config.cuh"
#include "params.h"
#include "scales.cuh"
#include "smem_layout.h"

namespace gemmkit::sm90 {

constexpr bool k8Bit = kBType == GEMMKIT_E4M3 || kBType == GEMMKIT_E5M2;  // A too, or 4-bit weights (W4A8)
constexpr bool kInnerA = is_inner_scale(kScaleA), kInnerB = is_inner_scale(kScaleB);
constexpr bool kInnerScales = kInnerA || kInnerB;
// 4-bit weights against 8-bit B (W4A8, widen.cuh) promote each of their groups: kWidenGranuleK (generated)
// is 32 for e2m1 (MX), a u4 group of 32 or 64, or 128.
constexpr int kGranuleK = kScaleA == GEMMKIT_SCALE_MX || kScaleB == GEMMKIT_SCALE_MX ? 32 : kWidenGranuleK;
constexpr int kGranules = 128 / kGranuleK;  // per K block of 128 8-bit elements
// A stage's scales (smem_layout.h, stage_scale_words_a), each operand's from a 128-byte boundary:
// - A: a 1x128 block's f32 per tile row; mx, four rows of exponents, one per granule, each a byte
//   per tile row; 128x128 blocks, four K blocks' f32 of the tile's block (a tile never straddles
//   one). Grouped tiles start at any row: their 1-wide boxes start up to kRowAlignA rows early.
// - B (kScaleOffsetB): a 128x1 block's f32 per tile column; mx, four rows of exponents, each a
//   byte per tile column; 128x128 blocks, four K blocks' f32 of each 128 block the tile touches.
//   Tiles of groups along N start at any column: their boxes start up to kColAlignB columns early.
//   A dual GEMM's tile columns are B's, then B2's (b_column), whose scales start kScaleHalfB
//   after B's.
constexpr bool kMxA = kScaleA == GEMMKIT_SCALE_MX, kMxB = kScaleB == GEMMKIT_SCALE_MX;
constexpr bool kCoarseA = kInnerA && !kMxA && kScaleMNA > 1;  // A scales in 128x128 blocks
constexpr bool kCoarseB = kInnerB && !kMxB && kScaleMNB > 1;  // B scales in 128x128 blocks
constexpr int kRowAlignA = scale_box_alignment(kScaleA);  // 16 bytes of A's 1-wide scales
constexpr int kBoxRowsA = kTileM + (kGrouped ? kRowAlignA : 0);
constexpr int kColAlignB = kGroupedN ? scale_box_alignment(kScaleB) : 1;  // B's, where tiles start at any column
constexpr int kBoxColsB = kHalfN + (kGroupedN ? kColAlignB : 0);           // a dual GEMM's: one half's
constexpr int kBlocksHalf = b_scale_blocks(kHalfN);  // 128-column blocks one operand's columns at any column touch
constexpr int kBlocksB = kDual ? 2 * kBlocksHalf : kBlocksHalf;
constexpr int kStageWordsA = stage_scale_words_a(kScaleA, kScaleMNA, kTileM, kGrouped);
constexpr int kStageWordsB = stage_scale_words_b(kScaleB, kScaleMNB, kTileN, kDual, kGroupedN);
// A 4-bit A's scales (and zero points) follow, where there are no others (widen.cuh).
constexpr u32 kStageScaleBytes =
    stage_scale_bytes(kScaleA, kScaleMNA, kScaleB, kScaleMNB, kTileM, kTileN, kDual, kGrouped, kGroupedN) +
    widen_scale_bytes(is_4bit_type(kAType) ? kTileM : 0, kAType == GEMMKIT_U4 ? 2 : 1, kWidenGranuleK == 32 ? 4 : 2, kZeros);
constexpr u32 kWidenScaleOffset =  // where a 4-bit A's scales start: after the others (B's, in W4A8)
    stage_scale_bytes(kScaleA, kScaleMNA, kScaleB, kScaleMNB, kTileM, kTileN, kDual, kGrouped, kGroupedN);
constexpr u32 kScaleOffsetB = kStageWordsA > 0 ? scale_part_bytes(kStageWordsA) : 0;
constexpr u32 kScaleHalfB = kDual ? scale_part_bytes(kStageWordsB / 2) : 0;
constexpr u32 kTmaScaleBytes = 4 * (kStageWordsA + kStageWordsB);  // TMA's bytes per stage: every word
static_assert(!kMxA || kStageWordsA == kBoxRowsA, "A's mx box: four granules of a byte per row");
static_assert(!kDual || kHalfN % 8 == 0, "a dual tile's halves are whole 8-column groups");
static_assert(!kDual || !kGroupedN, "groups along N are a single GEMM's");

// Where B's block scale word of tile column c (128x1), or of the tile's 128 block q (128x128),
// lies in a stage's scales.
__device__ __forceinline__ constexpr u32 b_column_word(int c) {
  return kScaleOffsetB + (kDual && c >= kHalfN ? kScaleHalfB + 4 * (c - kHalfN) : 4 * c);
}
__device__ __forceinline__ constexpr u32 b_block_words(int q) {
  return kScaleOffsetB + (kDual && q >= kBlocksHalf ? kScaleHalfB + 16 * (q - kBlocksHalf) : 16 * q);
}

// By the TMA thread, with a stage's data: the inner scales of K block `k_block` for the tile at
// (batch, row, col) into the stage's scales at `dst`, on the `full` barrier (kTmaScaleBytes).
// The maps (launch.cpp) are over the scales as the kernel takes them: 1-wide blocks' and mx
// exponents with M (N) contiguous, boxes of the tile's rows (columns) by one K block (four mx
// granules); 128-wide blocks' with K contiguous, boxes of four K blocks by the 128 blocks the
// tile touches. Boxes start 16-byte aligned along the contiguous dimension (an H200 raised an
// illegal instruction otherwise): A's 1-wide ones at a multiple of kRowAlignA rows, which holds
// the tile's row `row` at row % kRowAlignA (only grouped tiles start elsewhere), B's at a
// multiple of kColAlignB columns likewise (only tiles of groups along N start elsewhere), 128-wide ones
// at a multiple of four K blocks, which holds K block `k_block` at k_block % 4. Scales shared by
// every batch have a map without batches. Outside the scales they read as zero, as the data does.
__device__ __forceinline__ void load_stage_scales(u32 dst, const KernelMaps& maps, const GemmParams& p, u64* full,
                                                  int batch, i64 row, i64 col, int k_block) {
  if (kInnerA) {
    const int z = p.scale_a.batch_stride != 0 ? batch : 0;
    if (!kCoarseA) {
      tma_load_3d(dst, &maps.scale_a, full, int(row) & -kRowAlignA, kMxA ? 4 * k_block : k_block, z);
    } else {
      tma_load_3d(dst, &maps.scale_a, full, k_block & ~3, int(row / kScaleMNA), z);
    }
  }
  if (kInnerB) {
#pragma unroll
    for (int half = 0; half < (kDual ? 2 : 1); ++half) {
      const TensorMap* map = half == 0 ? &maps.scale_b : &maps.scale_b2;
      const int z = b_scale(p, half == 1).batch_stride != 0 ? batch : 0;
      const u32 to = dst + kScaleOffsetB + half * kScaleHalfB;
      if (!kCoarseB) {
        tma_load_3d(to, map, full, int(col) & -kColAlignB, kMxB ? 4 * k_block : k_block, z);
      } else {
        tma_load_3d(to, map, full, k_block & ~3, int(col / kScaleMNB), z);
      }
    }
  }
}

// Where a tile's scales lie in the boxes load_stage_scales staged: A's 1-wide rows from
// row % kRowAlignA (a_skew), B's 1-wide columns from col % kColAlignB (b_skew), and the unit's
// first K block (k_first), whose 128-wide blocks' lie at k_block % 4.
struct ScaleSkew {
  int a_skew, b_skew, k_first;
};
__device__ __forceinline__ ScaleSkew scale_skew(i64 row, i64 col, int k_first) {
  return {kGrouped ? int(row % kRowAlignA) : 0, int(col % kColAlignB), k_first};
}

// The scales of K block `k_block` that a consumer thread reads before its promotions: the A
// words of its two fragment rows and, with 128x128 B blocks, the values of the blocks the tile
// touches.
struct KBlockScales {
  u32 a[2];
  float b[kBlocksB];
};

__device__ __forceinline__ KBlockScales read_k_block_scales(u32 scales, const ScaleSkew& skew, int k_block, int slice,
                                                            int t) {
  KBlockScales k{};
  const u32 in_box = 4 * (k_block % 4);
  if (kInnerA) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = slice * 64 + fragment_row(t, h) + skew.a_skew;
      if (kMxA) {  // the row's byte in each granule's row, packed into a word as a_scale reads it
        u32 word = 0;
#pragma unroll
        for (int g = 0; g < 4; ++g) word |= ld_shared_u8(scales + g * kBoxRowsA + row) << (8 * g);
        k.a[h] = word;
      } else {
        k.a[h] = ld_shared_u32(scales + (kCoarseA ? in_box : 4 * row));
      }
    }
  }
  if (kCoarseB) {
#pragma unroll
    for (int q = 0; q < kBlocksB; ++q) k.b[q] = __uint_as_float(ld_shared_u32(scales + b_block_words(q) + in_box));
  }
  return k;
}

// B's mx exponents, one per column and granule, would cost each thread two conversions per
// column pair and granule; instead each consumer warpgroup converts a K block's once, a word per
// thread, into floats in a buffer of its own (two, used by alternate K blocks): granule g's
// column c at g * kTileN + c.
constexpr u32 kMxFloatBytes = mx_float_bytes(kScaleB, kTileN, kGroupedN);  // one K block's

// Whether promote() reads B's scales from the stage (else all it needs is in KBlockScales and
// the converted mx floats).
constexpr bool kPromoteReadsStage = kInnerB && !kMxB && kScaleMNB == 1;

// By each thread t of a consumer warpgroup: converts words t, t + 128, ... of the stage's B
// exponents (`scales`: four columns of one granule each, in B's box or B2's) into four floats
// each, granule g's box column c at `floats` + 4 * (g * kMxRow + c); the warpgroup meets at a
// barrier before reading them.
constexpr int kMxRow = kDual ? kTileN : kBoxColsB;  // floats a granule: the halves side by side, or the box
__device__ __forceinline__ void convert_mx_scales(u32 floats, u32 scales, int t) {
#pragma unroll
  for (int word_at = t; word_at < kStageWordsB; word_at += 128) {
    const int half = word_at / kBoxColsB, w = word_at % kBoxColsB;
    const int g = 4 * w / kBoxColsB, c = half * kHalfN + 4 * w % kBoxColsB;
    const u32 word = ld_shared_u32(scales + kScaleOffsetB + half * kScaleHalfB + 4 * w);
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(floats + 4 * (g * kMxRow + c)),
                 "f"(ue8m0_to_float(word)), "f"(ue8m0_to_float(word >> 8)), "f"(ue8m0_to_float(word >> 16)),
                 "f"(ue8m0_to_float(word >> 24))
                 : "memory");
  }
}

// A's scales of the thread's fragment rows (r and r + 8) for granule g.
struct RowScales {
  float row[2];
};
__device__ __forceinline__ RowScales a_scales(const KBlockScales& k, int g) {
  RowScales s{{1.0f, 1.0f}};
  if constexpr (kInnerA) {
#pragma unroll
    for (int h = 0; h < 2; ++h) s.row[h] = kMxA ? ue8m0_to_float(k.a[h] >> (8 * g)) : __uint_as_float(k.a[h]);
  }
  return s;
}

// acc += partial * (A's scale of the row: `rows`) * (B's scale of the column) for granule g of a
// K block whose B scales are staged at shared address `scales` (B's mx ones converted at
// `mx_floats`), each moved on by the tile's b_skew columns (ScaleSkew) where tiles of groups
// along N start off a box's start. A's scales are its inner ones (a_scales), or 4-bit weights' group scales
// (widen.cuh); without any this is a plain sum. wgmma's accumulator layout: registers 4j and
// 4j + 1 hold row r, 4j + 2 and 4j + 3 row r + 8.
// With 128x128 B blocks, which block a column group lies in depends only on the tile's first
// column modulo 128, kColInBlock: a multiple of kColStep, since tiles start at multiples of their
// width (tiles that divide 128 lie in one block, whichever it is, and other modes need no
// offset: kColStep = 128). A dual GEMM's halves each start at the tile's column, each in the
// blocks of its own operand. Callers compile their K loop once per possible value (gemm.cuh's
// multiply_8bit_at), so every group's block is known at compile time and the promotion is one
// FFMA per accumulator. (Block-scaled 128 x 176 tiles: 0.99x cuBLASLt so, 0.67x choosing each
// group's block at run time; H100.)
constexpr int kColStep = !kCoarseB || 128 % kHalfN == 0 ? 128 : (kHalfN & -kHalfN);  // else gcd(kHalfN, 128)

// B's scales of the thread's column pair at shared address `at`: one 8-byte load, or two where a
// tile of groups along N starts an odd number of columns into its box (b_skew), which leaves the
// pair 4 bytes off (an H200 raised a misaligned address).
__device__ __forceinline__ float2 column_pair_scales(u32 at) {
  if constexpr (kGroupedN) return make_float2(ld_shared_f32(at), ld_shared_f32(at + 4));
  return ld_shared_f32x2(at);
}

template <int kColInBlock>
__device__ __forceinline__ void promote(float* acc, const float* partial, const RowScales& rows, const KBlockScales& k,
                                        u32 scales, u32 mx_floats, int g, int t) {
  const float a0 = rows.row[0], a1 = rows.row[1];
#pragma unroll
  for (int j = 0; j < kTileN / 8; ++j) {
    // The scales of the thread's column pair and its two rows.
    float2 b = make_float2(1.0f, 1.0f);
    if (kInnerB && kMxB) b = column_pair_scales(mx_floats + 4 * (g * kMxRow + fragment_col(t, j)));
    if (kPromoteReadsStage) b = column_pair_scales(scales + b_column_word(8 * j) + 4 * (fragment_col(t, j) - 8 * j));
    if (kCoarseB) {
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
