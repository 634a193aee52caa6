// Argument checks that need no GPU: types, shapes, strides, null pointers and overlaps.
#pragma once

#include "dispatch/problem.h"
#include "gemmkit/gemm.h"

namespace gemmkit {

// Builds the Problem for gemm(a, b, d, options) or throws Error(invalid_argument) naming the
// argument, what it was and what was expected. Does not touch the device (see gemm.cpp).
Problem validate_gemm(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options);

}  // namespace gemmkit
