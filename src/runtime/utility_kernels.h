// Small helper kernels the library itself needs: a random fill (tuning runs on scratch inputs),
// a spin (timings queue their launches behind it) and the staging copy of operands TMA
// cannot read as they are.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "dispatch/problem.h"
#include "runtime/kernel_cache.h"

namespace gemmkit::runtime {

// Fills `count` elements at `data` (device memory of `type`) with uniform values in [lo, hi).
void fill_random(void* data, DType type, int64_t count, uint64_t seed, float lo, float hi, cudaStream_t stream);

// Copies the matrix `m` of 8- or 16-bit elements, seen as [batch] rows x cols (any strides),
// into `dst` densely: rows `ld` elements apart, batches rows * ld apart (kernels/sm90/stage.cuh).
void stage_copy(const MatrixRef& m, int64_t batch, int64_t rows, int64_t cols, void* dst, int64_t ld,
                cudaStream_t stream);

// Keeps the stream's GPU busy for about `cycles` SM clock cycles.
void gpu_spin(int64_t cycles, cudaStream_t stream);

// bench --overhead's bare launch, the floor under a GEMM call's host time: an empty kernel of the
// current device, with the TMA GEMM kernel's parameters, launched with them zeroed, `blocks` x
// `threads` and no dynamic shared memory through cuLaunchKernelEx with the programmatic-launch
// attribute, as launch_gemm launches. The kernel is looked up once, apart, since a lookup is no
// part of a launch.
const LoadedKernel& empty_kernel();
void launch_empty(const LoadedKernel& kernel, unsigned blocks, unsigned threads, cudaStream_t stream);

}  // namespace gemmkit::runtime
