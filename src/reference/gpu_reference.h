// The GPU reference GEMM (double accumulation) and a random fill, both for tests and the CLI.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "dispatch/problem.h"

namespace gemmkit::reference {

// ref and ref_abs: device arrays of batch*m*n doubles, dense [batch][m][n]; see reference.cuh.
void gpu_gemm(const Problem& p, double* ref, double* ref_abs, cudaStream_t stream);

// Fills `count` elements at `data` (device memory of `type`) with uniform values in [lo, hi).
void fill_random(void* data, DType type, int64_t count, uint64_t seed, float lo, float hi, cudaStream_t stream);

// Keeps the stream's GPU busy for about `cycles` SM clock cycles.
void gpu_spin(int64_t cycles, cudaStream_t stream);

}  // namespace gemmkit::reference
