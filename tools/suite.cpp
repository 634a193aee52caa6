#include "suite.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>

#include "gemmkit/error.h"

namespace gemmkit::tools {
namespace {

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw Error(ErrorCode::invalid_argument, where + ": " + what);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Our own mapping, so this file does not depend on the library's dtype_name().
const char* name_of(DType t) {
  switch (t) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
  }
  return "?";
}

std::optional<DType> dtype_of(const std::string& s) {
  for (DType t : {DType::bf16, DType::f16, DType::f32})
    if (s == name_of(t)) return t;
  return std::nullopt;
}

// Parses a whole field as a base-10 integer no smaller than `min`.
int64_t parse_int(const std::string& field, const char* what, int64_t min,
                  const std::string& where) {
  int64_t v = 0;
  const char* end = field.data() + field.size();
  auto [ptr, ec] = std::from_chars(field.data(), end, v);
  if (ec == std::errc::result_out_of_range)
    fail(where, std::string(what) + " '" + field + "' is out of range; expected a 64-bit integer");
  if (ec != std::errc() || ptr != end)
    fail(where, std::string(what) + " '" + field +
                    "' is not an integer; expected an integer >= " + std::to_string(min));
  if (v < min)
    fail(where, std::string(what) + " '" + field +
                    "' is too small; expected an integer >= " + std::to_string(min));
  return v;
}

std::string join(const std::vector<std::string>& fields) {
  std::string s;
  for (const auto& f : fields) s += (s.empty() ? "" : " ") + f;
  return s;
}

}  // namespace

SuiteProblem parse_problem(const std::vector<std::string>& fields, const std::string& where) {
  if (fields.size() < 3 || fields.size() > 6)
    fail(where, "expected 3 to 6 fields (M N K [layout] [dtype] [batch]), got " +
                    std::to_string(fields.size()) + ": '" + join(fields) + "'");
  SuiteProblem p;
  p.m = parse_int(fields[0], "M", 0, where);
  p.n = parse_int(fields[1], "N", 0, where);
  p.k = parse_int(fields[2], "K", 0, where);

  if (fields.size() > 3) {
    p.layout = upper(fields[3]);
    if (p.layout != "NN" && p.layout != "NT" && p.layout != "TN" && p.layout != "TT")
      fail(where, "unknown layout '" + fields[3] + "'; expected NN, NT, TN or TT");
  }

  if (fields.size() > 4) {
    const std::string spec = lower(fields[4]);
    const size_t colon = spec.find(':');
    const auto in = dtype_of(spec.substr(0, colon));
    const auto out = colon == std::string::npos ? in : dtype_of(spec.substr(colon + 1));
    // Inputs are 16-bit only; the output may also be f32.
    if (!in || *in == DType::f32 || !out)
      fail(where, "unknown dtype '" + fields[4] +
                      "'; expected IN or IN:OUT with IN bf16 or f16 and OUT bf16, f16 or f32");
    p.in_dtype = *in;
    p.out_dtype = *out;
  }

  if (fields.size() > 5) p.batch = parse_int(fields[5], "batch", 1, where);
  return p;
}

std::vector<SuiteProblem> parse_suite(std::istream& in, const std::string& name) {
  std::vector<SuiteProblem> problems;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    text = text.substr(0, text.find('#'));
    // '\r' counts as a separator so files with Windows line endings parse too.
    std::replace_if(
        text.begin(), text.end(), [](char c) { return c == '\t' || c == '\r'; }, ' ');
    std::istringstream words(text);
    std::vector<std::string> fields;
    for (std::string w; words >> w;) fields.push_back(w);
    if (fields.empty()) continue;
    SuiteProblem p = parse_problem(fields, name + ":" + std::to_string(line));
    p.line = line;
    problems.push_back(p);
  }
  if (in.bad()) throw Error(ErrorCode::io_error, "cannot read suite file '" + name + "'");
  return problems;
}

std::vector<SuiteProblem> load_suite(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::io_error, "cannot open suite file '" + path + "'");
  return parse_suite(in, path);
}

std::string dtype_spec(const SuiteProblem& p) {
  if (p.in_dtype == p.out_dtype) return name_of(p.in_dtype);
  return std::string(name_of(p.in_dtype)) + ":" + name_of(p.out_dtype);
}

}  // namespace gemmkit::tools
