// Small helper kernels the library itself needs: a random fill (tuning runs on scratch inputs),
// a spin (timings queue their launches behind it) and the K-major staging copy of 8-bit operands.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "dispatch/problem.h"

namespace gemmkit::runtime {

// Fills `count` elements at `data` (device memory of `type`) with uniform values in [lo, hi).
void fill_random(void* data, DType type, int64_t count, uint64_t seed, float lo, float hi, cudaStream_t stream);

// Copies the 8-bit matrix `m`, seen as [batch] rows x k (any strides), into `dst` K-major: rows
// `ld` bytes apart, batches rows * ld apart (kernels/sm90/stage.cuh).
void stage_k_major(const MatrixRef& m, int64_t batch, int64_t rows, int64_t k, void* dst, int64_t ld,
                   cudaStream_t stream);

// Keeps the stream's GPU busy for about `cycles` SM clock cycles.
void gpu_spin(int64_t cycles, cudaStream_t stream);

}  // namespace gemmkit::runtime
