// Split-K: when few tiles would leave SMs idle (small M), each tile's K range is cut into
// p.splits parts run by different CTAs. A consumer warpgroup that finishes its part publishes
// its f32 partial slice to p.partials and counts itself in on the slice's counter; the last to
// arrive sums every part and runs the epilogue. It sums the parts in split order, so D does
// not depend on which part finished last, and resets the counter for the next launch.
#pragma once

#include "common.cuh"
#include "epilogue.cuh"
#include "params.h"

namespace gemmkit::sm90 {

// A partial slice is kept in accumulator-fragment order, pair i (acc[2i], acc[2i + 1]) of
// thread t at float2 index i * 128 + t, so that every access is coalesced. Pair i = 2j + h
// holds fragment row fragment_row(t, h): rows below D are neither written nor read.
constexpr int kPairs = kTileN / 4;
constexpr i64 kPartialPairs = kPairs * 128;

// Returns whether `acc` now holds the whole sum (this warpgroup stores the slice) or this part
// is done. `slice_id` numbers the 64-row slice among all tiles' slices.
__device__ __forceinline__ bool combine_splits(float* acc, const GemmParams& p, i64 slice_id, int split,
                                               i64 first_row, int t, int barrier_id) {
  const float2* parts = reinterpret_cast<const float2*>(p.partials) + slice_id * p.splits * kPartialPairs;
  float2* mine = reinterpret_cast<float2*>(p.partials) + (slice_id * p.splits + split) * kPartialPairs;
  const bool row_inside[2] = {d_row(first_row, t, 0) < p.m, d_row(first_row, t, 1) < p.m};
#pragma unroll
  for (int i = 0; i < kPairs; ++i) {
    if (row_inside[i % 2]) mine[i * 128 + t] = make_float2(acc[2 * i], acc[2 * i + 1]);
  }
  named_barrier_sync(barrier_id, 128);
  bool last = false;
  if (t == 0) {
    last = atomic_add_acq_rel(&p.counters[slice_id], 1) == u32(p.splits - 1);
    if (last) store_relaxed(&p.counters[slice_id], 0);
  }
  if (!named_barrier_any(barrier_id, 128, last)) return false;

#pragma unroll
  for (int i = 0; i < 2 * kPairs; ++i) acc[i] = 0.0f;
  for (int s = 0; s < p.splits; ++s) {
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      if (!row_inside[i % 2]) continue;
      const float2 v = load_l2(parts + s * kPartialPairs + i * 128 + t);
      acc[2 * i] += v.x;
      acc[2 * i + 1] += v.y;
    }
  }
  return true;
}

}  // namespace gemmkit::sm90
