// The epilogue IR's text form (epilogue/program.h): what it parses to, its canonical strings
// (equal programs alike, different ones apart), its errors, and the double-precision evaluator
// (reference/epilogue_reference.h) against each operation's formula; a dual GEMM's second product,
// acc2, through each of them and into the generated code (codegen/epilogue_source.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../epilogue_random.h"
#include "codegen/epilogue_source.h"
#include "epilogue/program.h"
#include "gemmkit/error.h"
#include "reference/epilogue_reference.h"
#include "reference/host_numeric.h"

namespace gemmkit::epilogue {
namespace {

// D's value and the stores' for `text` at one element (whose second product, in a dual GEMM, is
// acc2).
std::vector<double> evaluate(const std::string& text, double acc, std::vector<double> inputs = {}, double acc2 = 0) {
  const Program p = parse(text);
  std::vector<double> values(p.nodes.size());
  reference::evaluate_epilogue(p, acc, acc2, inputs, values);
  std::vector<double> out{values[size_t(p.result)]};
  for (const Store& s : p.stores) out.push_back(values[size_t(s.node)]);
  return out;
}

TEST(EpilogueProgram, ParsesTensorsOperationsAndStores) {
  const Program p = parse("h = acc + bias[n];\npre[m, n] = h;\nsilu(h) * gate[m,n] * scale[m]");
  ASSERT_EQ(p.inputs.size(), 3u);
  EXPECT_EQ(p.inputs[0].name, "bias");
  EXPECT_EQ(p.inputs[0].shape, Shape::row_vector);
  EXPECT_EQ(p.inputs[1].shape, Shape::matrix);
  EXPECT_EQ(p.inputs[2].shape, Shape::column_vector);
  ASSERT_EQ(p.stores.size(), 1u);
  EXPECT_EQ(p.stores[0].name, "pre");
  EXPECT_EQ(p.nodes[size_t(p.stores[0].node)].op, Op::add);
  EXPECT_EQ(p.nodes[size_t(p.result)].op, Op::mul);
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    for (int operand : p.nodes[i].operands) EXPECT_LT(operand, int(i)) << "operands come before their users";
  }
}

TEST(EpilogueProgram, EqualProgramsShareACanonicalStringAndOthersDoNot) {
  const std::string fused = canonical(parse("silu(acc + bias[n]) * (acc + bias[n])"));
  EXPECT_EQ(fused, canonical(parse("h = acc + bias[n]; silu(h) * h")));
  EXPECT_EQ(fused, canonical(parse("  silu( acc+b[n] )*( acc+b[n] )  ")));  // names and spaces do not count
  EXPECT_EQ(fused, canonical(parse("unused = exp(acc); h = acc + bias[n]; silu(h) * h;")));
  const std::vector<std::string> others = {
      "silu(acc + bias[n]) * (bias[n] + acc)", "silu(acc + bias[m]) * (acc + bias[m])",
      "silu(acc + bias[m, n]) * (acc + bias[m, n])", "gelu(acc + bias[n]) * (acc + bias[n])",
      "silu(acc + bias[n]) * (acc + c[n])", "silu(acc + bias[n]) * (acc + bias[n]) + 0.1",
      "silu(acc + bias[n]) * (acc + bias[n]) + 0.10000000000000002", "h = acc + bias[n]; o[m, n] = h; silu(h) * h",
      "bf16(silu(acc + bias[n]) * (acc + bias[n]))", "f16(silu(acc + bias[n]) * (acc + bias[n]))",
      "clamp(silu(acc + bias[n]) * (acc + bias[n]), -7, 7)", "clamp(silu(acc + bias[n]) * (acc + bias[n]), -7, 8)",
      "silu(acc2 + bias[n]) * (acc2 + bias[n])", "silu(acc + bias[n]) * (acc2 + bias[n])"};
  std::vector<std::string> seen = {fused};
  for (const std::string& text : others) {
    const std::string c = canonical(parse(text));
    for (const std::string& s : seen) EXPECT_NE(c, s) << text;
    seen.push_back(c);
  }
}

TEST(EpilogueProgram, OperatorsBindAsInArithmetic) {
  EXPECT_DOUBLE_EQ(evaluate("acc + 2 * 3 - 4 / 2", 1)[0], 5);
  EXPECT_DOUBLE_EQ(evaluate("(acc + 2) * 3", 1)[0], 9);
  EXPECT_DOUBLE_EQ(evaluate("-acc * 2 - -1", 3)[0], -5);
  EXPECT_DOUBLE_EQ(evaluate("acc - 1 - 1", 3)[0], 1);  // left to right
  EXPECT_DOUBLE_EQ(evaluate("2.5e-1 * acc + .5", 4)[0], 1.5);
}

TEST(EpilogueProgram, EachOperationMatchesItsFormula) {
  std::mt19937_64 draws(7);
  std::uniform_real_distribution<double> value(-4.0, 4.0);
  for (int trial = 0; trial < 20; ++trial) {
    const double x = value(draws), y = value(draws), z = std::fabs(value(draws)) + 0.25;
    auto one = [&](const std::string& f, double at = 0) { return evaluate(f + "(acc)", at == 0 ? x : at)[0]; };
    EXPECT_EQ(one("identity"), x);
    EXPECT_EQ(one("relu"), x > 0 ? x : 0);
    EXPECT_DOUBLE_EQ(one("relu2"), x > 0 ? x * x : 0);
    EXPECT_NEAR(one("gelu"), x * 0.5 * std::erfc(-x / std::sqrt(2.0)), 1e-14);
    EXPECT_NEAR(one("gelu_tanh"), 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))), 1e-14);
    EXPECT_NEAR(one("silu"), x / (1 + std::exp(-x)), 1e-14);
    EXPECT_NEAR(one("sigmoid"), 1 / (1 + std::exp(-x)), 1e-15);
    EXPECT_DOUBLE_EQ(one("tanh"), std::tanh(x));
    EXPECT_DOUBLE_EQ(one("erf"), std::erf(x));
    EXPECT_DOUBLE_EQ(one("exp"), std::exp(x));
    EXPECT_DOUBLE_EQ(one("log", z), std::log(z));
    EXPECT_EQ(one("abs"), std::fabs(x));
    EXPECT_EQ(one("neg"), -x);
    EXPECT_DOUBLE_EQ(one("square"), x * x);
    EXPECT_DOUBLE_EQ(one("sqrt", z), std::sqrt(z));
    EXPECT_DOUBLE_EQ(one("rsqrt", z), 1 / std::sqrt(z));
    EXPECT_EQ(evaluate("clamp(acc, -1.5, 2)", x)[0], std::min(std::max(x, -1.5), 2.0));
    EXPECT_EQ(evaluate("max(acc, y[n])", x, {y})[0], std::max(x, y));
    EXPECT_EQ(evaluate("min(acc, y[m])", x, {y})[0], std::min(x, y));
    EXPECT_DOUBLE_EQ(evaluate("acc / y[m, n] - y[m, n]", x, {y})[0], x / y - y);
    EXPECT_EQ(evaluate("bf16(acc)", x)[0], reference::bf16_to_float(reference::float_to_bf16(float(x))));
    EXPECT_EQ(evaluate("f16(acc)", x)[0], reference::f16_to_float(reference::float_to_f16(float(x))));
    EXPECT_EQ(evaluate("f32(acc)", x)[0], double(float(x)));
    // The derivatives against central differences of the activations (to 1e-7: h = 1e-5).
    const double h = 1e-5;
    for (const char* f : {"gelu", "gelu_tanh", "silu", "sigmoid", "tanh"}) {
      const double slope = (one(f, x + h) - one(f, x - h)) / (2 * h);
      EXPECT_NEAR(one(std::string("d") + f), slope, 1e-7) << f << " at " << x;
    }
    EXPECT_EQ(one("drelu"), x > 0 ? 1.0 : 0.0);
  }
  EXPECT_NE(evaluate("bf16(acc)", 1.00390625 + 1e-6)[0], 1.00390625 + 1e-6) << "a cast rounds";
}

// Reductions are stores with an index of their own and a kind; their canonical strings differ
// by both; scalar tensors read one value a batch.
TEST(EpilogueProgram, ParsesReductionsAndScalars) {
  const Program p = parse("dh = acc * dgelu(pre[m, n]); db[n] = sum(dh); ra[m] = amax(dh); t[] = amax(dh * s[]); dh");
  ASSERT_EQ(p.inputs.size(), 2u);
  EXPECT_EQ(p.inputs[1].shape, Shape::scalar);
  ASSERT_EQ(p.stores.size(), 3u);
  EXPECT_EQ(p.stores[0].shape, Shape::row_vector);
  EXPECT_EQ(p.stores[0].reduce, Reduce::sum);
  EXPECT_EQ(p.stores[0].node, p.result);
  EXPECT_EQ(p.stores[1].shape, Shape::column_vector);
  EXPECT_EQ(p.stores[1].reduce, Reduce::amax);
  EXPECT_EQ(p.stores[2].shape, Shape::scalar);
  EXPECT_EQ(p.nodes[size_t(p.stores[2].node)].op, Op::mul);
  EXPECT_EQ(evaluate("x = acc + s[]; x", 1.0, {2.0})[0], 3.0);
  const std::vector<std::string> texts = {"o[m, n] = acc; acc", "o[n] = sum(acc); acc", "o[m] = sum(acc); acc",
                                          "o[] = sum(acc); acc", "o[n] = amax(acc); acc", "o[m] = amax(acc); acc",
                                          "o[] = amax(acc); acc", "acc + s[]", "acc + s[n]"};
  std::vector<std::string> seen;
  for (const std::string& text : texts) {
    const std::string c = canonical(parse(text));
    for (const std::string& other : seen) EXPECT_NE(c, other) << text;
    seen.push_back(c);
  }
}

TEST(EpilogueProgram, StoresGetTheirNodesValues) {
  const std::vector<double> out = evaluate("pre = acc + b[n]; pre_out[m, n] = pre; twice[m, n] = 2 * pre; gelu(pre)",
                                           1.0, {0.5});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_NEAR(out[0], 1.5 * 0.5 * std::erfc(-1.5 / std::numbers::sqrt2), 1e-14);
  EXPECT_EQ(out[1], 1.5);
  EXPECT_EQ(out[2], 3.0);
}

// A dual GEMM's second product (SwiGLU's up projection) is one leaf, apart from acc: it parses to
// one acc2 node however often the text reads it, reads no tensor, and keeps the program's
// canonical string apart from the same text over acc.
TEST(EpilogueProgram, ParsesTheSecondProduct) {
  const Program p = parse("silu(acc) * acc2");
  ASSERT_EQ(p.nodes.size(), 4u);
  EXPECT_EQ(p.nodes[0].op, Op::acc);
  EXPECT_EQ(p.nodes[1].op, Op::silu);
  EXPECT_EQ(p.nodes[2].op, Op::acc2);
  EXPECT_EQ(p.nodes[3].op, Op::mul);
  EXPECT_EQ(p.nodes[3].operands, (std::array<int, 2>{1, 2}));
  EXPECT_EQ(p.result, 3);
  EXPECT_TRUE(p.inputs.empty());
  EXPECT_TRUE(reads_acc2(p));
  EXPECT_EQ(op_name(Op::acc2), "acc2");
  EXPECT_EQ(arity(Op::acc2), 0);

  const Program twice = parse("acc2 * acc2 + sigmoid(acc2)");
  EXPECT_EQ(std::count_if(twice.nodes.begin(), twice.nodes.end(), [](const Node& n) { return n.op == Op::acc2; }), 1);
  EXPECT_EQ(std::count_if(twice.nodes.begin(), twice.nodes.end(), [](const Node& n) { return n.op == Op::acc; }), 0);
  EXPECT_TRUE(reads_acc2(twice));

  const Program gpt_oss = parse("h = min(acc, 7); h * sigmoid(1.702 * h) * (clamp(acc2, -7, 7) + 1)");
  EXPECT_TRUE(reads_acc2(gpt_oss));
  EXPECT_TRUE(gpt_oss.inputs.empty());

  EXPECT_FALSE(reads_acc2(parse("silu(acc) * gate[m, n]")));
  EXPECT_FALSE(reads_acc2(parse("acc")));
  EXPECT_FALSE(reads_acc2(parse("unused = acc2; silu(acc)"))) << "a value nothing uses is dropped";
  EXPECT_TRUE(reads_acc2(parse("up[m, n] = acc2; silu(acc)"))) << "a stored value is kept";
  EXPECT_FALSE(reads_acc2(Program{}));
}

TEST(EpilogueProgram, TheSecondProductHasCanonicalStringsOfItsOwn) {
  const std::string swiglu = canonical(parse("silu(acc) * acc2"));
  EXPECT_EQ(swiglu, canonical(parse("g = silu(acc); u = acc2; g * u")));
  EXPECT_EQ(swiglu, canonical(parse(" silu( acc )*acc2 ;")));
  const std::vector<std::pair<std::string, std::string>> apart = {
      {"silu(acc) * acc2", "silu(acc2) * acc"},
      {"silu(acc) * acc2", "silu(acc) * acc"},
      {"silu(acc2) * acc2", "silu(acc) * acc"},
      {"acc", "acc2"},
      {"acc + x[n]", "acc2 + x[n]"},
      {"h = min(acc, 7); h * sigmoid(1.702 * h) * (clamp(acc2, -7, 7) + 1)",
       "h = min(acc2, 7); h * sigmoid(1.702 * h) * (clamp(acc, -7, 7) + 1)"},
      {"h = min(acc, 7); h * sigmoid(1.702 * h) * (clamp(acc2, -7, 7) + 1)",
       "h = min(acc, 7); h * sigmoid(1.702 * h) * (clamp(acc, -7, 7) + 1)"},
      {"pre[m, n] = acc; silu(acc) * acc2", "pre[m, n] = acc2; silu(acc) * acc2"},
  };
  for (const auto& [a, b] : apart) EXPECT_NE(canonical(parse(a)), canonical(parse(b))) << a << " | " << b;
}

TEST(EpilogueProgram, TheSecondProductEvaluatesToItsValue) {
  auto silu = [](double x) { return x / (1 + std::exp(-x)); };
  auto sigmoid = [](double x) { return 1 / (1 + std::exp(-x)); };
  for (const auto& [acc, acc2] : std::vector<std::pair<double, double>>{
           {0.0, 1.0}, {1.5, -2.25}, {-3.0, 0.5}, {8.0, 9.0}, {-0.125, -7.5}, {12.0, 3.0}}) {
    SCOPED_TRACE(std::to_string(acc) + ", " + std::to_string(acc2));
    EXPECT_EQ(evaluate("acc2", acc, {}, acc2)[0], acc2);
    EXPECT_EQ(evaluate("acc", acc, {}, acc2)[0], acc);
    EXPECT_NEAR(evaluate("silu(acc) * acc2", acc, {}, acc2)[0], silu(acc) * acc2, 1e-14 * (1 + std::fabs(acc * acc2)));
    EXPECT_NEAR(evaluate("silu(acc2) * acc", acc, {}, acc2)[0], silu(acc2) * acc, 1e-14 * (1 + std::fabs(acc * acc2)));
    const double h = std::min(acc, 7.0);
    const double gated = h * sigmoid(1.702 * h) * (std::clamp(acc2, -7.0, 7.0) + 1);
    EXPECT_NEAR(evaluate("h = min(acc, 7); h * sigmoid(1.702 * h) * (clamp(acc2, -7, 7) + 1)", acc, {}, acc2)[0], gated,
                1e-14 * (1 + std::fabs(gated)));
    const std::vector<double> stored =
        evaluate("u = acc2 + x[n]; up[m, n] = u; gate[m, n] = acc; silu(acc) * u", acc, {0.25}, acc2);
    ASSERT_EQ(stored.size(), 3u);
    EXPECT_NEAR(stored[0], silu(acc) * (acc2 + 0.25), 1e-14 * (1 + std::fabs(acc * acc2)));
    EXPECT_EQ(stored[1], acc2 + 0.25);
    EXPECT_EQ(stored[2], acc);
  }
}

// The generated function takes the second product after the first and reads it as acc2.
TEST(EpilogueProgram, GeneratedCodeTakesTheSecondProduct) {
  const std::string signature =
      "__device__ __forceinline__ float epilogue_value(float acc, float acc2, const EpilogueParams& e, i64 b, i64 m, "
      "i64 n, float* aux, float* red)";
  const std::string swiglu = codegen::epilogue_source(parse("silu(acc) * acc2"), {});
  EXPECT_NE(swiglu.find(signature), std::string::npos) << swiglu;
  EXPECT_NE(swiglu.find("const float v0 = acc;"), std::string::npos) << swiglu;
  EXPECT_NE(swiglu.find("const float v2 = acc2;"), std::string::npos) << swiglu;
  EXPECT_NE(swiglu.find("return v3;"), std::string::npos) << swiglu;
  const std::string plain = codegen::epilogue_source(parse("silu(acc) * gate[m, n]"), {{DType::bf16}, {}});
  EXPECT_NE(plain.find(signature), std::string::npos) << "one signature with or without acc2: " << plain;
  EXPECT_EQ(plain.find("= acc2;"), std::string::npos) << plain;
}

// Random trees up to depth 4 (epilogue_random.h): each text parses to the program its writer
// meant, value by value, stores included; renaming its tensors and spacing it out keeps its
// canonical string, and one more operation changes it.
TEST(EpilogueProgram, RandomProgramsMeanWhatTheirTextSays) {
  testing::RandomPrograms programs(2026, [](const std::string& name, double x) { return evaluate(name + "(acc)", x)[0]; });
  std::mt19937_64 draws(11);
  std::uniform_real_distribution<double> value(-4.0, 4.0);
  int dual_programs = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const double acc = value(draws), x = value(draws), y = value(draws), z = value(draws), acc2 = value(draws);
    const bool dual = trial % 8 >= 4;  // half the trials a dual GEMM's, acc2 among the leaves
    const testing::RandomEpilogue want =
        programs.next(1 + trial % 4, acc, x, y, z, dual ? std::optional<double>(acc2) : std::nullopt);
    SCOPED_TRACE(want.text);
    Program p;
    ASSERT_NO_THROW(p = parse(want.text));
    if (reads_acc2(p)) {
      EXPECT_TRUE(dual);
      EXPECT_NE(want.text.find("acc2"), std::string::npos);
      ++dual_programs;
    }
    std::vector<double> inputs;
    for (const Input& input : p.inputs) inputs.push_back(input.name == "x" ? x : input.name == "y" ? y : z);
    std::vector<double> values(p.nodes.size());
    reference::evaluate_epilogue(p, acc, acc2, inputs, values);
    EXPECT_EQ(values[size_t(p.result)], want.value);
    ASSERT_EQ(p.stores.size(), want.store_values.size());
    for (size_t k = 0; k < p.stores.size(); ++k) EXPECT_EQ(values[size_t(p.stores[k].node)], want.store_values[k]);

    std::string renamed;
    for (char c : want.text) renamed += c == '(' ? std::string("( ") : std::string(1, c);
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"x[n]", "bias[n]"}, {"y[m]", "scale[m]"},
                                   {"z[m, n]", "gate[m,n]"}}) {
      for (size_t at = renamed.find(from); at != std::string::npos; at = renamed.find(from, at + to.size())) {
        renamed.replace(at, from.size(), to);
      }
    }
    EXPECT_EQ(canonical(parse(renamed)), canonical(p)) << renamed;
    EXPECT_NE(canonical(parse(want.text + " * 2")), canonical(p));
  }
  EXPECT_GT(dual_programs, 50) << "acc2 is a leaf of the dual trials' programs";
}

// Every error: invalid_argument, "epilogue: column C of \"TEXT\": " first, then what is wrong.
void expect_error(const std::string& text, const std::string& says, int column) {
  try {
    parse(text);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    const std::string where = "epilogue: column " + std::to_string(column) + " of \"" + text + "\": ";
    EXPECT_EQ(message.rfind(where, 0), 0u) << "does not start with '" << where << "': " << message;
    EXPECT_NE(message.find(says, where.size()), std::string::npos) << "lacks '" << says << "': " << message;
  }
}

TEST(EpilogueProgram, ErrorsSayWhatAndWhere) {
  expect_error("", "no statement", 1);
  expect_error("silu(acc) * slu(acc)", "unknown function 'slu'; expected one of identity, relu", 13);
  expect_error("silu(acc + bias)", "unknown name 'bias'; a tensor needs its index: bias[n], bias[m], bias[m, n] or bias[]", 12);
  expect_error("acc + bias[k]", "expected the index [n], [m], [m, n] or [] after 'bias'", 11);
  expect_error("db[n] = acc; acc", "db[n] holds one value for many elements of D; expected sum(...) or amax(...)", 9);
  expect_error("db[] = max(acc, 1); acc", "db[] holds one value", 8);
  expect_error("o[m, n] = sum(acc); acc", "sum(...) reduces many elements to one value", 11);
  expect_error("sum(acc)", "sum(...) reduces many elements", 1);
  expect_error("amax = acc; amax", "'amax' is reserved", 1);
  expect_error("db[n] = sum(acc; acc", "expected ')' to close sum(", 16);
  expect_error("db[n] = sum(acc); db[m] = sum(acc); acc", "'db' is stored twice", 19);
  expect_error("acc + bias[n] * bias[m]", "'bias' is indexed otherwise at column 7", 17);
  expect_error("silu(acc", "expected ')' to close silu(", 9);
  expect_error("(acc + 1", "expected ')' to close the '(' at column 1", 9);
  expect_error("acc +", "the text ends where a value was expected", 6);
  expect_error("acc 1", "unexpected '1'; expected an operator or ';'", 5);
  expect_error("acc * 1e", "'1e' is not a finite number", 7);
  expect_error("acc * 1e999", "'1e999' is not a finite number", 7);
  expect_error("h = acc;", "no value for D", 9);
  expect_error("h = acc; h = 2 * acc; h", "'h' is defined twice", 10);
  expect_error("acc = 1; acc", "'acc' is reserved", 1);
  expect_error("acc2 = 1; acc2", "'acc2' is reserved", 1);
  expect_error("acc2[m, n] = acc; acc", "'acc2' is reserved", 1);
  expect_error("acc2[n]", "'acc2' is reserved and cannot be indexed", 1);
  expect_error("silu(acc) * acc2[m, n]", "'acc2' is reserved and cannot be indexed", 13);
  expect_error("acc[m]", "'acc' is reserved and cannot be indexed", 1);
  expect_error("silu = acc; silu", "'silu' is reserved", 1);
  expect_error("h = acc b", "expected ';' after the statement that defines 'h'", 9);
  expect_error("acc * 2; acc", "a value nothing names or stores", 1);
  expect_error("clamp(acc, 0)", "clamp takes 3 arguments, got 2", 1);
  expect_error("clamp(acc, acc, 1)", "clamp's lower bound must be a number", 12);
  expect_error("clamp(acc, 2, 1)", "clamp's bounds are out of order", 12);
  expect_error("max(acc)", "max takes 2 arguments, got 1", 1);
  expect_error("silu", "'silu' is a function; call it as silu(...)", 1);
  expect_error("o[m, n] = acc; o[m, n] + 1", "'o' is an output; outputs cannot be read back", 16);
  expect_error("x = acc; x[n]", "'x' is a value defined above, not a tensor", 10);
  expect_error("b[m, n] = acc + b[n]; acc", "'b' is a tensor the epilogue reads", 1);
  expect_error("acc + # 1", "unexpected '#'; expected a value", 7);
}

}  // namespace
}  // namespace gemmkit::epilogue
