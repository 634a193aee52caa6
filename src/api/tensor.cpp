#include "gemmkit/tensor.h"

#include <algorithm>
#include <initializer_list>

namespace gemmkit {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::ue8m0: return "ue8m0";
    case DType::u4: return "u4";
    case DType::e2m1: return "e2m1";
  }
  return "unknown";
}

int dtype_size(DType dtype) {
  switch (dtype) {
    case DType::bf16:
    case DType::f16: return 2;
    case DType::f32: return 4;
    case DType::e4m3:
    case DType::e5m2:
    case DType::ue8m0:
    case DType::u4:
    case DType::e2m1: return 1;
  }
  return 0;
}

int dtype_bits(DType dtype) { return is_4bit(dtype) ? 4 : 8 * dtype_size(dtype); }

bool is_fp8(DType dtype) { return dtype == DType::e4m3 || dtype == DType::e5m2; }

bool is_4bit(DType dtype) { return dtype == DType::u4 || dtype == DType::e2m1; }

namespace {

TensorView view(void* data, DType dtype, std::initializer_list<int64_t> sizes, std::initializer_list<int64_t> strides) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = int(sizes.size());
  std::copy(sizes.begin(), sizes.end(), v.sizes);
  std::copy(strides.begin(), strides.end(), v.strides);
  return v;
}

}  // namespace

TensorView TensorView::matrix(void* data, DType dtype, int64_t rows, int64_t cols, int64_t row_stride,
                              int64_t col_stride) {
  return view(data, dtype, {rows, cols}, {row_stride, col_stride});
}

TensorView TensorView::batched(void* data, DType dtype, int64_t batch, int64_t rows, int64_t cols,
                               int64_t batch_stride, int64_t row_stride, int64_t col_stride) {
  return view(data, dtype, {batch, rows, cols}, {batch_stride, row_stride, col_stride});
}

}  // namespace gemmkit
