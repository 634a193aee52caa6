// Stage rows of 16-bit operands that TMA cannot address, whose base or outer stride is not a
// multiple of 16 bytes (odd K, odd leading dimensions, views at odd offsets): the producer warps
// realign them in shared memory instead (gemm.cuh). A stage row is 64 contiguous elements of the
// operand, 128 bytes that may start at any even address. The aligned 16-byte granules that hold
// it (at most 9) are copied with cp.async into a landing row; the row is then shifted back into
// place, zeroed where it lies outside the operand (as TMA's bounds zero it) and written into the
// stage with the 128-byte swizzle, where the consumers find it as if TMA had loaded it.
// A granule holds at most 14 bytes either side of the row, always inside 16-byte granules that
// also hold the operand's own bytes, so never on another page than the operand.
// (16x4096x4097, H100: 50 us so, 187 with a TMA bulk copy per row.)
#pragma once

#include "common.cuh"
#include "params.h"
#include "smem_layout.h"

namespace gemmkit::sm90 {

constexpr int kLandingGranules = kLandingRowBytes / 16;
constexpr int kRealignElementBytes = 2;  // 16-bit operands only; 8-bit ones are staged

// Where a stage row starts in global memory, and how many of its 128 bytes lie inside the operand.
struct SourceRow {
  u64 address;
  int bytes;  // 0 where the row lies wholly outside
};

// One operand's slice of a stage, for the tile starting at `mn0` (its first row of A, or column
// of B) and the K block starting at `k0`: K-major, one row per M or N index, 64 K elements long;
// MN-major, one row per K index and 64-wide block of M or N (block r / 64). `k_is_cols`: the
// operand is A (M x K), else B (K x N).
struct SliceSource {
  u64 base;          // row 0's first byte
  i64 outer_stride;  // bytes from one row to the next (within a 64-row block, MN-major)
  i64 outer_left;    // rows (K-major) or K rows of each block (MN-major) inside the operand
  i64 inner_left;    // elements of row 0 inside the operand
  bool k_major;

  __device__ __forceinline__ SliceSource(const GemmMatrix& m, bool k_is_cols, bool is_k_major, i64 mn_extent,
                                         i64 k_extent, i64 batch_offset, i64 mn0, i64 k0)
      : k_major(is_k_major) {
    const i64 mn_stride = k_is_cols ? m.row_stride : m.col_stride;
    const i64 k_stride = k_is_cols ? m.col_stride : m.row_stride;
    const i64 outer0 = k_major ? mn0 : k0, inner0 = k_major ? k0 : mn0;
    base = reinterpret_cast<u64>(m.data) +
           u64((batch_offset + outer0 * (k_major ? mn_stride : k_stride) + inner0) * kRealignElementBytes);
    outer_stride = (k_major ? mn_stride : k_stride) * kRealignElementBytes;
    outer_left = (k_major ? mn_extent : k_extent) - outer0;
    inner_left = (k_major ? k_extent : mn_extent) - inner0;
  }

  __device__ __forceinline__ SourceRow row(int r) const {
    const int outer = k_major ? r : r % 64, inner = k_major ? 0 : r / 64 * 64;
    const i64 left = inner_left - inner;
    SourceRow s;
    s.address = base + u64(outer * outer_stride + inner * kRealignElementBytes);
    s.bytes = outer < outer_left && left > 0 ? int(min(left, i64(64))) * kRealignElementBytes : 0;
    return s;
  }
};

// Starts the copies of a slice's `rows` rows into `landing`'s rows, skipping granules that hold
// none of the row: each of `warps` warps (this thread is lane `lane` of warp `warp`) takes three
// rows at a time, its lanes 0-26 one granule each, so that neighbouring lanes copy neighbouring
// bytes. K-major rows are `outer_stride` apart throughout, so their addresses are stepped rather
// than worked out afresh (which made the copying warps the pipeline's slowest part).
__device__ __forceinline__ void copy_slice_granules(const SliceSource& slice, int rows, u32 landing, int warp,
                                                    int warps, int lane) {
  constexpr int kRowsAtOnce = 32 / kLandingGranules;
  if (lane >= kRowsAtOnce * kLandingGranules) return;
  const int g = lane % kLandingGranules, step = warps * kRowsAtOnce;
  int r = warp * kRowsAtOnce + lane / kLandingGranules;
  SourceRow row = slice.row(r);
  const i64 row_step = step * slice.outer_stride;
  for (; r < rows; r += step) {
    if (!slice.k_major) row = slice.row(r);
    const u64 granule = (row.address & ~u64(15)) + 16 * g;
    const bool inside = slice.k_major ? r < slice.outer_left && row.bytes > 0 : row.bytes > 0;
    if (inside && granule < row.address + u64(row.bytes)) {
      cp_async_16(landing + r * kLandingRowBytes + 16 * g, reinterpret_cast<const void*>(granule));
    }
    row.address += u64(row_step);
  }
}

// The words of a row, shifted into place: word i is two landed words funnel-shifted by the row's
// offset within its first granule, and zero past the row's `bytes` unless kWhole (all 128 inside).
template <bool kWhole>
__device__ __forceinline__ void write_row(const u32 (&landed)[33], u32 shift, int bytes, u32 to, int phase) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    u32 words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int at = 16 * j + 4 * i;  // the word's first byte in the row
      words[i] = __funnelshift_r(landed[at / 4], landed[at / 4 + 1], shift);
      if (!kWhole) {
        const int inside = min(max(bytes - at, 0), 4);  // of the word's bytes
        words[i] &= __funnelshift_rc(0xffffffffu, 0u, 8 * (4 - inside));
      }
    }
    st_shared_v4(to + ((j ^ phase) << 4), words);
  }
}

// Writes `row`, landed at `from` (a landing row's shared address), into the stage row at `to`:
// its 16-byte chunk j at (j ^ phase) * 16, the 128-byte swizzle of the row's place in its 8-row
// atom. The 33 words are read before any is used: reading each just before its use waited out a
// shared-memory round trip per word.
__device__ __forceinline__ void realign_row(u32 from, const SourceRow& row, u32 to, int phase) {
  const u32 offset = u32(row.address % 16);
  from += offset & ~3u;
  u32 landed[33];
#pragma unroll
  for (int i = 0; i < 33; ++i) landed[i] = ld_shared_u32(from + 4 * i);
  if (row.bytes == 128) {
    write_row<true>(landed, 8 * (offset % 4), row.bytes, to, phase);
  } else {
    write_row<false>(landed, 8 * (offset % 4), row.bytes, to, phase);
  }
}

}  // namespace gemmkit::sm90
