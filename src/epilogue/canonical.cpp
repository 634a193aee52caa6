// A Program as the string that identifies it in the kernel cache key (program.h): its tensors'
// shapes in order, then its nodes in order, each with its operation's name (acc and a dual GEMM's
// acc2 apart, so programs with and without acc2 never share a string), its operands' numbers and
// its constants exact (hexadecimal floating point), then the stores (reductions with their kind
// and index) and the result.
#include <cstdio>
#include <string>

#include "epilogue/program.h"

namespace gemmkit::epilogue {
namespace {

std::string exact(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%a", value);
  return text;
}

std::string_view shape_name(Shape shape) {
  switch (shape) {
    case Shape::row_vector: return "n";
    case Shape::column_vector: return "m";
    case Shape::matrix: return "mn";
    case Shape::scalar: return "s";
  }
  return "?";
}

}  // namespace

std::string canonical(const Program& program) {
  std::string s = "in";
  for (const Input& input : program.inputs) (s += ':') += shape_name(input.shape);
  for (size_t i = 0; i < program.nodes.size(); ++i) {
    const Node& node = program.nodes[i];
    (((s += ';') += std::to_string(i)) += '=') += op_name(node.op);
    if (node.op == Op::cast) (s += '.') += dtype_name(node.type);
    s += '(';
    if (node.op == Op::constant) s += exact(node.value);
    if (node.op == Op::load) s += std::to_string(node.input);
    for (int k = 0; k < arity(node.op); ++k) (s += k ? "," : "") += std::to_string(node.operands[size_t(k)]);
    if (node.op == Op::clamp) (((s += ',') += exact(node.lo)) += ',') += exact(node.hi);
    s += ')';
  }
  for (const Store& store : program.stores) {
    s += ";store";
    if (store.reduce != Reduce::none) ((s += store.reduce == Reduce::sum ? ".sum." : ".amax.") += shape_name(store.shape));
    (s += '=') += std::to_string(store.node);
  }
  return (s += ";d=") += std::to_string(program.result);
}

}  // namespace gemmkit::epilogue
