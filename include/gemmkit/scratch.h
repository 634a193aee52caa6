// Where gemmkit's scratch memory comes from: its own buffers, or an allocator of the caller's.
//
// Some GEMM calls need device memory besides their operands while their kernels run: split-K's
// f32 partial sums and arrival counters, and the copies of operands TMA cannot read as they lie
// (staged operands, the tokens copied for row classes, an FP8 weight gradient's groups padded
// along K). By default gemmkit keeps buffers for them per stream, grown by stream-ordered
// allocation (cudaMallocAsync) as problems need and never freed. They cannot grow while the
// stream is being captured into a CUDA graph: a call that would need them to runs a slower kernel
// (a staged one the CUDA-core fallback, a split one unsplit), or, grouped, throws.
//
// A scratch allocator takes their place: each call that needs scratch allocates it from the
// allocator, and releases it as soon as its kernels are queued, as a caching allocator's
// temporary. Memory allocated while the stream is being captured is what every replay of the
// graph uses, and the calls run the same kernels as uncaptured. Only the split-K arrival
// counters stay gemmkit's own outside a capture: a small buffer per stream, allocated once and
// zeroed then (each launch leaves the counters at zero again, so a call needs no memset). Inside
// a capture they too come from the allocator, zeroed by a memset in the graph, so that a graph
// holds no gemmkit buffer and may replay on any stream, alongside other work.
//
// The Python package installs torch's caching allocator once torch has initialised CUDA: torch's
// memory statistics then count the scratch, its cache holds it between calls, and
// torch.cuda.graph keeps what a capture allocates in the graph's pool.
#pragma once

#include <cstddef>

typedef struct CUstream_st* cudaStream_t;

namespace gemmkit {

// Two functions and the context they are called with. Both are called from whichever threads
// call gemmkit, at the same time where those calls are concurrent: they must be thread-safe.
// They are called with the call's device current (the device that holds its tensors).
struct ScratchAllocator {
  // `bytes` (> 0) of memory on the current device for work queued on `stream` from now on
  // (stream-ordered, as cudaMallocAsync or a caching allocator gives it), 256-byte aligned. Also
  // called while `stream` is being captured: the memory must then serve every replay of the graph
  // until the graph is destroyed (cudaMallocAsync and cudaFreeAsync become the graph's
  // allocation and free nodes; torch's caching allocator keeps memory allocated during a capture
  // in the graph's private pool). Where it has none it returns nullptr, and the call throws
  // Error(cuda_error) naming the scratch and its size, or throws, and the call lets its exception
  // through unchanged.
  void* (*allocate)(void* context, size_t bytes, cudaStream_t stream) = nullptr;
  // Takes back what allocate returned (with the same bytes and stream) once the kernels that use
  // it are queued on `stream`: work queued on `stream` later may reuse it, other work only once
  // those kernels have run (as cudaFreeAsync, or a caching allocator's free of a block used on
  // one stream, provide). Must not throw.
  void (*release)(void* context, void* pointer, size_t bytes, cudaStream_t stream) = nullptr;
  void* context = nullptr;
};

// Makes every later GEMM call (gemm, grouped_gemm, grouped_gemm_wgrad; online tuning's timed runs
// too) take its scratch from `allocator` (copied; both functions must be set, else
// Error(invalid_argument)), or with nullptr from gemmkit's own buffers again. For the whole
// process. A call already running when it changes finishes with the allocator it began with:
// keep the old one's context valid until such calls have returned (setting it once at start-up
// avoids the question). quantize() keeps its own stream-ordered scratch.
void set_scratch_allocator(const ScratchAllocator* allocator);

}  // namespace gemmkit
