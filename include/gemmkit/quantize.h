// Quantisation of bf16, f16 or f32 tensors into the FP8 inputs of gemm(): e4m3 or e5m2 values
// with one scale per block, such that the dequantised value is q * scale.
#pragma once

#include <cstdint>

#include "gemmkit/tensor.h"

typedef struct CUstream_st* cudaStream_t;

namespace gemmkit {

struct QuantizeOptions {
  // Round every scale up to a power of two (always so with ue8m0 scales).
  bool power_of_two_scales = false;
  cudaStream_t stream = nullptr;
};

// x is [batch,] R x C of bf16, f16 or f32; q has x's shape (e4m3 or e5m2); scales is
// [batch,] ceil(R / block_rows) x ceil(C / block_cols), f32 or ue8m0 (a power of two per byte,
// as MXFP8 takes). Each may have any strides (q and scales must not overlap themselves, x, or
// each other); a rank-2 q or scales goes with a rank-3 x of batch 1 only. Blocks at the bottom
// and right edges are clipped. For each block:
//
//   amax  = max |x| over the block
//   scale = amax / max_finite(q's type)        (448 for e4m3, 57344 for e5m2), rounded to f32,
//           at least 2^-126; with power_of_two_scales or ue8m0, the smallest power of two
//           2^e >= amax / max_finite (so nothing saturates), e in [-127, 127];
//           an all-zero block gets scale 1
//   q     = round_to_nearest_even_satfinite(x / scale), with x / scale rounded to f32 first
//
// A block holding a NaN or an infinity gets a NaN scale (ue8m0: 0xFF) and NaN in every q of
// the block, so that it stays visible in what is computed from it.
//
// The scales are exactly what gemm() takes as GemmOptions::scale_a / scale_b (see gemm.h). For
// A (M x K) and B (K x N), pass (block_rows, block_cols) =
//
//   mode     A                                B                                 scales
//   tensor   (M, K)                           (K, N)                            f32, 1 x 1
//   rowwise  (1, K)                           (K, 1)                            f32, M x 1 / 1 x N
//   block    (1, 128) or (128, 128)           (128, 128) or (128, 1)            f32
//   mx       (1, 32)                          (32, 1)                           ue8m0
//
// e.g. DeepSeek-V3's recipe: activations A with (1, 128), weights B with (128, 128).
//
// Runs asynchronously on options.stream, on the device that holds the tensors, and may be
// captured into a CUDA graph: make one uncaptured call with the same types and layout first,
// since the first call of a configuration compiles and loads its kernel. Blocks that fit a
// CTA's tile (up to about 64K elements, or any size when there are enough of them to fill the
// GPU) take one kernel launch and no scratch memory; larger ones (tensor and rowwise scaling of
// big operands, mostly) take two launches, read x twice, and use a scratch buffer of 4 bytes
// per block, allocated and freed on the stream (cudaMallocAsync / cudaFreeAsync, which a graph
// captures as allocation nodes). Vector accesses need x and q contiguous along the same
// dimension, with that extent, the other strides and the pointers multiples of 4 elements (8
// for full width with 16-bit x); other layouts (q transposed against x, say) run element by
// element, several times slower.
// Throws gemmkit::Error naming the argument at fault.
void quantize(const TensorView& x, const TensorView& q, const TensorView& scales, int64_t block_rows,
              int64_t block_cols, const QuantizeOptions& options = {});

}  // namespace gemmkit
