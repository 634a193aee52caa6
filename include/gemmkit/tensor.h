// Non-owning views of device tensors: a pointer, an element type, sizes and strides.
#pragma once

#include <cstdint>
#include <string_view>

namespace gemmkit {

// e4m3 and e5m2 are the 8-bit floats of FP8 inputs; ue8m0 is the one-byte power-of-two scale of
// MXFP8 and MXFP4 (the value 2^(bits - 127)), valid only as a scale. u4 and e2m1 are 4-bit
// weights, two to a byte along their contiguous dimension, the element of even index in the low
// nibble: u4 an unsigned integer q in 0..15 (worth (q - zero) * scale, ScaleMode::group), e2m1
// OCP MX's FP4 (sign, two exponent bits, one mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
// negatives; worth q * 2^(e - 127) with an ue8m0 scale e, ScaleMode::mx). A 4-bit view's sizes
// and strides count elements (nibbles): the contiguous dimension's stride is 1, the others even.
enum class DType { bf16, f16, f32, e4m3, e5m2, ue8m0, u4, e2m1 };

std::string_view dtype_name(DType dtype);
int dtype_size(DType dtype);  // bytes an element takes: 1 for the 4-bit types, two of which share one
int dtype_bits(DType dtype);  // bits an element takes: 4 for the 4-bit types
bool is_fp8(DType dtype);     // e4m3 or e5m2
bool is_4bit(DType dtype);    // u4 or e2m1

// A rank-2 matrix [rows, cols] or a rank-3 strided batch [batch, rows, cols].
// Strides are in elements, one per dimension. Row-major is strides {cols, 1};
// column-major is strides {1, rows}. A batch stride of 0 broadcasts one matrix
// across the batch (allowed for inputs only).
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::bf16;
  int rank = 2;
  int64_t sizes[3] = {0, 0, 0};
  int64_t strides[3] = {0, 0, 0};

  static TensorView matrix(void* data, DType dtype, int64_t rows, int64_t cols,
                           int64_t row_stride, int64_t col_stride);
  static TensorView batched(void* data, DType dtype, int64_t batch, int64_t rows, int64_t cols,
                            int64_t batch_stride, int64_t row_stride, int64_t col_stride);
  static TensorView row_major(void* data, DType dtype, int64_t rows, int64_t cols) {
    return matrix(data, dtype, rows, cols, cols, 1);
  }
  static TensorView col_major(void* data, DType dtype, int64_t rows, int64_t cols) {
    return matrix(data, dtype, rows, cols, 1, rows);
  }

  int64_t batch() const { return rank == 3 ? sizes[0] : 1; }
  int64_t rows() const { return sizes[rank - 2]; }
  int64_t cols() const { return sizes[rank - 1]; }
  int64_t batch_stride() const { return rank == 3 ? strides[0] : 0; }
  int64_t row_stride() const { return strides[rank - 2]; }
  int64_t col_stride() const { return strides[rank - 1]; }
};

}  // namespace gemmkit
