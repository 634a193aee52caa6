// Random epilogue programs for the tests (issue 54: generated trees up to depth 4): the text of a
// program over the tensors x[n], y[m] and z[m, n] (and a dual GEMM's acc2, where asked), with the
// value it means at one element worked out while the text is written, by composing single
// operations, so that a test can hold the parser's tree (precedence, named values, stores) to it.
// Operations whose domain is not the whole line take operands that keep them finite:
// log(abs(e) + 1), sqrt(abs(e)), rsqrt(abs(e) + 1), e / (abs(e) + 1), exp(clamp(e, -8, 8)).
#pragma once

#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace gemmkit::testing {

struct RandomEpilogue {
  std::string text;
  double value = 0;                // D's value
  std::vector<double> store_values;  // each output's, in the text's order
};

// Writes programs from a seed. `unary(name, x)` is the value of the one-operation program
// "name(acc)" at acc = x (the evaluator's, whose formulas other tests check one by one), so that
// what is checked here is how operations compose.
class RandomPrograms {
 public:
  using Unary = std::function<double(const std::string&, double)>;
  RandomPrograms(uint64_t seed, Unary unary) : draws_(seed), unary_(std::move(unary)) {}

  // A program of depth up to `depth` at acc and the tensors' values x, y, z; with a named value
  // and an output some of the time. Given acc2 (a dual GEMM's second product there), acc2 is a
  // leaf too: one leaf in 6 or 7.
  RandomEpilogue next(int depth, double acc, double x, double y, double z, std::optional<double> acc2 = {}) {
    at_[0] = acc, at_[1] = x, at_[2] = y, at_[3] = z, at_[4] = acc2.value_or(0);
    dual_ = acc2.has_value();
    RandomEpilogue p;
    named_ = false;
    if (chance(0.5)) {
      const Expr h = expr(depth - 1);
      p.text = "h = " + h.text + "; ";
      named_ = true, named_value_ = h.value;
      if (chance(0.5)) {
        p.text += "saved[m, n] = h; ";
        p.store_values.push_back(h.value);
      }
    }
    const Expr d = expr(depth);
    p.text += d.text;
    p.value = d.value;
    return p;
  }

 private:
  struct Expr {
    std::string text;
    double value;
  };

  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(draws_) < p; }
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(draws_); }

  Expr leaf() {
    switch (pick(5 + int(named_) + int(dual_))) {
      case 0: return {"acc", at_[0]};
      case 1: {
        char text[32];
        std::snprintf(text, sizeof text, "%.2f", std::uniform_real_distribution<double>(-3, 3)(draws_));
        return {text, std::strtod(text, nullptr)};
      }
      case 2: return {"x[n]", at_[1]};
      case 3: return {"y[m]", at_[2]};
      case 4: return {"z[m, n]", at_[3]};
      case 5:
        if (named_) return {"h", named_value_};
        [[fallthrough]];
      default: return {"acc2", at_[4]};
    }
  }

  Expr apply(const std::string& name, const Expr& e) { return {name + "(" + e.text + ")", unary_(name, e.value)}; }

  Expr expr(int depth) {
    if (depth <= 0 || chance(0.25)) return leaf();
    static const char* const kUnary[] = {"identity", "relu", "relu2", "gelu", "gelu_tanh", "silu", "sigmoid",
                                         "tanh", "erf", "abs", "neg", "square", "bf16", "f16", "f32"};
    const Expr a = expr(depth - 1);
    switch (pick(5)) {
      case 0: return apply(kUnary[pick(int(std::size(kUnary)))], a);
      case 1: {  // a function of a restricted domain, on an operand made to fit it
        const Expr magnitude = apply("abs", a);
        switch (pick(4)) {
          case 0: return apply("log", {magnitude.text + " + 1", magnitude.value + 1});
          case 1: return apply("sqrt", magnitude);
          case 2: return apply("rsqrt", {magnitude.text + " + 1", magnitude.value + 1});
          default: {
            const Expr clamped{"clamp(" + a.text + ", -8, 8)", std::fmin(std::fmax(a.value, -8.0), 8.0)};
            return apply("exp", clamped);
          }
        }
      }
      case 2: {
        const double lo = -1.5, hi = 2.0;
        return {"clamp(" + a.text + ", -1.5, 2)", std::fmin(std::fmax(a.value, lo), hi)};
      }
      default: {
        const Expr b = expr(depth - 1);
        switch (pick(6)) {
          case 0: return {"(" + a.text + " + " + b.text + ")", a.value + b.value};
          case 1: return {"(" + a.text + " - " + b.text + ")", a.value - b.value};
          case 2: return {"(" + a.text + " * " + b.text + ")", a.value * b.value};
          case 3: return {"(" + a.text + " / (abs(" + b.text + ") + 1))", a.value / (std::fabs(b.value) + 1)};
          case 4: return {"max(" + a.text + ", " + b.text + ")", std::fmax(a.value, b.value)};
          default: return {"min(" + a.text + ", " + b.text + ")", std::fmin(a.value, b.value)};
        }
      }
    }
  }

  std::mt19937_64 draws_;
  Unary unary_;
  double at_[5] = {};  // acc, x, y, z, acc2
  bool named_ = false, dual_ = false;
  double named_value_ = 0;
};

}  // namespace gemmkit::testing
