// TensorViews of framework tensors (torch's, as python/gemmkit passes them), read from their
// Python attributes in one call instead of several from Python: the host time of a small product
// is mostly such calls.
#pragma once

#include <nanobind/nanobind.h>

#include "gemmkit/tensor.h"

namespace gemmkit::python {

// Tells view_of which gemmkit type a framework dtype object (e.g. torch.bfloat16) stands for.
void register_dtype(nanobind::handle framework_dtype, DType dtype);

// The view of a 2-D or 3-D tensor: data_ptr(), dtype, shape and stride(). Raises TypeError for a
// dtype never registered and ValueError for another number of dimensions, naming `name`.
TensorView view_of(nanobind::handle tensor, const char* name);

// The view of an operand's scales: as view_of, except that a single scale may have any shape (a
// 0-d tensor, say) and a 1-D tensor is a column for A (M x 1) and a row for B (1 x N).
TensorView scale_view_of(nanobind::handle scales, const char* name, bool of_a);

}  // namespace gemmkit::python
