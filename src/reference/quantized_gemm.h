// Quantise-then-GEMM: the error FP8 brings into a GEMM of 16-bit data, checked against what
// FP8's rounding allows. Shared by the GPU tests and `gemmkit quantize`.
#pragma once

#include <cstdint>
#include <string>

#include "reference/device_problem.h"

namespace gemmkit::reference {

struct QuantizedComparison {
  int64_t checked = 0;
  int64_t bad = 0;             // elements outside the elementwise bound
  double relative_norm = 0;    // ||D - ref||_2 / ||ref||_2
  double norm_bound = 0;
  bool passed() const { return bad == 0 && relative_norm <= norm_bound && relative_norm > 0; }
  // "ok: rel 4.1e-02 (bound 1.0e-01) over 98304" or "FAIL: 3 outside the elementwise bound ...".
  std::string summary() const;
};

// Random bf16 A and B of the spec's shape, layout and batch are quantised by gemmkit::quantize
// to the spec's FP8 types (spec.in for A, spec.b_type() for B) with the spec's scaling modes,
// multiplied by gemmkit::gemm into D of spec.out, and compared with the double-precision product
// of the bf16 inputs. Rounding to an 8-bit type of unit roundoff u moves each value by at most
// u of itself, or half a subnormal step times its scale; so each product by at most
// (u_a + u_b + u_a u_b) |a||b|. Elementwise, |D - ref| <= that times sum |A||B|, plus the FP8
// accumulation tolerance, the subnormal terms and D's rounding. In norm: the rounding errors of
// random inputs are independent and uniform, so the rms of D - ref is sqrt((u_a^2 + u_b^2) / 3)
// of the rms of ref; the bound is twice that, which a wrong scale (an error the size of ref)
// far exceeds. A zero error fails too: FP8 cannot reproduce bf16 data exactly.
QuantizedComparison quantized_gemm_check(const ProblemSpec& spec, uint64_t seed);

}  // namespace gemmkit::reference
