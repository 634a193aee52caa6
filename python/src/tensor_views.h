// TensorViews of framework tensors (torch's, as python/gemmkit passes them), read from their
// Python attributes in one call instead of several from Python: the host time of a small product
// is mostly such calls.
#pragma once

#include <nanobind/nanobind.h>

#include "gemmkit/grouped.h"
#include "gemmkit/tensor.h"

namespace gemmkit::python {

// Tells view_of which gemmkit type a framework dtype object (e.g. torch.bfloat16) stands for.
void register_dtype(nanobind::handle framework_dtype, DType dtype);

// Tells group_sizes_of that a framework dtype object (e.g. torch.int32) holds group sizes of 32
// bits, or of 64 bits where `int64`.
void register_size_dtype(nanobind::handle framework_dtype, bool int64);

// The view of a 2-D or 3-D tensor: data_ptr(), dtype, shape and stride(). Raises TypeError for a
// dtype never registered and ValueError for another number of dimensions, naming `name`.
TensorView view_of(nanobind::handle tensor, const char* name);

// The K x N view of 4-bit weights B, `dtype` u4 or e2m1, that a 2-D tensor of bytes holds in
// torch.nn.Linear's layout, [N, ceil(K/2)], two K elements a byte (the even one in the low
// nibble; for an odd K the last byte's high one is padding): sizes {K, N}, strides in nibbles
// {1, 2 * the bytes' row stride} (gemmkit/tensor.h). A 3-D tensor, [G, N, ceil(K/2)] (a grouped
// GEMM's experts), gives the G x K x N view, batch stride 2 * the bytes' batch stride. The
// tensor's dtype is not looked at (the caller checks it: uint8, or torch's float4_e2m1fn_x2).
// Raises ValueError naming `name` for another number of dimensions or shape, or bytes along K
// that are not contiguous.
TensorView packed_weight_view_of(nanobind::handle bytes, DType dtype, int64_t k, const char* name);

// The M x K e2m1 view of MXFP4 activations A that a 2-D tensor of bytes holds, [M, K/2], two codes
// a byte along K as 4-bit weights are packed (K = 2 * the bytes' columns: an even K): the
// transpose of packed_weight_view_of's view of the same bytes, strides in nibbles {2 * the bytes'
// row stride, 1}. A 3-D tensor, [G, max_m, K/2] (a grouped GEMM's masked rows), gives the G x
// max_m x K view, batch stride 2 * the bytes' batch stride. Raises ValueError naming `name` for
// another number of dimensions, or bytes along K that are not contiguous.
TensorView packed_activation_view_of(nanobind::handle bytes, const char* name);

// The view of an operand's scales: as view_of, except that a single scale may have any shape (a
// 0-d tensor, say) and a 1-D tensor is a column for A (M x 1) and a row for B (1 x N).
TensorView scale_view_of(nanobind::handle scales, const char* name, bool of_a);

// The GroupSizes of a 1-D tensor of G int32 or int64 values, laid out as `layout` says: its
// data_ptr(), dtype and length. Raises TypeError for another dtype and ValueError for another
// number of dimensions or values that are not consecutive (the kernel reads G in a row), naming
// `name`.
GroupSizes group_sizes_of(nanobind::handle sizes, const char* name, GroupLayout layout, bool check);

}  // namespace gemmkit::python
