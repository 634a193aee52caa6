// The opt-in check of grouped problems' sizes (GroupSizes::check), a kernel of its own that runs
// before the GEMM on the same stream: a call inside the GEMM kernel (the device runtime's
// assertion is one) makes ptxas serialize every wgmma in it.
#pragma once

#include "utility.cuh"

namespace gemmkit::sm90 {

// The device runtime's failed assertion: prints the message with the failing block and thread
// and stops the kernel (a trap).
extern "C" __device__ void __assertfail(const char* message, const char* file, unsigned line, const char* function,
                                        size_t char_size);

// One block, a thread per group (count <= 1024): `ends` says the sizes are cumulative ends, each
// at least the one before and at most `bound`; else counts, from 0 to `bound`.
extern "C" __global__ void __launch_bounds__(1024)
    gemmkit_check_group_sizes(const void* sizes, int int64, int count, i64 bound, int ends) {
  const int g = threadIdx.x;
  if (g >= count) return;
  auto size = [&](int i) {
    return int64 ? static_cast<const i64*>(sizes)[i] : i64(static_cast<const int*>(sizes)[i]);
  };
  const i64 least = ends && g > 0 ? size(g - 1) : 0;
  const i64 given = size(g);
  if (given < least || given > bound) {
    __assertfail(ends ? "gemmkit grouped: group ends must not decrease and must be at most M_total"
                      : "gemmkit grouped: group row counts must be from 0 to max_m",
                 "gemmkit group_check.cuh", __LINE__, "gemmkit_check_group_sizes", 1);
  }
}

}  // namespace gemmkit::sm90
