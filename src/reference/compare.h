// Judging a GEMM output against the CPU reference.
#pragma once

#include <cstdint>
#include <string>

#include "core/problem.h"

namespace gemmkit::reference {

struct Comparison {
  int64_t checked = 0;
  int64_t bad = 0;  // elements outside the tolerance, non-finite ones included
  int64_t nan = 0;  // non-finite outputs where the reference is finite (e.g. unwritten, NaN-poisoned)
  double max_abs_error = 0;
  double rel_error_norm = 0;  // ||d - ref||_2 / ||ref||_2, or 0 if ||ref||_2 = 0
  int64_t first_bad = -1;     // index into the dense [batch][M][N] order
  int64_t first_b = -1, first_i = -1, first_j = -1;  // first_bad as (batch, row, col)
  double first_value = 0, first_ref = 0;             // what D held there, and the reference
  int64_t written_outside = 0;  // elements of D's allocation outside its view that changed (if checked)

  bool passed() const { return bad == 0 && nan == 0 && written_outside == 0; }
  // One line: "ok: rel 3.1e-03, max abs 1.2e-02 over 1048576" or
  // "FAIL: 12 bad (3 NaN) of 1048576, first at (b,i,j)=(0,5,7): got 1.5, expected 2.25; rel ...".
  std::string summary() const;
};

// host_d: host image of D (same strides as p.d). An element passes if
//   |d - ref| <= 2 * unit_roundoff(D's dtype) * |ref| + accumulation_tolerance(p) * ref_abs
// i.e. one rounding of the output plus an accumulation error proportional to sum |A||B|. An
// e4m3 D (p.quantizes_d()) is compared as q * its block's scale, from host_scale_d (the host
// image of p.scale_d, same strides), with e4m3's subnormal step (2^-10 of the scale) allowed too.
Comparison compare(const Problem& p, const void* host_d, const double* ref, const double* ref_abs,
                   const void* host_scale_d = nullptr);

// The accumulation error allowed per unit of sum |A||B|: 1e-5 for 16-bit inputs (f32 sums);
// 2^-10 for FP8, whose tensor-core sums are narrower: modelled as each k32 instruction's sum
// being cut to 12 bits, at most 4 instructions per 128-deep granule before it joins the f32
// accumulator, 4 * 2^-12. On an H100, positive inputs at K = 16384 (every error of one sign)
// came out 2^-11 low with 128-deep granules; kept in the tensor cores over all of K, the same
// model gives 2^-4.
// FP8 activations against u4 weights (W4A8: e4m3 x u4, or u4 x e4m3 in a transposed problem)
// take FP8's allowance too: each weight's q - zero is an integer of at most 15 in magnitude, exact
// in e4m3, so the tensor cores sum a 128-deep block's exact FP8 products as in an FP8 GEMM, and
// the group's (and A's 1x128 block's) scale multiplies that sum in f32, a rounding of 2^-24.
// MXFP4 activations (e2m1 A, mx scales) against 4-bit weights in groups of 32 take it as well:
// the activations are widened exactly to e4m3 (every e2m1 value is one) and run as W4A8 in MX,
// each 32-deep granule's exact FP8 products scaled by A's exponent and the weights' scale.
// 4-bit weights against a 16-bit operand (either operand u4 or e2m1, the other bf16 or f16):
// the reference multiplies each weight dequantised exactly, the kernels round it to the other operand's 16-bit type
// first (gemmkit/gemm.h), a relative error of at most that type's unit roundoff (bf16 2^-8,
// f16 2^-11) per weight in its normal range, so at most that much of sum |A||B| in all; the products of two 16-bit
// values are exact in f32 and summed there, the 1e-5 of 16-bit inputs on top. A u4 weight
// (q - zero) * scale has up to 4 + 11 significant bits and is rounded; an e2m1 one times a
// power of two is exact unless its scale takes it out of the 16-bit type's normal range, but
// the allowance is the same for both.
double accumulation_tolerance(const Problem& p);

}  // namespace gemmkit::reference
