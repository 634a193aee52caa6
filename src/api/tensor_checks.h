// Argument checks on tensor views shared by the entry points (gemm, quantize): each throws
// Error(invalid_argument) with a message that names the argument, what it was and what was
// expected. None touches the device.
#pragma once

#include <cstdint>
#include <string>

#include "gemmkit/tensor.h"

namespace gemmkit::api {

[[noreturn]] void fail(const std::string& message);

int64_t element_count(const TensorView& t);   // the product of its sizes
std::string shape_text(const TensorView& t);    // "[2, 64, 48]"
std::string strides_text(const TensorView& t);  // "{3072, 48, 1}"

// Rank 2 or 3, no negative size or stride.
void check_form(const TensorView& t, const char* name);

// Byte range [first, last) the tensor's elements occupy over `batch` matrices (a rank-2 view's
// batch stride is 0); throws if it spans more than 2^63 elements.
struct ByteRange {
  uintptr_t first = 0, last = 0;
  bool overlaps(const ByteRange& o) const { return first < o.last && o.first < last; }
};
ByteRange byte_range(const TensorView& t, int64_t batch, const char* name);

// An output must not hold two elements at one address: ordered by stride, each dimension must
// step past everything the smaller ones cover.
void check_no_self_overlap(const TensorView& t, int64_t batch, const char* name);

}  // namespace gemmkit::api
