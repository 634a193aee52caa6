// TMA tensor maps for GEMM operands.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/problem.h"

namespace gemmkit::runtime {

// A 3-D map over [batch][rows][cols] of `m`, innermost dimension first: the contiguous one
// (cols if `cols_contiguous`, else rows), then the other, then the batch (size 1 when the
// operand is broadcast). Boxes are box_inner x box_outer x 1, `swizzled` in units as wide as a
// box row (32, 64 or 128 bytes; operands), or not (scales); elements outside the tensor read as
// zero and are not written.
CUtensorMap make_tensor_map(const MatrixRef& m, int64_t batch, int64_t rows, int64_t cols, bool cols_contiguous,
                            uint32_t box_inner, uint32_t box_outer, bool swizzled = true);

// The TMA GEMM kernel's tensor maps, its one parameter before GemmParams, in its order
// (kernels/sm90/common.cuh, KernelMaps).
struct KernelMaps {
  CUtensorMap a, b, b2, d, scale_a, scale_b, scale_b2;
  CUtensorMap zeros;
};

}  // namespace gemmkit::runtime
