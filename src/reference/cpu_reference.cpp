#include "reference/cpu_reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/host_numeric.h"

namespace gemmkit::reference {

void cpu_gemm(const Problem& p, const void* host_a, const void* host_b, const void* host_c,
              double* ref, double* ref_abs) {
  const bool use_c = p.has_c() && host_c != nullptr;
  // Per batch, decode A as dense M x K and B as dense N x K (transposed) once, so the inner
  // loop runs over contiguous doubles instead of decoding strided 16-bit values M*N*K times.
  std::vector<double> a(p.m * p.k), bt(p.n * p.k);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t kk = 0; kk < p.k; ++kk)
        a[i * p.k + kk] = load_element(
            host_a, p.a.dtype, b * p.a.batch_stride + i * p.a.row_stride + kk * p.a.col_stride);
    for (int64_t kk = 0; kk < p.k; ++kk)
      for (int64_t j = 0; j < p.n; ++j)
        bt[j * p.k + kk] = load_element(
            host_b, p.b.dtype, b * p.b.batch_stride + kk * p.b.row_stride + j * p.b.col_stride);

    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        const double* arow = &a[i * p.k];
        const double* bcol = &bt[j * p.k];
        double sum = 0, abs_sum = 0;
        for (int64_t kk = 0; kk < p.k; ++kk) {
          const double product = arow[kk] * bcol[kk];
          sum += product;
          abs_sum += std::fabs(product);
        }
        double value = p.alpha * sum, scale = std::fabs(p.alpha) * abs_sum;
        if (use_c) {
          const double c = load_element(
              host_c, p.c.dtype, b * p.c.batch_stride + i * p.c.row_stride + j * p.c.col_stride);
          value += p.beta * c;
          scale += std::fabs(p.beta) * std::fabs(c);
        }
        const int64_t out = (b * p.m + i) * p.n + j;
        ref[out] = value;
        ref_abs[out] = scale;
      }
    }
  }
}

int64_t span_elements(const MatrixRef& m, int64_t batch, int64_t rows, int64_t cols) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return 0;
  // Each index contributes its largest offset independently; a negative stride peaks at index 0.
  return 1 + std::max<int64_t>(0, (batch - 1) * m.batch_stride) +
         std::max<int64_t>(0, (rows - 1) * m.row_stride) +
         std::max<int64_t>(0, (cols - 1) * m.col_stride);
}

}  // namespace gemmkit::reference
