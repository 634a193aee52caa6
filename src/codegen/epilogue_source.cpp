// One f32 variable a node, in the program's order (operands before users); constants as exact
// hexadecimal literals; each tensor's offset from the strides its shape uses.
#include "codegen/epilogue_source.h"

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "codegen/kernel_source.h"
#include "gemmkit/error.h"
#include "kernels/sm90/params.h"

namespace gemmkit::codegen {
namespace {

using epilogue::Op;

std::string literal(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%af", double(float(value)));
  return text;
}

// The element offset of (b, m, n) in tensor `slot` of EpilogueParams, as its shape indexes it.
std::string offset(int slot, epilogue::Shape shape) {
  const std::string t = "e.tensors[" + std::to_string(slot) + "].";
  std::string s = "b * " + t + "batch_stride";
  if (shape == epilogue::Shape::column_vector || shape == epilogue::Shape::matrix) s += " + m * " + t + "row_stride";
  if (shape == epilogue::Shape::row_vector || shape == epilogue::Shape::matrix) s += " + n * " + t + "col_stride";
  return s;
}

// Node i's variable.
std::string var(int i) {
  std::string s = "v";
  return s += std::to_string(i);
}

std::string expression(const epilogue::Node& node, const EpilogueTypes& types, const epilogue::Program& program) {
  const std::string x = var(node.operands[0]), y = var(node.operands[1]);
  switch (node.op) {
    case Op::acc: return "acc";
    case Op::acc2: return "acc2";
    case Op::constant: return literal(node.value);
    case Op::load:
      return "load_as_float(e.tensors[" + std::to_string(node.input) + "].data, " +
             type_code(types.inputs[size_t(node.input)]) + ", " +
             offset(node.input, program.inputs[size_t(node.input)].shape) + ")";
    case Op::identity: return x;
    case Op::relu: return "ep_relu(" + x + ")";
    case Op::relu2: return "ep_relu2(" + x + ")";
    case Op::gelu: return "ep_gelu(" + x + ")";
    case Op::gelu_tanh: return "ep_gelu_tanh(" + x + ")";
    case Op::silu: return "ep_silu(" + x + ")";
    case Op::sigmoid: return "ep_sigmoid(" + x + ")";
    case Op::tanh: return "tanhf(" + x + ")";
    case Op::erf: return "erff(" + x + ")";
    case Op::exp: return "expf(" + x + ")";
    case Op::log: return "logf(" + x + ")";
    case Op::abs: return "fabsf(" + x + ")";
    case Op::neg: return "-" + x;
    case Op::square: return x + " * " + x;
    case Op::sqrt: return "sqrtf(" + x + ")";
    case Op::rsqrt: return "rsqrtf(" + x + ")";
    case Op::dgelu: return "ep_dgelu(" + x + ")";
    case Op::dgelu_tanh: return "ep_dgelu_tanh(" + x + ")";
    case Op::dsilu: return "ep_dsilu(" + x + ")";
    case Op::drelu: return "ep_drelu(" + x + ")";
    case Op::dsigmoid: return "ep_dsigmoid(" + x + ")";
    case Op::dtanh: return "ep_dtanh(" + x + ")";
    case Op::clamp: return "ep_clamp(" + x + ", " + literal(node.lo) + ", " + literal(node.hi) + ")";
    case Op::cast: return node.type == DType::f32 ? x : "ep_round(" + x + ", " + type_code(node.type) + ")";
    case Op::add: return x + " + " + y;
    case Op::sub: return x + " - " + y;
    case Op::mul: return x + " * " + y;
    case Op::div: return x + " / " + y;
    case Op::max: return "fmaxf(" + x + ", " + y + ")";
    case Op::min: return "fminf(" + x + ", " + y + ")";
  }
  return "";
}

}  // namespace

std::string epilogue_source(const epilogue::Program& program, const EpilogueTypes& types) {
  const size_t inputs = program.inputs.size(), stores = program.stores.size();
  if (types.inputs.size() != inputs || types.stores.size() != stores) {
    throw Error(ErrorCode::invalid_argument, "epilogue: " + std::to_string(types.inputs.size()) + " input and " +
                                                 std::to_string(types.stores.size()) + " output types for " +
                                                 std::to_string(inputs) + " inputs and " + std::to_string(stores) +
                                                 " outputs; expected one a tensor");
  }
  if (inputs + stores > GEMMKIT_MAX_EPILOGUE_TENSORS) {
    throw Error(ErrorCode::invalid_argument, "epilogue: " + std::to_string(inputs + stores) +
                                                 " tensors; expected at most " +
                                                 std::to_string(GEMMKIT_MAX_EPILOGUE_TENSORS) + " read and written");
  }
  // Stores element by element go through aux, reductions through red.
  std::vector<size_t> elementwise, reduced;
  for (size_t k = 0; k < stores; ++k) (program.stores[k].reduce == epilogue::Reduce::none ? elementwise : reduced).push_back(k);
  std::ostringstream s;
  s << "// epilogue " << epilogue::canonical(program) << "\n"
    << "#include \"epilogue_ops.cuh\"\n"
    << "#include \"params.h\"\n"
    << "namespace gemmkit::sm90 {\n"
    << "constexpr int kEpilogueStores = " << elementwise.size() << ";\n"
    << "constexpr int kEpilogueReductions = " << reduced.size() << ";\n"
    << "constexpr EpilogueReduction kEpilogueReduced[] = {";
  for (size_t k : reduced) {
    const epilogue::Store& store = program.stores[k];
    s << "{" << (store.reduce == epilogue::Reduce::sum ? "true" : "false") << ", "
      << (store.shape == epilogue::Shape::row_vector      ? "kPerColumn"
          : store.shape == epilogue::Shape::column_vector ? "kPerRow"
                                                          : "kPerBatch")
      << "}, ";
  }
  if (reduced.empty()) s << "{}";
  s << "};\n"
    << "__device__ __forceinline__ float epilogue_value(float acc, float acc2, const EpilogueParams& e, i64 b, i64 m, "
       "i64 n, float* aux, float* red) {\n";
  for (size_t i = 0; i < program.nodes.size(); ++i) {
    s << "  const float v" << i << " = " << expression(program.nodes[i], types, program) << ";\n";
  }
  for (size_t k = 0; k < elementwise.size(); ++k) s << "  aux[" << k << "] = v" << program.stores[elementwise[k]].node << ";\n";
  for (size_t r = 0; r < reduced.size(); ++r) s << "  red[" << r << "] = v" << program.stores[reduced[r]].node << ";\n";
  s << "  return v" << program.result << ";\n}\n"
    << "__device__ __forceinline__ void epilogue_store(const EpilogueParams& e, const float* aux, i64 b, i64 m, "
       "i64 n) {\n";
  for (size_t k = 0; k < elementwise.size(); ++k) {
    const int slot = int(inputs + elementwise[k]);
    s << "  store_from_float(e.tensors[" << slot << "].data, " << type_code(types.stores[elementwise[k]]) << ", "
      << offset(slot, epilogue::Shape::matrix) << ", aux[" << k << "]);\n";
  }
  s << "}\n"
    << "// Adds reduction r's partial `value` into its output at (b, m, n) (the index its shape takes).\n"
    << "__device__ __forceinline__ void epilogue_reduce(const EpilogueParams& e, int r, i64 b, i64 m, i64 n, "
       "float value) {\n";
  for (size_t r = 0; r < reduced.size(); ++r) {
    const int slot = int(inputs + reduced[r]);
    s << "  if (r == " << r << ") reduce_into(static_cast<float*>(e.tensors[" << slot << "].data) + "
      << offset(slot, program.stores[reduced[r]].shape) << ", value, kEpilogueReduced[" << r << "].sum);\n";
  }
  s << "}\n}  // namespace gemmkit::sm90\n";
  return s.str();
}

const std::string* interned_epilogue(const epilogue::Program& program, const std::string& canonical,
                                     const EpilogueTypes& types) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<const std::string>> codes;
  std::string key = canonical;
  for (const std::vector<DType>* list : {&types.inputs, &types.stores}) {
    key += '|';
    for (DType t : *list) key += char('a' + int(t));
  }
  std::lock_guard<std::mutex> lock(mutex);
  auto& code = codes[key];
  if (!code) code = std::make_unique<const std::string>(epilogue_source(program, types));
  return code.get();
}

}  // namespace gemmkit::codegen
