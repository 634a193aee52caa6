#include "api/tensor_checks.h"

#include <algorithm>
#include <array>
#include <sstream>
#include <utility>

#include "gemmkit/error.h"

namespace gemmkit::api {

void fail(const std::string& message) { throw Error(ErrorCode::invalid_argument, message); }

namespace {

// "[a, b]" or "{a, b}": the first `rank` values between the brackets given.
std::string list_text(const int64_t* values, int rank, char open, char close) {
  std::ostringstream s;
  s << open;
  for (int i = 0; i < rank; ++i) s << (i ? ", " : "") << values[i];
  s << close;
  return s.str();
}

}  // namespace

int64_t element_count(const TensorView& t) {
  int64_t count = 1;
  for (int i = 0; i < t.rank; ++i) count *= t.sizes[i];
  return count;
}

std::string shape_text(const TensorView& t) { return list_text(t.sizes, t.rank, '[', ']'); }

std::string strides_text(const TensorView& t) { return list_text(t.strides, t.rank, '{', '}'); }

void check_form(const TensorView& t, const char* name) {
  if (t.rank != 2 && t.rank != 3) {
    fail(std::string(name) + ": rank " + std::to_string(t.rank) + "; expected 2 (a matrix) or 3 (a batch of matrices)");
  }
  for (int i = 0; i < t.rank; ++i) {
    if (t.sizes[i] < 0) fail(std::string(name) + ": sizes " + shape_text(t) + " include a negative size; expected sizes >= 0");
    if (t.strides[i] < 0) {
      fail(std::string(name) + ": strides " + strides_text(t) + " include a negative stride; expected strides >= 0");
    }
  }
}

ByteRange byte_range(const TensorView& t, int64_t batch, const char* name) {
  int64_t span = 1;
  const int64_t sizes[3] = {batch, t.rows(), t.cols()};
  const int64_t strides[3] = {t.batch_stride(), t.row_stride(), t.col_stride()};
  for (int i = 0; i < 3; ++i) {
    int64_t step = 0;
    if (sizes[i] > 1 && (__builtin_mul_overflow(sizes[i] - 1, strides[i], &step) ||
                         __builtin_add_overflow(span, step, &span))) {
      fail(std::string(name) + ": strides " + strides_text(t) + " with sizes " + shape_text(t) +
           " address more than 2^63 elements; expected strides that fit in 64 bits");
    }
  }
  int64_t bytes = 0;  // 4-bit elements: span nibbles from a byte's low one (their strides are even)
  if (is_4bit(t.dtype)) {
    bytes = span / 2 + span % 2;
  } else if (__builtin_mul_overflow(span, int64_t(dtype_size(t.dtype)), &bytes)) {
    fail(std::string(name) + ": strides " + strides_text(t) + " with sizes " + shape_text(t) +
         " address more than 2^63 bytes; expected strides that fit in 64 bits");
  }
  const uintptr_t first = reinterpret_cast<uintptr_t>(t.data);
  return {first, first + uintptr_t(bytes)};
}

void check_no_self_overlap(const TensorView& t, int64_t batch, const char* name) {
  std::array<std::pair<int64_t, int64_t>, 3> dims = {
      {{t.batch_stride(), batch}, {t.row_stride(), t.rows()}, {t.col_stride(), t.cols()}}};
  std::sort(dims.begin(), dims.end());
  int64_t covered = 1;  // elements spanned by the dimensions seen so far
  for (auto [stride, size] : dims) {
    if (size <= 1) continue;
    if (stride < covered) {
      fail(std::string(name) + ": strides " + strides_text(t) + " with sizes " + shape_text(t) +
           " make elements overlap; expected every element of " + name + " to have its own address");
    }
    int64_t extent = 0;
    if (__builtin_mul_overflow(stride, size - 1, &extent) || __builtin_add_overflow(extent, covered, &covered)) {
      fail(std::string(name) + ": strides " + strides_text(t) + " with sizes " + shape_text(t) +
           " address more than 2^63 elements; expected strides that fit in 64 bits");
    }
  }
}

}  // namespace gemmkit::api
