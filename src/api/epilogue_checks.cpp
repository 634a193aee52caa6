#include "api/epilogue_checks.h"

#include <array>
#include <cstdint>
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

// A text parsed, and its code for each set of tensor types it ran with (types packed 4 bits a
// tensor): a call that repeats an epilogue pays two lookups, no allocation.
struct Parsed {
  epilogue::Program program;
  std::string canonical;
  bool reads_acc2 = false;  // epilogue::reads_acc2(program), which every call checks
  std::map<uint64_t, const std::string*> codes;  // guarded by epilogues().mutex
};

struct Epilogues {
  std::mutex mutex;
  std::map<std::string, std::unique_ptr<Parsed>, std::less<>> parsed;
};

Epilogues& epilogues() {
  static Epilogues all;
  return all;
}

// The text parsed, once per text for the process.
Parsed& parsed(const std::string& text) {
  Epilogues& all = epilogues();
  {
    std::lock_guard<std::mutex> lock(all.mutex);
    if (auto it = all.parsed.find(text); it != all.parsed.end()) return *it->second;
  }
  epilogue::Program program = epilogue::parse(text);  // throws, naming the column
  auto entry = std::make_unique<Parsed>(Parsed{program, epilogue::canonical(program), epilogue::reads_acc2(program), {}});
  std::lock_guard<std::mutex> lock(all.mutex);
  auto& slot = all.parsed[text];
  if (!slot) slot = std::move(entry);
  return *slot;
}

// The program's device code for the tensors' types (the references' dtypes, in program order).
const std::string* code_for(Parsed& text, const EpilogueRef& ref) {
  uint64_t key = 0;
  for (int i = 0; i < ref.tensor_count; ++i) key |= uint64_t(ref.tensors[size_t(i)].dtype) << (4 * i);
  Epilogues& all = epilogues();
  {
    std::lock_guard<std::mutex> lock(all.mutex);
    if (auto it = text.codes.find(key); it != text.codes.end()) return it->second;
  }
  codegen::EpilogueTypes types;
  for (int i = 0; i < ref.tensor_count; ++i) {
    (size_t(i) < text.program.inputs.size() ? types.inputs : types.stores).push_back(ref.tensors[size_t(i)].dtype);
  }
  const std::string* code = codegen::interned_epilogue(text.program, text.canonical, types);
  std::lock_guard<std::mutex> lock(all.mutex);
  text.codes[key] = code;
  return code;
}

// The text the call's epilogue runs: its own, or a dual GEMM's default.
const std::string& text_of(const Epilogue& e, const Problem& p) {
  static const std::string dual_default = kDualEpilogue;
  return e.text.empty() && p.dual() ? dual_default : e.text;
}

std::string tensor_name(const std::string& name) { return "options.epilogue.tensors[\"" + name + "\"]"; }

// The batch an epilogue tensor may have (rank 3): D's, or the groups'.
std::string batch_text(const Problem& p) { return p.grouped() ? "G = " + std::to_string(p.batch) : std::to_string(p.batch); }

bool rows_shared(const Problem& p) { return p.d_batch() == 1 && p.batch > 1; }  // contiguous groups

// The index form and expected shapes of a tensor read as `shape` (or written: matrix, `output`).
std::string expected_shapes(const Problem& p, epilogue::Shape shape, bool output) {
  const std::string m = std::to_string(p.m), n = std::to_string(p.n), b = batch_text(p);
  if (output) return p.d_batch() > 1 ? "[" + b + ", " + m + ", " + n + "] (D's shape)" : "[" + m + ", " + n + "] (D's shape)";
  switch (shape) {
    case epilogue::Shape::row_vector: return "[1, " + n + "] or [" + b + ", 1, " + n + "]";
    case epilogue::Shape::column_vector:
      return rows_shared(p) ? "[" + m + ", 1]" : "[" + m + ", 1] or [" + b + ", " + m + ", 1]";
    case epilogue::Shape::matrix: return rows_shared(p) ? "[" + m + ", " + n + "]" : "[" + m + ", " + n + "] or [" + b + ", " + m + ", " + n + "]";
    case epilogue::Shape::scalar: return "[1, 1] or [" + b + ", 1, 1]";
  }
  return "";
}

bool fits(const TensorView& t, const Problem& p, epilogue::Shape shape, bool output) {
  const bool along_m = shape == epilogue::Shape::column_vector || shape == epilogue::Shape::matrix;
  const bool along_n = shape == epilogue::Shape::row_vector || shape == epilogue::Shape::matrix;
  if (t.rows() != (along_m ? p.m : 1) || t.cols() != (along_n ? p.n : 1)) return false;
  if (output) return p.d_batch() > 1 ? t.rank == 3 && t.batch() == p.batch : t.rank == 2 || t.batch() == 1;
  if (t.rank == 2) return true;
  if (along_m && rows_shared(p)) return false;
  return t.batch() == p.batch;
}

// The index a store writes, as the text spells it.
std::string store_text(const epilogue::Store& s) {
  switch (s.shape) {
    case epilogue::Shape::row_vector: return s.name + "[n] =";
    case epilogue::Shape::column_vector: return s.name + "[m] =";
    case epilogue::Shape::scalar: return s.name + "[] =";
    case epilogue::Shape::matrix: break;
  }
  return s.name + "[m, n] =";
}

const TensorView* find(const Epilogue& e, const std::string& name) {
  for (const EpilogueTensor& t : e.tensors) {
    if (t.name == name) return &t.tensor;
  }
  return nullptr;
}

// The tensor given for `name`, checked: an input read as `shape` (store null), or the output of
// `store`. A reduction's output is f32 and contiguous, and its bytes go to `zeroed_bytes`.
// Messages are made only where a check fails.
MatrixRef checked_tensor(const Epilogue& e, const std::string& name, const Problem& p, epilogue::Shape shape,
                         const epilogue::Store* store, int64_t& zeroed_bytes) {
  const bool output = store != nullptr, reduced = output && store->reduce != epilogue::Reduce::none;
  if (output) shape = store->shape;
  const TensorView* given = find(e, name);
  auto what = [&] {
    return output ? store_text(*store) : shape == epilogue::Shape::row_vector ? name + "[n]"
                                      : shape == epilogue::Shape::column_vector ? name + "[m]"
                                      : shape == epilogue::Shape::scalar       ? name + "[]"
                                                                               : name + "[m, n]";
  };
  if (!given) fail("options.epilogue.tensors: none named '" + name + "'; expected one, as the epilogue uses " + what());
  const TensorView& t = *given;
  const bool formed = (t.rank == 2 || t.rank == 3) && t.sizes[0] >= 0 && t.sizes[1] >= 0 && t.sizes[2] >= 0 &&
                      t.strides[0] >= 0 && t.strides[1] >= 0 && t.strides[2] >= 0;
  if (!formed) check_form(t, tensor_name(name).c_str());  // throws, saying what is wrong
  if (reduced ? t.dtype != DType::f32 : t.dtype != DType::bf16 && t.dtype != DType::f16 && t.dtype != DType::f32) {
    fail(tensor_name(name) + ": dtype " + std::string(dtype_name(t.dtype)) + "; expected " +
         (reduced ? "f32 for " + what() + " " + (store->reduce == epilogue::Reduce::sum ? "sum" : "amax") + "(...)"
                  : std::string("bf16, f16 or f32")));
  }
  if (!fits(t, p, shape, output && !reduced)) {
    fail(tensor_name(name) + ": shape " + shape_text(t) + " for " + what() + "; expected " +
         expected_shapes(p, shape, output && !reduced));
  }
  if (element_count(t) > 0 && (t.data == nullptr || reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0)) {
    fail(tensor_name(name) + ": data is " + (t.data ? "not " + std::to_string(dtype_size(t.dtype)) + "-byte aligned" : "null") +
         "; expected a device pointer to " + std::string(dtype_name(t.dtype)) + " elements");
  }
  // A reduction's rank-2 output takes every batch's values: it is one matrix.
  const int64_t batches = reduced ? (t.rank == 3 ? t.batch() : 1) : p.d_batch();
  if (output) check_no_self_overlap(t, batches, tensor_name(name).c_str());
  zeroed_bytes = 0;
  if (reduced) {
    // Contiguous: its elements are all the bytes from its first to its last (no self-overlap).
    const ByteRange bytes = byte_range(t, batches, tensor_name(name).c_str());
    zeroed_bytes = int64_t(element_count(t)) * 4;
    if (zeroed_bytes > 0 && int64_t(bytes.last - bytes.first) != zeroed_bytes) {
      fail(tensor_name(name) + ": strides " + strides_text(t) + " leave gaps; expected a contiguous tensor for " + what() +
           " a reduction (gemmkit zeroes it before adding into it)");
    }
  }
  return {t.data, t.dtype, t.rank == 3 ? t.batch_stride() : 0, t.row_stride(), t.col_stride()};
}

}  // namespace

EpilogueRef epilogue_ref(const Epilogue& e, const Problem& p) {
  if (e.text.empty()) {
    if (!e.tensors.empty()) {
      fail("options.epilogue.tensors: " + std::to_string(e.tensors.size()) +
           " given but the epilogue's text is empty; expected none without an epilogue");
    }
    if (!p.dual()) return {};
  }
  Parsed& text = parsed(text_of(e, p));
  const epilogue::Program& program = text.program;
  if (text.reads_acc2 != p.dual()) {
    fail(p.dual() ? "options.epilogue.text: \"" + e.text + "\" does not read acc2, the product of options.b2; "
                    "expected a dual GEMM's epilogue to use it, e.g. \"" + std::string(kDualEpilogue) + "\""
                  : "options.epilogue.text: \"" + e.text + "\" reads acc2, a dual GEMM's second product; expected "
                    "options.b2 with it (or acc alone)");
  }
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
    if (!named) {
      std::string names;
      for (const epilogue::Input& in : program.inputs) names += (names.empty() ? "" : ", ") + in.name;
      for (const epilogue::Store& out : program.stores) names += (names.empty() ? "" : ", ") + out.name;
      fail("options.epilogue.tensors: '" + name + "' is not a tensor the epilogue uses; expected " +
           (names.empty() ? "none" : "only " + names));
    }
    for (size_t j = 0; j < i; ++j) {
      if (e.tensors[j].name == name) fail("options.epilogue.tensors: '" + name + "' given twice; expected each once");
    }
  }
  EpilogueRef ref;
  for (const epilogue::Input& in : program.inputs) {
    const size_t i = size_t(ref.tensor_count++);
    ref.tensors[i] = checked_tensor(e, in.name, p, in.shape, nullptr, ref.zeroed_bytes[i]);
  }
  for (const epilogue::Store& out : program.stores) {
    const size_t i = size_t(ref.tensor_count++);
    ref.tensors[i] = checked_tensor(e, out.name, p, out.shape, &out, ref.zeroed_bytes[i]);
  }
  ref.code = code_for(text, ref);
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
  const epilogue::Program& program = parsed(text_of(e, p)).program;
  // Each tensor's memory, inputs first, in the program's order (as epilogue_ref checked them).
  struct Range {
    const std::string* name;
    ByteRange bytes;
  };
  std::array<Range, kMaxEpilogueTensors> ranges;
  const size_t reads = program.inputs.size(), count = reads + program.stores.size();
  for (size_t i = 0; i < count; ++i) {
    const std::string& name = i < reads ? program.inputs[i].name : program.stores[i - reads].name;
    ranges[i] = {&name, byte_range(*find(e, name), p.batch, name.c_str())};
  }
  for (size_t i = 0; i < count; ++i) {
    const Range& r = ranges[i];
    if (i < reads) {
      if (r.bytes.overlaps(d)) {
        fail(tensor_name(*r.name) + ": memory overlaps D; expected epilogue inputs apart from D (for D + x in "
                                    "place, give x as C with beta 1)");
      }
      continue;
    }
    if (r.bytes.overlaps(d)) fail(tensor_name(*r.name) + ": memory overlaps D; expected the epilogue's outputs apart from D");
    for (const Operand& in : inputs) {
      if (byte_range(*in.view, in.batch, in.name).overlaps(r.bytes)) {
        fail(tensor_name(*r.name) + ": memory overlaps " + in.name +
             "; expected the epilogue's outputs apart from what the call reads");
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (ranges[j].bytes.overlaps(r.bytes)) {
        fail(tensor_name(*r.name) + ": memory overlaps " + tensor_name(*ranges[j].name) + "; expected the epilogue's " +
             (j < reads ? "outputs apart from its inputs" : "outputs apart"));
      }
    }
  }
}

}  // namespace gemmkit::api

namespace gemmkit {

namespace {

EpilogueIndex index_of(epilogue::Shape shape) {
  switch (shape) {
    case epilogue::Shape::row_vector: return EpilogueIndex::n;
    case epilogue::Shape::column_vector: return EpilogueIndex::m;
    case epilogue::Shape::scalar: return EpilogueIndex::none;
    case epilogue::Shape::matrix: break;
  }
  return EpilogueIndex::mn;
}

}  // namespace

std::vector<EpilogueTensorUse> epilogue_tensor_uses(const std::string& text) {
  const epilogue::Program& program = api::parsed(text).program;
  std::vector<EpilogueTensorUse> uses;
  for (const epilogue::Input& input : program.inputs) {
    uses.push_back({input.name, index_of(input.shape), false});
  }
  for (const epilogue::Store& store : program.stores) {
    const EpilogueReduce reduce = store.reduce == epilogue::Reduce::sum    ? EpilogueReduce::sum
                                  : store.reduce == epilogue::Reduce::amax ? EpilogueReduce::amax
                                                                           : EpilogueReduce::none;
    uses.push_back({store.name, index_of(store.shape), true, reduce});
  }
  return uses;
}

}  // namespace gemmkit
