// A straightforward double-precision GEMM on host copies of the operands, for checking results.
#pragma once

#include <cstdint>

#include "core/problem.h"

namespace gemmkit::reference {

// Host images of the operands: each pointer holds the bytes the device tensor's strides address,
// i.e. host_a[offset] corresponds to p.a.data[offset] (same strides). host_c may be null when
// !p.has_c(). Writes, densely in [batch][M][N] order,
//   ref[(b*M + i)*N + j]     = alpha * sum_k A*B + beta*C        (in double)
//   ref_abs[(b*M + i)*N + j] = |alpha| * sum_k |A||B| + |beta||C| (the scale errors are judged against)
void cpu_gemm(const Problem& p, const void* host_a, const void* host_b, const void* host_c,
              double* ref, double* ref_abs);

// The number of elements a host image of an operand must hold: 1 + the largest offset any
// (batch, row, col) reaches, or 0 if any extent is 0.
int64_t span_elements(const MatrixRef& m, int64_t batch, int64_t rows, int64_t cols);

}  // namespace gemmkit::reference
