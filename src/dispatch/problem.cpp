#include "dispatch/problem.h"

#include <utility>

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
  std::swap(t.block_rows, t.block_cols);
  return t;
}

}  // namespace

std::string layout_name(const Problem& p) {
  std::string name;
  name += p.a.col_stride == 1 ? 'N' : p.a.row_stride == 1 ? 'T' : 'S';
  name += p.b.col_stride == 1 ? 'N' : p.b.row_stride == 1 ? 'T' : 'S';
  return name;
}

Problem transposed_problem(const Problem& p) {
  Problem t = p;
  t.m = p.n;
  t.n = p.m;
  t.a = transposed(p.b);
  t.b = transposed(p.a);
  t.d = transposed(p.d);
  if (p.has_c()) t.c = transposed(p.c);
  t.scale_a = transposed(p.scale_b);
  t.scale_b = transposed(p.scale_a);
  return t;
}

}  // namespace gemmkit
