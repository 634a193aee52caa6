#include "api/epilogue_checks.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/tensor_checks.h"
#include "codegen/epilogue_source.h"
#include "epilogue/program.h"

namespace gemmkit::api {
namespace {

struct Parsed {
  epilogue::Program program;
  std::string canonical;
};

// The text parsed, once per text for the process (a call repeats it).
const Parsed& parsed(const std::string& text) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<const Parsed>> programs;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = programs.find(text); it != programs.end()) return *it->second;
  }
  epilogue::Program program = epilogue::parse(text);  // throws, naming the column
  auto entry = std::make_unique<const Parsed>(Parsed{program, epilogue::canonical(program)});
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = programs[text];
  if (!slot) slot = std::move(entry);
  return *slot;
}

std::string tensor_name(const std::string& name) { return "options.epilogue.tensors[\"" + name + "\"]"; }

// The batch an epilogue tensor may have (rank 3): D's, or the groups'.
std::string batch_text(const Problem& p) { return p.grouped() ? "G = " + std::to_string(p.batch) : std::to_string(p.batch); }

bool rows_shared(const Problem& p) { return p.rows_batch() == 1 && p.batch > 1; }  // contiguous groups

// The index form and expected shapes of a tensor read as `shape` (or written: matrix, `output`).
std::string expected_shapes(const Problem& p, epilogue::Shape shape, bool output) {
  const std::string m = std::to_string(p.m), n = std::to_string(p.n), b = batch_text(p);
  if (output) return p.rows_batch() > 1 ? "[" + b + ", " + m + ", " + n + "] (D's shape)" : "[" + m + ", " + n + "] (D's shape)";
  switch (shape) {
    case epilogue::Shape::row_vector: return "[1, " + n + "] or [" + b + ", 1, " + n + "]";
    case epilogue::Shape::column_vector:
      return rows_shared(p) ? "[" + m + ", 1]" : "[" + m + ", 1] or [" + b + ", " + m + ", 1]";
    case epilogue::Shape::matrix: return rows_shared(p) ? "[" + m + ", " + n + "]" : "[" + m + ", " + n + "] or [" + b + ", " + m + ", " + n + "]";
  }
  return "";
}

bool fits(const TensorView& t, const Problem& p, epilogue::Shape shape, bool output) {
  const int64_t rows = shape == epilogue::Shape::row_vector ? 1 : p.m;
  const int64_t cols = shape == epilogue::Shape::column_vector ? 1 : p.n;
  if (t.rows() != rows || t.cols() != cols) return false;
  if (output) return p.rows_batch() > 1 ? t.rank == 3 && t.batch() == p.batch : t.rank == 2 || t.batch() == 1;
  if (t.rank == 2) return true;
  if (shape != epilogue::Shape::row_vector && rows_shared(p)) return false;
  return t.batch() == p.batch;
}

// The tensor given for `name`, checked; `output`: an auxiliary output (else an input read as `shape`).
MatrixRef checked_tensor(const Epilogue& e, const std::string& name, const Problem& p, epilogue::Shape shape,
                         bool output) {
  const EpilogueTensor* given = nullptr;
  for (const EpilogueTensor& t : e.tensors) {
    if (t.name == name) given = &t;
  }
  const std::string what = output ? name + "[m, n] =" : shape == epilogue::Shape::row_vector ? name + "[n]"
                                                       : shape == epilogue::Shape::column_vector ? name + "[m]"
                                                                                                : name + "[m, n]";
  if (!given) fail("options.epilogue.tensors: none named '" + name + "'; expected one, as the epilogue uses " + what);
  const TensorView& t = given->tensor;
  const std::string label = tensor_name(name);
  check_form(t, label.c_str());
  if (t.dtype != DType::bf16 && t.dtype != DType::f16 && t.dtype != DType::f32) {
    fail(label + ": dtype " + std::string(dtype_name(t.dtype)) + "; expected bf16, f16 or f32");
  }
  if (!fits(t, p, shape, output)) {
    fail(label + ": shape " + shape_text(t) + " for " + what + "; expected " + expected_shapes(p, shape, output));
  }
  if (element_count(t) > 0 && (t.data == nullptr || reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0)) {
    fail(label + ": data is " + (t.data ? "not " + std::to_string(dtype_size(t.dtype)) + "-byte aligned" : "null") +
         "; expected a device pointer to " + std::string(dtype_name(t.dtype)) + " elements");
  }
  if (output) check_no_self_overlap(t, p.rows_batch(), label.c_str());
  return {t.data, t.dtype, t.rank == 3 ? t.batch_stride() : 0, t.row_stride(), t.col_stride()};
}

const TensorView* find(const Epilogue& e, const std::string& name) {
  for (const EpilogueTensor& t : e.tensors) {
    if (t.name == name) return &t.tensor;
  }
  return nullptr;
}

}  // namespace

EpilogueRef epilogue_ref(const Epilogue& e, const Problem& p) {
  if (e.text.empty()) {
    if (!e.tensors.empty()) {
      fail("options.epilogue.tensors: " + std::to_string(e.tensors.size()) +
           " given but the epilogue's text is empty; expected none without an epilogue");
    }
    return {};
  }
  const Parsed& parsed_text = parsed(e.text);
  const epilogue::Program& program = parsed_text.program;
  const size_t count = program.inputs.size() + program.stores.size();
  if (count > size_t(kMaxEpilogueTensors)) {
    fail("options.epilogue.text: " + std::to_string(count) + " tensors read and written; expected at most " +
         std::to_string(kMaxEpilogueTensors));
  }
  // Every tensor given is one the text names, once.
  for (size_t i = 0; i < e.tensors.size(); ++i) {
    const std::string& name = e.tensors[i].name;
    bool named = false;
    for (const epilogue::Input& in : program.inputs) named = named || in.name == name;
    for (const epilogue::Store& out : program.stores) named = named || out.name == name;
    std::string names;
    for (const epilogue::Input& in : program.inputs) names += (names.empty() ? "" : ", ") + in.name;
    for (const epilogue::Store& out : program.stores) names += (names.empty() ? "" : ", ") + out.name;
    if (!named) {
      fail("options.epilogue.tensors: '" + name + "' is not a tensor the epilogue uses; expected " +
           (names.empty() ? "none" : "only " + names));
    }
    for (size_t j = 0; j < i; ++j) {
      if (e.tensors[j].name == name) fail("options.epilogue.tensors: '" + name + "' given twice; expected each once");
    }
  }
  EpilogueRef ref;
  codegen::EpilogueTypes types;
  for (const epilogue::Input& in : program.inputs) {
    ref.tensors[size_t(ref.tensor_count++)] = checked_tensor(e, in.name, p, in.shape, false);
    types.inputs.push_back(ref.tensors[size_t(ref.tensor_count - 1)].dtype);
  }
  for (const epilogue::Store& out : program.stores) {
    ref.tensors[size_t(ref.tensor_count++)] = checked_tensor(e, out.name, p, epilogue::Shape::matrix, true);
    types.stores.push_back(ref.tensors[size_t(ref.tensor_count - 1)].dtype);
  }
  ref.code = codegen::interned_epilogue(program, parsed_text.canonical, types);
  return ref;
}

size_t epilogue_operands(const Epilogue& e, const Problem& p, std::span<Operand> out) {
  size_t count = 0;
  if (!p.epilogue.fused()) return 0;
  for (const EpilogueTensor& t : e.tensors) out[count++] = {&t.tensor, p.batch, t.name.c_str()};
  return count;
}

void check_epilogue_apart(const Epilogue& e, const Problem& p, const ByteRange& d, std::span<const Operand> inputs) {
  if (!p.epilogue.fused()) return;
  const epilogue::Program& program = parsed(e.text).program;
  std::vector<std::pair<std::string, ByteRange>> reads, writes;
  for (const epilogue::Input& in : program.inputs) {
    reads.push_back({in.name, byte_range(*find(e, in.name), p.batch, tensor_name(in.name).c_str())});
  }
  for (const epilogue::Store& out : program.stores) {
    writes.push_back({out.name, byte_range(*find(e, out.name), p.batch, tensor_name(out.name).c_str())});
  }
  for (const auto& [name, range] : reads) {
    if (range.overlaps(d)) {
      fail(tensor_name(name) + ": memory overlaps D; expected epilogue inputs apart from D (for D + x in place, give "
                               "x as C with beta 1)");
    }
  }
  for (size_t i = 0; i < writes.size(); ++i) {
    const auto& [name, range] = writes[i];
    const std::string label = tensor_name(name);
    if (range.overlaps(d)) fail(label + ": memory overlaps D; expected the epilogue's outputs apart from D");
    for (const Operand& in : inputs) {
      if (byte_range(*in.view, in.batch, in.name).overlaps(range)) {
        fail(label + ": memory overlaps " + in.name + "; expected the epilogue's outputs apart from what the call reads");
      }
    }
    for (const auto& [other, other_range] : reads) {
      if (other_range.overlaps(range)) {
        fail(label + ": memory overlaps " + tensor_name(other) + "; expected the epilogue's outputs apart from its inputs");
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (writes[j].second.overlaps(range)) fail(label + ": memory overlaps " + tensor_name(writes[j].first) + "; expected the epilogue's outputs apart");
    }
  }
}

}  // namespace gemmkit::api
