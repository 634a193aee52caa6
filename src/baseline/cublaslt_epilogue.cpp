#include "baseline/cublaslt_epilogue.h"

#include <utility>
#include <vector>

#include "gemmkit/error.h"

namespace gemmkit::baseline {
namespace {

// What each cuBLASLt epilogue computes, in the text form, its tensors named by their roles:
// `bias` for cuBLASLt's bias vector (read, or the bias gradient written), `pre` for its aux
// matrix (GELU's input, written forward, read backward). ReLU's _AUX and backward kinds are not
// here: their aux is a bit mask, which no text writes or reads.
struct Pattern {
  std::string_view text;
  cublasLtEpilogue_t kind;
  std::string_view name;
};
constexpr Pattern kPatterns[] = {
    {"acc + bias[n]", CUBLASLT_EPILOGUE_BIAS, "BIAS"},
    {"relu(acc)", CUBLASLT_EPILOGUE_RELU, "RELU"},
    {"relu(acc + bias[n])", CUBLASLT_EPILOGUE_RELU_BIAS, "RELU_BIAS"},
    {"gelu_tanh(acc)", CUBLASLT_EPILOGUE_GELU, "GELU"},
    {"gelu_tanh(acc + bias[n])", CUBLASLT_EPILOGUE_GELU_BIAS, "GELU_BIAS"},
    {"pre[m, n] = acc; gelu_tanh(acc)", CUBLASLT_EPILOGUE_GELU_AUX, "GELU_AUX"},
    {"pre[m, n] = acc + bias[n]; gelu_tanh(acc + bias[n])", CUBLASLT_EPILOGUE_GELU_AUX_BIAS, "GELU_AUX_BIAS"},
    {"acc * dgelu_tanh(pre[m, n])", CUBLASLT_EPILOGUE_DGELU, "DGELU"},
    {"dx = acc * dgelu_tanh(pre[m, n]); bias[n] = sum(dx); dx", CUBLASLT_EPILOGUE_DGELU_BGRAD, "DGELU_BGRAD"},
};

// The sums and products of the patterns, with their operands the other way round: the canonical
// form keeps the operands' order. (No pattern has two of them.)
constexpr std::pair<std::string_view, std::string_view> kCommuted[] = {
    {"acc + bias[n]", "bias[n] + acc"},
    {"acc * dgelu_tanh(pre[m, n])", "dgelu_tanh(pre[m, n]) * acc"},
};

// One way to write a pattern, parsed.
struct Spelling {
  const Pattern* pattern;
  epilogue::Program program;
  std::string canonical;
};

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// Each pattern as written and commuted.
const std::vector<Spelling>& spellings() {
  static const std::vector<Spelling> all = [] {
    std::vector<Spelling> out;
    for (const Pattern& pattern : kPatterns) {
      std::vector<std::string> texts = {std::string(pattern.text)};
      for (const auto& [written, commuted] : kCommuted) {
        if (texts[0].find(written) != std::string::npos) texts.push_back(replace_all(texts[0], written, commuted));
      }
      for (const std::string& text : texts) {
        epilogue::Program program = epilogue::parse(text);
        std::string canonical = epilogue::canonical(program);
        out.push_back({&pattern, std::move(program), std::move(canonical)});
      }
    }
    return out;
  }();
  return all;
}

// The name `program` gives the tensor that `pattern` calls `role`: the input or output at the
// same place (equal canonical forms have their tensors in the same order); empty where the
// pattern has none.
std::string role_name(const epilogue::Program& pattern, const epilogue::Program& program, std::string_view role) {
  for (size_t i = 0; i < pattern.inputs.size(); ++i) {
    if (pattern.inputs[i].name == role) return program.inputs[i].name;
  }
  for (size_t i = 0; i < pattern.stores.size(); ++i) {
    if (pattern.stores[i].name == role) return program.stores[i].name;
  }
  return "";
}

MatrixRef matrix_ref(const Epilogue& epilogue, const std::string& name) {
  if (name.empty()) return {};
  for (const EpilogueTensor& t : epilogue.tensors) {
    if (t.name == name) {
      const TensorView& v = t.tensor;
      return {v.data, v.dtype, v.rank == 3 ? v.batch_stride() : 0, v.row_stride(), v.col_stride()};
    }
  }
  throw Error(ErrorCode::invalid_argument, "epilogue: no tensor '" + name + "' for \"" + epilogue.text +
                                               "\"; expected one for each name the text uses");
}

}  // namespace

std::optional<LtEpilogueMatch> match_lt_epilogue(const epilogue::Program& program) {
  const std::string canonical = epilogue::canonical(program);
  for (const Spelling& s : spellings()) {
    if (s.canonical == canonical) {
      return LtEpilogueMatch{s.pattern->kind, role_name(s.program, program, "bias"), role_name(s.program, program, "pre")};
    }
  }
  return std::nullopt;
}

std::string_view lt_epilogue_name(cublasLtEpilogue_t kind) {
  for (const Pattern& pattern : kPatterns) {
    if (pattern.kind == kind) return pattern.name;
  }
  return kind == CUBLASLT_EPILOGUE_DEFAULT ? "DEFAULT" : "unknown";
}

std::optional<LtEpilogue> lt_epilogue(const Epilogue& epilogue) {
  if (epilogue.text.empty()) return std::nullopt;
  const std::optional<LtEpilogueMatch> match = match_lt_epilogue(epilogue::parse(epilogue.text));
  if (!match) return std::nullopt;
  return LtEpilogue{match->kind, matrix_ref(epilogue, match->bias), matrix_ref(epilogue, match->aux)};
}

}  // namespace gemmkit::baseline
