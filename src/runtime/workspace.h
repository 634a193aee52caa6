// Scratch device memory a launch may need: for split-K, the f32 partial tiles and the arrival
// counters (which the kernel leaves at zero after every launch); for operands that TMA cannot
// read as they are, their dense copies. It comes from the scratch allocator where one is set
// (gemmkit/scratch.h), per launch; else from buffers kept per stream, so that kernels on
// different streams never share them.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <mutex>
#include <optional>
#include <utility>

#include "gemmkit/scratch.h"

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

// The scratch of one launch, for kernels queued on `stream` of `device` (the current device);
// held until they are queued.
//
// With a scratch allocator set, each part comes from it, and goes back to it, stream-ordered,
// when this object goes; the counters only inside a capture (zeroed by a memset there), outside
// one they are the stream's. Throws what the allocator throws, or Error where it has no memory,
// having given back what it took before.
//
// Without one, the stream's buffers: at least as large as asked, grown by stream-ordered
// allocation and never freed (a CUDA graph captured earlier may still use them); a thread's
// later launches on the same stream take no lock unless they must grow. Where an operand is
// staged, the object holds the stream's staging lock: threads that share a stream share its
// staged copies too, and another thread's copy queued in between would overwrite them before the
// kernel runs.
class LaunchScratch {
 public:
  LaunchScratch(int device, cudaStream_t stream, const WorkspaceNeeds& needs);
  LaunchScratch(const LaunchScratch&) = delete;
  LaunchScratch& operator=(const LaunchScratch&) = delete;

  // Nullptr where nothing was asked for, or where the stream's buffers would have to grow while
  // `stream` is being captured, where allocating is not allowed.
  const Workspace* workspace() const { return workspace_ ? &*workspace_ : nullptr; }

 private:
  // What was taken from the allocator, given back when this goes (also when the constructor
  // throws part way).
  struct Allocations {
    ScratchAllocator allocator;
    cudaStream_t stream = nullptr;
    std::array<std::pair<void*, size_t>, 4> taken{};
    size_t count = 0;

    Allocations() = default;
    Allocations(const Allocations&) = delete;
    Allocations& operator=(const Allocations&) = delete;
    ~Allocations();
    // `bytes` from the allocator for `what` (nullptr for none).
    void* take(size_t bytes, const char* what);
  };

  Allocations allocations_;
  std::unique_lock<std::mutex> staging_;
  std::optional<Workspace> workspace_;
};

}  // namespace gemmkit::runtime
