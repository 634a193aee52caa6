#include "gemmkit/tensor.h"

namespace gemmkit {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::ue8m0: return "ue8m0";
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
    case DType::ue8m0: return 1;
  }
  return 0;
}

bool is_fp8(DType dtype) { return dtype == DType::e4m3 || dtype == DType::e5m2; }

TensorView TensorView::matrix(void* data, DType dtype, int64_t rows, int64_t cols, int64_t row_stride,
                              int64_t col_stride) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = 2;
  v.sizes[0] = rows;
  v.sizes[1] = cols;
  v.strides[0] = row_stride;
  v.strides[1] = col_stride;
  return v;
}

TensorView TensorView::batched(void* data, DType dtype, int64_t batch, int64_t rows, int64_t cols,
                               int64_t batch_stride, int64_t row_stride, int64_t col_stride) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = 3;
  v.sizes[0] = batch;
  v.sizes[1] = rows;
  v.sizes[2] = cols;
  v.strides[0] = batch_stride;
  v.strides[1] = row_stride;
  v.strides[2] = col_stride;
  return v;
}

}  // namespace gemmkit
