// The tensors of a fused epilogue for the GPU tests: device buffers of each shape with fresh
// random values (outputs poisoned with NaN), strides past the dense ones (vectors 2 apart,
// matrix rows N + 3 apart) so that an offset computed the wrong way reads another value, and
// the host's copy of each value as its type holds it.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "epilogue/program.h"
#include "gemmkit/tensor.h"
#include "reference/host_numeric.h"

namespace gemmkit::testing {

// x as a value of `type` holds it.
inline double stored(DType type, double x) {
  const float f = float(x);
  if (type == DType::bf16) return reference::bf16_to_float(reference::float_to_bf16(f));
  if (type == DType::f16) return reference::f16_to_float(reference::float_to_f16(f));
  return f;
}

// Element i of a host copy of `type` values.
inline double read_back(const std::vector<char>& bytes, DType type, int64_t i) {
  if (type == DType::f32) {
    float f;
    std::memcpy(&f, &bytes[size_t(4 * i)], 4);
    return f;
  }
  if (type == DType::e4m3) return reference::fp8_to_float(uint8_t(bytes[size_t(i)]), type);
  uint16_t h;
  std::memcpy(&h, &bytes[size_t(2 * i)], 2);
  return type == DType::bf16 ? reference::bf16_to_float(h) : reference::f16_to_float(h);
}

// One tensor over `batches` batches of an M x N problem (1: one for every batch, batch stride 0).
struct EpilogueTestTensor {
  DType type = DType::f32;
  epilogue::Shape shape = epilogue::Shape::matrix;
  int64_t batches = 1, m = 0, n = 0;
  int64_t batch_stride = 0, row_stride = 0, col_stride = 0, elements = 0;
  std::vector<double> values;  // host copy, element (b, m, n) at offset(b, m, n)
  void* data = nullptr;

  bool along_m() const { return shape == epilogue::Shape::column_vector || shape == epilogue::Shape::matrix; }
  bool along_n() const { return shape == epilogue::Shape::row_vector || shape == epilogue::Shape::matrix; }
  int64_t offset(int64_t b, int64_t i, int64_t j) const {
    int64_t at = batches > 1 ? b * batch_stride : 0;
    if (along_m()) at += i * row_stride;
    if (along_n()) at += j * col_stride;
    return at;
  }
  // As gemmkit takes it: [batches, rows, cols] where batched, else [rows, cols].
  TensorView view() const {
    const int64_t rows = along_m() ? m : 1, cols = along_n() ? n : 1;
    const int64_t rs = along_m() ? row_stride : std::max<int64_t>(cols * col_stride, 1);
    const int64_t cs = along_n() ? col_stride : 1;
    return batches > 1 ? TensorView::batched(data, type, batches, rows, cols, batch_stride, rs, cs)
                       : TensorView::matrix(data, type, rows, cols, rs, cs);
  }
  // The device values, copied back (outputs).
  std::vector<char> copy_back() const {
    std::vector<char> bytes(size_t(elements * dtype_size(type)));
    EXPECT_EQ(cudaMemcpy(bytes.data(), data, bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return bytes;
  }
  void free() {
    cudaFree(data);
    data = nullptr;
  }
};

inline EpilogueTestTensor make_epilogue_tensor(DType type, epilogue::Shape shape, int64_t batches, int64_t m,
                                               int64_t n, std::mt19937_64& draws, bool output) {
  EpilogueTestTensor t;
  t.type = type;
  t.shape = shape;
  t.batches = batches;
  t.m = m;
  t.n = n;
  // Vectors and scalars read with gaps between their elements; a reduction's output (a vector
  // or scalar output) contiguous, as gemmkit requires.
  const int64_t gap = output ? 1 : 2;
  switch (shape) {
    case epilogue::Shape::row_vector: t.col_stride = gap, t.batch_stride = gap * n; break;
    case epilogue::Shape::column_vector: t.row_stride = gap, t.batch_stride = gap * m; break;
    case epilogue::Shape::scalar: t.batch_stride = gap; break;
    case epilogue::Shape::matrix: t.col_stride = 1, t.row_stride = n + 3, t.batch_stride = m * (n + 3); break;
  }
  t.elements = std::max<int64_t>(batches * t.batch_stride, 1);
  std::uniform_real_distribution<double> value(-2.0, 2.0);
  t.values.resize(size_t(t.elements));
  for (double& v : t.values) v = output ? std::nan("") : stored(type, value(draws));
  std::vector<char> bytes(size_t(t.elements * dtype_size(type)));
  for (int64_t i = 0; i < t.elements; ++i) {
    const float f = float(t.values[size_t(i)]);
    if (type == DType::f32) {
      std::memcpy(&bytes[size_t(4 * i)], &f, 4);
    } else {
      const uint16_t h = output ? 0xffff : type == DType::bf16 ? reference::float_to_bf16(f) : reference::float_to_f16(f);
      std::memcpy(&bytes[size_t(2 * i)], &h, 2);
    }
  }
  EXPECT_EQ(cudaMalloc(&t.data, bytes.size()), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(t.data, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return t;
}

// What a reduction's output (a vector or scalar output) should hold, gathered element by
// element: at each of its offsets, the sum of the values (or their largest |x|) and how far the
// result may be off (the elements' allowances summed, or their largest, plus f32 rounding).
struct ExpectedReduction {
  bool sum = true;
  std::vector<double> value, allowed, magnitude;

  ExpectedReduction(const EpilogueTestTensor& t, bool is_sum)
      : sum(is_sum), value(size_t(t.elements), 0.0), allowed(size_t(t.elements), 0.0), magnitude(size_t(t.elements), 0.0) {}
  void add(int64_t at, double x, double allowance) {
    double& v = value[size_t(at)];
    if (sum) {
      v += x;
      allowed[size_t(at)] += allowance;
    } else {
      v = std::isnan(v) || std::isnan(x) ? std::nan("") : std::max(v, std::fabs(x));
      allowed[size_t(at)] = std::max(allowed[size_t(at)], allowance);
    }
    magnitude[size_t(at)] += std::fabs(x);
  }
  // Each element of `bytes` (the output copied back) against the expectation; returns how many
  // are wrong, reporting the first few.
  int64_t check(const std::vector<char>& bytes, const std::string& name) const {
    int64_t wrong = 0;
    for (size_t i = 0; i < value.size(); ++i) {
      const double got = read_back(bytes, DType::f32, int64_t(i));
      const double limit = allowed[i] + 1e-6 * magnitude[i] + 1e-30;
      if (std::fabs(got - value[i]) <= limit || (std::isnan(got) && std::isnan(value[i]))) continue;
      if (++wrong <= 5) {
        ADD_FAILURE() << name << " at offset " << i << " is " << got << ", expected " << value[i] << " (within " << limit
                      << ")";
      }
    }
    return wrong;
  }
};

}  // namespace gemmkit::testing
