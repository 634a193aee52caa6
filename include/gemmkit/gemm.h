// D = alpha * A * B + beta * C on an sm_90 GPU.
#pragma once

#include <optional>

#include "gemmkit/tensor.h"

typedef struct CUstream_st* cudaStream_t;

namespace gemmkit {

struct GemmOptions {
  float alpha = 1.0f;
  float beta = 0.0f;
  // Read only when beta != 0. Same shape as D; any dtype gemmkit outputs. May be D itself.
  std::optional<TensorView> c;
  cudaStream_t stream = nullptr;
};

// A is [batch,] M x K, B is [batch,] K x N, D is [batch,] M x N, each with any strides.
// A and B are bf16 or f16 (the same type); D is bf16, f16 or f32; accumulation is f32.
// Runs asynchronously on options.stream, on the device that holds the tensors.
// Throws gemmkit::Error naming the argument at fault.
void gemm(const TensorView& a, const TensorView& b, const TensorView& d,
          const GemmOptions& options = {});

}  // namespace gemmkit
