// The tile scheduler of a grouped GEMM (gemmkit/grouped.h), whose group sizes lie in device
// memory: it provides the dense scheduler's members (scheduler.cuh), so the producer, the
// consumers and the epilogue run unchanged, plus each unit's row end, past which the epilogue
// stores nothing.
//
// Each CTA first builds a table of the groups in shared memory (build_group_table): group g owns
// ceil(rows_g / (kTileM * kClusterM)) cluster rows of tiles by tiles_n columns, and the table
// holds the number of g's first unit and g's row end. Units are numbered group after group and,
// inside a group, as the dense order does: bands of kGroupM tile rows walked column by column, so
// that CTAs running at once share a band's A rows and B columns in L2. Every unit is one tile's
// whole K: however skewed the sizes, the persistent CTAs take the tiles of a large group as they
// would any others, and none idles behind it.
// A group's first tile row starts at its first row; its last reaches past its rows (into the next
// group's in A, or past A, which TMA fills with zeros), computing rows nobody stores.
//
// Groups along N (kGroupedN: the problem transposed, so that the kernel widens 4-bit weights as
// A) are the same with rows and columns swapped: group g owns ceil(cols_g / kTileCols) tile
// columns of its tokens (B's columns) by every tile row of its weights (A, batched by group);
// bands of kGroupM tile columns are walked row by row, and each unit carries its group's column
// end, past which the epilogue (storing directly) writes nothing. An empty group owns no units,
// so its weights are never read.
//
// Groups along K (kGroupedK, the weight gradient: D_g = A_g B_g, each group's K range its own
// rows of tokens) take the dense order over the batch of groups instead (GroupedKScheduler), each
// unit with its group's K range from the table. 16-bit operands are read MN-major as they lie, and
// the consumers zero the K rows of the last K block past the group's end (clear_rows_past), which
// belong to the next group. 8-bit ones (K-major only) come staged (stage.cuh), each group's K
// range starting at a whole K block and zero-filled to a whole number of blocks, at least one.
#pragma once

#include "group_ends.cuh"
#include "kernel_config.cuh"
#include "params.h"
#include "scheduler.cuh"
#include "utility.cuh"

namespace gemmkit::sm90 {

// Contiguous groups share one A and D, each group's rows after the one before's; masked groups
// are A's and D's batches, valid up to their counts. Groups along K share A and B, D batched.
// Along N, the same holds of B's and D's columns (contiguous: kGroupedCols).
constexpr bool kGroupedRows = kGrouped && !kGroupsMasked && !kGroupedK && !kGroupedN;
constexpr bool kGroupedCols = kGrouped && !kGroupsMasked && kGroupedN;
// The sizes are cumulative ends (contiguous groups, rows, columns or K), not counts (masked).
constexpr bool kGroupEnds = kGrouped && !kGroupsMasked;
// Rows of a cluster's tile row.
constexpr int kClusterRows = kTileM * kClusterM;
// A group's tokens a line of its units covers: a cluster row of tiles, or along N a tile column.
constexpr int kLineTokens = kGroupedN ? kTileCols : kClusterRows;
static_assert(!kGroupedN || (kGrouped && !kGroupedK && kClusterM == 1 && !kTmaStore && !kRowStore),
              "groups along N run unclustered, D stored directly (up to each group's column end)");
static_assert(!kGrouped || (kGroupCapacity >= 32 && (kGroupCapacity & (kGroupCapacity - 1)) == 0),
              "the table of groups holds a power of two, at least one per lane of a warp");
static_assert(!kGrouped || (!kSplitK && !kRowClasses && !kRealignA && !kRealignB && !kDByColumns),
              "grouped kernels multiply whole tiles of TMA-read operands and store D by rows");
static_assert(!kGroupedK || (kGrouped && !kGroupsMasked && ((kAType == GEMMKIT_BF16 || kAType == GEMMKIT_F16) ? !kAKMajor : kAKMajor && kBKMajor)),
              "groups along K are contiguous: 16-bit with A's K rows (MN-major) to clear, or 8-bit staged K-major");

// Where the table lies in shared memory (smem_layout.h, group_table_bytes): kGroupCapacity + 1
// first units (the last one past the groups: the units' total), then the groups' row ends.
struct GroupTable {
  u32* units;
  u32* ends;
  __device__ explicit GroupTable(u8* at)
      : units(reinterpret_cast<u32*>(at)), ends(reinterpret_cast<u32*>(at) + kGroupCapacity + 1) {}
};

// By the 32 lanes of one warp: fills `table` from p.group_sizes, once the grids before this one
// (which may write the sizes) are done, clamped (group_ends.cuh) so that no tile reaches outside
// D (or K): contiguous ends to at least the end before and at most M (K for groups along K, N
// along N), counts to [0, M] (along N, [0, N]). (The caller's opt-in check that traps on them instead is a kernel of its own,
// group_check.cuh.) Groups along K take only the ends: their units are the dense order's.
// Lane l takes groups [l * kPerLane, (l + 1) * kPerLane), so that the units' running sum is a
// sequential pass per lane and one warp scan.
__device__ __forceinline__ void build_group_table(const GemmParams& p, GroupTable table, int lane) {
  constexpr int kPerLane = kGroupCapacity > 32 ? kGroupCapacity / 32 : 1;  // dense kernels: 0 groups
  const u32 across = u32(kGroupedN ? p.order.rows : p.order.tiles_n);  // units a line of tokens
  wait_for_prerequisite_grids();
  i64 end[kPerLane];
  const i64 end_before = clamped_group_sizes<kPerLane>(p.group_sizes, p.group_sizes_64, int(p.batch),
                                                       kGroupedK ? p.k : kGroupedN ? p.n : p.m, kGroupEnds, lane, end);
  if (kGroupedK) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) table.ends[lane * kPerLane + i] = u32(end[i]);
    return;
  }
  u32 units[kPerLane];
  u32 sum = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const i64 tokens = end[i] - (i == 0 ? end_before : kGroupEnds ? end[i - 1] : 0);
    units[i] = u32((tokens + kLineTokens - 1) / kLineTokens) * across;
    sum += units[i];
  }
  u32 before = sum;  // inclusive scan of the lanes' sums, then exclusive
  for (int d = 1; d < 32; d *= 2) {
    const u32 x = __shfl_up_sync(0xffffffffu, before, d);
    if (lane >= d) before += x;
  }
  const u32 total = __shfl_sync(0xffffffffu, before, 31);
  before -= sum;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    table.units[lane * kPerLane + i] = before;
    table.ends[lane * kPerLane + i] = u32(end[i]);
    before += units[i];
  }
  if (lane == 0) table.units[kGroupCapacity] = total;
}

struct GroupedScheduler : PersistentUnits {
  static constexpr u32 kGroup = kGroupM / kClusterM;  // lines (cluster rows; along N, tile columns) per band
  const u32* units;
  const u32* ends;
  int groups;
  u32 across;  // a line's units: tile columns (along N, tile rows)
  int col_shift_from, col_shift_to;
  int k_blocks;

  // After build_group_table filled the table at `group_table`, and a barrier that made it visible
  // to this thread.
  __device__ GroupedScheduler(const GemmParams& p, u8* group_table)
      : PersistentUnits(GroupTable(group_table).units[kGroupCapacity]),
        units(GroupTable(group_table).units),
        ends(GroupTable(group_table).ends),
        groups(int(p.batch)),
        across(u32(kGroupedN ? p.order.rows : p.order.tiles_n)),
        col_shift_from(p.order.col_shift_from),
        col_shift_to(p.order.col_shift_to),
        k_blocks(int((p.k + kTileK - 1) / kTileK)) {}

  __device__ Work work(u32 unit, int rank) const {
    // The unit's group: the last whose first unit is at most `unit` (an empty group's first unit
    // is the next group's).
    int g = 0;
#pragma unroll
    for (int step = kGroupCapacity / 2; step > 0; step /= 2) {
      if (g + step < groups && units[g + step] <= unit) g += step;
    }
    const u32 in_group = unit - units[g];
    const u32 lines = (units[g + 1] - units[g]) / across;  // the group's lines of tiles
    const u32 first = in_group / (kGroup * across) * kGroup;
    const u32 band_lines = min(kGroup, lines - first);
    const u32 in_band = in_group - first * across;
    const u32 other = in_band / band_lines;  // the tile column (along N, tile row)
    const u32 line = first + in_band - other * band_lines;
    const int start = (kGroupedRows || kGroupedCols) && g > 0 ? int(ends[g - 1]) : 0;  // the group's first token
    Work w;
    w.batch = g;
    if (kGroupedN) {
      w.row = int(other * kTileM);
      w.col = start + int(line * kTileCols);
      w.col_end = int(ends[g]);
    } else {
      w.row = start + int((line * kClusterM + rank) * kTileM);
      w.row_end = int(ends[g]);
      w.col = int(other * kTileCols);
      if (kShiftLastCol && w.col == col_shift_from) w.col = col_shift_to;
    }
    w.split = 0;
    w.k_begin = 0;
    w.k_end = k_blocks;
    w.tile = 0;  // split-K's; grouped kernels do not split
    return w;
  }
};

// Groups along K: the dense order over the batch of groups, each unit with its group's K range
// (at least one K block, all of it past the end for an empty group, so that the consumers zero it
// and store zeros, or C).
struct GroupedKScheduler : TileScheduler {
  const u32* ends;

  __device__ GroupedKScheduler(const GemmParams& p, u8* group_table)
      : TileScheduler(p, group_table), ends(GroupTable(group_table).ends) {}

  __device__ Work work(u32 unit, int rank) const {
    Work w = TileScheduler::work(unit, rank);
    w.k_first = w.batch > 0 ? int(ends[w.batch - 1]) : 0;
    w.k_size = int(ends[w.batch]) - w.k_first;
    w.k_begin = 0;
    w.k_end = max(1, (w.k_size + kTileK - 1) / kTileK);
    return w;
  }
};

// By the 128 threads of a consumer warpgroup (t), in the last K block of a unit of groups along K:
// once the block has landed, zeroes its K rows from `valid` on (the next group's, or past K) in
// the warpgroup's slice of A and in B, both MN-major (64-wide blocks of a 128-byte row per K
// element), and makes the zeros visible to wgmma. Both operands: a zero times the next group's
// infinity would still be NaN. Every consumer warpgroup clears B alike; the values it writes
// over another's are the same zeros.
__device__ __forceinline__ void clear_rows_past(u8* slice_a, u8* stage_b, int b_blocks, int valid, int t, u64* full,
                                                u32 phase, int barrier_id) {
  if (valid >= kTileK) return;
  mbarrier_wait(full, phase);
  const int first = (valid < 0 ? 0 : valid) * 8;  // 16-byte chunks, 8 a row
  constexpr int kChunks = kTileK * 8;             // a 64-wide block's
  for (int i = first + t; i < kChunks * (1 + b_blocks); i += 128) {
    if (i % kChunks < first) continue;
    u8* block = i < kChunks ? slice_a : stage_b + (i / kChunks - 1) * kTileK * 128;
    *reinterpret_cast<uint4*>(block + (i % kChunks) * 16) = make_uint4(0, 0, 0, 0);
  }
  fence_async_shared();
  named_barrier_sync(barrier_id, 128);
}

}  // namespace gemmkit::sm90
