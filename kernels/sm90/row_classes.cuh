// Row classes: a 16-bit, K-major A whose rows TMA cannot address (K or the leading dimension not
// a multiple of 8, or a base off 16 bytes: odd K in decode weights) read by TMA all the same.
// Rows r, r + 8, r + 16, ... (class r) start at the same offset past a 16-byte granule, since
// eight rows span a multiple of 16 bytes. So the host's tensor map for A has one row per group
// of 8 rows (a stride TMA takes), long enough to reach the last row's end, and a tile holds 64
// rows of one class: one box per K block, from the granule where the class's rows start, brings
// each row `shift` elements to the right. B comes staged as 8 copies (one per class) shifted as
// far right, with zeros around, so that every product lines up; what A's box holds outside its
// row (the neighbouring rows' elements, or bytes beside A) the consumers zero before they
// multiply, as it may hold anything, NaN included. Tiles number their rows in D: a tile of
// class r starting at group 64 b holds rows 512 b + r + 8 i (kRowStep apart). Only for
// unclustered 64-row tiles of one consumer warpgroup, unbatched, M a multiple of 8 (gemm.cuh).
// Against copying A's rows into place in the kernel (realign.cuh), the loads run at TMA's speed.
#pragma once

#include "common.cuh"
#include "kernel_config.cuh"
#include "params.h"

namespace gemmkit::sm90 {

constexpr int kClasses = 8;
constexpr int kRowStep = kRowClasses ? kClasses : 1;
constexpr int kClassBlock = 64;  // a K block of 16-bit elements: one 128-byte stage row

struct RowClass {
  int index;  // r
  int shift;  // how far right of its granule's start a row of the class starts, in elements
  int x;      // that granule's inner coordinate in a group row of A's tensor map
};

// The class of D's row `row`. A's tensor map starts at the 16-byte granule that holds A's first
// element; group row g's row r starts (A's offset in that granule) + r * ld elements into it.
__device__ __forceinline__ RowClass row_class(const GemmParams& p, i64 row) {
  const int r = int(row % kClasses);
  const i64 start = i64(reinterpret_cast<u64>(p.a.data) % 16 / 2) + r * p.a.row_stride;
  return {r, int(start % 8), int(start - start % 8)};
}

// K blocks of a problem: row classes shift K right by up to 7 elements.
__device__ __forceinline__ int row_class_k_blocks(i64 k) { return int((k + 7 + kClassBlock - 1) / kClassBlock); }

// By the 128 threads of the consumer warpgroup (t): once K block `k_block` has landed in A's stage
// `stage_a` (64 rows of 128 bytes, 128-byte swizzle), zeroes its columns outside the class's rows
// (before `shift` in the first block, from shift + K on), and makes the zeros visible to wgmma.
// Blocks with nothing to zero return at once, without waiting.
__device__ __forceinline__ void clear_outside_rows(u8* stage_a, int k_block, int shift, i64 k, int t, u64* full,
                                                   u32 phase, int barrier_id) {
  const int head_end = k_block == 0 ? shift : 0;
  const i64 tail = shift + k - i64(k_block) * kClassBlock;
  const int tail_begin = tail < 0 ? 0 : tail > kClassBlock ? kClassBlock : int(tail);
  if (head_end == 0 && tail_begin == kClassBlock) return;
  mbarrier_wait(full, phase);
  const int row = t / 2;
  u8* row_bytes = stage_a + row * 2 * kClassBlock;
  for (int col = (t % 2) * 32; col < (t % 2) * 32 + 32; ++col) {
    if (col >= head_end && col < tail_begin) continue;
    // The swizzle XORs a row's 16-byte chunk index with the row's index within its 8-row atom.
    const int chunk = (col / 8) ^ (row % 8);
    *reinterpret_cast<u16*>(row_bytes + chunk * 16 + (col % 8) * 2) = 0;
  }
  fence_async_shared();
  named_barrier_sync(barrier_id, 128);
}

}  // namespace gemmkit::sm90
