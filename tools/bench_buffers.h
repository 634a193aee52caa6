// What bench's suite and chain modes share about buffers: the spec a suite line is timed with,
// the bytes its operands move, and the device-to-device copy that moves as many, the yardstick
// for a memory-bound GEMM.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reference/device_problem.h"
#include "bench/suite.h"

namespace gemmkit::tools {

// The problem a suite line describes (to_spec), with FP8 scales laid out the way cuBLASLt can
// read them where one layout fits both operands, so that both sides time the same buffers.
reference::ProblemSpec bench_spec(const SuiteProblem& p);

// Bytes of one buffer set: A, B and D (FP8 inputs: one byte an element; scales left out).
double set_bytes(const reference::ProblemSpec& spec);

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};

// The tensors of bench's --epilogue for one buffer set of `spec`: each input the text reads bf16,
// uniform in [-1, 1), as its index form shapes it ([1, N], [M, 1], [M, N] or [1, 1], one for
// every batch); each output of D's type and shape, a reduction's f32 and shaped by its index,
// one a batch. Throws Error(invalid_argument) for a text that does not parse.
class EpilogueBuffers {
 public:
  EpilogueBuffers(const std::string& text, const reference::ProblemSpec& spec, uint64_t seed);
  const Epilogue& epilogue() const { return epilogue_; }

 private:
  std::vector<std::unique_ptr<void, CudaFree>> memory_;
  Epilogue epilogue_;
};

// A dual GEMM's operands on the buffers of the GEMM of its accumulators, B [.., K, 2N] and D
// [.., M, 2N] (batched where they are): B's first N columns and its last N as B2 (a concatenated
// [2N, K] weight for NT), D's first N columns; FP8 B's scales likewise split (a tensor scale
// serves both). Throws Error(invalid_argument) for an odd 2N, or scale blocks that straddle the
// halves, naming `what`; the DeviceProblem form also for a batch.
struct DualViews {
  TensorView b, b2, d;
  Scale scale_b, scale_b2;
};
DualViews dual_views(const TensorView& b, const TensorView& d, const Scale& scale_b, const std::string& what);
DualViews dual_views(const reference::DeviceProblem& set);

// Source and destination halves for copies that move `bytes` each (half read, half written),
// one pair per set so that copies rotate past L2 as the GEMMs do. No memory unless half of what
// is free covers them.
struct CopyBuffers {
  std::unique_ptr<void, CudaFree> memory;
  size_t half = 0;  // bytes copied per run

  CopyBuffers(double bytes, int sets);
  void copy(int set, cudaStream_t stream) const;
};

}  // namespace gemmkit::tools
