#include "runtime/workspace.h"

#include <functional>
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

// One growable buffer; the counters' is zeroed whenever it is allocated.
struct Buffer {
  void* data = nullptr;
  size_t bytes = 0;
};

struct Buffers {
  Buffer partials, counters, staged_a, staged_b;

  bool cover(const WorkspaceNeeds& n) const {
    return partials.bytes >= n.partial_bytes && counters.bytes >= n.counters * sizeof(unsigned) &&
           staged_a.bytes >= n.staged_a_bytes && staged_b.bytes >= n.staged_b_bytes;
  }
  Workspace workspace() const {
    return {static_cast<float*>(partials.data), static_cast<unsigned*>(counters.data), staged_a.data, staged_b.data};
  }
};

void grow(Buffer& b, size_t needed, bool zeroed, cudaStream_t stream, const char* what) {
  if (b.bytes >= needed) return;
  const size_t size = grown(needed);
  void* fresh = nullptr;
  check(cudaMallocAsync(&fresh, size, stream), what);
  if (zeroed) check(cudaMemsetAsync(fresh, 0, size, stream), what);
  b.data = fresh;
  b.bytes = size;
}

// cudaStreamPerThread names a different stream in every thread, so the thread is part of the key.
using StreamKey = std::tuple<int, cudaStream_t, std::thread::id>;

StreamKey stream_key(int device, cudaStream_t stream) {
  return {device, stream, stream == cudaStreamPerThread ? std::this_thread::get_id() : std::thread::id()};
}

}  // namespace

std::optional<Workspace> stream_workspace(int device, cudaStream_t stream, const WorkspaceNeeds& needs) {
  const StreamKey key = stream_key(device, stream);
  // What this thread last got for the stream, looked up without the lock. Buffers that another
  // thread has since outgrown are never freed and are still big enough here; kernels on one
  // stream run one after another, so it does not matter which of them a launch uses.
  thread_local std::map<StreamKey, Buffers> seen;
  if (auto it = seen.find(key); it != seen.end() && it->second.cover(needs)) return it->second.workspace();
  static std::mutex mutex;
  static std::map<StreamKey, Buffers> buffers;
  std::lock_guard<std::mutex> lock(mutex);
  Buffers& b = buffers[key];
  if (!b.cover(needs)) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
    if (capture != cudaStreamCaptureStatusNone) return std::nullopt;
  }
  grow(b.partials, needs.partial_bytes, false, stream, "cudaMallocAsync(split-K partials)");
  grow(b.counters, needs.counters * sizeof(unsigned), true, stream, "cudaMallocAsync(split-K counters)");
  grow(b.staged_a, needs.staged_a_bytes, false, stream, "cudaMallocAsync(staged A)");
  grow(b.staged_b, needs.staged_b_bytes, false, stream, "cudaMallocAsync(staged B)");
  seen[key] = b;
  return b.workspace();
}

std::unique_lock<std::mutex> lock_staged_copies(int device, cudaStream_t stream) {
  // One of a few mutexes by the stream's key: streams that share one merely wait for each other.
  static std::mutex mutexes[16];
  const StreamKey key = stream_key(device, stream);
  const size_t slot = (std::hash<cudaStream_t>()(std::get<1>(key)) ^ std::hash<std::thread::id>()(std::get<2>(key)) ^
                       size_t(device)) % 16;
  return std::unique_lock<std::mutex>(mutexes[slot]);
}

}  // namespace gemmkit::runtime
