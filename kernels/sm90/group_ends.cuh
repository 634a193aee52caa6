// Group sizes as the kernels take them (gemmkit/grouped.h): G cumulative ends or, for masked
// groups, row counts, int32 or int64, in device memory. Out-of-range sizes are clamped, so that
// no group reaches outside its bound. The grouped GEMM's table of groups (grouped_scheduler.cuh)
// and the staging of FP8 weight gradients' operands (stage.cuh) read them alike.
#pragma once

#include "utility.cuh"

namespace gemmkit::sm90 {

// By the 32 lanes of a warp, lane l taking groups [l * kPerLane, (l + 1) * kPerLane) of `groups`
// (those past the last count as the last): each one's size as given, clamped to [0, bound], and
// where the sizes are cumulative `ends`, raised to at least the end before, so that both passes
// (a running maximum) are sequential per lane and one warp scan. Returns the end of the group
// before the lane's first (0 for counts).
template <int kPerLane>
__device__ __forceinline__ i64 clamped_group_sizes(const void* sizes, bool int64, int groups, i64 bound, bool ends,
                                                   int lane, i64 (&size)[kPerLane]) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int g = lane * kPerLane + i;
    const i64 given = g >= groups ? 0 : int64 ? static_cast<const i64*>(sizes)[g] : i64(static_cast<const int*>(sizes)[g]);
    size[i] = min(max(given, i64(0)), bound);
  }
  if (!ends) return 0;
#pragma unroll
  for (int i = 1; i < kPerLane; ++i) size[i] = max(size[i], size[i - 1]);
  i64 running = size[kPerLane - 1];
  for (int d = 1; d < 32; d *= 2) {
    const i64 before = __shfl_up_sync(0xffffffffu, running, d);
    if (lane >= d) running = max(running, before);
  }
  i64 end_before = __shfl_up_sync(0xffffffffu, running, 1);
  if (lane == 0) end_before = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) size[i] = max(size[i], end_before);
  return end_before;
}

}  // namespace gemmkit::sm90
