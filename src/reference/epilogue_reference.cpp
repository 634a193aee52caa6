#include "reference/epilogue_reference.h"

#include <cmath>
#include <numbers>

#include "reference/host_numeric.h"

namespace gemmkit::reference {
namespace {

using epilogue::Op;

double rounded(double x, DType type) {
  const float f = float(x);
  if (type == DType::bf16) return bf16_to_float(float_to_bf16(f));
  if (type == DType::f16) return f16_to_float(float_to_f16(f));
  return f;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

constexpr double kTanhGeluScale = 0.7978845608028654;  // sqrt(2 / pi)

// The slope of gelu_tanh, 0.5 x (1 + tanh(u)) with u = k (x + 0.044715 x^3).
double dgelu_tanh(double x) {
  const double th = std::tanh(kTanhGeluScale * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kTanhGeluScale * (1.0 + 3 * 0.044715 * x * x);
}

double unary(const epilogue::Node& node, double x) {
  switch (node.op) {
    case Op::identity: return x;
    case Op::relu: return std::fmax(x, 0.0);
    case Op::relu2: return std::fmax(x, 0.0) * std::fmax(x, 0.0);
    case Op::gelu: return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2));
    case Op::gelu_tanh: return 0.5 * x * (1.0 + std::tanh(kTanhGeluScale * (x + 0.044715 * x * x * x)));
    case Op::silu: return x * sigmoid(x);
    case Op::sigmoid: return sigmoid(x);
    case Op::tanh: return std::tanh(x);
    case Op::erf: return std::erf(x);
    case Op::exp: return std::exp(x);
    case Op::log: return std::log(x);
    case Op::abs: return std::fabs(x);
    case Op::neg: return -x;
    case Op::square: return x * x;
    case Op::sqrt: return std::sqrt(x);
    case Op::rsqrt: return 1.0 / std::sqrt(x);
    case Op::dgelu: return 0.5 * (1.0 + std::erf(x / std::numbers::sqrt2)) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
    case Op::dgelu_tanh: return dgelu_tanh(x);
    case Op::dsilu: return sigmoid(x) * (1.0 + x * (1.0 - sigmoid(x)));
    case Op::drelu: return x > 0 ? 1.0 : 0.0;
    case Op::dsigmoid: return sigmoid(x) * (1.0 - sigmoid(x));
    case Op::dtanh: return 1.0 - std::tanh(x) * std::tanh(x);
    case Op::clamp: return std::fmin(std::fmax(x, node.lo), node.hi);
    case Op::cast: return rounded(x, node.type);
    default: return std::nan("");
  }
}

double binary(Op op, double x, double y) {
  switch (op) {
    case Op::add: return x + y;
    case Op::sub: return x - y;
    case Op::mul: return x * y;
    case Op::div: return x / y;
    case Op::max: return std::fmax(x, y);
    case Op::min: return std::fmin(x, y);
    default: return std::nan("");
  }
}

}  // namespace

void evaluate_epilogue(const epilogue::Program& program, double acc, double acc2, std::span<const double> inputs,
                       std::span<double> values) {
  for (size_t i = 0; i < program.nodes.size(); ++i) {
    const epilogue::Node& node = program.nodes[i];
    const double x = node.operands[0] >= 0 ? values[size_t(node.operands[0])] : 0.0;
    const double y = node.operands[1] >= 0 ? values[size_t(node.operands[1])] : 0.0;
    switch (epilogue::arity(node.op)) {
      case 0:
        values[i] = node.op == Op::acc        ? acc
                    : node.op == Op::acc2     ? acc2
                    : node.op == Op::constant ? node.value
                                              : inputs[size_t(node.input)];
        break;
      case 1: values[i] = unary(node, x); break;
      default: values[i] = binary(node.op, x, y);
    }
  }
}

}  // namespace gemmkit::reference
