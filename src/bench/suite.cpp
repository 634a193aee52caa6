#include "bench/suite.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

#include "core/problem.h"
#include "gemmkit/error.h"

namespace gemmkit::tools {
namespace {

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw Error(ErrorCode::invalid_argument, where + ": " + what);
}

// A field or line quoted for an error message, between single quotes: its first 80 bytes,
// those outside printable ASCII as \xNN and a backslash as \\, then "..." where it is cut. A
// suite line may be megabytes of anything; the message stays one short printable line.
std::string quoted(std::string_view text) {
  constexpr size_t kLimit = 80;
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "'";
  for (const unsigned char c : text.substr(0, kLimit)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c >= 0x7f) {
      out += {'\\', 'x', kDigits[c >> 4], kDigits[c & 0xf]};
    } else {
      out += char(c);
    }
  }
  return out + (text.size() > kLimit ? "...'" : "'");
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// One type name (already lower-case), with the usual alternative spellings; ue8m0 is a scale type
// only and never names an operand.
std::optional<DType> dtype_of(const std::string& s) {
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f16" || s == "fp16" || s == "float16") return DType::f16;
  if (s == "f32" || s == "fp32" || s == "float32") return DType::f32;
  if (s == "e4m3") return DType::e4m3;
  if (s == "e5m2") return DType::e5m2;
  return std::nullopt;
}

const ScaleMode kModes[] = {ScaleMode::tensor, ScaleMode::rowwise, ScaleMode::block, ScaleMode::mx};

std::optional<ScaleMode> mode_of(const std::string& field) {
  const std::string s = lower(field);
  for (ScaleMode mode : kModes)
    if (s == scale_mode_name(mode)) return mode;
  return std::nullopt;
}

// A field that can only have been meant as a number (the batch), not as a mode.
bool numeric(const std::string& field) {
  return !field.empty() && (std::isdigit(static_cast<unsigned char>(field[0])) || field[0] == '-' || field[0] == '+');
}

// The dtype field: IN or IN:OUT, IN one 16-bit or 8-bit type or two 8-bit types A,B.
void parse_dtype(const std::string& field, SuiteProblem& p, const std::string& where) {
  const std::string spec = lower(field);
  const size_t colon = spec.find(':');
  const std::string in_text = spec.substr(0, colon);
  const size_t comma = in_text.find(',');
  const auto in_a = dtype_of(in_text.substr(0, comma));
  const auto in_b = comma == std::string::npos ? in_a : dtype_of(in_text.substr(comma + 1));
  bool ok = in_a && in_b && *in_a != DType::f32 && *in_b != DType::f32;
  // Two input types only where both are 8-bit.
  if (ok && comma != std::string::npos) ok = is_fp8(*in_a) && is_fp8(*in_b);
  std::optional<DType> out;
  if (ok) {
    if (colon == std::string::npos) {
      out = is_fp8(*in_a) ? DType::bf16 : *in_a;
    } else {
      out = dtype_of(spec.substr(colon + 1));
      ok = out && !is_fp8(*out);  // outputs are 16- or 32-bit
    }
  }
  if (!ok)
    fail(where, "unknown dtype " + quoted(field) +
                    "; expected IN or IN:OUT with IN bf16, f16, e4m3, e5m2 or two 8-bit types A,B "
                    "(e.g. e4m3,e5m2) and OUT bf16, f16 or f32");
  p.in_dtype = *in_a;
  p.in_b = *in_b == *in_a ? std::nullopt : in_b;
  p.out_dtype = *out;
  if (is_fp8(p.in_dtype)) p.mode = ScaleMode::tensor;
}

std::string join(const std::vector<std::string>& fields) {
  std::string s;
  for (const auto& f : fields) s += (s.empty() ? "" : " ") + f;
  return s;
}

}  // namespace

bool SuiteProblem::fp8() const { return is_fp8(in_dtype); }

int64_t parse_int(const std::string& field, const char* what, int64_t min,
                  const std::string& where) {
  int64_t v = 0;
  const char* end = field.data() + field.size();
  auto [ptr, ec] = std::from_chars(field.data(), end, v);
  if (ec == std::errc::result_out_of_range)
    fail(where, std::string(what) + " " + quoted(field) + " is out of range; expected a 64-bit integer");
  if (ec != std::errc() || ptr != end)
    fail(where, std::string(what) + " " + quoted(field) +
                    " is not an integer; expected an integer >= " + std::to_string(min));
  if (v < min)
    fail(where, std::string(what) + " " + quoted(field) +
                    " is too small; expected an integer >= " + std::to_string(min));
  return v;
}

SuiteProblem parse_problem(const std::vector<std::string>& fields, const std::string& where) {
  if (fields.size() < 3 || fields.size() > 7)
    fail(where, "expected 3 to 7 fields (M N K [layout] [dtype] [mode] [batch]), got " +
                    std::to_string(fields.size()) + ": " + quoted(join(fields)));
  SuiteProblem p;
  p.m = parse_int(fields[0], "M", 0, where);
  p.n = parse_int(fields[1], "N", 0, where);
  p.k = parse_int(fields[2], "K", 0, where);

  if (fields.size() > 3) {
    p.layout = upper(fields[3]);
    if (p.layout != "NN" && p.layout != "NT" && p.layout != "TN" && p.layout != "TT")
      fail(where, "unknown layout " + quoted(fields[3]) + "; expected NN, NT, TN or TT");
  }

  if (fields.size() > 4) parse_dtype(fields[4], p, where);

  // After the dtype: [mode] [batch]. A mode only follows 8-bit inputs; a number is the batch.
  size_t next = 5;
  if (fields.size() > next) {
    const std::string& field = fields[next];
    const auto mode = mode_of(field);
    if (!p.fp8()) {
      if (mode)
        fail(where, "scaling mode " + quoted(field) + " with " + std::string(dtype_name(p.in_dtype)) +
                        " inputs; expected a batch (a mode goes with e4m3 or e5m2 inputs only)");
      if (fields.size() > 6)
        fail(where, "expected 3 to 6 fields for 16-bit inputs (M N K [layout] [dtype] [batch]), got " +
                        std::to_string(fields.size()) + ": " + quoted(join(fields)));
    } else if (mode) {
      p.mode = *mode;
      ++next;
    } else if (!numeric(field) || fields.size() > 6) {
      fail(where, "unknown scaling mode " + quoted(field) + "; expected tensor, rowwise, block or mx" +
                      (fields.size() > 6 ? "" : " (or a batch)"));
    }
  }
  if (fields.size() > next) p.batch = parse_int(fields[next], "batch", 1, where);
  try {
    check_addressable(p.m, p.n, p.k, p.batch,
                      std::max({dtype_size(p.in_dtype), dtype_size(p.b_dtype()), dtype_size(p.out_dtype)}));
  } catch (const Error& e) {
    fail(where, e.what());
  }
  return p;
}

std::vector<std::string> line_fields(std::string text) {
  text = text.substr(0, text.find('#'));
  // '\r' counts as a separator so files with Windows line endings parse too.
  std::replace_if(
      text.begin(), text.end(), [](char c) { return c == '\t' || c == '\r'; }, ' ');
  std::istringstream words(text);
  std::vector<std::string> fields;
  for (std::string w; words >> w;) fields.push_back(w);
  return fields;
}

std::vector<SuiteProblem> parse_suite(std::istream& in, const std::string& name) {
  std::vector<SuiteProblem> problems;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    const std::vector<std::string> fields = line_fields(text);
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
  std::string in(dtype_name(p.in_dtype));
  if (p.in_b && *p.in_b != p.in_dtype) (in += ",") += dtype_name(*p.in_b);
  if (p.in_dtype == p.out_dtype && !p.in_b) return in;
  return in + ":" + std::string(dtype_name(p.out_dtype));
}


std::string type_spec(const SuiteProblem& p) {
  if (!p.fp8()) return dtype_spec(p);
  return dtype_spec(p) + " " + std::string(scale_mode_name(p.mode));
}

}  // namespace gemmkit::tools
