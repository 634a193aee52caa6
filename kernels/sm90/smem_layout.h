// The TMA kernel's shared-memory layout, worked out in one place for the host (the dynamic
// shared memory a launch reserves: KernelConfig::smem_bytes) and the kernel (where each region
// starts: gemm.cuh). Plain C++ that g++ and NVRTC both compile.
//
// From the 1 KB-aligned base, regions in this order: the ring's A stages, its B stages, the
// epilogue's staging buffers, the realigned operands' landing rows (kernel realigning only),
// the full, empty and (realigning) landed barriers of every stage, a work slot per stage (the
// scheduler's Work), the block and mx scales staged beside each stage's data, B's rowwise
// scales of two tiles per consumer warpgroup (epilogue.cuh), and B's mx scales of two K blocks
// per consumer warpgroup as floats (promote.cuh).
#pragma once

#include "codes.h"

// The functions below are constexpr for both compilers (NVRTC takes unannotated ones for host code).
#ifdef __CUDACC__
#define GEMMKIT_HOST_DEVICE __host__ __device__
#else
#define GEMMKIT_HOST_DEVICE
#endif

namespace gemmkit::sm90 {

constexpr unsigned kStageRowBytes = 128;     // a ring stage's row: 128 bytes of K, one swizzle row
constexpr unsigned kSmemAlignment = 1024;    // the kernel aligns its base to a swizzle atom (8 rows)
constexpr int kEpilogueBufferBytes = 64 * 128;  // one 64-row, 128-byte-wide staging buffer
constexpr unsigned kLandingRowBytes = 144;   // 9 granules: 128 bytes at any 16-byte offset
constexpr unsigned kBarrierBytes = 8;        // one mbarrier
constexpr unsigned kWorkSlotBytes = 40;      // one Work (scheduler.cuh)

// What the layout depends on: a TMA kernel's configuration (KernelConfig's fields, or the
// constants of its kernel_config.cuh).
struct SmemShape {
  int tile_m, tile_n, stages;
  bool b_k_major;
  int epilogue_buffers;        // staging buffers per consumer warpgroup (0 where D is stored directly)
  bool realign_a, realign_b;
  int scale_a, scale_b;        // GEMMKIT_SCALE_* codes
  int scale_a_mn, scale_b_mn;  // M (N) elements per block scale of A (B): 1 or 128
  int group_capacity;          // groups the table holds (grouped kernels), else 0
  bool grouped_n;              // the groups split N (tiles start at any column), not the rows
  bool dual;                   // a dual GEMM's: B's half of the tile's columns, then B2's
  int widen_rows;              // a 4-bit A's rows per stage (its tile rows), else 0
  int widen_row_bytes;         // a row's packed bytes per stage: half its K block (32, or 64 against 8-bit B)
  int widen_scale_bytes;       // bytes of one of its scales: 2 (u4's group scales) or 1 (e2m1's ue8m0)
  int widen_groups;            // K groups of its scales per stage: 2, or 4 (e2m1 against 8-bit B)
  bool widen_zeros;            // u4 with zero points
};

GEMMKIT_HOST_DEVICE constexpr bool is_inner_scale_mode(int mode) { return mode == GEMMKIT_SCALE_BLOCK || mode == GEMMKIT_SCALE_MX; }

// Stage rows of a B slice: N-major slices in whole 64-wide blocks.
GEMMKIT_HOST_DEVICE constexpr int b_slice_rows(int tile_n, bool b_k_major) { return b_k_major ? tile_n : (tile_n + 63) / 64 * 64; }

// 128-column blocks a tile at any column touches (B's scales in 128 x 128 blocks).
GEMMKIT_HOST_DEVICE constexpr int b_scale_blocks(int tile_n) { return (tile_n + 127) / 128 + 1; }

// The 4-byte words of block and mx scales staged per stage (promote.cuh), which TMA brings, a box
// per operand: 1-wide blocks' and mx exponents along M (N), 128-wide blocks' along K, four K
// blocks (16 bytes, TMA's least) of each 128-row (column) block the tile touches. A: a 1x128
// block's f32 per tile row, or four rows of mx exponents (one per granule) of a byte per tile
// row; or 128x128 blocks' four. B: a 128x1 block's f32 per tile column, or four rows of mx
// exponents of a byte per tile column; or four per 128-column block the tile touches for 128x128
// blocks (a dual GEMM's: those of B's half, then those of B2's). A box of 1-wide scales starts at
// a multiple of 16 bytes (scale_box_alignment elements), so where tiles start at any row (grouped
// kernels) or column (groups along N), it is that many longer.
GEMMKIT_HOST_DEVICE constexpr int scale_box_alignment(int mode) { return mode == GEMMKIT_SCALE_MX ? 16 : 4; }
GEMMKIT_HOST_DEVICE constexpr int stage_scale_words_a(int mode, int mn, int tile_m, bool grouped) {
  return !is_inner_scale_mode(mode)               ? 0
         : mode == GEMMKIT_SCALE_MX || mn == 1 ? tile_m + (grouped ? scale_box_alignment(mode) : 0)
                                               : 4;
}
GEMMKIT_HOST_DEVICE constexpr int stage_scale_words_b(int mode, int mn, int tile_n, bool dual, bool grouped_n) {
  return !is_inner_scale_mode(mode)               ? 0
         : mode == GEMMKIT_SCALE_MX || mn == 1 ? tile_n + (grouped_n ? scale_box_alignment(mode) : 0)
         : dual                                ? 2 * 4 * b_scale_blocks(tile_n / 2)
                                               : 4 * b_scale_blocks(tile_n);
}

// The scale words of one stage: A's, then B's, each (and a dual GEMM's B2's half of B's) from a
// 128-byte boundary, where TMA's boxes land.
GEMMKIT_HOST_DEVICE constexpr unsigned scale_part_bytes(int words) { return unsigned(words * 4 + 127) / 128 * 128; }
GEMMKIT_HOST_DEVICE constexpr unsigned stage_scale_bytes(int scale_a, int scale_a_mn, int scale_b, int scale_b_mn, int tile_m,
                                                         int tile_n, bool dual, bool grouped, bool grouped_n) {
  const int words_a = stage_scale_words_a(scale_a, scale_a_mn, tile_m, grouped);
  const int words_b = stage_scale_words_b(scale_b, scale_b_mn, tile_n, dual, grouped_n);
  return (words_a > 0 ? scale_part_bytes(words_a) : 0) +
         (words_b == 0 ? 0 : dual ? 2 * scale_part_bytes(words_b / 2) : scale_part_bytes(words_b));
}

// B's rowwise scales of one tile (f32 per column; a dual GEMM's tensor scales too, B's and B2's
// per half), and B's mx scales of one K block as floats (four granules per column of its box).
GEMMKIT_HOST_DEVICE constexpr unsigned column_scale_bytes(int scale_b, int tile_n, bool dual) {
  return scale_b == GEMMKIT_SCALE_ROWWISE || (dual && scale_b == GEMMKIT_SCALE_TENSOR) ? tile_n * 4 : 0;
}
GEMMKIT_HOST_DEVICE constexpr unsigned mx_float_bytes(int scale_b, int tile_n, bool grouped_n) {
  return scale_b == GEMMKIT_SCALE_MX ? 4 * stage_scale_words_b(scale_b, 1, tile_n, false, grouped_n) * 4 : 0;
}

// A 4-bit A's stage (widen.cuh): its packed rows, a K block's elements two a byte, as its slice;
// after the stage's other scales, those of `groups` K groups by the rows (the K block's first group
// and the next, where groups of 32 split a 64-deep block; e2m1's four against 8-bit B), then its
// zero points likewise, each part from a 128-byte boundary.
GEMMKIT_HOST_DEVICE constexpr unsigned widen_scale_part_bytes(int rows, int scale_bytes, int groups) {
  return unsigned(groups * rows * scale_bytes + 127) / 128 * 128;
}
GEMMKIT_HOST_DEVICE constexpr unsigned widen_scale_bytes(int rows, int scale_bytes, int groups, bool zeros) {
  return rows == 0 ? 0 : widen_scale_part_bytes(rows, scale_bytes, groups) * (zeros ? 2 : 1);
}

// A grouped kernel's table: each group's first work unit and row end, and the units' total.
GEMMKIT_HOST_DEVICE constexpr unsigned group_table_bytes(int capacity) { return capacity == 0 ? 0 : unsigned(2 * capacity + 4) * 4; }

struct SmemLayout {
  // Sizes of one stage's parts.
  unsigned stage_a, stage_b;   // A's and B's slices
  unsigned stage_scales;       // the staged scale words (stage_scale_bytes)
  unsigned landing;            // the landing rows of the realigned operands, A's first
  unsigned stage;              // A, B and scales: what TMA and the scale warp fill per stage
  // Where each region starts, in bytes from the aligned base.
  unsigned a, b, epilogue, landing_rows, full, empty, landed, slots, scales, column_scales, mx_floats, group_table;
  unsigned end;    // the last region's end
  unsigned total;  // what the launch reserves: the regions and the alignment slack
};

GEMMKIT_HOST_DEVICE constexpr SmemLayout smem_layout(const SmemShape& s) {
  SmemLayout l{};
  const unsigned stages = unsigned(s.stages), consumers = unsigned(s.tile_m / 64);
  const unsigned rows_a = unsigned(s.tile_m), rows_b = unsigned(b_slice_rows(s.tile_n, s.b_k_major));
  l.stage_a = rows_a * (s.widen_rows > 0 ? unsigned(s.widen_row_bytes) : kStageRowBytes);
  l.stage_b = rows_b * kStageRowBytes;
  l.stage_scales = stage_scale_bytes(s.scale_a, s.scale_a_mn, s.scale_b, s.scale_b_mn, s.tile_m, s.tile_n, s.dual,
                                     s.group_capacity > 0, s.grouped_n) +
                   widen_scale_bytes(s.widen_rows, s.widen_scale_bytes, s.widen_groups, s.widen_zeros);
  l.landing = ((s.realign_a ? rows_a : 0) + (s.realign_b ? rows_b : 0)) * kLandingRowBytes;
  l.stage = l.stage_a + l.stage_b + l.stage_scales;
  const bool realign = s.realign_a || s.realign_b;
  l.a = 0;
  l.b = l.a + stages * l.stage_a;
  l.epilogue = l.b + stages * l.stage_b;
  l.landing_rows = l.epilogue + consumers * unsigned(kEpilogueBufferBytes) * unsigned(s.epilogue_buffers);
  l.full = l.landing_rows + stages * l.landing;
  l.empty = l.full + stages * kBarrierBytes;
  l.landed = l.empty + stages * kBarrierBytes;
  l.slots = l.landed + (realign ? stages * kBarrierBytes : 0);
  // 128-byte aligned where scales are staged (TMA's boxes land there), else 16 (mx promotion
  // stores its floats 16 bytes at a time: 40-byte slots would leave the regions after them
  // 8-byte aligned at odd stage counts).
  const unsigned scale_alignment = l.stage_scales > 0 ? 128 : 16;
  l.scales = (l.slots + stages * kWorkSlotBytes + scale_alignment - 1) / scale_alignment * scale_alignment;
  l.column_scales = l.scales + stages * l.stage_scales;
  l.mx_floats = l.column_scales + 2 * consumers * column_scale_bytes(s.scale_b, s.tile_n, s.dual);
  l.group_table = l.mx_floats + 2 * consumers * mx_float_bytes(s.scale_b, s.tile_n, s.grouped_n);
  l.end = l.group_table + group_table_bytes(s.group_capacity);
  l.total = kSmemAlignment + l.end;
  return l;
}

}  // namespace gemmkit::sm90
