// Quantisation of bf16, f16 or f32 tensors into the inputs gemm() takes: FP8 (quantize: e4m3 or
// e5m2 values with one scale per block, such that the dequantised value is q * scale), and 4-bit
// weights (quantize_int4: u4 codes with group scales and optional zero points, GPTQ and AWQ;
// quantize_mxfp4: e2m1 values with ue8m0 scales, OCP MX).
#pragma once

#include <cstdint>
#include <optional>

#include "gemmkit/tensor.h"

typedef struct CUstream_st* cudaStream_t;

namespace gemmkit {

struct QuantizeOptions {
  // quantize: round every scale up to a power of two (always so with ue8m0 scales).
  // quantize_mxfp4: ignored (MX scales are powers of two); quantize_int4: must be false.
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

// ---- 4-bit weights -------------------------------------------------------------------------------
// Every tensor is as gemm() takes it for B and scale_b (gemm.h), so that the views passed here are
// passed to gemm() unchanged:
//
//   w       [batch,] K x N of bf16, f16 or f32, any strides: a checkpoint's [N, K] weight (K
//           contiguous) is the view K x N with strides {1, K}
//   q       [batch,] K x N of u4 (quantize_int4) or e2m1 (quantize_mxfp4), two a byte along K,
//           the even element in the low nibble: K contiguous (row stride 1), the column and batch
//           strides even. [N, ceil(K/2)] bytes (a checkpoint's packing) are the view K x N with
//           strides {1, 2 ceil(K/2)}. Where K is odd, the high nibble of each column's last byte
//           is written 0.
//   scales  [batch,] ceil(K/group) x N, any strides: bf16 or f16 for int4 (gemm() wants A's
//           type), ue8m0 for MXFP4 (group 32). GPTQ's and AWQ's [K/group, N] layout is
//           row-major, which gemm() reads fastest; gpt-oss's [N, K/32] MXFP4 scales are the
//           view with strides {1, ceil(K/32)}.
//   zeros   int4 only, optional: the scales' shape and dtype, the zero points as numbers.
//
// A rank-2 q, scales or zeros goes with a rank-3 w of batch 1 only. Outputs must not overlap w,
// themselves or each other. Blocks run along K: each column's K elements in groups of `group`
// (the last one may be short). For each block, in f32 with every operation rounded to nearest
// and ties to even (rne: to an integer, ties to even):
//
//   quantize_int4, no zeros (symmetric, GPTQ's sym = True):
//     scale = round(2 amax / 15) to the scales' dtype, 2 / 15 for a block of zeros
//     q     = clamp(rne(x / scale) + 8, 0, 15)                          (worth (q - 8) * scale)
//   quantize_int4 with zeros (AWQ; GPTQ's sym = False), lo = min x and hi = max x:
//     scale = round(max(hi - lo, 1e-5) / 15) to the scales' dtype
//     zero  = clamp(rne(-lo / scale), 0, 15)
//     q     = clamp(rne(x / scale) + zero, 0, 15)                    (worth (q - zero) * scale)
//   quantize_mxfp4 (OCP MX v1.0), amax = max |x|:
//     e     = floor(log2(amax)) - 2 (e2m1's largest exponent), clamped to [-127, 127]; 0 for a
//             block of zeros. The scale is the ue8m0 byte e + 127 (2^e)
//     q     = x * 2^-e rounded to e2m1, to nearest, ties to even, saturating at +-6 (the sign
//             kept: -0 is code 8)                                      (worth q * 2^e)
//
// q is computed from the scale as stored (rounded), so dequantising reproduces what the codes
// mean. A block holding a NaN or an infinity gets a NaN scale: int4 the quiet NaN of the scales'
// type (f16 0x7e00, bf16 0x7fc0), zero point 8 and every code 8; MXFP4 0xff and every code 0.
// Where x / scale is NaN in a finite block (0 / 0, where a symmetric block's scale rounds to 0),
// q is the zero point. These are the rules of src/reference/lowbit.h, bit for bit.
//
// group (quantize_int4) is any even number, or any at least K (one scale a column); gemm()
// takes 32, a power of two from 64, or at least K. The weights are read twice and each block
// is one warp's: these run once per checkpoint, written for clarity, not speed. Asynchronous
// on options.stream, on the device that holds the tensors; the first call of a type
// combination compiles and loads its kernel. Throws gemmkit::Error naming the argument at fault.
//
//   // A [N, K] bf16 weight to GPTQ-style int4 in groups of 128, then y = x w^T.
//   auto w_kn = TensorView::matrix(w, DType::bf16, K, N, 1, K);
//   auto q = TensorView::matrix(packed, DType::u4, K, N, 1, K);  // [N, K/2] bytes, K even
//   auto s = TensorView::row_major(scales, DType::bf16, K / 128, N);
//   gemmkit::quantize_int4(w_kn, q, s, std::nullopt, 128);
//   GemmOptions o;
//   o.scale_b = {ScaleMode::group, s, 128};
//   gemmkit::gemm(TensorView::row_major(x, DType::bf16, M, K), q, TensorView::row_major(y, DType::bf16, M, N), o);
void quantize_int4(const TensorView& w, const TensorView& q, const TensorView& scales,
                   const std::optional<TensorView>& zeros, int64_t group, const QuantizeOptions& options = {});
void quantize_mxfp4(const TensorView& w, const TensorView& q, const TensorView& scales,
                    const QuantizeOptions& options = {});

}  // namespace gemmkit
