// D = alpha * A * B + beta * C on an sm_90 GPU, with 16-bit or 8-bit (FP8) inputs.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gemmkit/tensor.h"

typedef struct CUstream_st* cudaStream_t;

namespace gemmkit {

// How the stored values q of an FP8 operand turn into the values multiplied: q * s, where s is
// the operand's scale for q's block. A scale tensor has one element per block, laid out like
// its operand: A's scales are indexed [m block][k block], B's [k block][n block], each view
// with any strides (row-major, transposed, batched [batch,] ... or shared by every batch).
// For A (M x K) and B (K x N), the shapes are:
//
//   mode     blocks                  A's scales                   B's scales                 dtype
//   tensor   the whole operand       1 x 1                        1 x 1                      f32
//   rowwise  a row of A, a column    M x 1                        1 x N                      f32
//            of B
//   block    128 along K, and 1 or   M x ceil(K/128)   (1x128)    ceil(K/128) x ceil(N/128)  f32
//            128 along M or N        ceil(M/128) x ceil(K/128)    (128x128), or
//                                    (128x128)                    ceil(K/128) x N  (128x1)
//   mx       32 along K (MXFP8)      M x ceil(K/32)               ceil(K/32) x N             ue8m0
//
// DeepSeek-V3's recipe is block with activations 1x128 (A: M x ceil(K/128)) and weights
// 128x128. Scales live on the device, so a CUDA graph replays with whatever they hold then.
//
// 4-bit weights (B of dtype u4 or e2m1, against a bf16, f16 or e4m3 A; e4m3: W4A8) take their own
// modes:
//
//   mode     B       blocks                      B's scales                dtype
//   group    u4      `group` along K (GPTQ,      ceil(K/group) x N         A's (bf16 or f16); W4A8:
//                    AWQ: 32, 64, 128, ...)                                bf16 or f16
//   mx       e2m1    32 along K (MXFP4)          ceil(K/32) x N            ue8m0
//
// A u4 value q is worth (q - z) * s, with z from `zeros` (the scales' shape and dtype: AWQ's zero
// points, as numbers) or 8 where there are none (symmetric, GPTQ's). group is 32 or a power of two
// from 64; one at least K is per-channel (one scale a column). The weights are rounded to A's type
// once dequantised, as a 16-bit GEMM on dequantised weights would round them, and multiplied in
// it; in decode (a few rows of A) with u4 groups of 64 or more, q - z is multiplied instead
// (exact for integer z) and each group's sums scaled in f32. Scales read fastest N-contiguous
// (GPTQ's and AWQ's [K/group, N] layout); gpt-oss's [N, K/32] MXFP4 scales are that transposed,
// which any strides express.
// W4A8: A e4m3 with scale_a none, tensor, rowwise or block in 1x128 blocks, or, where the
// weights' groups are 32 of K (e2m1; u4 with group 32 and K > 32), mx (ue8m0, 1x32: MXFP8
// activations); each weight's q - z is multiplied exactly as e4m3 (z an integer from -1 to 16:
// AWQ's 0 to 15; any other z makes the outputs its weights reach NaN), each 128-deep K block's
// products summed by the tensor cores as FP8 GEMMs sum them (groups of 32 and 64: each group's),
// then scaled by its group's scale (and A's block scale or mx exponent) in f32; e2m1 values
// likewise exact, each 32 of K summed apart and scaled by its ue8m0 scale.
// Many tokens (M of at least 2048 rows, over the batches that share the weights, for W4A8 with
// u4 groups of a multiple of 128; 256 for MXFP4 weights under bf16 activations): the weights are
// first widened exactly into stream-ordered scratch (e4m3 q - z with f32 scales per 128 of K:
// N x K bytes and a little more; bf16 values: 2 N x K bytes), a copy each call, and the FP8 or
// 16-bit GEMM runs on the copy, which pays from there on (the results as the widening kernels
// give them, up to the order of the sums).
// FP4 x FP4: A e2m1 (MXFP4 activations, packed along K as 4-bit weights are: K contiguous, the
// other strides even) with scale_a mx, against weights in groups of 32: the activations are first
// widened exactly to e4m3 into stream-ordered scratch (a copy each call), then multiplied as W4A8.
enum class ScaleMode { none, tensor, rowwise, block, mx, group };

std::string_view scale_mode_name(ScaleMode mode);  // "none", "tensor", "rowwise", "block", "mx", "group"

struct Scale {
  ScaleMode mode = ScaleMode::none;  // none: every scale is 1
  TensorView scales;                 // shape and dtype as the tables above say
  int64_t group = 0;                 // group mode: K elements a scale covers
  std::optional<TensorView> zeros;   // group mode: zero points, shaped and typed as `scales`
};

// A fused epilogue: D holds, instead of alpha A B + beta C, what `text` computes from it (`acc`)
// element by element, and the auxiliary outputs the text names are written beside D, in the same
// kernel. The text form, e.g. "h = acc + bias[n]; pre[m, n] = h; silu(h) * gate[m, n]", is
// described in the README ("Fused epilogues"). Each tensor the text names is given once, by name,
// in D's orientation ([batch,] M x N; a grouped GEMM's D for its groups):
//   name[n]     one value a column of D (a bias): [1, N], or [batch, 1, N] (grouped: [G, 1, N],
//               one per group)
//   name[m]     one value a row of D (a per-token scale): [M, 1], or [batch, M, 1]
//   name[m, n]  an M x N tensor (a residual, a gate): [M, N], or [batch, M, N]
//   name[]      one value (a scale computed on the device): [1, 1], or [batch, 1, 1]
//   name[m, n] = value;   an auxiliary output, D's shape
//   name[n] = sum(value); name[m] = amax(value); name[] = amax(value); ...  a reduction: f32,
//               contiguous, shaped as an input of that index; a rank-2 one reduces over every
//               batch too. gemmkit zeroes it on the call's stream before the kernel adds into it.
// A rank-2 input serves every batch; contiguous groups share one M_total x N D, so tensors along
// its rows are rank 2. Inputs and outputs are bf16, f16 or f32 with any strides, in memory apart
// from D and from the outputs.
struct EpilogueTensor {
  std::string name;
  TensorView tensor;
};
struct Epilogue {
  std::string text;  // empty: none
  std::vector<EpilogueTensor> tensors;
};

// How an epilogue's text uses a tensor it names: read as name[n], name[m], name[m, n] or
// name[], or written (output) element by element (name[m, n] = value) or as a reduction.
// epilogue_tensor_uses lists them inputs first, in order of first use, then the outputs in the
// text's order; it throws Error(invalid_argument) for a text that does not parse, naming the
// column. The text is parsed once per process.
enum class EpilogueIndex { n, m, mn, none };
enum class EpilogueReduce { none, sum, amax };
struct EpilogueTensorUse {
  std::string name;
  EpilogueIndex index;
  bool output;
  EpilogueReduce reduce = EpilogueReduce::none;
};
std::vector<EpilogueTensorUse> epilogue_tensor_uses(const std::string& text);

struct GemmOptions {
  float alpha = 1.0f;
  float beta = 0.0f;
  // Read only when beta != 0. Same shape as D; any dtype gemmkit outputs. May be D itself.
  std::optional<TensorView> c;
  cudaStream_t stream = nullptr;
  // Scales of FP8 inputs (see ScaleMode); 16-bit inputs take none.
  Scale scale_a, scale_b;
  // D's scales where D is e4m3, which the call writes: mode block, f32, [batch,] M x ceil(N/128)
  // with any strides, one scale per 128 columns of a row of D (1x128 blocks, the layout scale_a
  // takes in block mode, so the next FP8 GEMM reads D and these as its A). Each block is
  // quantised as gemmkit::quantize(x, D, scale_d, 1, 128) would quantise x, the f32 values D
  // holds otherwise (the epilogue's result): scale = amax / 448 (1 for an all-zero block, NaN
  // where the block holds a NaN or an infinity), D = x / scale rounded to e4m3, saturating.
  Scale scale_d;
  // An SM budget: at most this many SMs run the call's kernel (0: all), leaving the others to
  // kernels running beside it (communication, say). grouped_gemm only, for now.
  int max_sms = 0;
  // Computed from the result before it is stored (see Epilogue).
  Epilogue epilogue;
  // A dual GEMM: a second B, multiplied by the same A in the same kernel, whose product the
  // epilogue reads as `acc2` (SwiGLU's gate and up projections: B the gate weight, b2 the up
  // weight, and an empty epilogue text taken as "silu(acc) * acc2"). K x N like B, of B's dtype,
  // batch and layout (strides may differ; a concatenated [2N, K] weight is two views of it, an
  // interleaved one two views with twice the row stride). No C. grouped_gemm takes it [G, K, N]
  // like its B (the MoE up-projection); grouped_gemm_wgrad does not.
  std::optional<TensorView> b2;
  // B2's scales where the inputs are FP8: scale_b's mode and blocks, shaped as scale_b is (K x N;
  // grouped_gemm: batched by group as scale_b is), any strides; the epilogue's acc2 is A B2 with
  // A's and these scales. A concatenated [2N, K] weight's scales are two views of its scale
  // tensor where each half starts on a scale block. Mode none otherwise.
  Scale scale_b2;
};

// A is [batch,] M x K, B is [batch,] K x N, D is [batch,] M x N, each with any strides.
// A and B are both bf16 or both f16, or each e4m3 or e5m2 (e.g. e4m3 x e5m2 for gradients), or
// A bf16 or f16 and B 4-bit weights (u4 or e2m1, with scale_b as the modes above say; a
// checkpoint's [N, K/2] bytes are B K x N with strides {1, K}, counted in elements), or A e4m3
// and B 4-bit (W4A8), or A e2m1 with mx scales and B 4-bit in groups of 32 (FP4 x FP4);
// D is bf16, f16, f32, or e4m3 quantised in 1x128 blocks (options.scale_d); accumulation is f32. FP8 products are summed by the tensor cores in
// 128-deep (MXFP8: 32-deep) chunks, each added to an f32 accumulator with its block scales.
// Runs asynchronously on options.stream, on the device that holds the tensors.
// Throws gemmkit::Error naming the argument at fault.
void gemm(const TensorView& a, const TensorView& b, const TensorView& d,
          const GemmOptions& options = {});

}  // namespace gemmkit
