// 4-bit weights, exactly, on the host: the formats issue 55's kernels take (MXFP4; int4 in groups
// along K, symmetric or with zero points), their quantisers from floats, and the packings
// checkpoints ship them in. The reference the GPU quantisers and the widening kernels are
// checked against, value for value and byte for byte.
//
// A weight W is N x K (a row per output column, K contiguous, as checkpoints store it); its
// 4-bit values are packed two a byte along K, element 2i in the low nibble of byte i, which is
// the OCP MX order, torch's float4_e2m1fn_x2 and the order of GPTQ's words (8 a word, low first).
#pragma once

#include <cstdint>
#include <vector>

#include "gemmkit/tensor.h"

namespace gemmkit::reference {

// ---- e2m1 (OCP MX FP4): sign, 2 exponent bits (bias 1), 1 mantissa bit ------------------------
// Magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; no infinities, no NaN.
float e2m1_to_float(uint8_t nibble);
// Rounds to nearest, ties to even, saturating at +-6. NaN has no e2m1 code: quantise_mxfp4 marks
// its block by a NaN scale instead.
uint8_t float_to_e2m1(float x);

// ---- MXFP4: e2m1 values, one ue8m0 scale (2^(e - 127)) per 32 values along K -----------------
constexpr int kMxBlock = 32;

struct Mxfp4Weights {
  int64_t n = 0, k = 0;
  std::vector<uint8_t> values;  // N x ceil(K / 2) bytes
  std::vector<uint8_t> scales;  // N x ceil(K / 32) ue8m0 exponents
};

// OCP MX v1.0 (6.3): per block, shared exponent = floor(log2(amax)) - 2 (e2m1's largest exponent),
// clamped to [-127, 127]; each value is x / 2^shared rounded as float_to_e2m1 rounds. A block of
// zeros gets exponent 0 (scale 1); one holding a NaN or an infinity gets the NaN scale 0xFF and
// zero values. The last block along K may be short. gemmkit::quantize_mxfp4 computes the same bits
// on the GPU.
Mxfp4Weights quantize_mxfp4(const float* w, int64_t n, int64_t k);
double mxfp4_value(const Mxfp4Weights& w, int64_t row, int64_t col);  // element (row, col), dequantised

// ---- int4 in groups of `group` along K: value = (q - zero) * scale --------------------------
// q in [0, 15]. Symmetric (GPTQ's sym = True): zero = 8 for every group. With zero points (AWQ,
// GPTQ's sym = False): a zero in [0, 15] per group. Scales are what checkpoints store, f16 (GPTQ's
// and AWQ's) or bf16 (gemm() takes A's type), kept here as the f32 of that value; group = K is
// one scale per row (per channel).
struct Int4Weights {
  int64_t n = 0, k = 0, group = 0;
  bool zero_points = false;
  DType scale_type = DType::f16;  // f16 or bf16: what every scale is exactly
  std::vector<uint8_t> values;    // N x ceil(K / 2) bytes
  std::vector<float> scales;      // N x ceil(K / group), each exactly a value of scale_type (or NaN)
  std::vector<uint8_t> zeros;     // N x ceil(K / group), zero points (8 where symmetric)
};

// Round to nearest on the formulas GPTQ (symmetric) and AWQ (zero points) use, in f32, with the
// scale rounded to the type checkpoints store (scale_type: f16 or bf16, to nearest, ties to even)
// and q computed from that stored scale. Symmetric: scale = 2 amax / 15 (2 / 15 for a group of
// zeros); q = clamp(rne(x / scale) + 8, 0, 15). Zero points: scale = max(hi - lo, 1e-5) / 15 over
// the group's lo = min x and hi = max x; zero = clamp(rne(-lo / scale), 0, 15); q = clamp(rne(x /
// scale) + zero, 0, 15). rne: to nearest, ties to even, as torch.round. The last group along K
// may be short. Defined where the formulas are not: a group holding a NaN or an infinity gets a
// NaN scale, zero point 8 and every q 8; where x / scale is NaN in a finite group (0 / 0, a
// symmetric scale that rounds to 0), q is the zero point. gemmkit::quantize_int4 computes the same
// bits on the GPU.
Int4Weights quantize_int4(const float* w, int64_t n, int64_t k, int64_t group, bool zero_points,
                          DType scale_type = DType::f16);
double int4_value(const Int4Weights& w, int64_t row, int64_t col);

// ---- Checkpoint packings ----------------------------------------------------------------------
// GPTQ (AutoGPTQ): qweight int32 [ceil(K/8), N], word (i, n) = sum_j q[n][8i + j] << 4j; qzeros
// int32 [ceil(K/g), ceil(N/8)], word (g, j) = sum_t (zero[8j + t][g] - 1) << 4t, the "v1" format's
// offset of one (as AutoGPTQ stores it); scales f16 [ceil(K/g), N].
std::vector<int32_t> pack_gptq_qweight(const Int4Weights& w);
std::vector<int32_t> pack_gptq_qzeros(const Int4Weights& w);
// AWQ: qweight int32 [K, ceil(N/8)], word (k, j) = sum_t q[8j + kAwqOrder[t]][k] << 4t; qzeros
// int32 [ceil(K/g), ceil(N/8)] in the same order, without offset; scales f16 [ceil(K/g), N].
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
std::vector<int32_t> pack_awq_qweight(const Int4Weights& w);
std::vector<int32_t> pack_awq_qzeros(const Int4Weights& w);
// Their inverses, into values (N x ceil(K/2) bytes) and zero points (N x ceil(K/g)).
Int4Weights unpack_gptq(const std::vector<int32_t>& qweight, const std::vector<int32_t>& qzeros,
                        const std::vector<float>& scales_kn, int64_t n, int64_t k, int64_t group);
Int4Weights unpack_awq(const std::vector<int32_t>& qweight, const std::vector<int32_t>& qzeros,
                       const std::vector<float>& scales_kn, int64_t n, int64_t k, int64_t group);

}  // namespace gemmkit::reference
