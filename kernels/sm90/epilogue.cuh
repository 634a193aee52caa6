// The epilogue stage: turns a consumer warpgroup's 64 x kTileN f32 accumulators into D's 64 x
// kTileCols values (a dual GEMM pairs the accumulators' two halves: kTileCols = kTileN / 2).
//
// Every store path takes each element's value from output_value(): scales, alpha and beta C,
// then the fused epilogue's code (fuse.cuh), or, for an epilogue with reductions, the value
// evaluate_tile left in the accumulators. The paths around it only move data: through shared
// memory and TMA when D allows it, by rows, or direct predicated stores. An e4m3 D is quantised
// a 128-column group at a time before it is stored (quantize_group), one scale per block.
#pragma once

#include "common.cuh"
#include "fuse.cuh"
#include "kernel_config.cuh"
#include "params.h"
#include "quant_rule.cuh"
#include "row_classes.cuh"
#include "scales.cuh"
#include "scheduler.cuh"
#include "smem_layout.h"

namespace gemmkit::sm90 {

// A dual GEMM's tile holds B's columns [col, col + kHalfN) in its first kHalfN accumulator
// columns and the same columns of B2 in the others (gemm.cuh); else kHalfN is the tile's width.
constexpr int kHalfN = kDual ? kTileN / 2 : kTileN;

// The operand of a tile's accumulator column `c` (B, or a dual GEMM's B2: `second`) and its
// column there, for the tile at column `col`.
struct BColumn {
  bool second;
  i64 col;
};
__device__ __forceinline__ BColumn b_column(i64 col, int c) {
  const bool second = kDual && c >= kHalfN;
  return {second, col + c - (second ? kHalfN : 0)};
}
__device__ __forceinline__ const GemmScale& b_scale(const GemmParams& p, bool second) {
  return second ? p.scale_b2 : p.scale_b;
}

// The outer scales split into the part an output row shares (A's scale of the row, B's tensor
// scale), looked up once per tile, and the part of a column: B's rowwise scales, or a dual
// GEMM's B and B2 tensor scales, which differ between the tile's halves. Those are copied into
// shared memory for each tile while it multiplies (stage_column_scales), so the epilogue finds
// them there instead of waiting on global loads. Rows past D (computed, then clipped by the
// store) read no scale.
constexpr bool kRowTensorB = kScaleB == GEMMKIT_SCALE_TENSOR && !kDual;
constexpr bool kRowOuterScales = kScaleA == GEMMKIT_SCALE_TENSOR || kScaleA == GEMMKIT_SCALE_ROWWISE || kRowTensorB;
constexpr bool kColumnScales = kScaleB == GEMMKIT_SCALE_ROWWISE || (kDual && kScaleB == GEMMKIT_SCALE_TENSOR);
constexpr u32 kColumnScaleBytes = column_scale_bytes(kScaleB, kTileN, kDual);  // one tile's

__device__ __forceinline__ float row_outer_scale(const GemmParams& p, i64 batch, i64 row) {
  if (!kRowOuterScales) return 1.0f;
  if (row >= p.m) return 0.0f;
  return outer_scale_a(p, batch, row) * (kRowTensorB ? outer_scale_b(p, batch, 0) : 1.0f);
}

// Where one warpgroup's slice of a tile lands in D, the outer scales of the thread's two
// fragment rows (fragment_row(t, h); 1 without tensor or rowwise scales) and the shared address
// of the tile's column scales (kColumnScales).
struct TileOrigin {
  int batch;
  i64 row;  // first row of the warpgroup's 64-row slice
  int row_end;  // rows from it on are not stored: M, or a grouped tile's group end
  int first_stored;  // rows above it are the tile above's (first_stored_row)
  i64 col;  // first column of the tile
  int first_stored_col;  // columns left of it are the tile to the left's (first_stored_col)
  int col_end;  // groups along N (kColEnds): columns from it on are not stored (else N: col_end())
  float row_scale[2];
  u32 column_scales;
  int group;  // the fused epilogue's batch: the batch, or a grouped tile's group
};

// Columns from it on are not stored: N, or a grouped tile's group end along N.
__device__ __forceinline__ i64 col_end(const GemmParams& p, const TileOrigin& at) { return kColEnds ? at.col_end : p.n; }

// By each thread t of a consumer warpgroup: starts copying its share of the column scales of the
// tile at (batch, col), a scale per accumulator column to shared address `dst` (zeros past D's last column). The warpgroup waits
// for them with cp_async_wait_all and a named barrier before its epilogue.
__device__ __forceinline__ void stage_column_scales(u32 dst, const GemmParams& p, int batch, i64 col, int t) {
  for (int c = t; c < kTileN; c += 128) {
    const BColumn b = b_column(col, c);
    const GemmScale& s = b_scale(p, b.second);
    const u8* base = static_cast<const u8*>(s.data);
    const bool inside = b.col < p.n;
    const i64 index = batch * s.batch_stride + (kScaleB == GEMMKIT_SCALE_TENSOR ? 0 : b.col * s.col_stride);
    cp_async_4(dst + 4 * c, inside ? base + 4 * index : base, inside ? 4 : 0);
  }
}

__device__ __forceinline__ float epilogue_op(float acc, float c, const GemmParams& p) {
  return kHasC ? p.alpha * acc + p.beta * c : p.alpha * acc;
}

__device__ __forceinline__ float load_c(const GemmParams& p, int batch, i64 row, i64 col) {
  if (!kHasC || row >= p.m || col >= p.n) return 0.0f;
  i64 index = batch * p.c.batch_stride + row * p.c.row_stride + col * p.c.col_stride;
  return load_as_float(p.c.data, kCType, index);
}

// wgmma's accumulator fragment: thread t of the warpgroup holds, for each 8-column group j,
// rows (t/32)*16 + (t%32)/4 + {0, 8} and columns 8j + 2*(t%4) + {0, 1}, at acc[4j + 2h + e].
__device__ __forceinline__ int fragment_row(int t, int h) { return (t / 32) * 16 + (t % 32) / 4 + 8 * h; }
__device__ __forceinline__ int fragment_col(int t, int j) { return 8 * j + 2 * (t % 4); }
// D's row of thread t's fragment row h in the slice starting at D's row `first` (row classes:
// kRowStep rows apart).
__device__ __forceinline__ i64 d_row(i64 first, int t, int h) { return first + kRowStep * fragment_row(t, h); }

// The column scale of thread t's accumulator column (j, e): 1 without column scales.
__device__ __forceinline__ float column_scale(const TileOrigin& at, int t, int j, int e) {
  return kColumnScales ? ld_shared_f32(at.column_scales + 4 * (fragment_col(t, j) + e)) : 1.0f;
}

// The value of D at thread t's accumulator of column group j, half h (rows + 8h), element e, and
// its reductions' values in `red` (zeros where `counted` is false: an element another tile counts).
__device__ __forceinline__ float evaluate(const float* acc, const GemmParams& p, TileOrigin at, int t, int j, int h,
                                          int e, bool counted, float* red) {
  const i64 row = d_row(at.row, t, h), col = at.col + fragment_col(t, j) + e;
  const float row_scale = kRowOuterScales ? at.row_scale[h] : 1.0f;  // a constant 1 folds away
  const float value = epilogue_op(acc[4 * j + 2 * h + e] * row_scale * column_scale(at, t, j, e), load_c(p, at.batch, row, col), p);
  // A dual GEMM's second product (no C) lies kTileCols columns on: B2's half of the stage.
  const int j2 = j + kTileCols / 8;
  const float value2 = kDual ? p.alpha * (acc[4 * j2 + 2 * h + e] * row_scale * column_scale(at, t, j2, e)) : 0.0f;
  // Elements outside D (those TMA clips, a grouped tile's rows past its group) are computed and
  // not stored: a fused epilogue reads D's last row or column for them and writes nothing.
  const bool inside = row < at.row_end && col < col_end(p, at) && counted;
  return fused_value(value, value2, p, at.group, min(row, p.m - 1), min(col, p.n - 1), inside, red);
}

// An e4m3 D (GemmParams::scale_d): its values are quantised in 1x128 blocks, a block's scale from
// the largest |value| of its 128 columns of a row, which the tile holds whole: tiles start on a
// block (no shifted last column) and span whole blocks, in D's orientation (not transposed). A
// block is a staging group of 1-byte outputs (kGroupCols).
constexpr bool kQuantizedD = kOutType == GEMMKIT_E4M3;
static_assert(!kQuantizedD || (kTileCols % 128 == 0 && !kShiftLastCol && !kDByColumns && !kEpilogueTransposed),
              "an e4m3 D's tiles hold whole 128-column blocks of its rows");

// An epilogue that reduces is evaluated over the whole tile first (evaluate_tile), which leaves
// D's values in the accumulators for the store paths.
// So is an e4m3 D stored directly: evaluated in its groups instead, its kernels spilled (24 bytes,
// 128 x 128 with a bias).
constexpr bool kEvaluateFirst = kEpilogueReductions > 0 || (kQuantizedD && !kTmaStore);

// D's value at thread t's accumulator (j, h, e): evaluated now, or where evaluate_tile or
// quantize_group left it in the accumulators.
__device__ __forceinline__ float output_value(const float* acc, const GemmParams& p, TileOrigin at, int t, int j,
                                              int h, int e) {
  if (kEvaluateFirst || kQuantizedD) return acc[4 * j + 2 * h + e];
  float red[kReductionSlots];
  return evaluate(acc, p, at, t, j, h, e, true, red);
}

// Which of the kernel's indices a reduction keeps: a transposed plan's rows are D's columns.
__device__ __forceinline__ constexpr int kernel_keeps(int keeps) {
  return !kEpilogueTransposed || keeps == kPerBatch ? keeps : keeps == kPerColumn ? kPerRow : kPerColumn;
}

// Adds reduction r's partial over the kernel's row `row` or column `col` into its output.
__device__ __forceinline__ void reduce_tile_part(const GemmParams& p, const TileOrigin& at, int r, i64 row, i64 col,
                                                 float value) {
  epilogue_reduce(p.epilogue, r, at.group, kEpilogueTransposed ? col : row, kEpilogueTransposed ? row : col, value);
}

// `value` combined over the lanes whose lane bits in `masks` differ.
__device__ __forceinline__ float combine_lanes(float value, bool sum, int first_mask, int last_mask) {
#pragma unroll
  for (int mask = first_mask; mask <= last_mask; mask *= 2) value = combine(value, __shfl_xor_sync(0xffffffffu, value, mask), sum);
  return value;
}

// By every thread of a consumer warpgroup: D's values of its slice into acc[0, kTileCols / 2),
// the auxiliary outputs stored, and the reductions' partials added into their outputs. An element
// counts once: not where it lies outside D, nor in the rows or columns a shifted last tile shares
// with its neighbour (kShiftLastRow, kShiftLastCol). A column's partial is combined in registers
// over the thread's two rows, then over the 8 lanes holding the column (shuffles), and added by
// one lane a warp; a row's over the thread's columns, then the 4 lanes holding the row.
__device__ __forceinline__ void evaluate_tile(float* acc, const GemmParams& p, const TileOrigin& at, int t) {
  const int lane = t % 32;
  float row_part[kReductionSlots][2];
#pragma unroll
  for (int r = 0; r < kReductionSlots; ++r) row_part[r][0] = row_part[r][1] = 0.0f;
#pragma unroll
  for (int j = 0; j < kTileCols / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const i64 col = at.col + fragment_col(t, j) + e;
      float column[kReductionSlots];
#pragma unroll
      for (int r = 0; r < kReductionSlots; ++r) column[r] = 0.0f;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const i64 row = d_row(at.row, t, h);
        const bool counted = (!kShiftLastRow || row >= at.first_stored) && (!kShiftLastCol || col >= at.first_stored_col);
        float red[kReductionSlots];
        acc[4 * j + 2 * h + e] = evaluate(acc, p, at, t, j, h, e, counted, red);
#pragma unroll
        for (int r = 0; r < kEpilogueReductions; ++r) {
          const bool sum = kEpilogueReduced[r].sum;
          if (kernel_keeps(kEpilogueReduced[r].keeps) == kPerColumn) {
            column[r] = combine(column[r], red[r], sum);
          } else {  // a row's, or the batch's: the rows' partials combined last
            row_part[r][h] = combine(row_part[r][h], red[r], sum);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kEpilogueReductions; ++r) {
        if (kernel_keeps(kEpilogueReduced[r].keeps) != kPerColumn) continue;
        const float part = combine_lanes(column[r], kEpilogueReduced[r].sum, 4, 16);
        if (lane < 4 && col < p.n) reduce_tile_part(p, at, r, 0, col, part);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kEpilogueReductions; ++r) {
    const bool sum = kEpilogueReduced[r].sum;
    if (kernel_keeps(kEpilogueReduced[r].keeps) == kPerRow) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const i64 row = d_row(at.row, t, h);
        const float part = combine_lanes(row_part[r][h], sum, 1, 2);
        if (lane % 4 == 0 && row < at.row_end) reduce_tile_part(p, at, r, row, 0, part);
      }
    } else if (kernel_keeps(kEpilogueReduced[r].keeps) == kPerBatch) {
      const float part = combine_lanes(combine(row_part[r][0], row_part[r][1], sum), sum, 1, 16);
      if (lane == 0) reduce_tile_part(p, at, r, 0, 0, part);
    }
  }
}

// By every thread of a consumer warpgroup, before it stores group `group` of an e4m3 D's tile:
// the group's values (evaluated here, unless evaluate_tile did) quantised in their 128-column
// block as gemmkit::quantize does (quant_rule.cuh), left in the accumulators as value / scale,
// and the block's scale stored. A block's row is 16 column groups of the 4 lanes holding the row:
// their largest |value| (as bits, so that NaN wins) over the thread's 32 values, then 2 shuffles.
// Columns past D's last do not count. Group by group, rather than over the whole tile first, two
// blocks fit beside a 256-wide tile's accumulators.
__device__ __forceinline__ void quantize_group(float* acc, const GemmParams& p, const TileOrigin& at, int t,
                                               int group) {
  const i64 block_col = at.col + 128 * group;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    u32 amax = 0;
#pragma unroll
    for (int j = 16 * group; j < 16 * group + 16; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float red[kReductionSlots];
        float& x = acc[4 * j + 2 * h + e];
        if (!kEvaluateFirst) x = evaluate(acc, p, at, t, j, h, e, true, red);
        const u32 bits = at.col + fragment_col(t, j) + e < p.n ? __float_as_uint(x) : 0u;
        amax = max(amax, bits & 0x7fffffffu);
      }
    }
    amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const QuantDivisor divisor = quant_divisor<GEMMKIT_E4M3, false>(amax);
#pragma unroll
    for (int j = 16 * group; j < 16 * group + 16; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) acc[4 * j + 2 * h + e] = quant_divide<false>(acc[4 * j + 2 * h + e], divisor);
    }
    const i64 row = d_row(at.row, t, h);
    if (t % 4 == 0 && row < at.row_end && (!kShiftLastRow || row >= at.first_stored) && block_col < p.n) {
      static_cast<float*>(p.scale_d.data)[at.batch * p.scale_d.batch_stride + row * p.scale_d.row_stride +
                                          block_col / 128 * p.scale_d.col_stride] = divisor.scale;
    }
  }
}

// Direct stores, for outputs TMA cannot address (unaligned base or strides, non-unit column stride).
__device__ __forceinline__ void store_tile_direct(float* acc, const GemmParams& p, TileOrigin at, int t) {
#pragma unroll
  for (int j = 0; j < kTileCols / 8; ++j) {
    if (kQuantizedD && j % 16 == 0) quantize_group(acc, p, at, t, j / 16);  // its block, before its first column
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const i64 row = d_row(at.row, t, h);
        i64 col = at.col + fragment_col(t, j) + e;
        if (row < at.row_end && (!kShiftLastRow || row >= at.first_stored) && col < col_end(p, at) &&
            (!kShiftLastCol || col >= at.first_stored_col)) {
          const float value = output_value(acc, p, at, t, j, h, e);
          i64 index = at.batch * p.d.batch_stride + row * p.d.row_stride + col * p.d.col_stride;
          store_from_float(p.d.data, kOutType, index, value);
        }
      }
    }
  }
}

// Through shared memory, warp by warp: each warp writes its 16 rows of the slice in groups of
// columns 128 bytes wide into its part of kStoreBuffers 8 KB buffers, used in turn, and issues
// their TMA stores itself, so that the warps of a warpgroup never wait for each other (with as
// many buffers as groups, a tile's stores drain while the next tile multiplies). A warp's part
// of a group holds 128 / kStoreBoxBytes boxes of 16 rows, each laid out with the swizzle of its
// width, which keeps stmatrix free of bank conflicts. Rows and columns outside D are clipped by
// TMA. In grouped kernels, a warp whose 16 rows reach past its group's end (into the next
// group's) stores the rows before it itself, from its registers (store_group_direct). Where a
// tile's row is not a multiple of 128 bytes, its last group is shifted left to end at the tile's
// edge and stores again some columns the group before stored, with the same values; with C,
// which D may alias, those values would be recomputed from C already overwritten, so there boxes
// as narrow as the row needs (kStoreBoxBytes < 128) tile it instead.
// (The shifted group: 128 x 176 8-bit tiles at fp8-large's K = 512 run 0.99x cuBLASLt, 0.80x
// with 32-byte boxes; H100.)
// With kDByColumns, D's rows are contiguous rather than its columns (a problem the plan
// transposed, dispatch/plan.h): a warp's part of a group then holds each of the group's columns
// as a line of its 16 rows (32 bytes of 16-bit outputs, 64 of f32), swizzled as wide as a line,
// written by stmatrix's transposing form, and stored in boxes of kBoxCols whole lines
// (kStoreBoxBytes / kOutBytes columns, which divide the tile's width: no group is shifted).
constexpr int kOutBytes = kOutType == GEMMKIT_F32 ? 4 : kQuantizedD ? 1 : 2;
constexpr int kGroupCols = 128 / kOutBytes;
constexpr int kBoxCols = kStoreBoxBytes / kOutBytes;
constexpr int kBoxRows = 16;  // one warp's rows
constexpr int kBoxBytes = kBoxRows * kStoreBoxBytes;
constexpr int kColumnLineBytes = kBoxRows * kOutBytes;  // kDByColumns: one column of a warp's rows
static_assert(!kDByColumns || (kTmaStore && kTileCols % kBoxCols == 0), "columns are stored by TMA, in whole boxes");
static_assert(!kRowStore || kOutBytes > 1, "8-bit rows are stored through TMA or directly");
static_assert(!kDual || kTileCols % 16 == 0, "a dual tile's columns are whole stmatrix pairs of 8-column groups");
constexpr int kGroups = (kTileCols + kGroupCols - 1) / kGroupCols;
constexpr bool kShiftLastGroup = kTileCols % kGroupCols != 0 && kStoreBoxBytes == 128;
static_assert(kTileCols >= kGroupCols || !(kTmaStore || kRowStore), "a tile stored through shared memory spans a whole group");

// The first column of group `group` within the tile.
__device__ __forceinline__ int group_col(int group) {
  return kShiftLastGroup && group == kGroups - 1 ? kTileCols - kGroupCols : group * kGroupCols;
}

// `offset` within a swizzled box whose lines are `width` bytes (32, 64 or 128): its 16-byte unit
// XOR-ed with the line bits TMA's SWIZZLE_32B/64B/128B use.
__device__ __forceinline__ int swizzled(int offset, int width) {
  return offset ^ (((offset >> 7) & (width / 16 - 1)) << 4);
}

// Byte offset in a warp's part of a buffer of column byte `byte` (0..127) of its row r (0..15):
// box, then row, then swizzled (every box starts on a multiple of its swizzle pattern); with
// kDByColumns, the column's line, then the row.
__device__ __forceinline__ int staged_offset(int r, int byte) {
  if (kDByColumns) return swizzled(byte / kOutBytes * kColumnLineBytes + r * kOutBytes, kColumnLineBytes);
  return (byte / kStoreBoxBytes) * kBoxBytes + swizzled(r * kStoreBoxBytes + byte % kStoreBoxBytes, kStoreBoxBytes);
}

// 16-bit outputs: the stmatrix operands of one group, each instruction two column groups of 8
// by the 16 rows (matrix q is half q % 2, rows +8, of column group j + q / 2).
constexpr int kGroupJs = kGroupCols / 8;  // 8-column groups j in a staging group
constexpr int kPackedPerGroup = kGroupJs * 2;
__device__ __forceinline__ void pack_group(const float* acc, const GemmParams& p, TileOrigin at, int t, int group,
                                           u32* m) {
#pragma unroll
  for (int jj = 0; jj < kGroupJs; jj += 2) {
    const int j = group_col(group) / 8 + jj;
    if (j >= kTileCols / 8) break;  // a partial last group (kTileCols / 8 is even)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      m[2 * jj + q] = pack_pair(kOutType, output_value(acc, p, at, t, j + q / 2, q % 2, 0),
                                output_value(acc, p, at, t, j + q / 2, q % 2, 1));
    }
  }
}

// Lane l addresses row l % 8 of its matrix (or, by columns, column l % 8).
__device__ __forceinline__ void stmatrix_group(const u32* m, int group, int t, u32 part) {
  const int lane = t % 32;
  const int row = 8 * ((lane / 8) % 2) + (kDByColumns ? 0 : lane % 8);
#pragma unroll
  for (int jj = 0; jj < kGroupJs; jj += 2) {
    if (group_col(group) / 8 + jj >= kTileCols / 8) break;
    const int col = 8 * (jj + lane / 16) + (kDByColumns ? lane % 8 : 0);
    stmatrix_x4<kDByColumns>(part + staged_offset(row, col * 2), m[2 * jj], m[2 * jj + 1], m[2 * jj + 2],
                             m[2 * jj + 3]);
  }
}

// Writes this warp's part of group `group` (columns 128 bytes wide) into `part`, the shared
// address of its 16 rows: 16-bit outputs with stmatrix, f32 and e4m3 outputs as pairs.
__device__ __forceinline__ void stage_group(const float* acc, const GemmParams& p, TileOrigin at, int t, int group,
                                            u32 part) {
  if (kOutType == GEMMKIT_F32) {
#pragma unroll
    for (int jj = 0; jj < kGroupJs; ++jj) {
      const int j = group_col(group) / 8 + jj;
      if (j >= kTileCols / 8) break;  // a partial last group
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = fragment_row(t, h) % 16, byte = fragment_col(t, jj) * 4;
        const float x = output_value(acc, p, at, t, j, h, 0), y = output_value(acc, p, at, t, j, h, 1);
        if (kDByColumns) {  // the pair lies in the lines of an even column and the next, alike swizzled
          const u32 line = part + staged_offset(r, byte);
          st_shared_u32(line, __float_as_uint(x));
          st_shared_u32(line + kColumnLineBytes, __float_as_uint(y));
        } else {
          store_shared(part + staged_offset(r, byte), x, y);
        }
      }
    }
  } else if (kOutBytes == 1) {
    // A lane's e4m3 pair of column group j is 2 bytes, its neighbour's (lane ^ 1) the next 2: the
    // even lane of the two stores both pairs of group j as a word, the odd lane both of j + 1.
    const bool odd = t % 2;
#pragma unroll
    for (int jj = 0; jj < kGroupJs; jj += 2) {
      const int j = group_col(group) / 8 + jj;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const u32 mine = fp8_pair(GEMMKIT_E4M3, output_value(acc, p, at, t, j, h, 0), output_value(acc, p, at, t, j, h, 1));
        const u32 next = fp8_pair(GEMMKIT_E4M3, output_value(acc, p, at, t, j + 1, h, 0),
                                  output_value(acc, p, at, t, j + 1, h, 1));
        const u32 theirs = __shfl_xor_sync(0xffffffffu, odd ? mine : next, 1);
        const u32 word = odd ? theirs | next << 16 : mine | theirs << 16;
        const int byte = fragment_col(t, odd ? jj + 1 : jj) - 2 * odd;  // the even lane's pair starts the word
        st_shared_u32(part + staged_offset(fragment_row(t, h) % 16, byte), word);
      }
    }
  } else {
    u32 m[kPackedPerGroup];
    pack_group(acc, p, at, t, group, m);
    stmatrix_group(m, group, t, part);
  }
}

// For a D whose rows TMA cannot store (a base or row stride off 16 bytes, or rows not a whole
// number of 16-byte pieces) but whose columns are contiguous: each warp stages a group of its
// 16 rows in its part of one buffer as store_tile_tma does, then writes the rows, a 4-byte word
// a lane, so that a warp instruction covers 128 contiguous bytes of a row. A 16-bit row that
// starts 2 bytes past a word writes its first element alone and the words after it. The rows
// go kRowBatch at a time, their shared-memory reads before their stores so that the reads'
// latencies overlap, in a loop rather than all 16 rows unrolled (which is slower). Contiguous
// bytes per instruction count for more than wide stores: against store_tile_direct's 8-byte
// pieces of 8 rows, 4097^3 NT runs 268 us instead of 314 (H100).
constexpr int kRowBatch = 4;
__device__ __forceinline__ void store_tile_rows(const float* acc, const GemmParams& p, TileOrigin at, int t,
                                                u8* buffer) {
  const int warp = t / 32, lane = t % 32;
  const u32 part = smem_u32(buffer + warp * (kEpilogueBufferBytes / 4));
  if (kShiftLastRow && at.row + kBoxRows * warp < at.first_stored) return;  // the tile above's rows
#pragma unroll
  for (int group = 0; group < kGroups; ++group) {
    const i64 col = at.col + group_col(group);
    if (col >= p.n) break;  // uniform across the warpgroup
    // The group's columns to write: past those a shifted last group shares with the one before
    // and those a moved last tile column shares with the one to its left (even counts), and
    // within the tile and D.
    const int first = max(group * kGroupCols, kShiftLastCol ? at.first_stored_col - int(at.col) : 0) - group_col(group);
    const int end = int(min(i64(min(kGroupCols, kTileCols - group_col(group))), p.n - col));
    if (first >= end) continue;
    __syncwarp();  // every lane has read the group before
    stage_group(acc, p, at, t, group, part);
    __syncwarp();
    const i64 first_row = at.row + kBoxRows * warp;
    u8* const rows = static_cast<u8*>(p.d.data) + (at.batch * p.d.batch_stride + first_row * p.d.row_stride + col) * kOutBytes;
#pragma unroll 1
    for (int r0 = 0; r0 < kBoxRows; r0 += kRowBatch) {
      // Where the lane's word of each row starts (e: its first element), and the row's values there.
      int e[kRowBatch];
      u32 word[kRowBatch], lone[kRowBatch];  // lone: a 16-bit row's first element where it starts off a word
#pragma unroll
      for (int i = 0; i < kRowBatch; ++i) {
        const int r = r0 + i;
        const bool odd = kOutBytes == 2 && reinterpret_cast<u64>(rows + r * p.d.row_stride * kOutBytes) / 2 % 2;
        e[i] = kOutBytes == 4 ? lane : 2 * lane + odd;
        if (kOutBytes == 4) {
          word[i] = ld_shared_u32(part + staged_offset(r, 4 * lane));
        } else {
          word[i] = ld_shared_u16(part + staged_offset(r, 2 * e[i])) |
                    (e[i] + 1 < kGroupCols ? ld_shared_u16(part + staged_offset(r, 2 * e[i] + 2)) << 16 : 0u);
          lone[i] = odd && lane == 0 ? ld_shared_u16(part + staged_offset(r, 2 * first)) : 0u;
        }
      }
#pragma unroll
      for (int i = 0; i < kRowBatch; ++i) {
        const int r = r0 + i;
        if (first_row + r >= at.row_end) break;
        u8* line = rows + r * p.d.row_stride * kOutBytes;
        const int x = e[i];
        if (kOutBytes == 4 || x + 1 < end) {
          if (x >= first && x < end) *reinterpret_cast<u32*>(line + kOutBytes * x) = word[i];
        } else if (x >= first && x < end) {
          *reinterpret_cast<u16*>(line + 2 * x) = u16(word[i]);
        }
        if (kOutBytes == 2 && x % 2 == 1 && lane == 0 && first < end) *reinterpret_cast<u16*>(line + 2 * first) = u16(lone[i]);
      }
    }
  }
}

// By a warp of a grouped kernel's slice whose rows cross its group's end: the warp's own values
// of staging group `group`'s columns, from the accumulators or (16-bit outputs) `packed` (the
// group's pack_group pairs), stored directly up to the row end, a column pair at a time. No
// shared memory: staged rows read back with ld.shared while wgmma streams the stages cost ~40 us
// a crossing (Qwen3 up, 128 groups of 255 rows: 2.5 ms against 1.5 for 256 rows; H100).
__device__ __forceinline__ void store_group_direct(const float* acc, const u32* packed, const GemmParams& p,
                                                   const TileOrigin& at, int t, int group) {
#pragma unroll
  for (int jj = 0; jj < kGroupJs; ++jj) {
    const int j = group_col(group) / 8 + jj;
    if (j >= kTileCols / 8) break;  // a partial last group
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const i64 row = d_row(at.row, t, h), col = at.col + fragment_col(t, j);
      // Columns before first_stored_col are the tile to the left's (an even count: whole pairs).
      if (row >= at.row_end || col >= p.n || (kShiftLastCol && col < at.first_stored_col)) continue;
      const i64 index = at.batch * p.d.batch_stride + row * p.d.row_stride + col;
      if (kOutBytes == 4) {
        store_from_float(p.d.data, kOutType, index, output_value(acc, p, at, t, j, h, 0));
        if (col + 1 < p.n) store_from_float(p.d.data, kOutType, index + 1, output_value(acc, p, at, t, j, h, 1));
      } else {
        const u32 pair = packed ? packed[2 * jj + h]  // pack_group's order: pair (j, h) at 2 jj + h
                                : pack_pair(kOutType, output_value(acc, p, at, t, j, h, 0),
                                            output_value(acc, p, at, t, j, h, 1));
        u16* d = static_cast<u16*>(p.d.data) + index;
        if (col + 1 < p.n) {
          *reinterpret_cast<u32*>(d) = pair;  // rows and the pair's column 4-byte aligned (TMA-stored D)
        } else {
          *d = u16(pair);
        }
      }
    }
  }
}

// By a warp of a grouped kernel's slice whose rows cross its group's end, for an e4m3 D: its
// rows of group `group` before the end, staged at `part`, written from shared memory, 4 bytes a
// lane (a row of the group is 128 bytes). Staging them as TMA would keeps one conversion path:
// a second one, from the registers, made the kernels spill.
__device__ __forceinline__ void store_staged_rows(u32 part, const GemmParams& p, const TileOrigin& at, int first_row,
                                                  int group, int t) {
  const int lane = t % 32;
  const i64 col = at.col + group_col(group) + 4 * lane;
  for (int r = 0; r < kBoxRows && first_row + r < at.row_end; ++r) {
    const u32 word = ld_shared_u32(part + staged_offset(r, 4 * lane));
    u8* d = static_cast<u8*>(p.d.data) + at.batch * p.d.batch_stride + (first_row + r) * p.d.row_stride + col;
    if (col + 3 < p.n) {
      *reinterpret_cast<u32*>(d) = word;  // rows and 4-column steps 4-byte aligned (TMA-stored D)
    } else {
      for (int b = 0; b < 4 && col + b < p.n; ++b) d[b] = u8(word >> 8 * b);
    }
  }
}

// Stores groups [First, End) of the slice: from the accumulators, or (16-bit outputs) from
// `packed`, the groups' stmatrix operands packed earlier. Group g uses buffer g % kStoreBuffers.
// Before its first group a warp waits until every store it issued before has read its buffer
// (long done: a main loop or a K block ran since), so a tile that ended early at the right edge
// of D leaves no buffer in use; later groups wait only for the store that last used their
// buffer, kStoreBuffers groups ago.
template <int First, int End>
__device__ __forceinline__ void store_tile_tma(float* acc, const u32* packed, const GemmParams& p, TileOrigin at,
                                               int t, u8* buffers, const TensorMap* map_d) {
  const int warp = t / 32;
  const bool leader = t % 32 == 0;
#pragma unroll
  for (int group = First; group < End; ++group) {
    if (at.col + group_col(group) >= p.n) break;  // uniform across the warpgroup
    if (kQuantizedD) quantize_group(acc, p, at, t, group);  // its shuffles before any lane leaves
    u8* part = buffers + (group % kStoreBuffers) * kEpilogueBufferBytes + warp * (kEpilogueBufferBytes / 4);
    if (leader) {
      if (group == First) {
        tma_store_wait_read<0>();
      } else {
        tma_store_wait_read<kStoreBuffers - 1>();
      }
    }
    __syncwarp();
    const int row = int(at.row) + kBoxRows * warp;
    // A group's rows end among the warp's (grouped kernels): TMA would store the next group's rows
    // too.
    const bool crossing = kRowEnds && row + kBoxRows > at.row_end;
    if (crossing && kOutBytes > 1) {
      store_group_direct(acc, packed ? packed + (group - First) * kPackedPerGroup : nullptr, p, at, t, group);
    } else {
      if (packed) {
        stmatrix_group(packed + (group - First) * kPackedPerGroup, group, t, smem_u32(part));
      } else {
        stage_group(acc, p, at, t, group, smem_u32(part));
      }
      fence_async_shared();
      __syncwarp();
      if (crossing) {
        store_staged_rows(smem_u32(part), p, at, row, group, t);
      } else if (leader) {
#pragma unroll
        for (int box = 0; box < 128 / kStoreBoxBytes; ++box) {
          const int first = group_col(group) + box * kBoxCols;  // within the tile
          const int col = int(at.col + first);
          if (first < kTileCols && col < p.n && (!kShiftLastRow || row >= at.first_stored) &&
              (!kShiftLastCol || col + kBoxCols > at.first_stored_col)) {
            tma_store_3d(map_d, part + box * kBoxBytes, kDByColumns ? row : col, kDByColumns ? col : row, at.batch);
          }
        }
      }
    }
    if (leader) tma_store_commit();  // one bulk group per buffer fill (maybe empty), which tma_store_wait_read counts
  }
}

}  // namespace gemmkit::sm90
