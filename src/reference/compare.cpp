#include "reference/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "reference/host_numeric.h"

namespace gemmkit::reference {

std::string Comparison::summary() const {
  char line[512];
  if (passed()) {
    std::snprintf(line, sizeof line, "ok: rel %.1e, max abs %.1e over %lld", rel_error_norm,
                  max_abs_error, static_cast<long long>(checked));
  } else {
    std::snprintf(line, sizeof line,
                  "FAIL: %lld bad (%lld NaN) of %lld, first at (b,i,j)=(%lld,%lld,%lld): got %.8g, "
                  "expected %.8g; rel %.1e, max abs %.1e",
                  static_cast<long long>(bad), static_cast<long long>(nan),
                  static_cast<long long>(checked), static_cast<long long>(first_b),
                  static_cast<long long>(first_i), static_cast<long long>(first_j), first_value,
                  first_ref, rel_error_norm, max_abs_error);
  }
  std::string text = line;
  if (written_outside > 0) text += "; " + std::to_string(written_outside) + " elements outside D's view written";
  return text;
}

double accumulation_tolerance(const Problem& p) {
  // FP8 on either side: an FP8 GEMM, or FP8 activations against u4 weights in either order.
  if (is_fp8(p.a.dtype) || is_fp8(p.b.dtype)) return 0x1p-10;
  // MXFP4 activations against 4-bit weights: both widened exactly to e4m3, an FP8 GEMM's sums.
  if (is_4bit(p.a.dtype) && is_4bit(p.b.dtype)) return 0x1p-10;
  // 4-bit weights: each rounded to the 16-bit operand's type (B's where the problem runs
  // transposed, the weights then A), then f32 sums (compare.h).
  if (is_4bit(p.b.dtype)) return unit_roundoff(p.a.dtype) + 1e-5;
  if (is_4bit(p.a.dtype)) return unit_roundoff(p.b.dtype) + 1e-5;
  return 1e-5;
}

Comparison compare(const Problem& p, const void* host_d, const double* ref, const double* ref_abs,
                   const void* host_scale_d) {
  Comparison result;
  const double relative = 2 * unit_roundoff(p.d.dtype);
  const double accumulation = accumulation_tolerance(p);
  double error_sq = 0, ref_sq = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        const int64_t index = (b * p.m + i) * p.n + j;
        double d = load_element(host_d, p.d.dtype, b * p.d.batch_stride + i * p.d.row_stride + j * p.d.col_stride);
        double step = 0;  // an e4m3 D's subnormal half step
        if (p.quantizes_d()) {
          const double scale = load_element(
              host_scale_d, DType::f32, b * p.scale_d.batch_stride + i * p.scale_d.row_stride + j / 128 * p.scale_d.col_stride);
          d *= scale;
          step = 0x1p-10 * scale;
        }
        const double r = ref[index];
        ++result.checked;
        bool ok;
        if (!std::isfinite(r)) {
          // Non-finite inputs: only the same inf, or a NaN for a NaN, is right.
          ok = std::isnan(r) ? std::isnan(d) : d == r;
        } else if (!std::isfinite(d)) {
          ok = false;
          ++result.nan;
        } else {
          const double error = std::fabs(d - r);
          ok = error <= relative * std::fabs(r) + accumulation * ref_abs[index] + step;
          result.max_abs_error = std::max(result.max_abs_error, error);
          error_sq += error * error;
          ref_sq += r * r;
        }
        if (!ok && result.bad++ == 0) {
          result.first_bad = index;
          result.first_b = b;
          result.first_i = i;
          result.first_j = j;
          result.first_value = d;
          result.first_ref = r;
        }
      }
    }
  }
  result.rel_error_norm = ref_sq > 0 ? std::sqrt(error_sq / ref_sq) : 0;
  return result;
}

}  // namespace gemmkit::reference
