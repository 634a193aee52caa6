#include "runtime/workspace.h"

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>

#include "gemmkit/error.h"
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

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
  return capture != cudaStreamCaptureStatusNone;
}

// Buffers at least as large as `needs` asks for, or nullopt where they would have to grow while
// `stream` is being captured.
std::optional<Workspace> stream_buffers(int device, cudaStream_t stream, const WorkspaceNeeds& needs) {
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
  if (!b.cover(needs) && capturing(stream)) return std::nullopt;
  grow(b.partials, needs.partial_bytes, false, stream, "cudaMallocAsync(split-K partials)");
  grow(b.counters, needs.counters * sizeof(unsigned), true, stream, "cudaMallocAsync(split-K counters)");
  grow(b.staged_a, needs.staged_a_bytes, false, stream, "cudaMallocAsync(staged A)");
  grow(b.staged_b, needs.staged_b_bytes, false, stream, "cudaMallocAsync(staged B)");
  seen[key] = b;
  return b.workspace();
}

// Held while a launch queues its copies into the stream's staging buffers and the kernel that
// reads them (workspace.h).
std::unique_lock<std::mutex> lock_staged_copies(int device, cudaStream_t stream) {
  // One of a few mutexes by the stream's key: streams that share one merely wait for each other.
  static std::mutex mutexes[16];
  const StreamKey key = stream_key(device, stream);
  const size_t slot = (std::hash<cudaStream_t>()(std::get<1>(key)) ^ std::hash<std::thread::id>()(std::get<2>(key)) ^
                       size_t(device)) % 16;
  return std::unique_lock<std::mutex>(mutexes[slot]);
}

// The allocator set_scratch_allocator set (allocate is nullptr where none is). Launches copy it,
// so that one that runs while it changes gives back its memory to the allocator it took it from.
std::mutex allocator_mutex;
ScratchAllocator allocator_set;

ScratchAllocator current_allocator() {
  std::lock_guard<std::mutex> lock(allocator_mutex);
  return allocator_set;
}

}  // namespace

LaunchScratch::LaunchScratch(int device, cudaStream_t stream, const WorkspaceNeeds& needs) {
  const bool stages = needs.staged_a_bytes > 0 || needs.staged_b_bytes > 0;
  if (!stages && needs.partial_bytes == 0 && needs.counters == 0) return;
  allocations_.allocator = current_allocator();
  if (!allocations_.allocator.allocate) {
    if (stages) staging_ = lock_staged_copies(device, stream);
    workspace_ = stream_buffers(device, stream, needs);
    return;
  }
  allocations_.stream = stream;
  Workspace w;
  w.partials = static_cast<float*>(allocations_.take(needs.partial_bytes, "split-K partials"));
  w.staged_a = allocations_.take(needs.staged_a_bytes, "staged A");
  w.staged_b = allocations_.take(needs.staged_b_bytes, "staged B");
  if (needs.counters > 0) {
    // A graph captured with the stream's counters would share them with the stream's later
    // launches, and with its own replays on other streams.
    std::optional<Workspace> own;
    if (!capturing(stream)) own = stream_buffers(device, stream, {.counters = needs.counters});
    if (own) {
      w.counters = own->counters;
    } else {
      const size_t bytes = needs.counters * sizeof(unsigned);
      w.counters = static_cast<unsigned*>(allocations_.take(bytes, "split-K counters"));
      check(cudaMemsetAsync(w.counters, 0, bytes, stream), "cudaMemsetAsync(split-K counters)");
    }
  }
  workspace_ = w;
}

LaunchScratch::Allocations::~Allocations() {
  while (count > 0) {
    --count;
    allocator.release(allocator.context, taken[count].first, taken[count].second, stream);
  }
}

void* LaunchScratch::Allocations::take(size_t bytes, const char* what) {
  if (bytes == 0) return nullptr;
  void* data = allocator.allocate(allocator.context, bytes, stream);
  if (!data) {
    throw Error(ErrorCode::cuda_error, "the scratch allocator returned no memory for " + std::string(what) + " (" +
                                           std::to_string(bytes) + " bytes)");
  }
  taken[count++] = {data, bytes};
  if (reinterpret_cast<uintptr_t>(data) % 256 != 0) {
    throw Error(ErrorCode::invalid_argument, "the scratch allocator returned memory for " + std::string(what) +
                                                 " that is not 256-byte aligned (gemmkit/scratch.h)");
  }
  return data;
}

}  // namespace gemmkit::runtime

namespace gemmkit {

void set_scratch_allocator(const ScratchAllocator* allocator) {
  if (allocator && (!allocator->allocate || !allocator->release)) {
    throw Error(ErrorCode::invalid_argument, "set_scratch_allocator: the allocator needs both allocate and release");
  }
  std::lock_guard<std::mutex> lock(runtime::allocator_mutex);
  runtime::allocator_set = allocator ? *allocator : ScratchAllocator{};
}

}  // namespace gemmkit
