// Argument checks that need no GPU: types, shapes, strides, null pointers and overlaps.
#pragma once

#include "core/problem.h"
#include "gemmkit/gemm.h"

namespace gemmkit {

// Builds the Problem for gemm(a, b, d, options) or throws Error(invalid_argument) naming the
// argument, what it was and what was expected. Does not touch the device (see api/prepare.h).
Problem validate_gemm(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options);

// Throws Error(invalid_argument) where D's memory overlaps an input the problem `p` (from
// validate_gemm, not empty) reads; C may be D itself. gemm() checks this after each view is
// known to lie inside its allocation, so that a view running past it is reported as such.
void check_apart(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options,
                 const Problem& p);

}  // namespace gemmkit
