// The epilogue's text form (program.h) to a Program: a recursive-descent parser over a small
// tokenizer, building the DAG as it goes (each node looked up before it is added), then dropping
// the values nothing stores.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <string>

#include "epilogue/program.h"
#include "gemmkit/error.h"

namespace gemmkit::epilogue {
namespace {

struct Function {
  std::string_view name;
  Op op;
  int args;  // as written: clamp takes its two bounds too
  DType type = DType::f32;  // casts
};

constexpr Function kFunctions[] = {
    {"identity", Op::identity, 1}, {"relu", Op::relu, 1},     {"relu2", Op::relu2, 1},
    {"gelu", Op::gelu, 1},         {"gelu_tanh", Op::gelu_tanh, 1}, {"silu", Op::silu, 1},
    {"sigmoid", Op::sigmoid, 1},   {"tanh", Op::tanh, 1},     {"erf", Op::erf, 1},       {"exp", Op::exp, 1},
    {"log", Op::log, 1},           {"abs", Op::abs, 1},       {"neg", Op::neg, 1},
    {"square", Op::square, 1},     {"sqrt", Op::sqrt, 1},     {"rsqrt", Op::rsqrt, 1},
    {"dgelu", Op::dgelu, 1},       {"dgelu_tanh", Op::dgelu_tanh, 1}, {"dsilu", Op::dsilu, 1},
    {"drelu", Op::drelu, 1},       {"dsigmoid", Op::dsigmoid, 1}, {"dtanh", Op::dtanh, 1},
    {"clamp", Op::clamp, 3},       {"max", Op::max, 2},       {"min", Op::min, 2},
    {"bf16", Op::cast, 1, DType::bf16}, {"f16", Op::cast, 1, DType::f16}, {"f32", Op::cast, 1, DType::f32},
};

const Function* find_function(std::string_view name) {
  for (const Function& f : kFunctions) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string function_names() {
  std::string names;
  for (const Function& f : kFunctions) names += (names.empty() ? "" : ", ") + std::string(f.name);
  return names;
}

// The GEMM results' names: values the text cannot define or index.
bool accumulator(std::string_view name) { return name == "acc" || name == "acc2"; }

// The reductions, which only a vector or scalar output's statement takes: name[n] = sum(x).
std::optional<Reduce> reduction_named(std::string_view name) {
  if (name == "sum") return Reduce::sum;
  if (name == "amax") return Reduce::amax;
  return std::nullopt;
}

std::string index_text(Shape shape) {
  switch (shape) {
    case Shape::row_vector: return "[n]";
    case Shape::column_vector: return "[m]";
    case Shape::matrix: return "[m, n]";
    case Shape::scalar: return "[]";
  }
  return "";
}

bool identifier_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Program run() {
    skip_space();
    if (at_end()) fail(0, "no statement; expected at least the value of D, e.g. \"silu(acc + bias[n])\"");
    for (;;) {
      const size_t start = pos_;
      if (!statement()) {  // the value of D: the last statement
        program_.result = expression();
        skip_space();
        if (peek() == ';') {
          ++pos_;
          skip_space();
          if (!at_end()) fail(start, "a value nothing names or stores; only the last statement may be D's value");
        }
        if (!at_end()) fail(pos_, "unexpected '" + std::string(1, peek()) + "'; expected an operator or ';'");
        break;
      }
      skip_space();
      if (at_end()) fail(pos_, "no value for D; the last statement must be an expression, e.g. \"h\"");
    }
    return prune(std::move(program_));
  }

 private:
  // name = expression; name[m, n] = expression; or a reduction, name[n], name[m] or name[] =
  // sum(expression) or amax(expression); (false, nothing consumed, where it is none of these)
  bool statement() {
    const size_t start = pos_;
    if (!identifier_start(peek())) return false;
    const std::string name = identifier();
    skip_space();
    std::optional<Shape> shape;  // an output's
    if (peek() == '[') {
      shape = index();
      if (!shape) {  // the expression that starts here reports the index
        pos_ = start;
        return false;
      }
      skip_space();
    }
    if (peek() != '=' || peek(1) == '=') {  // name[...] read in an expression
      pos_ = start;
      return false;
    }
    ++pos_;
    Reduce reduce = Reduce::none;
    const int node = shape && *shape != Shape::matrix ? reduced(name + index_text(*shape), reduce) : expression();
    check_new_name(name, start);  // after its value, which may read a tensor of the same name
    skip_space();
    if (peek() != ';') fail(pos_, "expected ';' after the statement that defines '" + name + "'");
    ++pos_;
    if (shape) {
      program_.stores.push_back({name, node, *shape, reduce});
    } else {
      values_[name] = node;
    }
    return true;
  }

  // sum(expression) or amax(expression), the value of the output `output`; sets `reduce`.
  int reduced(const std::string& output, Reduce& reduce) {
    skip_space();
    const size_t start = pos_;
    const std::string function = identifier_start(peek()) ? identifier() : "";
    skip_space();
    const std::optional<Reduce> found = reduction_named(function);
    if (!found || peek() != '(') {
      fail(start, output + " holds one value for many elements of D; expected sum(...) or amax(...) as its value");
    }
    reduce = *found;
    ++pos_;
    const int node = expression();
    expect(')', "to close " + function + "(");
    return node;
  }

  void check_new_name(const std::string& name, size_t at) {
    if (accumulator(name) || find_function(name) || reduction_named(name)) {
      fail(at, "'" + name + "' is reserved; name values otherwise");
    }
    if (values_.count(name)) fail(at, "'" + name + "' is defined twice");
    if (input_index(name) >= 0) fail(at, "'" + name + "' is a tensor the epilogue reads; an output needs a name of its own");
    for (const Store& s : program_.stores) {
      if (s.name == name) fail(at, "'" + name + "' is stored twice");
    }
  }

  int expression() { return operands_of(0); }

  // A sum (level 0) of products (level 1) of unary values, each taken left to right.
  int operands_of(int level) {
    static constexpr std::pair<char, Op> kOperators[2][2] = {{{'+', Op::add}, {'-', Op::sub}},
                                                              {{'*', Op::mul}, {'/', Op::div}}};
    auto operand = [&] { return level == 0 ? operands_of(1) : unary(); };
    int left = operand();
    for (;;) {
      skip_space();
      const auto* found = std::find_if(std::begin(kOperators[level]), std::end(kOperators[level]),
                                       [&](const auto& entry) { return entry.first == peek(); });
      if (found == std::end(kOperators[level])) return left;
      ++pos_;
      left = add({.op = found->second, .operands = {left, operand()}});
    }
  }

  int unary() {
    skip_space();
    if (peek() == '-') {
      ++pos_;
      return add({.op = Op::neg, .operands = {unary(), -1}});
    }
    return primary();
  }

  int primary() {
    skip_space();
    const size_t start = pos_;
    if (peek() == '(') {
      ++pos_;
      const int node = expression();
      expect(')', "to close the '(' at column " + std::to_string(start + 1));
      return node;
    }
    if (std::isdigit(static_cast<unsigned char>(peek())) || peek() == '.') {
      return add({.op = Op::constant, .value = number()});
    }
    if (!identifier_start(peek())) {
      fail(pos_, at_end() ? "the text ends where a value was expected"
                          : "unexpected '" + std::string(1, peek()) + "'; expected a value");
    }
    const std::string name = identifier();
    skip_space();
    if (peek() == '(') return call(name, start);
    if (peek() == '[') return load(name, start);
    if (name == "acc") return add({.op = Op::acc});
    if (name == "acc2") return add({.op = Op::acc2});
    if (auto it = values_.find(name); it != values_.end()) return it->second;
    if (find_function(name)) fail(start, "'" + name + "' is a function; call it as " + name + "(...)");
    fail(start, "unknown name '" + name + "'; a tensor needs its index: " + name + "[n], " + name + "[m], " + name +
                    "[m, n] or " + name + "[]");
  }

  int call(const std::string& name, size_t start) {
    if (reduction_named(name)) {
      fail(start, name + "(...) reduces many elements to one value; expected it only as a vector or scalar output's "
                         "value, e.g. db[n] = " + name + "(x);");
    }
    const Function* f = find_function(name);
    if (!f) fail(start, "unknown function '" + name + "'; expected one of " + function_names());
    ++pos_;  // '('
    std::vector<int> args;
    std::vector<size_t> arg_starts;
    skip_space();
    if (peek() != ')') {
      for (;;) {
        skip_space();
        arg_starts.push_back(pos_);
        args.push_back(expression());
        skip_space();
        if (peek() != ',') break;
        ++pos_;
      }
    }
    expect(')', "to close " + name + "(");
    if (int(args.size()) != f->args) {
      fail(start, name + " takes " + std::to_string(f->args) + " argument" + (f->args == 1 ? "" : "s") + ", got " +
                      std::to_string(args.size()));
    }
    Node node{.op = f->op, .operands = {args[0], f->args == 2 ? args[1] : -1}, .type = f->type};
    if (f->op == Op::clamp) {
      node.lo = constant_argument(args[1], arg_starts[1], "clamp's lower bound");
      node.hi = constant_argument(args[2], arg_starts[2], "clamp's upper bound");
      if (!(node.lo <= node.hi)) fail(arg_starts[1], "clamp's bounds are out of order; expected lo <= hi");
    }
    return add(node);
  }

  double constant_argument(int node, size_t at, const std::string& what) {
    const Node& n = program_.nodes[size_t(node)];
    if (n.op == Op::constant) return n.value;
    if (n.op == Op::neg && program_.nodes[size_t(n.operands[0])].op == Op::constant) {
      return -program_.nodes[size_t(n.operands[0])].value;
    }
    fail(at, what + " must be a number");
  }

  int load(const std::string& name, size_t start) {
    if (accumulator(name) || find_function(name) || reduction_named(name)) {
      fail(start, "'" + name + "' is reserved and cannot be indexed");
    }
    if (values_.count(name)) fail(start, "'" + name + "' is a value defined above, not a tensor");
    for (const Store& s : program_.stores) {
      if (s.name == name) fail(start, "'" + name + "' is an output; outputs cannot be read back");
    }
    const size_t bracket = pos_;
    const std::optional<Shape> shape = index();
    if (!shape) {
      fail(bracket, "expected the index [n], [m], [m, n] or [] after '" + name + "'");
    }
    int input = input_index(name);
    if (input < 0) {
      input = int(program_.inputs.size());
      program_.inputs.push_back({name, *shape});
      input_columns_.push_back(start);
    } else if (program_.inputs[size_t(input)].shape != *shape) {
      fail(start, "'" + name + "' is indexed otherwise at column " + std::to_string(input_columns_[size_t(input)] + 1) +
                      "; a tensor has one shape");
    }
    return add({.op = Op::load, .input = input});
  }

  // [n], [m], [m, n] or [] (any spaces), or nothing where the brackets hold anything else.
  std::optional<Shape> index() {
    ++pos_;  // '['
    std::string first, second;
    bool comma = false;
    skip_space();
    if (identifier_start(peek())) first = identifier();
    skip_space();
    if (peek() == ',') {
      comma = true;
      ++pos_;
      skip_space();
      if (identifier_start(peek())) second = identifier();
      skip_space();
    }
    if (peek() != ']') return std::nullopt;
    ++pos_;
    if (first == "n" && second.empty()) return Shape::row_vector;
    if (first == "m" && second.empty()) return Shape::column_vector;
    if (first == "m" && second == "n") return Shape::matrix;
    if (first.empty() && !comma) return Shape::scalar;
    return std::nullopt;
  }

  double number() {
    const size_t start = pos_;
    while (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '.' ||
           ((peek() == '+' || peek() == '-') && (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E'))) {
      ++pos_;
    }
    double value = 0;
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    const auto [end, error] = std::from_chars(first, last, value);
    if (error != std::errc() || end != last || !std::isfinite(value)) {
      fail(start, "'" + std::string(first, last) + "' is not a finite number");
    }
    return value;
  }

  int add(const Node& node) {
    const auto found = std::find(program_.nodes.begin(), program_.nodes.end(), node);
    if (found != program_.nodes.end()) return int(found - program_.nodes.begin());
    program_.nodes.push_back(node);
    return int(program_.nodes.size()) - 1;
  }

  int input_index(const std::string& name) const {
    for (size_t i = 0; i < program_.inputs.size(); ++i) {
      if (program_.inputs[i].name == name) return int(i);
    }
    return -1;
  }

  std::string identifier() {
    const size_t start = pos_;
    while (identifier_char(peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  void expect(char c, const std::string& why) {
    skip_space();
    if (peek() != c) fail(pos_, "expected '" + std::string(1, c) + "' " + why);
    ++pos_;
  }

  void skip_space() {
    while (std::isspace(static_cast<unsigned char>(peek()))) ++pos_;
  }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  [[noreturn]] void fail(size_t at, const std::string& message) const {
    throw Error(ErrorCode::invalid_argument, "epilogue: column " + std::to_string(at + 1) + " of \"" +
                                                 std::string(text_) + "\": " + message);
  }

  // The nodes D and the stores use, in their order, renumbered; the tensors they read, in order
  // of first use.
  static Program prune(Program p) {
    std::vector<bool> used(p.nodes.size(), false);
    used[size_t(p.result)] = true;
    for (const Store& s : p.stores) used[size_t(s.node)] = true;
    for (size_t i = p.nodes.size(); i-- > 0;) {
      if (!used[i]) continue;
      for (int operand : p.nodes[i].operands) {
        if (operand >= 0) used[size_t(operand)] = true;
      }
    }
    Program out;
    std::vector<int> node_of(p.nodes.size(), -1), input_of(p.inputs.size(), -1);
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      if (!used[i]) continue;
      Node node = p.nodes[i];
      for (int& operand : node.operands) {
        if (operand >= 0) operand = node_of[size_t(operand)];
      }
      if (node.op == Op::load) {
        int& input = input_of[size_t(node.input)];
        if (input < 0) {
          input = int(out.inputs.size());
          out.inputs.push_back(p.inputs[size_t(node.input)]);
        }
        node.input = input;
      }
      node_of[i] = int(out.nodes.size());
      out.nodes.push_back(node);
    }
    for (const Store& s : p.stores) out.stores.push_back({s.name, node_of[size_t(s.node)], s.shape, s.reduce});
    out.result = node_of[size_t(p.result)];
    return out;
  }

  std::string_view text_;
  size_t pos_ = 0;
  Program program_;
  std::map<std::string, int> values_;  // named values
  std::vector<size_t> input_columns_;  // where each tensor was first read
};

}  // namespace

Program parse(std::string_view text) { return Parser(text).run(); }

std::string_view op_name(Op op) {
  switch (op) {
    case Op::acc: return "acc";
    case Op::acc2: return "acc2";
    case Op::constant: return "constant";
    case Op::load: return "load";
    case Op::add: return "add";
    case Op::sub: return "sub";
    case Op::mul: return "mul";
    case Op::div: return "div";
    case Op::cast: return "cast";
    default:
      for (const Function& f : kFunctions) {
        if (f.op == op) return f.name;
      }
  }
  return "?";
}

int arity(Op op) {
  switch (op) {
    case Op::acc:
    case Op::acc2:
    case Op::constant:
    case Op::load: return 0;
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::max:
    case Op::min: return 2;
    default: return 1;
  }
}

bool reads_acc2(const Program& program) {
  return std::any_of(program.nodes.begin(), program.nodes.end(), [](const Node& n) { return n.op == Op::acc2; });
}

}  // namespace gemmkit::epilogue
