// Scratch device memory for split-K: the f32 partial tiles, and the arrival counters, which the
// kernel leaves at zero after every launch. One pair of buffers per stream, so that kernels on
// different streams never share one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>

namespace gemmkit::runtime {

struct SplitWorkspace {
  float* partials = nullptr;
  unsigned* counters = nullptr;
};

// Buffers of at least `partial_bytes` and `counters` counters for kernels queued on `stream`
// of `device` (the current device). They grow by stream-ordered allocation and are never freed (a CUDA
// graph captured earlier may still use them). A thread's later calls for the same stream take no
// lock unless the buffers must grow. Returns nullopt when they would have to grow
// while `stream` is being captured, where allocating is not allowed; the caller then runs
// without split-K.
std::optional<SplitWorkspace> split_workspace(int device, cudaStream_t stream, size_t partial_bytes, size_t counters);

}  // namespace gemmkit::runtime
