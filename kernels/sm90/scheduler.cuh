// The tile scheduler of the TMA kernel: which work units each CTA takes, in what order, and
// where each lies. The producer, the consumers and the epilogue use only this interface, not
// the order itself:
//   const TileScheduler tiles(p, group_table);  // from the kernel parameters, once per CTA
//   for (u32 unit = tiles.first(); !tiles.done(unit); unit = tiles.next(unit)) {
//     const Work w = tiles.work(unit, rank);  // rank: the CTA's in its cluster
//     // w.batch, w.row, w.col: the tile; K blocks [w.k_begin, w.k_end) of it, part w.split
//   }
// and tiles.k_blocks, every unsplit tile's K blocks. A tile that was moved to end at D's edge
// overlaps the tile before it; first_stored_row and first_stored_col say where the rows and
// columns it stores start. The grouped scheduler (grouped_scheduler.cuh), which reads the group
// sizes from device memory into a table in shared memory, provides the same members.
#pragma once

#include "kernel_config.cuh"
#include "params.h"
#include "row_classes.cuh"
#include "scales.cuh"
#include "utility.cuh"

namespace gemmkit::sm90 {

// Work units carry their group's row end (groups of rows; groups along K store all of D's rows),
// or along N its column end.
constexpr bool kRowEnds = kGrouped && !kGroupedK && !kGroupedN;
constexpr bool kColEnds = kGroupedN;

// One work unit of a CTA: a tile (its batch, or group, and first row and column) and the K
// blocks of it to multiply; `tile` numbers the CTA's tile among all tiles, `split` its part of
// K; grouped kernels store only the tile's rows above `row_end` (along N, its columns left of
// `col_end`); groups along K (the weight gradient) multiply k_size elements of K from k_first on.
struct Work {
  int batch;
  int row, col;  // below 2^31: the host picks this kernel only where TMA addresses A and B
  int split, k_begin, k_end;
  u32 tile;
  union {  // one or the other: groups of rows, or along N (40 bytes a slot, kWorkSlotBytes)
    int row_end;
    int col_end;
  };
  int k_first, k_size;
};

// TMA fills the rows of A's box past M with zeros, and a tile whose box reaches far past M loads
// slowly. So the tile row that reaches past M moves up, from p.order.shift_from to shift_to, to
// end within 15 rows of M (a multiple of 16 rows up, the host's choice), and stores only the rows
// past those the tile row above stores, every warp's 16 rows whole or not at all (H100, 128x160
// tiles, 513x4096x4096 NT: 33.0 us, 47.3 unmoved). A cluster's tile wholly below D stays there. Not with row classes, nor where A's block scales cover 128
// rows (a tile's rows must lie in one block); nor on three consumer warpgroups that store rows
// (store_tile_rows), nor with B's block scales per column (staged for each K block), whose
// registers then spill; nor grouped (each group's tile rows start at its first row).
constexpr bool kShiftLastRow = !kGrouped && !kRowClasses && kScaleMNA == 1 && !(kRowStore && kTileM == 192) &&
                               !(kScaleB == GEMMKIT_SCALE_BLOCK && kScaleMNB == 1);

// The first row a tile multiplied from `row` stores.
__device__ __forceinline__ int first_stored_row(const GemmParams& p, int row) {
  const bool moved = kShiftLastRow && row == p.order.shift_to && p.order.shift_to != p.order.shift_from;
  return moved ? p.order.shift_from : row;
}

// Likewise B's boxes reaching past N load slowly, so the tile column reaching past N moves
// left, from p.order.col_shift_from to col_shift_to (a multiple of 16 columns, or of the store
// box's where D may alias C), and stores only the columns from col_shift_from on: whole boxes
// through TMA, those wholly left of it skipped. A box that starts left of it is stored whole,
// with the values the tile to the left stored, which only C could make differ (hence the box
// multiple). (H100, NT, 385x4096x4096 transposed on 64x208 tiles: 25.7 us, 32.2 unmoved.)
// Not where B's block or mx scales, or an e4m3 D's 1x128 blocks, need tiles to start on their
// blocks, nor with row classes, nor grouped along N (each group's tile columns start at its first).
constexpr bool kShiftLastCol = !kRowClasses && !is_inner_scale(kScaleB) && kOutType != GEMMKIT_E4M3 && !kGroupedN;

// The first column a tile multiplied from `col` stores.
__device__ __forceinline__ int first_stored_col(const GemmParams& p, int col) {
  const bool moved = kShiftLastCol && col == p.order.col_shift_to && p.order.col_shift_to != p.order.col_shift_from;
  return moved ? p.order.col_shift_from : col;
}

// The dense scheduler, persistent: cluster tiles (kClusterM tiles stacked in M; CTA `rank` of
// the cluster takes the rank-th), each split into `splits` consecutive units, so that a tile's
// parts run at once. Numbered batch by batch; inside a batch, groups of kGroupM tile rows are
// walked column by column so that clusters running at once share A and B in L2. With row
// classes, tile row 8 b + r holds class r of groups 64 b to 64 b + 63 (M is a multiple of 8).
// The host works out the order's size and divisors (p.order): unit numbers are below 2^31, and a
// division by a fixed divisor is a multiply and a shift (as 64-bit divisions, a CTA's first pass
// through them cost ~630 cycles before its first load; H100).
__device__ __forceinline__ u32 quotient(u32 n, FastDivisor d) { return u32((u64(n) * d.mul) >> d.shift); }

// The persistent walk every scheduler shares: of `total` work units, this CTA's cluster takes
// units first_unit, + unit_step, ... (one cluster per unit at a time). 32 bits, one register a
// count: the total is below 2^31 (the host's kMaxWorkUnits), so no step passes 2^32.
struct PersistentUnits {
  u32 total;
  u32 first_unit, unit_step;

  __device__ explicit PersistentUnits(u32 units)
      : total(units), first_unit(blockIdx.x / kClusterM), unit_step(gridDim.x / kClusterM) {}

  __device__ __forceinline__ u32 first() const { return first_unit; }
  __device__ __forceinline__ bool done(u32 unit) const { return unit >= total; }
  __device__ __forceinline__ u32 next(u32 unit) const { return unit + unit_step; }
};

struct TileScheduler : PersistentUnits {
  static constexpr u32 kGroup = kGroupM / kClusterM;  // cluster rows per group
  TileOrder order;
  int splits, k_blocks;  // splits: 1 unless kSplitK (then p.splits, at most k_blocks)

  __device__ TileScheduler(const GemmParams& p, const u8* /*group_table: the grouped scheduler's*/)
      : PersistentUnits(u32(p.order.rows * p.order.tiles_n * p.batch * (kSplitK ? p.splits : 1))),
        order(p.order),
        splits(kSplitK ? p.splits : 1),
        k_blocks(kRowClasses ? row_class_k_blocks(p.k) : int((p.k + kTileK - 1) / kTileK)) {}

  // Where unit `unit` lies, for CTA `rank` of the cluster.
  __device__ Work work(u32 unit, int rank) const {
    Work w;
    const u32 rows = u32(order.rows);
    const u32 cluster_tile = kSplitK ? quotient(unit, order.splits) : unit;
    w.split = kSplitK ? int(unit - cluster_tile * u32(splits)) : 0;
    w.k_begin = kSplitK ? int(quotient(u32(w.split) * u32(k_blocks), order.splits)) : 0;
    w.k_end = kSplitK ? int(quotient(u32(w.split + 1) * u32(k_blocks), order.splits)) : k_blocks;
    w.tile = cluster_tile * kClusterM + rank;
    w.row_end = 0;  // the consumers take p.m
    const u32 batch = quotient(cluster_tile, order.per_batch);
    const u32 in_batch = cluster_tile - batch * rows * u32(order.tiles_n);
    const u32 group = quotient(in_batch, order.group_tiles);
    const u32 first = group * kGroup;
    const u32 in_group = in_batch - group * kGroup * u32(order.tiles_n);
    const bool whole = rows - first >= kGroup;
    const u32 group_rows = whole ? kGroup : rows - first;
    const u32 group_col = whole ? in_group / kGroup : quotient(in_group, order.last_group);
    const u32 tile_row = first + in_group - group_col * group_rows;
    w.batch = int(batch);
    w.row = int(kRowClasses ? tile_row / kClasses * 64 * kClasses + tile_row % kClasses
                            : (tile_row * kClusterM + rank) * kTileM);
    if (kShiftLastRow && w.row == order.shift_from) w.row = order.shift_to;
    w.col = int(group_col * kTileCols);
    if (kShiftLastCol && w.col == order.col_shift_from) w.col = order.col_shift_to;
    return w;
  }
};

}  // namespace gemmkit::sm90
