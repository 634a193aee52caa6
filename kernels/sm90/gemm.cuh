// The dense GEMM kernel for sm_90a: D = alpha * A * B + beta * C, bf16/f16 or e4m3/e5m2 in,
// f32 accumulate.
//
// Warp-specialised and persistent. Warpgroup 0 is the producer: one thread walks the tiles and
// streams K slices of A and B, 128 bytes deep (64 16-bit or 128 8-bit elements), into a ring of
// kStages shared-memory stages with TMA, block and mx scales with them.
// Warpgroups 1..kConsumers each own 64 rows of the kTileM x kTileN tile and multiply with wgmma,
// then run the epilogue while the producer already fetches the next tile (part of it waits for
// the next tile's first K block: kDeferGroups). Each stage has a "full" barrier (TMA bytes
// landed) and an "empty" barrier (every consumer warp is done with it).
// The producer also works out where each tile lies and leaves it in a slot beside the stage of
// the tile's first K block, so the consumers, who wait for that stage anyway, read it there
// instead of repeating the scheduler's divisions between two tiles, when the tensor cores idle.
//
// With kClusterM = 2, two CTAs of a cluster take vertically adjacent tiles, which share their
// columns of B: each CTA loads half of the B slice and multicasts it to both, halving B's L2
// traffic. A stage is then refilled only when the consumers of both CTAs have released it, so
// consumer warps arrive on the empty barriers of every CTA in the cluster.
//
// With kSplitK, each tile's K range is cut into p.splits parts, taken by different CTAs as
// separate work units and summed by the last to finish (split_k.cuh).
//
// 8-bit inputs (both K-major, as wgmma requires) take the same pipeline; their consumers
// accumulate in two levels (promote.cuh).
//
// With kRealignA or kRealignB, that operand (16-bit, which TMA cannot address) is loaded by the
// producer warpgroup's threads instead (realign.cuh): warps 0-1 copy the granules that hold a
// stage's rows into a landing ring beside the stages, counted on that stage's "landed" barrier;
// warps 2-3 wait for it, write the rows into the stage as TMA would have, and arrive on the full
// barrier.
//
// With kRowClasses, A (16-bit, K-major, rows TMA cannot address) is read by TMA one class of rows
// at a time, and B from 8 shifted copies (row_classes.cuh); a tile's rows lie kRowStep apart in D.
//
// 4-bit weights (kWidenA: A u4 or e2m1) come packed into the stage with their scales; the
// consumers widen their fragments into registers and multiply from there (widen.cuh); against
// 8-bit B (W4A8), in the 8-bit loop, each K block's partial promoted by the weights' group scales.
//
// kernel_config.cuh (generated) defines the configuration: kTileM, kTileN, kTileK, kStages,
// kGroupM, kClusterM, kSplitK, kAKMajor, kBKMajor, kAType, kBType, kOutType, kCType, kHasC,
// kScaleA, kScaleB, kScaleMNA, kScaleMNB, kABatched, kBBatched, kRealignA, kRealignB,
// kRowClasses, kTmaStore, kRowStore, kDByColumns, kStoreBoxBytes, kStoreBuffers, kSmemBytes
// (the host's smem_layout total), kGrouped, kGroupsMasked, kGroupedK, kGroupCapacity, and
// wgmma_tile().
//
// Grouped problems (kGrouped: one GEMM per group, sizes in device memory) take the same kernel
// with the grouped scheduler (grouped_scheduler.cuh): B is batched by group, and each work unit
// carries its group's row end, past which the epilogue stores nothing. Groups along K (the weight
// gradient: kGroupedK) walk the dense order over a batch of groups, each unit with its group's K
// range.
// A dual GEMM (kDual: SwiGLU's gate and up projections) multiplies A by B and by a second B, B2,
// in one accumulator: each stage holds kTileN / 2 columns of B, then the same columns of B2 (in a
// cluster of two, each CTA loads one operand's half for both). The epilogue pairs column c of the
// accumulators with column c + kTileN / 2 (epilogue.cuh), and a tile stores kTileCols = kTileN / 2
// columns of D. With 8-bit inputs, each half takes its own operand's scales (b_column): the
// promotion's inner ones, the epilogue's column scales.
// kTileN is any multiple of 16 up to 256.
#pragma once

#include "common.cuh"
#include "epilogue.cuh"
#include "grouped_scheduler.cuh"
#include "kernel_config.cuh"
#include "params.h"
#include "promote.cuh"
#include "realign.cuh"
#include "row_classes.cuh"
#include "scales.cuh"
#include "scheduler.cuh"
#include "smem_layout.h"
#include "split_k.cuh"
#include "widen.cuh"

namespace gemmkit::sm90 {

constexpr u32 kRowBytes = kStageRowBytes;  // a K slice's row: one 128-byte swizzle row
constexpr int kConsumers = kTileM / 64;
// Narrow 4-bit tiles run several CTAs an SM, whose producer is one warp (warp 4, after the
// consumer warpgroup) rather than a warpgroup holding registers for its one TMA thread: four CTAs
// then keep 96 registers a thread (kernel_config.cpp).
constexpr bool kProducerWarp = kWidenA && kConsumers == 1 && kCtasPerSm > 1;
constexpr int kThreads = kProducerWarp ? 160 : 128 * (kConsumers + 1);
constexpr u32 kSwizzleAtom = 1024;      // 8 rows of 128 bytes
constexpr u32 kMajorBlock = 64 * kRowBytes;  // one 64-wide MN block of an MN-major (16-bit) tile
constexpr int kBlocksN = (kTileN + 63) / 64;  // 64-wide blocks of an N-major B slice (the last may be partial)
// The shared-memory layout (smem_layout.h), as the host reserves it. kRowStore: D written
// through one buffer per consumer, row by row, where TMA cannot store it.
constexpr SmemLayout kSmem =
    smem_layout({kTileM, kTileN, kStages, kBKMajor, kTmaStore ? kStoreBuffers : kRowStore ? 1 : 0, kRealignA, kRealignB,
                 kScaleA, kScaleB, kScaleMNA, kScaleMNB, kGroupCapacity, kGroupedN, kDual, kWidenRows, kPackedRowBytes,
                 kWidenScaleBytes, kWidenGroups, kZeros});
static_assert(kSmem.total == kSmemBytes, "the kernel's shared-memory layout differs from the host's");
static_assert(kSmem.stage_scales == kStageScaleBytes && kSmem.stage_b == (kBKMajor ? kTileN : kBlocksN * 64) * kRowBytes,
              "the stage layout differs from what the producer loads");
static_assert(kSmemAlignment == kSwizzleAtom, "stages start on a swizzle atom");
static_assert(kSmem.scales % 16 == 0 && kSmem.column_scales % 16 == 0 && kSmem.mx_floats % 16 == 0,
              "staged scales and mx floats are 16-byte aligned");
constexpr u32 kStageBytesA = kSmem.stage_a, kStageBytesB = kSmem.stage_b;
constexpr u32 kEpilogueBytes = kSmem.landing_rows - kSmem.epilogue;
// Realigned operands: the stage rows of each slice (a K-major slice's rows, an MN-major one's 64
// K rows per 64-wide block) and the landing ring's rows per stage, A's first.
constexpr bool kRealign = kRealignA || kRealignB;
constexpr int kRowsA = kStageBytesA / kRowBytes, kRowsB = kStageBytesB / kRowBytes;
constexpr int kLandingRowsBeforeB = kRealignA ? kRowsA : 0;
constexpr u32 kLandingBytes = kSmem.landing;
constexpr int kCopyWarps = 2, kRealignWarps = 2;  // the producer's warps 0-1 and 2-3
constexpr u32 kTmaStageBytes = (kRealignA ? 0 : kWidenA ? kWidenTmaBytes : kStageBytesA) + (kRealignB ? 0 : kStageBytesB);
static_assert(!kWidenA || kStageBytesA == kPackedBytes, "a 4-bit A's stage slice holds its packed rows");
static_assert(!kRealign || (kClusterM == 1 && kConsumers == 1 && !k8Bit),
              "realigned operands run on unclustered 16-bit tiles of one consumer warpgroup");
static_assert(!kDual || (!kSplitK && !kGroupedK && !kRealignB && !kRowClasses && !kDByColumns && kClusterM <= 2 &&
                         (kBKMajor || kTileN % 128 == 0)),
              "dual GEMMs run on unsplit tiles (dense or groups of rows) with B read by TMA, N-major B's halves whole "
              "64-wide blocks");
static_assert(!kRowClasses || (kClusterM == 1 && kConsumers == 1 && !k8Bit && !kRealign && !kTmaStore && kAKMajor &&
                               kBKMajor && !kABatched && kTileK == kClassBlock),
              "row classes run on unclustered, unbatched 16-bit K-major tiles of one consumer warpgroup, stored directly");
// Registers per thread after reallocation: the producer gives most of its own back, and the
// consumers share the rest of what the launch gave the CTA (kLaunchRegisters per thread, as
// __launch_bounds__ allows) in multiples of 8, at most 240 (224 for two, 152 for three). Asking
// for more than the launch gave deadlocks: setmaxnreg.inc waits for registers that never free.
// A producer that realigns keeps 128 (its row copies spilled at 96 on some tiles), which
// still leaves its single consumer warpgroup 240. Two partial accumulators (multiply_8bit_runs)
// fit where promotion reads no scales from the stage and has one granule per K block (not mx,
// not 128x1 B blocks): in a single consumer warpgroup (half-height tiles, 240 registers), split-K
// included, since no other warpgroup fills the tensor cores while it promotes; and in two up to
// 128 wide (224 registers, the producer keeping 56), not with
// split-K, whose reduction needs registers too, nor grouped (block scales at 128 x 128 spilled
// 8 bytes in the main loop), and not wider (128 x 144 spills). (Per-tensor
// 128 x 128 on fp8-large: 0.88x cuBLASLt with two partials, 0.85x with one; H100.)
constexpr int kLaunchRegisters = (65536 / kThreads / kCtasPerSm < 255 ? 65536 / kThreads / kCtasPerSm : 255) / 8 * 8;
constexpr bool kTwoPartials = !kPromoteReadsStage && kGranules == 1 && kTileN <= 128 && !kWidenA &&
                              (kConsumers == 1 || (kConsumers == 2 && !kSplitK && !kGrouped));
constexpr int kProducerRegisters = kRealign ? 128 : 56;
constexpr int kConsumerShare = (kLaunchRegisters * (kConsumers + 1) - kProducerRegisters) / kConsumers / 8 * 8;
constexpr int kConsumerRegisters = kConsumerShare < 240 ? kConsumerShare : 240;
static_assert(kProducerRegisters + kConsumers * kConsumerRegisters <= kLaunchRegisters * (kConsumers + 1),
              "registers reallocated beyond what the launch gives the CTA");

static_assert(sizeof(Work) == kWorkSlotBytes && sizeof(u64) == kBarrierBytes, "the layout's work slots and barriers");

static_assert(kSmem.mx_floats - kSmem.column_scales == 2 * kConsumers * kColumnScaleBytes &&
                  kSmem.group_table - kSmem.mx_floats == 2 * kConsumers * kMxFloatBytes,
              "the layout's column and mx scale buffers are the epilogue's and promotion's");

// The tile scheduler: the dense one (scheduler.cuh) or, for grouped problems, one reading the
// group sizes (grouped_scheduler.cuh): groups of rows, or groups along K.
template <bool kIsGrouped, bool kAlongK>
struct SchedulerFor {
  using type = TileScheduler;
};
template <>
struct SchedulerFor<true, false> {
  using type = GroupedScheduler;
};
template <>
struct SchedulerFor<true, true> {
  using type = GroupedKScheduler;
};
using Scheduler = SchedulerFor<kGrouped, kGroupedK>::type;

// A box of B: into this CTA alone, or multicast to every CTA of the cluster.
__device__ __forceinline__ void load_b_box(u8* dst, const TensorMap* map_b, u64* full, int x, int y, int z) {
  if (kClusterM == 1) {
    tma_load_3d(dst, map_b, full, x, y, z);
  } else {
    tma_load_3d_multicast(dst, map_b, full, x, y, z, u16((1u << kClusterM) - 1));
  }
}

// Loads the K slice `k_block` of A and B for the tile at (batch, row, col) into one stage, but
// for realigned operands (the producer's other warps load those); K block 0 starts at K element
// k_first (groups along K; else 0). With row classes, A's box comes from the class's groups and
// B's from the class's copy.
// K-major operands come in boxes of rows x 64; MN-major ones in boxes of 64 x 64 (a swizzle
// row holds only 64 elements), one per 64-wide block of M or N. B's boxes are shared out
// among the cluster's CTAs (K-major: kTileN / kClusterM rows each; N-major: every
// kClusterM-th block), and the full barrier expects the whole slice from all of them.
// A dual GEMM's stage holds B's half of the slice, then B2's (map_b2), each kTileN / 2 columns
// from `col`: K-major, one box each (in a cluster of two, CTA r loads half r); N-major, blocks.
// Inner scales come with the data, each CTA's own, into the stage's scales `scales`
// (promote.cuh, load_stage_scales).
__device__ __forceinline__ void load_stage(const GemmParams& p, const KernelMaps& maps, u8* a, u8* b, u32 scales,
                                           u64* full, int rank, int batch, i64 row, i64 col, int k_first,
                                           int k_block) {
  const TensorMap *map_a = &maps.a, *map_b = &maps.b, *map_b2 = &maps.b2;
  const int k = k_first + k_block * kTileK;
  const int batch_a = kABatched ? batch : 0;  // else broadcast
  int batch_b = kBBatched ? batch : 0;
  mbarrier_arrive_expect_tx(full, kTmaStageBytes + kTmaScaleBytes);
  if (kInnerScales) load_stage_scales(scales, maps, p, full, batch, row, col, k_block);
  if (kRowClasses) {
    const RowClass c = row_class(p, row);
    tma_load_3d(a, map_a, full, c.x + k, int(row / kClasses), 0);
    batch_b = c.index;
  } else if (kWidenA) {
    load_packed_stage(p, maps, a, scales, full, batch_a, row, k);
  } else if (!kRealignA && kAKMajor) {
    tma_load_3d(a, map_a, full, k, int(row), batch_a);
  } else if (!kRealignA) {
    for (int i = 0; i < kTileM / 64; ++i) tma_load_3d(a + i * kMajorBlock, map_a, full, int(row) + 64 * i, k, batch_a);
  }
  if (!kRealignB && kBKMajor && kDual) {
    for (int half = rank; half < 2; half += kClusterM) {
      load_b_box(b + half * (kTileN / 2) * kRowBytes, half == 0 ? map_b : map_b2, full, k, int(col), batch_b);
    }
  } else if (!kRealignB && kBKMajor) {
    constexpr int rows = kTileN / kClusterM;
    load_b_box(b + rank * rows * kRowBytes, map_b, full, k, int(col) + rank * rows, batch_b);
  } else if (!kRealignB) {
    for (int i = rank; i < kBlocksN; i += kClusterM) {
      const bool second = kDual && i >= kBlocksN / 2;  // B2's half
      load_b_box(b + i * kMajorBlock, second ? map_b2 : map_b, full, int(col) + 64 * (second ? i - kBlocksN / 2 : i), k,
                 batch_b);
    }
  }
}

// The slices of A and B whose rows a stage of K block `k_block` of work unit `w` holds.
__device__ __forceinline__ SliceSource slice_a(const GemmParams& p, const Work& w, int k_block) {
  return SliceSource(p.a, true, kAKMajor, p.m, p.k, kABatched ? w.batch * p.a.batch_stride : 0, w.row,
                     i64(k_block) * kTileK);
}
__device__ __forceinline__ SliceSource slice_b(const GemmParams& p, const Work& w, int k_block) {
  return SliceSource(p.b, false, kBKMajor, p.n, p.k, kBBatched ? w.batch * p.b.batch_stride : 0, w.col,
                     i64(k_block) * kTileK);
}

// The copying warps (every lane): start the copies of a stage's realigned rows into its landing
// slot, A's rows first; each lane's copies arrive on the landed barrier as they complete.
__device__ __forceinline__ void copy_stage_rows(const GemmParams& p, const Work& w, int k_block, const u8* landing,
                                                u64* landed, int thread) {
  const u32 to = smem_u32(landing);
  const int warp = thread / 32, lane = thread % 32;
  if (kRealignA) copy_slice_granules(slice_a(p, w, k_block), kRowsA, to, warp, kCopyWarps, lane);
  if (kRealignB) {
    copy_slice_granules(slice_b(p, w, k_block), kRowsB, to + kLandingRowsBeforeB * kLandingRowBytes, warp, kCopyWarps,
                        lane);
  }
  cp_async_arrive(landed);
}

// The realigning warps, once the stage's rows have landed: each thread writes some of them into
// the stage; then each warp arrives on the full barrier, its writes fenced for wgmma's reads.
__device__ __forceinline__ void realign_stage(const GemmParams& p, const Work& w, int k_block, const u8* landing,
                                              u8* a, u8* b, u64* full, int thread) {
  auto realign_slice = [&](const SliceSource& slice, int rows, const u8* from, u8* to) {
    for (int r = thread; r < rows; r += 32 * kRealignWarps) {
      const u32 at = smem_u32(to + r * kRowBytes);
      // The swizzle XORs a row's 16-byte chunk index with its address bits 7-9.
      realign_row(smem_u32(from + r * kLandingRowBytes), slice.row(r), at, int(at >> 7) % 8);
    }
  };
  if (kRealignA) realign_slice(slice_a(p, w, k_block), kRowsA, landing, a);
  if (kRealignB) realign_slice(slice_b(p, w, k_block), kRowsB, landing + kLandingRowsBeforeB * kLandingRowBytes, b);
  fence_async_shared();
  __syncwarp();
  if (thread % 32 == 0) mbarrier_arrive(full);
}

// A K block's place in the ring: the stage that holds it and the parity of that stage's current
// use (the phase its barriers are in). Stepped one K block at a time: worked out from a running
// count, the division by kStages sat on the consumers' path from one K block's wgmma to the next.
// `odd` says whether an odd number of K blocks went before (mx's alternate float buffers).
struct RingSlot {
  u32 stage = 0, phase = 0, odd = 0;
  __device__ __forceinline__ RingSlot next() const {
    RingSlot n{stage + 1, phase, odd ^ 1};
    if (n.stage == kStages) {
      n.stage = 0;
      n.phase ^= 1;
    }
    return n;
  }
};

// The producer's walk: for each K block of each of this CTA's work units, in order, waits until
// the stage it goes to is ready, then lets `fill` fill it. Ready means released by the consumers
// (`ready` = the empty barriers, whose first wait is on the phase before: `flip` 1), or, for the
// warps that realign rows, landed (the landed barriers, `flip` 0).
// The grids before this one in the stream may still be writing what the stages load (A, B,
// scales): only the first fill waits for them, so that everything before it (the first unit's
// place, the instructions' first fetch) overlaps their end. Returns the slot after the last one
// filled.
template <class Fill>
__device__ __forceinline__ RingSlot for_each_stage(const Scheduler& tiles, int rank, u64* ready, u32 flip, Fill fill) {
  RingSlot slot;
  bool first = true;
  for (u32 unit = tiles.first(); !tiles.done(unit); unit = tiles.next(unit)) {
    const Work w = tiles.work(unit, rank);
    for (int kb = w.k_begin; kb < w.k_end; ++kb, slot = slot.next()) {
      mbarrier_wait(&ready[slot.stage], slot.phase ^ flip);
      if (first) wait_for_prerequisite_grids();
      first = false;
      fill(w, kb, slot.stage);
    }
  }
  return slot;
}

// In a cluster, the TMA thread waits, before its CTA may leave, until the consumer warps of every
// CTA have released the last kStages stages it filled (a stage never filled passes at once).
// After that no arrival from a peer can reach this CTA's barriers, and the peers' multicast
// loads into it have all landed (its own consumers waited for each), so the CTAs of a cluster
// need no cluster barrier at the end.
__device__ __forceinline__ void wait_for_last_releases(u64* empty, RingSlot slot) {
  for (int i = 0; i < kStages; ++i, slot = slot.next()) mbarrier_wait(&empty[slot.stage], slot.phase ^ 1);
}

// Leaves in a work slot what the consumers read of a unit: where its tile lies and, for
// split-K, which part of K it is. Writing only those keeps the producer within its registers.
__device__ __forceinline__ void publish(Work& slot, const Work& w) {
  slot.batch = w.batch;
  slot.row = w.row;
  slot.col = w.col;
  if (kRowEnds) slot.row_end = w.row_end;
  if (kColEnds) slot.col_end = w.col_end;
  if (kGroupedK) {
    slot.k_first = w.k_first;
    slot.k_size = w.k_size;
    slot.k_begin = w.k_begin;
    slot.k_end = w.k_end;
  }
  if (kSplitK) {
    slot.tile = w.tile;
    slot.split = w.split;
    slot.k_begin = w.k_begin;
    slot.k_end = w.k_end;
  }
}

// A consumer warp is done with a stage: tell the producer of every CTA that fills it.
__device__ __forceinline__ void release_stage(u64* empty) {
  if (kClusterM == 1) {
    mbarrier_arrive(empty);
  } else {
    for (int cta = 0; cta < kClusterM; ++cta) mbarrier_arrive_cluster(empty, cta);
  }
}

// Low word of the descriptor of an operand tile (the high word is the same for all: 8-row atoms
// kSwizzleAtom apart). K-major: rows of 128 bytes. MN-major: 64-wide MN blocks kMajorBlock apart.
__device__ __forceinline__ u32 operand_descriptor_low(const u8* tile, bool k_major) {
  return descriptor_low(tile, k_major ? 16 : kMajorBlock);
}

// Descriptor low words of a consumer's slice of A and of B in stage 0; stage s adds s times a
// stage's size in 16-byte units.
struct StageDescriptors {
  u32 a, b;
  __device__ __forceinline__ StageDescriptors(const u8* stages_a, const u8* stages_b, int slice, bool a_k_major,
                                              bool b_k_major)
      : a(operand_descriptor_low(stages_a + slice * 64 * kRowBytes, a_k_major)),
        b(operand_descriptor_low(stages_b, b_k_major)) {}
  __device__ __forceinline__ u32 low_a(u32 stage) const { return a + stage * (kStageBytesA / 16); }
  __device__ __forceinline__ u32 low_b(u32 stage) const { return b + stage * (kStageBytesB / 16); }
};

// How far one 16-deep K step moves a descriptor's start address (in its 16-byte units):
// 32 bytes along a K-major row, 16 rows (2 KB) down an MN-major block.
__device__ __forceinline__ u32 k_step(bool k_major) { return k_major ? 32 / 16 : 2 * kSwizzleAtom / 16; }

// A tile's epilogue leaves its last column groups to the next tile: their stmatrix operands wait
// in registers (packed, half the accumulators' size) and are staged and stored while the next
// tile's first K block multiplies, so the tensor cores idle through half as long an epilogue.
// Only for 16-bit D stored with TMA, unsplit and without C, from 16-bit inputs: f32 pairs would
// not fit (e4m3 pairs are staged as they are made), and with C's loads or 8-bit inputs' partial accumulators the consumers run out of
// registers.
constexpr bool kDeferGroups = kTmaStore && kOutBytes == 2 && !kSplitK && !kHasC && !k8Bit && kGroups > 1;
constexpr int kDeferFrom = (kGroups + 1) / 2;  // groups [kDeferFrom, kGroups) wait
constexpr int kDeferredRegisters = kDeferGroups ? (kGroups - kDeferFrom) * kPackedPerGroup : 1;

// Named barrier of consumer warpgroup `slice` alone: kWarpgroupBarrier + slice (1 + slice is
// split-K's).
constexpr int kWarpgroupBarrier = 1 + kConsumers;

// Consumer warpgroups with two partial accumulators take turns issuing their K blocks, passing a
// token through named barriers (kTurnBarrier + slice: slice's turn), so that the tensor cores
// take their groups alternately (fp8-large's block shapes 1.02x faster, H100). The one-partial
// loop (multiply_8bit) takes no turns: they slow its tiles (per-tensor 0.97x, mx 0.95x).
constexpr bool kTakeTurns = kTwoPartials && kConsumers > 1;
constexpr int kTurnBarrier = kWarpgroupBarrier + kConsumers;
__device__ __forceinline__ void take_turn(int slice) {
  if (kTakeTurns) named_barrier_sync(kTurnBarrier + slice, 256);
}
__device__ __forceinline__ void pass_turn(int slice) {
  if (kTakeTurns) named_barrier_arrive(kTurnBarrier + (slice + 1) % kConsumers, 256);
}

// Commits the wgmma group of the K block in `slot`, which has arrived, into `acc`, adding to
// what `acc` holds where `accumulate` says so.
__device__ __forceinline__ void issue_k_block(float* acc, RingSlot slot, const StageDescriptors& stages,
                                              bool accumulate) {
  const u32 low_a = stages.low_a(slot.stage), low_b = stages.low_b(slot.stage);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kRowBytes / 32; ++kk) {
    wgmma_tile(acc, smem_descriptor(low_a + kk * k_step(kAKMajor), kSwizzleAtom),
               smem_descriptor(low_b + kk * k_step(kBKMajor), kSwizzleAtom), (accumulate || kk > 0) ? 1u : 0u);
  }
  wgmma_commit();
}

// 4-bit weights (widen.cuh): widens the K block in `slot` into this thread's fragments and
// commits its wgmma group, A from those registers, into `acc`; row_scales: its rows' group scales.
__device__ __forceinline__ void issue_widened_k_block(float* acc, u32 (&fragments)[16], RowScales& row_scales,
                                                      u32 stages_a, u32 stage_scales, const WidenLanes& lanes,
                                                      RingSlot slot, const StageDescriptors& stages, bool accumulate) {
  if constexpr (kWidenA) {
    widen_fragments(fragments, row_scales, stages_a + slot.stage * kStageBytesA,
                    stage_scales + slot.stage * kStageScaleBytes, lanes);
    const u32 low_b = stages.low_b(slot.stage);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kRowBytes / 32; ++kk) {
      wgmma_tile_registers(acc, fragments + 4 * kk, smem_descriptor(low_b + kk * k_step(kBKMajor), kSwizzleAtom),
                           (accumulate || kk > 0) ? 1u : 0u);
    }
    wgmma_commit();
  }
}

// 8-bit inputs: each K granule of a K block is multiplied into `partial`, whose sums the tensor
// cores keep narrower than f32, then promoted into `acc` with its inner scales. The scales a
// thread needs throughout the K block are read while its first granule multiplies (B's mx ones
// converted to floats first). A stage goes back to the producer once its last granule has
// multiplied, or where promotion reads B's scales from it (128x1 blocks), once that is promoted.
// The wait for the next K block's data comes while the last granule multiplies, not between its
// promotion and the next block's wgmma, where the tensor cores may be waiting for this warpgroup.
// kColInBlock: the tile's first column modulo 128 (promote.cuh). skew: where the tile's scales lie.
// W4A8 (kWidenA): A's fragments are widened from the stage's packed weights (at `stages_a`, the
// thread's bytes where `lanes` says) before the K block's first wgmma, and its group scales take
// the place of A's inner scales.
template <int kColInBlock>
__device__ __forceinline__ void multiply_8bit(float* acc, const ScaleSkew& skew, int k_count, RingSlot& slot, int slice,
                                              int t, const StageDescriptors& stages, u32 stages_a, const WidenLanes& lanes,
                                              u32 stage_scales, u32 mx_float_buffers, u64* full, u64* empty) {
  constexpr int kSteps = kRowBytes / 32 / kGranules;  // k32 wgmma steps per granule
  float partial[kTileN / 2];
  u32 fragments[16];  // W4A8's widened A (unused otherwise)
  RowScales group_scales[kGranules];
#pragma unroll
  for (int i = 0; i < kTileN / 2; ++i) acc[i] = 0.0f;
  mbarrier_wait(&full[slot.stage], slot.phase);
  for (int i = 0; i < k_count; ++i, slot = slot.next()) {
    const u32 s = slot.stage;
    const u32 low_a = stages.low_a(s), low_b = stages.low_b(s);
    const u32 scales = stage_scales + s * kStageScaleBytes;
    const u32 mx_floats = mx_float_buffers + (2 * slice + slot.odd) * kMxFloatBytes;
    if (kMxB) {
      convert_mx_scales(mx_floats, scales, t);
      named_barrier_sync(kWarpgroupBarrier + slice, 128);
    }
    // Read now, before the first wgmma: ptxas would place loads issued after it among the wgmma
    // instructions, where the tensor cores wait for them.
    const KBlockScales k_scales = read_k_block_scales(scales, skew, skew.k_first + i, slice, t);
    if constexpr (kWidenA) widen_fragments_8bit(fragments, group_scales, stages_a + s * kStageBytesA, scales, lanes);
#pragma unroll
    for (int g = 0; g < kGranules; ++g) {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk) {
        const u32 step = (g * kSteps + kk) * k_step(true);
        if constexpr (kWidenA) {
          wgmma_tile_registers(partial, fragments + 4 * (g * kSteps + kk), smem_descriptor(low_b + step, kSwizzleAtom),
                               kk > 0 ? 1u : 0u);
        } else {
          wgmma_tile(partial, smem_descriptor(low_a + step, kSwizzleAtom), smem_descriptor(low_b + step, kSwizzleAtom),
                     kk > 0 ? 1u : 0u);
        }
      }
      wgmma_commit();
      if (g == kGranules - 1 && i + 1 < k_count) {
        const RingSlot next = slot.next();
        mbarrier_wait(&full[next.stage], next.phase);
      }
      wgmma_wait<0>();
#pragma unroll
      for (int j = 0; j < kTileN / 2; ++j) fence_register(partial[j]);
      if (g == kGranules - 1 && !kPromoteReadsStage && t % 32 == 0) release_stage(&empty[s]);
      promote<kColInBlock>(acc, partial, kWidenA ? group_scales[g] : a_scales(k_scales, g), k_scales,
                           scales + 4 * skew.b_skew, mx_floats + 4 * skew.b_skew, g, t);
    }
    if (kPromoteReadsStage && t % 32 == 0) release_stage(&empty[s]);
  }
}

// Runs multiply_8bit compiled for `col_in_block` (a multiple of kColStep below 128), through a
// chain of branches, one per possible value: one copy of the K loop for each.
template <int kColInBlock = 0>
__device__ __forceinline__ void multiply_8bit_at(int col_in_block, float* acc, const ScaleSkew& skew, int k_count,
                                                 RingSlot& slot, int slice, int t, const StageDescriptors& stages,
                                                 u32 stages_a, const WidenLanes& lanes, u32 stage_scales,
                                                 u32 mx_float_buffers, u64* full, u64* empty) {
  if constexpr (kColInBlock + kColStep < 128) {
    if (col_in_block != kColInBlock) {
      multiply_8bit_at<kColInBlock + kColStep>(col_in_block, acc, skew, k_count, slot, slice, t, stages, stages_a,
                                                lanes, stage_scales, mx_float_buffers, full, empty);
      return;
    }
  }
  multiply_8bit<kColInBlock>(acc, skew, k_count, slot, slice, t, stages, stages_a, lanes, stage_scales,
                             mx_float_buffers, full, empty);
}

// Waits for all but the newest `in_flight` wgmma groups, hands the K block's `stage` back and
// promotes it from `partial`.
template <int kInFlight>
__device__ __forceinline__ void finish_k_block(float* acc, float* partial, const KBlockScales& scales, u32 stage,
                                               int t, u64* empty) {
  wgmma_wait<kInFlight>();
#pragma unroll
  for (int j = 0; j < kTileN / 2; ++j) fence_register(partial[j]);
  if (t % 32 == 0) release_stage(&empty[stage]);
  promote<0>(acc, partial, a_scales(scales, 0), scales, 0, 0, 0, t);  // tiles up to 128 wide: kColStep = 128
}

// kBlocks K blocks, alternating between two partial accumulators: block j + 1 is issued before
// block j is promoted, so the tensor cores multiply one while the other is promoted. A run ends
// with nothing in flight: ptxas serialises every wgmma where accumulators are read with others
// in flight across a loop (C7514), so the tensor cores wait once per run. k_block: the run's first.
template <int kBlocks>
__device__ __forceinline__ void multiply_run(float* acc, float* first, float* second, const ScaleSkew& skew,
                                             int k_block, RingSlot& slot, int slice, int t,
                                             const StageDescriptors& stages, u32 stage_scales, u64* full, u64* empty) {
  // A block's scales are read once it has arrived, before its wgmma: loads issued after them
  // would sit among them (promote.cuh).
  auto arrived = [&](RingSlot at, int kb) {
    mbarrier_wait(&full[at.stage], at.phase);
    return read_k_block_scales(stage_scales + at.stage * kStageScaleBytes, skew, kb, slice, t);
  };
  auto issue_in_turn = [&](float* partial, RingSlot at) {
    take_turn(slice);
    issue_k_block(partial, at, stages, false);
    pass_turn(slice);
  };
  KBlockScales scales = arrived(slot, k_block);
  issue_in_turn(first, slot);
#pragma unroll
  for (int j = 0; j < kBlocks; ++j) {
    float* partial = j % 2 == 0 ? first : second;
    const RingSlot next = slot.next();
    if (j + 1 < kBlocks) {
      const KBlockScales next_scales = arrived(next, k_block + j + 1);
      issue_in_turn(j % 2 == 0 ? second : first, next);
      finish_k_block<1>(acc, partial, scales, slot.stage, t, empty);
      scales = next_scales;
    } else {
      finish_k_block<0>(acc, partial, scales, slot.stage, t, empty);
    }
    slot = next;
  }
}

// Tiles whose consumers have registers for two partial accumulators (kTwoPartials) multiply in
// runs of kRunBlocks K blocks; the K blocks that do not fill a run go first, in a run of one and
// one of two.
constexpr int kRunBlocks = 4;
__device__ __forceinline__ void multiply_8bit_runs(float* acc, const ScaleSkew& skew, int k_count, RingSlot& slot,
                                                    int slice, int t, const StageDescriptors& stages, u32 stage_scales,
                                                    u64* full, u64* empty) {
  float first[kTileN / 2], second[kTileN / 2];
#pragma unroll
  for (int i = 0; i < kTileN / 2; ++i) acc[i] = 0.0f;
  int i = 0;
  if (k_count % 2 == 1) {
    multiply_run<1>(acc, first, second, skew, skew.k_first, slot, slice, t, stages, stage_scales, full, empty);
    i = 1;
  }
  if ((k_count - i) % kRunBlocks != 0) {
    multiply_run<2>(acc, first, second, skew, skew.k_first + i, slot, slice, t, stages, stage_scales, full, empty);
    i += 2;
  }
  for (; i < k_count; i += kRunBlocks) {
    multiply_run<kRunBlocks>(acc, first, second, skew, skew.k_first + i, slot, slice, t, stages, stage_scales, full,
                             empty);
  }
}

// A consumer warpgroup: multiplies its `slice` (64 rows) of each tile, then stores it.
__device__ __forceinline__ void consume(const TensorMap& map_d, const GemmParams& p, const Scheduler& tiles,
                                        int slice, int t,
                                        u8* stages_a, u8* stages_b, u32 stage_scales,
                                        u32 column_scale_buffers, u32 mx_float_buffers, u8* epilogue_buffers,
                                        u64* full, u64* empty, const Work* slots) {
  const bool warp_leader = t % 32 == 0;
  // This warpgroup's two column-scale buffers, used by alternate tiles: a tile's copies start
  // after every thread has passed the previous tile's barrier, so after the one before's epilogue.
  int column_buffer = 0;
  // The first turn is the first warpgroup's: the last one passes it a token to start with, and it
  // takes the last token back after its last turn.
  if (slice == kConsumers - 1) pass_turn(slice);
  u8* buffers = epilogue_buffers + slice * (kEpilogueBytes / kConsumers);
  float acc[kTileN / 2];
  u32 deferred[kDeferredRegisters];
  TileOrigin deferred_at{};
  bool have_deferred = false;
  const StageDescriptors stages(stages_a, stages_b, slice, kAKMajor, kBKMajor);
  RingSlot slot;
  for (u32 unit = tiles.first(); !tiles.done(unit); unit = tiles.next(unit)) {
    mbarrier_wait(&full[slot.stage], slot.phase);
    const Work w = slots[slot.stage];  // the stage holds the unit's first K block
    // Unsplit, the count is a kernel parameter, not a value loaded from shared memory, which
    // lets the compiler keep the loop's bookkeeping in uniform registers.
    const int k_count = kSplitK || kGroupedK ? w.k_end - w.k_begin : tiles.k_blocks;
    const u32 column_scales = column_scale_buffers + (2 * slice + column_buffer) * kColumnScaleBytes;
    column_buffer ^= 1;
    if (kColumnScales) stage_column_scales(column_scales, p, w.batch, w.col, t);
    // The outer scales of the thread's rows are loaded now, so that the main loop hides their
    // latency from the epilogue.
    const i64 slice_row = w.row + slice * 64;
    // D's batch: the group's, but for contiguous groups, which share one D.
    TileOrigin at{kGroupedRows || kGroupedCols ? 0 : w.batch, slice_row, kRowEnds ? w.row_end : int(p.m), 0, w.col,
                  first_stored_col(p, w.col), kColEnds ? w.col_end : 0,
                  {row_outer_scale(p, w.batch, d_row(slice_row, t, 0)),
                   row_outer_scale(p, w.batch, d_row(slice_row, t, 1))},
                  column_scales, w.batch};
    const WidenLanes lanes = kWidenA ? widen_lanes(slice, t, p) : WidenLanes{};
    if constexpr (k8Bit) {
      // The unit's first K block: unsplit, the slot holds no K range.
      const ScaleSkew skew = scale_skew(w.row, w.col, kSplitK ? w.k_begin : 0);
      if constexpr (kTwoPartials) {
        multiply_8bit_runs(acc, skew, k_count, slot, slice, t, stages, stage_scales, full, empty);
      } else {
        // From lane 0, so that the compiler knows the branch on it is uniform.
        const int col_in_block = __shfl_sync(0xffffffffu, w.col % 128, 0);
        multiply_8bit_at(col_in_block, acc, skew, k_count, slot, slice, t, stages, smem_u32(stages_a), lanes,
                         stage_scales, mx_float_buffers, full, empty);
      }
    } else {
      // One wgmma group stays in flight: after committing K block i, wait for i - 1 and hand
      // its stage back to the producer (with group partials, for i itself: see below).
      u32 previous = 0;  // the stage of the K block before
      u32 fragments[2][16];  // 4-bit weights' widened A fragments, alternate K blocks' (kWidenA only)
      // kGroupPartials: each K block's partial accumulator, promoted by its rows' group scales
      // once its wgmma is done (ptxas serialises every wgmma of the loop where one is read while
      // another block's is in flight, C7514).
      float partial[kGroupPartials ? kTileN / 2 : 1];
      RowScales row_scales;
      if (kGroupPartials) {
#pragma unroll
        for (int j = 0; j < kTileN / 2; ++j) acc[j] = 0.0f;
      }
      const int shift = kRowClasses ? row_class(p, w.row).shift : 0;
      const int first_block = kSplitK ? w.k_begin : 0;  // unsplit, the slot holds no K range
      for (int i = 0; i < k_count; ++i, previous = slot.stage, slot = slot.next()) {
        if (kRowClasses) {
          clear_outside_rows(stages_a + slot.stage * kStageBytesA, first_block + i, shift, p.k, t, &full[slot.stage],
                             slot.phase, kWarpgroupBarrier + slice);
        }
        if (kGroupedK && i == k_count - 1) {
          clear_rows_past(stages_a + slot.stage * kStageBytesA + slice * kMajorBlock,
                          stages_b + slot.stage * kStageBytesB, kBlocksN, w.k_size - i * kTileK, t,
                          &full[slot.stage], slot.phase, kWarpgroupBarrier + slice);
        }
        mbarrier_wait(&full[slot.stage], slot.phase);
        if constexpr (kWidenA) {
          // Block i's fragments go where block i - 2's were, whose wgmma the wait below block i - 1
          // retired (with group partials, where block i - 1's were: its wgmma is done).
          if (kGroupPartials || i % 2 == 0) {
            issue_widened_k_block(kGroupPartials ? partial : acc, fragments[0], row_scales, smem_u32(stages_a),
                                  stage_scales, lanes, slot, stages, !kGroupPartials && i > 0);
          } else {
            issue_widened_k_block(kGroupPartials ? partial : acc, fragments[1], row_scales, smem_u32(stages_a),
                                  stage_scales, lanes, slot, stages, !kGroupPartials && i > 0);
          }
        } else {
          issue_k_block(acc, slot, stages, i > 0);
        }
        if (kDeferGroups && i == 0 && have_deferred) {
          store_tile_tma<kDeferFrom, kGroups>(acc, deferred, p, deferred_at, t, buffers, &map_d);
          have_deferred = false;
        }
        if (kGroupPartials) {
          wgmma_wait<0>();
          if (warp_leader) release_stage(&empty[slot.stage]);
#pragma unroll
          for (int j = 0; j < kTileN / 2; ++j) fence_register(partial[j]);
          promote<0>(acc, partial, row_scales, KBlockScales{}, 0, 0, 0, t);
          continue;
        }
        wgmma_wait<1>();
        if (i > 0 && warp_leader) release_stage(&empty[previous]);
      }
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < kTileN / 2; ++i) fence_register(acc[i]);
      if (!kGroupPartials && warp_leader) release_stage(&empty[previous]);
    }

    if (kColumnScales) {
      cp_async_wait_all();
      named_barrier_sync(kWarpgroupBarrier + slice, 128);
    }
    // From the tile's row, after the main loop: nothing more stays live through it.
    at.first_stored = first_stored_row(p, int(at.row) - slice * 64);
    if (at.row >= at.row_end || at.row + 64 <= at.first_stored) continue;  // below D, or the tile above's
    if (kSplitK && p.splits > 1 && !combine_splits(acc, p, i64(w.tile) * kConsumers + slice, w.split, at.row, t, 1 + slice)) continue;
    if (kEvaluateFirst) evaluate_tile(acc, p, at, t);
    if (kDeferGroups) {
      store_tile_tma<0, kDeferFrom>(acc, nullptr, p, at, t, buffers, &map_d);
#pragma unroll
      for (int g = kDeferFrom; g < kGroups; ++g) pack_group(acc, p, at, t, g, deferred + (g - kDeferFrom) * kPackedPerGroup);
      deferred_at = at;
      have_deferred = at.col + group_col(kDeferFrom) < p.n;
    } else if (kTmaStore) {
      store_tile_tma<0, kGroups>(acc, nullptr, p, at, t, buffers, &map_d);
    } else if (kRowStore && p.d.col_stride == 1) {
      store_tile_rows(acc, p, at, t, buffers);
    } else {
      store_tile_direct(acc, p, at, t);
    }
  }
  if (kDeferGroups && have_deferred) store_tile_tma<kDeferFrom, kGroups>(acc, deferred, p, deferred_at, t, buffers, &map_d);
  if (slice == 0) take_turn(slice);
  // The CTA may leave once its stores have read shared memory: their writes land before the grid
  // counts as finished, which is what a later grid or the host waits for.
  if (kTmaStore && t % 32 == 0) tma_store_wait_read<0>();
}

extern "C" __global__ void __launch_bounds__(kThreads, kCtasPerSm)
    gemmkit_gemm(const __grid_constant__ KernelMaps maps, const GemmParams p) {
  extern __shared__ u8 smem_raw[];
  u8* smem = reinterpret_cast<u8*>((reinterpret_cast<u64>(smem_raw) + kSmemAlignment - 1) &
                                   ~u64(kSmemAlignment - 1));
  u8* stages_a = smem + kSmem.a;
  u8* stages_b = smem + kSmem.b;
  u8* epilogue_buffers = smem + kSmem.epilogue;
  u8* landing = smem + kSmem.landing_rows;  // kRealign only
  u64* full = reinterpret_cast<u64*>(smem + kSmem.full);
  u64* empty = reinterpret_cast<u64*>(smem + kSmem.empty);
  u64* landed = reinterpret_cast<u64*>(smem + kSmem.landed);  // kRealign only
  Work* slots = reinterpret_cast<Work*>(smem + kSmem.slots);
  const u32 stage_scales = smem_u32(smem + kSmem.scales);  // kInnerScales only
  const u32 column_scales = smem_u32(smem + kSmem.column_scales);  // kColumnScales only
  const u32 mx_floats = smem_u32(smem + kSmem.mx_floats);  // kMxB only

  // The producer is warpgroup 0, or the warp after the consumers' (kProducerWarp).
  const int warpgroup =
      __shfl_sync(0xffffffffu, kProducerWarp ? (threadIdx.x < 128 ? 1 : 0) : int(threadIdx.x / 128), 0);
  const int t = threadIdx.x % 128;
  const int rank = kClusterM == 1 ? 0 : int(cluster_rank());
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      // The TMA thread, and the realigning warps.
      mbarrier_init(&full[s], 1 + (kRealign ? kRealignWarps : 0));
      mbarrier_init(&empty[s], kClusterM * kConsumers * 4);  // one arrival per consumer warp
      if (kRealign) mbarrier_init(&landed[s], 32 * kCopyWarps);  // every lane of the copying warps
    }
    fence_barrier_init();
  }
  // Each CTA's barriers must be initialised before anything uses them: its own threads', and in a
  // cluster the peers' loads and arrivals. Clustered, every thread waits for the whole cluster to
  // have arrived only just before it first uses a barrier, after the work that needs none.
  if (kClusterM == 1) {
    __syncthreads();
  } else {
    cluster_arrive_relaxed();
  }

  // A grouped kernel's table of groups, by the first warp, for every thread.
  u8* group_table = smem + kSmem.group_table;
  if (kGrouped) {
    if (threadIdx.x < 32) build_group_table(p, GroupTable(group_table), int(threadIdx.x));
    __syncthreads();
  }
  launch_dependent_grids();

  // Each role makes its scheduler after its registers are reallocated: made before, its values
  // lived across the reallocation, and one spilled (grouped kernels with an e4m3 D, 4 bytes).
  if (warpgroup == 0) {
    if (!kProducerWarp) registers_decrease<kProducerRegisters>();
    const Scheduler tiles(p, group_table);
    if (t == 0 && !kRealignA) tma_prefetch_descriptor(&maps.a);
    if (t == 0 && !kRealignB) tma_prefetch_descriptor(&maps.b);
    if (t == 0 && kDual) tma_prefetch_descriptor(&maps.b2);
    if (t == 0 && kInnerA) tma_prefetch_descriptor(&maps.scale_a);
    if (t == 0 && kInnerB) tma_prefetch_descriptor(&maps.scale_b);
    if (t == 0 && kInnerB && kDual) tma_prefetch_descriptor(&maps.scale_b2);
    if (t == 0 && kWidenA) tma_prefetch_descriptor(&maps.scale_a);
    if (t == 0 && kZeros) tma_prefetch_descriptor(&maps.zeros);
    if (kClusterM > 1) cluster_wait();
    if (t == 0 || (kRealign && t < 32 * kCopyWarps)) {
      const auto fill = [&](const Work& w, int kb, u32 s) {
        if (t == 0) {
          if (kb == w.k_begin) publish(slots[s], w);  // by the full barrier's arrival below
          load_stage(p, maps, stages_a + s * kStageBytesA, stages_b + s * kStageBytesB,
                     stage_scales + s * kStageScaleBytes, &full[s], rank, w.batch, w.row, w.col,
                     kGroupedK ? w.k_first : 0, kb);
        }
        if (kRealign) copy_stage_rows(p, w, kb, landing + s * kLandingBytes, &landed[s], t);
      };
      const RingSlot end = for_each_stage(tiles, rank, empty, 1, fill);
      if (kClusterM > 1 && t == 0) wait_for_last_releases(empty, end);
    } else if (kRealign) {
      for_each_stage(tiles, rank, landed, 0, [&](const Work& w, int kb, u32 s) {
        realign_stage(p, w, kb, landing + s * kLandingBytes, stages_a + s * kStageBytesA, stages_b + s * kStageBytesB,
                      &full[s], t - 32 * kCopyWarps);
      });
    }
  } else {
    if (!kProducerWarp) registers_increase<kConsumerRegisters>();
    const Scheduler tiles(p, group_table);
    wait_for_prerequisite_grids();
    if (kClusterM > 1) cluster_wait();
    consume(maps.d, p, tiles, warpgroup - 1, t, stages_a, stages_b, stage_scales, column_scales,
            mx_floats, epilogue_buffers, full, empty, slots);
  }
}

}  // namespace gemmkit::sm90
