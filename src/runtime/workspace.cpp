#include "runtime/workspace.h"

#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "runtime/driver.h"

namespace gemmkit::runtime {
namespace {

// Sizes grow to powers of two (from 1 MiB), so that a run of growing problems allocates rarely.
size_t grown(size_t needed) {
  size_t size = size_t(1) << 20;
  while (size < needed) size *= 2;
  return size;
}

struct Buffers {
  void* partials = nullptr;
  size_t partial_bytes = 0;
  void* counters = nullptr;
  size_t counter_bytes = 0;
};

// cudaStreamPerThread names a different stream in every thread, so the thread is part of the key.
using StreamKey = std::tuple<int, cudaStream_t, std::thread::id>;

StreamKey stream_key(int device, cudaStream_t stream) {
  return {device, stream, stream == cudaStreamPerThread ? std::this_thread::get_id() : std::thread::id()};
}

}  // namespace

std::optional<SplitWorkspace> split_workspace(int device, cudaStream_t stream, size_t partial_bytes, size_t counters) {
  const size_t counter_bytes = counters * sizeof(unsigned);
  const StreamKey key = stream_key(device, stream);
  // What this thread last got for the stream, looked up without the lock. Buffers that another
  // thread has since outgrown are never freed and are still big enough here; kernels on one
  // stream run one after another, so it does not matter which of them a launch uses.
  thread_local std::map<StreamKey, Buffers> seen;
  if (auto it = seen.find(key);
      it != seen.end() && it->second.partial_bytes >= partial_bytes && it->second.counter_bytes >= counter_bytes) {
    return SplitWorkspace{static_cast<float*>(it->second.partials), static_cast<unsigned*>(it->second.counters)};
  }
  static std::mutex mutex;
  static std::map<StreamKey, Buffers> buffers;
  std::lock_guard<std::mutex> lock(mutex);
  Buffers& b = buffers[key];
  if (b.partial_bytes < partial_bytes || b.counter_bytes < counter_bytes) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
    if (capture != cudaStreamCaptureStatusNone) return std::nullopt;
  }
  if (b.partial_bytes < partial_bytes) {
    const size_t size = grown(partial_bytes);
    check(cudaMallocAsync(&b.partials, size, stream), "cudaMallocAsync(split-K partials)");
    b.partial_bytes = size;
  }
  if (b.counter_bytes < counter_bytes) {
    const size_t size = grown(counter_bytes);
    void* fresh = nullptr;
    check(cudaMallocAsync(&fresh, size, stream), "cudaMallocAsync(split-K counters)");
    check(cudaMemsetAsync(fresh, 0, size, stream), "cudaMemsetAsync(split-K counters)");
    b.counters = fresh;
    b.counter_bytes = size;
  }
  seen[key] = b;
  return SplitWorkspace{static_cast<float*>(b.partials), static_cast<unsigned*>(b.counters)};
}

}  // namespace gemmkit::runtime
