// Small helper kernels the library itself needs: a random fill (tuning runs on scratch inputs)
// and a spin (timings queue their launches behind it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gemmkit/tensor.h"

namespace gemmkit::runtime {

// Fills `count` elements at `data` (device memory of `type`) with uniform values in [lo, hi).
void fill_random(void* data, DType type, int64_t count, uint64_t seed, float lo, float hi, cudaStream_t stream);

// Keeps the stream's GPU busy for about `cycles` SM clock cycles.
void gpu_spin(int64_t cycles, cudaStream_t stream);

}  // namespace gemmkit::runtime
