// The epilogue IR: what a kernel computes from each element of its GEMM result before storing it
// (a fused epilogue). Its text form is a few statements separated by ';':
//
//   h = acc + bias[n];          a name for a value (used below, any number of times)
//   pre[m, n] = h;              an auxiliary output: h stored to the tensor `pre`, M x N
//   db[n] = sum(h);             a reduction: the sum of h down each column of D, to `db` (f32)
//   silu(h) * gate[m, n]        the last statement: the value D holds
//
// `acc` is the GEMM's result at (m, n), alpha * A B (+ beta * C); in a dual GEMM, `acc2` is the
// second product there, alpha * A B2 (GemmOptions::b2), as in SwiGLU's "silu(acc) * acc2". A
// tensor is read as name[n] (one value a column, broadcast down the rows: a bias), name[m] (one a
// row: a per-token scale), name[m, n] (an M x N tensor: a residual, a gate) or name[] (one value:
// a scale the device computed). Numbers are constants baked into the kernel. Operators + - * / and unary minus; functions of one value: identity,
// relu, relu2 (relu squared), gelu (erf), gelu_tanh, silu, sigmoid, tanh, erf, exp, log, abs, neg,
// square, sqrt, rsqrt, the derivatives of activations for backward epilogues (dgelu, dgelu_tanh,
// dsilu, drelu, dsigmoid, dtanh: the activation's slope at x), and the casts bf16, f16 and f32
// (the value rounded to the type, as a store of it would); of two: max, min; clamp(x, lo, hi)
// with constant bounds.
//
// A reduction stores one value a column (name[n] = ...), a row (name[m] = ...) or a batch
// (name[] = ...): sum(x), the sum of x over the elements of D it covers, or amax(x), their
// largest |x| (NaN if any is NaN). Reductions are f32 and run across tiles with atomics: sums
// may differ in the last bits from run to run; maxima do not.
//
// A parsed Program is a DAG: equal subexpressions are one node, however the text spelled them,
// and values nothing stores are dropped. canonical() serialises it for the kernel cache key:
// equal programs give equal strings (tensor names do not count, their shapes and order of first
// use do), different ones never do.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "gemmkit/tensor.h"

namespace gemmkit::epilogue {

enum class Op {
  acc,       // the GEMM's result at (m, n)
  acc2,      // the second GEMM's result at (m, n): a dual GEMM's (GemmOptions::b2)
  constant,  // Node::value
  load,      // Node::input's tensor at (m, n), broadcast as its Shape says
  // one operand
  identity, relu, relu2, gelu, gelu_tanh, silu, sigmoid, tanh, erf, exp, log, abs, neg, square, sqrt, rsqrt,
  dgelu, dgelu_tanh, dsilu, drelu, dsigmoid, dtanh,  // activations' derivatives
  clamp,  // to [Node::lo, Node::hi]
  cast,   // rounded to Node::type, as a store of that type would
  // two operands
  add, sub, mul, div, max, min,
};

// How a tensor the epilogue reads is indexed.
enum class Shape {
  row_vector,     // name[n]: one value a column of D
  column_vector,  // name[m]: one value a row of D
  matrix,         // name[m, n]
  scalar,         // name[]: one value a batch
};

struct Input {
  std::string name;
  Shape shape;
};

struct Node {
  Op op = Op::acc;
  std::array<int, 2> operands{-1, -1};  // earlier nodes
  double value = 0;                     // constant
  double lo = 0, hi = 0;                // clamp
  int input = -1;                       // load: index into Program::inputs
  DType type = DType::f32;              // cast

  bool operator==(const Node&) const = default;
};

// How an output takes its node's values.
enum class Reduce {
  none,  // each element stored: an M x N output
  sum,   // summed over the elements its index leaves out
  amax,  // their largest absolute value
};

// An auxiliary output: node `node` stored to the tensor `name`, element by element (an M x N
// tensor), or reduced to one value a column (row_vector), a row (column_vector) or a batch (scalar).
struct Store {
  std::string name;
  int node;
  Shape shape = Shape::matrix;
  Reduce reduce = Reduce::none;
};

struct Program {
  std::vector<Node> nodes;  // every operand before its users
  std::vector<Input> inputs;  // in order of first use
  std::vector<Store> stores;  // in the text's order
  int result = -1;            // the node D holds
};

// Parses the text form. Throws Error(invalid_argument) saying where and what is wrong, e.g.
//   epilogue: column 13 of "silu(acc) * slu(x[n])": unknown function 'slu'; expected one of ...
Program parse(std::string_view text);

// The program as a string that identifies it (see above).
std::string canonical(const Program& program);

// The name of an operation as the text form spells it ("add" for +, "cast" for the casts).
std::string_view op_name(Op op);
int arity(Op op);  // operands: 0, 1 or 2

bool reads_acc2(const Program& program);  // whether any node is acc2 (a dual GEMM's epilogue)

}  // namespace gemmkit::epilogue
