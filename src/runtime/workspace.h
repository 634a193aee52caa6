// Scratch device memory a launch may need, one set per stream so that kernels on different
// streams never share it: for split-K, the f32 partial tiles and the arrival counters (which the
// kernel leaves at zero after every launch); for operands that TMA cannot read as they are,
// their dense copies.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <mutex>
#include <optional>

namespace gemmkit::runtime {

struct WorkspaceNeeds {
  size_t partial_bytes = 0;
  size_t counters = 0;
  size_t staged_a_bytes = 0, staged_b_bytes = 0;
};

struct Workspace {
  float* partials = nullptr;
  unsigned* counters = nullptr;
  void* staged_a = nullptr;
  void* staged_b = nullptr;
};

// Buffers at least as large as `needs` asks for kernels queued on `stream` of `device` (the
// current device). They grow by stream-ordered allocation and are never freed (a CUDA graph
// captured earlier may still use them). A thread's later calls for the same stream take no lock
// unless the buffers must grow. Returns nullopt when they would have to grow while `stream` is
// being captured, where allocating is not allowed.
std::optional<Workspace> stream_workspace(int device, cudaStream_t stream, const WorkspaceNeeds& needs);

// Held while a call queues its staging copies and the kernel that reads them: threads that share
// a stream share its staged copies too, and another thread's copy queued in between would
// overwrite them before the kernel runs.
std::unique_lock<std::mutex> lock_staged_copies(int device, cudaStream_t stream);

}  // namespace gemmkit::runtime
