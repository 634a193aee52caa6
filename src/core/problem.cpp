#include "core/problem.h"

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>

#include "core/checked_math.h"
#include "gemmkit/error.h"

namespace gemmkit {
namespace {

MatrixRef transposed(const MatrixRef& m) {
  MatrixRef t = m;
  std::swap(t.row_stride, t.col_stride);
  return t;
}

ScaleRef transposed(const ScaleRef& s) {
  ScaleRef t = s;
  t.m = transposed(s.m);
  t.zeros = transposed(s.zeros);
  std::swap(t.block_rows, t.block_cols);
  return t;
}

int64_t address(const void* data) { return int64_t(reinterpret_cast<uintptr_t>(data)); }

}  // namespace

void check_addressable(int64_t m, int64_t n, int64_t k, int64_t batch, int element_bytes) {
  // Plain arithmetic on the way through (gemm() calls this every time); text only to fail.
  const int64_t bytes = element_bytes;
  auto fail = [&](const std::string& what, std::initializer_list<int64_t> factors, const char* unit) {
    throw Error(ErrorCode::invalid_argument,
                "problem " + std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k) +
                    (batch != 1 ? " (batch " + std::to_string(batch) + ")" : "") + ": " + what + " = " +
                    product_text(factors) + " " + unit + " overflows 64-bit addressing");
  };
  // A single size counts too: where another is 0 the operand is empty, but the kernels' tile
  // counts and offsets still step along it.
  for (auto [name, size] : {std::pair{"M", m}, std::pair{"N", n}, std::pair{"K", k}}) {
    if (!checked_product({size, bytes})) fail(std::string(name) + " x " + std::to_string(bytes) + " bytes", {size, bytes}, "bytes");
  }
  for (auto [name, rows, cols] : {std::tuple{"M x K", m, k}, std::tuple{"K x N", k, n}, std::tuple{"M x N", m, n}}) {
    for (int64_t matrices : {int64_t(1), batch}) {
      if (checked_product({matrices, rows, cols, bytes})) continue;  // so the elements fit too
      const std::string what = (matrices != 1 ? "batch x " : "") + std::string(name);
      if (!checked_product({matrices, rows, cols})) fail(what, {matrices, rows, cols}, "elements");
      fail(what + " x " + std::to_string(bytes) + " bytes", {matrices, rows, cols, bytes}, "bytes");
    }
  }
}

MatrixRef packed_bytes(const MatrixRef& m, bool is_a) {
  MatrixRef bytes = m;
  bytes.batch_stride = m.batch_stride / 2;
  bytes.row_stride = is_a ? m.row_stride / 2 : 1;
  bytes.col_stride = is_a ? 1 : m.col_stride / 2;
  return bytes;
}

bool Problem::pads_groups_along_k() const { return groups.along_k && is_fp8(a.dtype); }

DType Problem::group_scale_type() const {
  if (scale_a.mode == ScaleMode::group) return scale_a.m.dtype;
  if (scale_b.mode == ScaleMode::group) return scale_b.m.dtype;
  return DType::bf16;
}

ProblemWords problem_words(const Problem& p) {
  ProblemWords w{};
  size_t i = 0;
  auto put_matrix = [&](const MatrixRef& m) {
    for (int64_t x : {address(m.data), int64_t(m.dtype), m.batch_stride, m.row_stride, m.col_stride}) w[i++] = x;
  };
  for (int64_t x : {p.m, p.n, p.k, p.batch}) w[i++] = x;
  for (const MatrixRef* m : {&p.a, &p.b, &p.d, &p.c, &p.b2, &p.scale_d}) put_matrix(*m);
  for (const ScaleRef* s : {&p.scale_a, &p.scale_b, &p.scale_b2}) {
    w[i++] = int64_t(s->mode);
    put_matrix(s->m);
    put_matrix(s->zeros);
    w[i++] = s->block_rows;
    w[i++] = s->block_cols;
  }
  w[i++] = int64_t(std::bit_cast<uint32_t>(p.alpha)) | int64_t(std::bit_cast<uint32_t>(p.beta)) << 32;
  w[i++] = p.device;
  w[i++] = address(p.groups.sizes);
  w[i++] = int64_t(p.groups.layout) | int64_t(p.groups.int64) << 8 | int64_t(p.groups.check) << 9 |
            int64_t(p.groups.along_k) << 10 | int64_t(p.groups.zero_unowned) << 11 | int64_t(p.groups.along_n) << 12;
  w[i++] = p.max_sms;
  w[i++] = address(p.epilogue.code);
  w[i++] = int64_t(p.epilogue.tensor_count) | int64_t(p.epilogue.transposed) << 8;
  for (int t = 0; t < p.epilogue.tensor_count; ++t) {
    put_matrix(p.epilogue.tensors[size_t(t)]);
    w[i++] = p.epilogue.zeroed_bytes[size_t(t)];
  }
  return w;
}

std::string layout_name(const Problem& p) {
  std::string name;
  name += p.a.col_stride == 1 ? 'N' : p.a.row_stride == 1 ? 'T' : 'S';
  name += p.b.col_stride == 1 ? 'N' : p.b.row_stride == 1 ? 'T' : 'S';
  return name;
}

Problem transposed_problem(const Problem& p) {
  if (p.dual()) throw Error(ErrorCode::invalid_argument, "a dual GEMM cannot run transposed: its products pair along N");
  if (p.quantizes_d()) {
    throw Error(ErrorCode::invalid_argument, "an e4m3 D cannot run transposed: its scales' blocks lie along its rows");
  }
  Problem t = p;
  t.m = p.n;
  t.n = p.m;
  t.a = transposed(p.b);
  t.b = transposed(p.a);
  t.d = transposed(p.d);
  if (p.has_c()) t.c = transposed(p.c);
  t.scale_a = transposed(p.scale_b);
  t.scale_b = transposed(p.scale_a);
  t.epilogue.transposed = !p.epilogue.transposed;
  if (p.grouped()) t.groups.along_n = !p.groups.along_n;
  return t;
}

}  // namespace gemmkit
