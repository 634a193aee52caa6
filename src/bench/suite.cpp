#include "bench/suite.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <numeric>
#include <optional>
#include <sstream>
#include <string_view>

#include "core/problem.h"
#include "gemmkit/error.h"
#include "gemmkit/grouped.h"

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

// The format of 4-bit weights, what follows "w4:" in the dtype field `field` (as written):
// int4gG (u4 in groups of G along K), int4gGz (with zero points) or mxfp4 (e2m1, mx), against a
// 16-bit or an e4m3 A alike.
void parse_w4_format(const std::string& format, const std::string& field, SuiteProblem& p, const std::string& where) {
  const std::string spec = lower(format);
  const std::string named = "4-bit weight format " + quoted(format) + " in dtype " + quoted(field);
  if (spec == "mxfp4") {
    p.in_b = DType::e2m1;
    p.mode = ScaleMode::mx;
    p.group = 32;
    return;
  }
  if (spec.rfind("mxfp4", 0) == 0)
    fail(where, named + "; expected mxfp4 alone (one ue8m0 scale per 32 of K: no group size, no zero points)");
  if (spec.rfind("int4g", 0) != 0)
    fail(where, "unknown " + named + "; expected int4gG, int4gGz (with zero points) or mxfp4, G 32 or a power of two >= 64");
  std::string digits = spec.substr(5);
  const bool zeros = !digits.empty() && digits.back() == 'z';
  if (zeros) digits.pop_back();
  const std::string group_text = format.substr(5, digits.size());
  const bool number = !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!number)
    fail(where, "group size " + quoted(group_text) + " in dtype " + quoted(field) +
                    " is not a number; expected int4gG or int4gGz, G 32 or a power of two >= 64");
  int64_t group = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), group);
  const bool power_of_two = ec == std::errc() && group >= 64 && (group & (group - 1)) == 0;
  if (!power_of_two && !(ec == std::errc() && group == 32))
    fail(where, "group size " + quoted(group_text) + " in dtype " + quoted(field) + "; expected 32 or a power of two >= 64");
  p.in_b = DType::u4;
  p.mode = ScaleMode::group;
  p.group = group;
  p.zeros = zeros;
}

// Whether p's 4-bit weights are scaled per 32 of K, as A's mx exponents need: mxfp4, or int4g32
// where K > 32 (else one group covers K, as gemm() takes it).
bool groups_of_32(const SuiteProblem& p) { return p.group == 32 && (p.b_dtype() == DType::e2m1 || p.k > 32); }

// A dtype field naming 4-bit weights: A,w4:FORMAT or A,w4:FORMAT:OUT, `w4` where ",w4:" starts.
// FORMAT holds no colon, so OUT is what follows the first colon after "w4:". An e4m3 A (W4A8)
// is scaled per token unless the line's mode field says otherwise; an e2m1 A (MXFP4
// activations: FP4 x FP4) by mx exponents, against weights in groups of 32 only.
void parse_w4_dtype(const std::string& field, size_t w4, SuiteProblem& p, const std::string& where) {
  const std::string spec = lower(field);
  const auto a = spec.substr(0, w4) == "e2m1" ? std::optional<DType>(DType::e2m1) : dtype_of(spec.substr(0, w4));
  if (!a || (*a != DType::bf16 && *a != DType::f16 && *a != DType::e4m3 && *a != DType::e2m1))
    fail(where, "activation type " + quoted(field.substr(0, w4)) + " in dtype " + quoted(field) +
                    " with 4-bit weights; expected bf16, f16, e4m3 or e2m1 (e.g. bf16,w4:int4g128, e2m1,w4:mxfp4)");
  p.in_dtype = *a;
  const size_t format_at = w4 + std::string_view(",w4:").size();
  const size_t colon = spec.find(':', format_at);
  const std::string format =
      field.substr(format_at, colon == std::string::npos ? std::string::npos : colon - format_at);
  parse_w4_format(format, field, p, where);
  if (*a == DType::e2m1 && p.group != 32)
    fail(where, "4-bit weight format " + quoted(format) + " with e2m1 activations in dtype " + quoted(field) +
                    "; expected mxfp4, int4g32 or int4g32z (MXFP4 activations' exponents cover 32 of K, as the "
                    "weights' scales must)");
  const bool scaled_a = *a == DType::e4m3 || *a == DType::e2m1;
  p.out_dtype = scaled_a ? DType::bf16 : *a;
  p.mode_a = *a == DType::e4m3 ? ScaleMode::rowwise : *a == DType::e2m1 ? ScaleMode::mx : ScaleMode::none;
  if (colon != std::string::npos) {
    const auto out = dtype_of(spec.substr(colon + 1));
    if (!out || (*out != DType::bf16 && *out != DType::f16 && *out != DType::f32))
      fail(where, "output type " + quoted(field.substr(colon + 1)) + " in dtype " + quoted(field) +
                      "; expected bf16, f16 or f32 after 4-bit weights (A,w4:FORMAT:OUT)");
    p.out_dtype = *out;
  }
}

// The dtype field: IN or IN:OUT, IN one 16-bit or 8-bit type, two 8-bit types A,B or a 16-bit A
// and 4-bit weights, A,w4:FORMAT.
void parse_dtype(const std::string& field, SuiteProblem& p, const std::string& where) {
  const std::string spec = lower(field);
  if (spec.rfind("w4:", 0) == 0)
    fail(where, "dtype " + quoted(field) + " names no activation type; expected A,w4:FORMAT with A bf16, f16, "
                "e4m3 or e2m1 (e.g. bf16,w4:int4g128)");
  if (const size_t w4 = spec.find(",w4:"); w4 != std::string::npos) return parse_w4_dtype(field, w4, p, where);
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
      ok = out && *out != DType::e5m2 && *out != DType::ue8m0;  // 16- or 32-bit, or e4m3 in 1x128 blocks
    }
  }
  if (!ok)
    fail(where, "unknown dtype " + quoted(field) +
                    "; expected IN or IN:OUT with IN bf16, f16, e4m3, e5m2, two 8-bit types A,B "
                    "(e.g. e4m3,e5m2) or A,w4:FORMAT (4-bit weights, e.g. bf16,w4:int4g128) and OUT bf16, "
                    "f16, f32 or e4m3 (quantised in 1x128 blocks)");
  p.in_dtype = *in_a;
  p.in_b = *in_b == *in_a ? std::nullopt : in_b;
  p.out_dtype = *out;
  if (is_fp8(p.in_dtype)) p.mode = ScaleMode::tensor;
}

// check_addressable (core/problem.h) for an M x N x K problem of p's types over `batch`
// matrices, its message prefixed by `where`.
void check_sizes(const SuiteProblem& p, int64_t m, int64_t n, int64_t k, int64_t batch, const std::string& where) {
  try {
    check_addressable(m, n, k, batch,
                      std::max({dtype_size(p.in_dtype), dtype_size(p.b_dtype()), dtype_size(p.out_dtype)}));
  } catch (const Error& e) {
    fail(where, e.what());
  }
}

// The shortest text that reads back as v: "10", "1.2".
std::string num_text(double v) {
  char text[32];
  const std::to_chars_result written = std::to_chars(text, text + sizeof text, v);
  return std::string(text, written.ptr);
}

// A whole field as a finite number no smaller than `min` (and above it unless `min_allowed`).
double parse_number(const std::string& field, const char* what, double min, bool min_allowed, const std::string& where) {
  double v = 0;
  const char* end = field.data() + field.size();
  auto [ptr, ec] = std::from_chars(field.data(), end, v);
  const std::string expected = std::string("expected a number ") + (min_allowed ? ">= " : "> ") + num_text(min);
  if (ec != std::errc() || ptr != end || !std::isfinite(v))
    fail(where, std::string(what) + " " + quoted(field) + " is not a number; " + expected);
  if (v < min || (v == min && !min_allowed)) fail(where, std::string(what) + " " + quoted(field) + " is too small; " + expected);
  return v;
}

const GroupedOp kOps[] = {GroupedOp::fwd, GroupedOp::dgrad, GroupedOp::wgrad, GroupedOp::masked};

std::string join(const std::vector<std::string>& fields) {
  std::string s;
  for (const auto& f : fields) s += (s.empty() ? "" : " ") + f;
  return s;
}

// The field after dtype field `dtype` (already parsed into p, with p.k) read as its scaling mode,
// as dense lines (`grouped` false) and grouped lines have it: FP8 inputs' mode, both operands'
// (p.mode: tensor, rowwise, block, or on a dense line mx), or a W4A8 line's A's (p.mode_a:
// tensor, rowwise, block, or where the weights are in groups of 32 of K (mxfp4, int4g32) mx, on
// dense and grouped lines alike; the weight format sets B's). Returns true where the field is p's mode; false, p untouched,
// where it names no mode and may be a batch (`batch`: a dense line's number there; a dense line's
// 16-bit inputs take no mode, so any field but a mode's name). Fails on a mode p cannot take and,
// where no batch may stand there, on anything else.
bool read_mode(const std::string& field, const std::string& dtype, SuiteProblem& p, bool grouped, bool batch,
               const std::string& where) {
  const auto mode = mode_of(field);
  const bool named = mode || lower(field) == scale_mode_name(ScaleMode::group);
  const std::string or_batch = batch ? " (or a batch)" : "";
  if (p.fp4x4()) {  // MXFP4 activations: mx, the only mode, may be named (dense and grouped lines)
    if (mode == ScaleMode::mx) return true;
    if (!named && batch && numeric(field)) return false;
    fail(where, std::string(named ? "" : "unknown ") + "scaling mode " + quoted(field) + " for the e2m1 activations of " +
                    quoted(dtype) + "; expected mx (MXFP4 activations: one ue8m0 exponent per 32 of K)" + or_batch);
  }
  if (p.w4a8()) {
    // A's mx exponents (MXFP8 activations) promote each 32 of K beside the weights' own scales:
    // weights in groups of 32 of K only (mxfp4; int4g32 where K > 32, else one group covers K, as
    // gemm() and grouped_gemm() take it).
    if (mode && (*mode != ScaleMode::mx || groups_of_32(p))) {
      p.mode_a = *mode;
      return true;
    }
    if (!named && batch && numeric(field)) return false;
    const std::string why =  // why mx is not taken here
        mode != ScaleMode::mx ? ""
                              : " against weights in groups of " + std::to_string(p.group) +
                                    (p.group >= p.k ? ", one covering all of K = " + std::to_string(p.k) : "") +
                                    " (mx exponents go with weights in groups of 32 of K: mxfp4, int4g32)";
    fail(where, std::string(named ? "" : "unknown ") + "scaling mode " + quoted(field) +
                    " for the e4m3 activations of " + quoted(dtype) + why +
                    "; expected tensor, rowwise, block or mx (A's scales, block 1x128, mx 1x32 ue8m0 against "
                    "weights in groups of 32; the weight format sets B's)" +
                    or_batch);
  }
  if (!p.fp8()) {  // 16-bit inputs, or 16-bit activations of 4-bit weights
    if (!named && !grouped) return false;
    const std::string why = p.w4() ? "the weight format sets the mode: group for int4, mx for mxfp4"
                                   : "a mode goes with e4m3 or e5m2 inputs only";
    fail(where, "scaling mode " + quoted(field) + " with " +
                    (p.w4() ? "4-bit weights " + quoted(dtype) : std::string(dtype_name(p.in_dtype)) + " inputs") +
                    "; " + (grouped ? why : "expected a batch (" + why + ")"));
  }
  if (mode && !(grouped && *mode == ScaleMode::mx)) {
    p.mode = *mode;
    return true;
  }
  if (!mode && batch && numeric(field)) return false;
  fail(where, "unknown scaling mode " + quoted(field) +
                  (grouped ? " for a grouped line; expected tensor, rowwise or block"
                           : "; expected tensor, rowwise, block or mx" + or_batch));
}

}  // namespace

bool SuiteProblem::fp8() const { return is_fp8(in_dtype) && !w4(); }

bool SuiteProblem::w4() const { return is_4bit(b_dtype()); }

bool SuiteProblem::w4a8() const { return w4() && is_fp8(in_dtype); }

bool SuiteProblem::fp4x4() const { return w4() && in_dtype == DType::e2m1; }

double SuiteProblem::bytes() const { return gemm_bytes(m, n, k, batch, in_dtype, b_dtype(), out_dtype, group, zeros); }

double weight_bytes(int64_t n, int64_t k, DType b, int64_t group, bool zeros) {
  if (!is_4bit(b)) return double(k) * double(n) * dtype_size(b);
  // Two codes a byte; then ceil(K / block) scales a column, one byte each (ue8m0) for e2m1, two
  // (bf16 or f16, whatever A is) for u4, whose zero points are as many again. A u4 group of 0 or
  // less: one scale a column.
  const bool mx = b == DType::e2m1;
  const int64_t block = mx ? 32 : group > 0 ? group : std::max<int64_t>(k, 1);
  const double scales = double(k / block + (k % block != 0)) * double(n);
  return double(k) * double(n) / 2 + scales * (mx ? 1 : 2 * (zeros ? 2 : 1));
}

double gemm_bytes(int64_t m, int64_t n, int64_t k, int64_t batch, DType a, DType b, DType d, int64_t group, bool zeros) {
  // MXFP4 activations are packed and scaled as e2m1 weights are: M rows of K codes, exponents.
  const double a_bytes = is_4bit(a) ? weight_bytes(m, k, a) : double(m) * double(k) * dtype_size(a);
  const double per_batch = a_bytes + weight_bytes(n, k, b, group, zeros) + double(m) * double(n) * dtype_size(d);
  return per_batch * double(batch);
}

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
  // 4-bit weights are packed two codes a byte along K: B is stored N x K.
  if (p.w4() && p.layout[1] != 'T')
    fail(where, "layout " + quoted(fields[3]) + " with 4-bit weights " + quoted(fields[4]) +
                    "; expected NT or TT (B stored N x K, K-contiguous, two codes a byte along K)");
  // MXFP4 activations likewise along K (A stored M x K), each 32 of K one exponent, as the weights' scales.
  if (p.fp4x4() && p.layout[0] != 'N')
    fail(where, "layout " + quoted(fields[3]) + " with e2m1 activations " + quoted(fields[4]) +
                    "; expected NT (A stored M x K, K-contiguous, two codes a byte along K)");
  if (p.fp4x4() && !groups_of_32(p))
    fail(where, "e2m1 activations " + quoted(fields[4]) + " with K = " + std::to_string(p.k) +
                    ", which one group of int4g32 covers; expected K > 32 (or mxfp4 weights), as gemm() takes it");

  // After the dtype: [mode] [batch]. A mode only follows 8-bit inputs (W4A8: A's alone); a number
  // is the batch, where one may still follow.
  size_t next = 5;
  if (fields.size() > next && read_mode(fields[next], fields[4], p, false, fields.size() <= 6, where)) ++next;
  if (!p.fp8() && !p.w4a8() && !p.fp4x4() && fields.size() > 6)
    fail(where, std::string("expected 3 to 6 fields for ") + (p.w4() ? "4-bit weights" : "16-bit inputs") +
                    " (M N K [layout] [dtype] [batch]), got " + std::to_string(fields.size()) + ": " +
                    quoted(join(fields)));
  if (fields.size() > next) p.batch = parse_int(fields[next], "batch", 1, where);
  check_sizes(p, p.m, p.n, p.k, p.batch, where);
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

std::string_view grouped_op_name(GroupedOp op) {
  switch (op) {
    case GroupedOp::fwd: return "fwd";
    case GroupedOp::dgrad: return "dgrad";
    case GroupedOp::wgrad: return "wgrad";
    case GroupedOp::masked: return "masked";
  }
  return "?";
}

double GroupedProblem::bytes() const {
  const double total = double(std::accumulate(rows.begin(), rows.end(), int64_t(0)));
  const double busy = double(std::count_if(rows.begin(), rows.end(), [](int64_t r) { return r > 0; }));
  const double a = dtype_size(dense.in_dtype), b = dtype_size(dense.b_dtype()), d = dtype_size(dense.out_dtype);
  // wgrad reads dD [M, N] and X [M, K] and writes a [N, K] gradient per group.
  if (op == GroupedOp::wgrad) return total * (double(n) * a + double(k) * b) + busy * double(n) * double(k) * d;
  // Each busy group's weights: 4-bit ones packed, with their scales and zero points; MXFP4
  // activations packed with their exponents, as gemm_bytes counts them.
  const double weights = weight_bytes(dense.n, dense.k, dense.b_dtype(), dense.group, dense.zeros);
  const double x = is_4bit(dense.in_dtype) ? weight_bytes(int64_t(total), dense.k, dense.in_dtype)
                                           : total * double(dense.k) * a;
  return x + busy * weights + total * double(dense.n) * d;
}

GroupDist parse_dist(const std::string& field, const std::string& where) {
  const std::string spec = lower(field);
  if (spec == "balanced") return {};
  // The kinds that take a value: NAME:VALUE.
  const size_t colon = spec.find(':');
  const std::string name = colon == std::string::npos ? "" : spec.substr(0, colon);
  const std::string value = colon == std::string::npos ? "" : field.substr(colon + 1);
  using Kind = GroupDist::Kind;
  if (name == "skew") return {Kind::skew, parse_number(value, "skew ratio", 0, false, where), 0};
  if (name == "zipf") return {Kind::zipf, parse_number(value, "zipf exponent", 0, true, where), 0};
  if (name == "random") return {Kind::random, 0, uint64_t(parse_int(value, "random seed", 0, where))};
  if (name == "routed") return {Kind::routed, 0, uint64_t(parse_int(value, "routed seed", 0, where))};
  fail(where, "unknown distribution " + quoted(field) +
                  "; expected balanced, skew:R, zipf:S, random:SEED or routed:SEED");
}

std::string dist_spec(const GroupDist& dist) {
  switch (dist.kind) {
    case GroupDist::Kind::balanced: return "balanced";
    case GroupDist::Kind::skew: return "skew:" + num_text(dist.value);
    case GroupDist::Kind::zipf: return "zipf:" + num_text(dist.value);
    case GroupDist::Kind::random: return "random:" + std::to_string(dist.seed);
    case GroupDist::Kind::routed: return "routed:" + std::to_string(dist.seed);
  }
  return "?";
}

GroupedProblem parse_grouped(const std::vector<std::string>& fields, const std::string& where) {
  if (fields.size() < 8 || fields.size() > 9)
    fail(where, "expected 8 or 9 fields for a grouped line (grouped OP G M N K dtype [mode] dist), got " +
                    std::to_string(fields.size()) + ": " + quoted(join(fields)));
  GroupedProblem p;
  const std::string op = lower(fields[1]);
  const auto named = std::find_if(std::begin(kOps), std::end(kOps), [&](GroupedOp o) { return op == grouped_op_name(o); });
  if (named == std::end(kOps)) fail(where, "unknown grouped op " + quoted(fields[1]) + "; expected fwd, dgrad, wgrad or masked");
  p.op = *named;
  const int64_t groups = parse_int(fields[2], "G", 1, where);
  if (groups > kMaxGroups)
    fail(where, "G " + quoted(fields[2]) + " is too large; expected at most " + std::to_string(kMaxGroups) +
                    " groups (grouped_gemm's limit)");
  p.m = parse_int(fields[3], p.op == GroupedOp::masked ? "max_m" : "M", 0, where);
  p.n = parse_int(fields[4], "N", 0, where);
  p.k = parse_int(fields[5], "K", 0, where);
  parse_dtype(fields[6], p.dense, where);
  // 4-bit weights are packed along K, the contraction of the forward's weights [G, N, K] only.
  if (p.dense.w4() && p.op != GroupedOp::fwd && p.op != GroupedOp::masked)
    fail(where, "4-bit weights " + quoted(fields[6]) + " on a grouped " + quoted(fields[1]) +
                    " line; expected fwd or masked (the weights [G, N, K], two codes a byte along K, are the "
                    "forward's B only)");
  p.dense.k = p.k;  // the weights' K, which a W4A8 line's mx needs in groups of 32 (the shape is set below)
  // MXFP4 activations (FP4 x FP4), as on dense lines: against weights in groups of 32 of K only.
  if (p.dense.fp4x4() && !groups_of_32(p.dense))
    fail(where, "e2m1 activations " + quoted(fields[6]) + " with K = " + std::to_string(p.k) +
                    ", which one group of int4g32 covers; expected K > 32 (or mxfp4 weights), as grouped_gemm takes "
                    "it");
  if (fields.size() == 9) read_mode(fields[7], fields[6], p.dense, true, false, where);
  p.dist = parse_dist(fields.back(), where);
  // Checked as if every group had all M rows: masked A and D are that, contiguous ones less.
  check_sizes(p.dense, p.m, p.n, p.k, groups, where);
  p.rows = p.op == GroupedOp::masked ? masked_rows(groups, p.m, p.dist) : split_rows(groups, p.m, p.dist);
  const int64_t total = std::accumulate(p.rows.begin(), p.rows.end(), int64_t(0));
  const auto dense_shape = [&](int64_t m, int64_t n, int64_t k, const char* layout) {
    p.dense.m = m;
    p.dense.n = n;
    p.dense.k = k;
    p.dense.layout = layout;
  };
  switch (p.op) {
    case GroupedOp::fwd:
    case GroupedOp::masked: dense_shape(total, p.n, p.k, "NT"); break;
    // FP8 weights for the input gradient are a second copy, quantized K-major for it, as FP8
    // training keeps them (wgmma reads 8-bit operands K-major only; weights as they lie are staged).
    case GroupedOp::dgrad: dense_shape(total, p.k, p.n, p.dense.fp8() ? "NT" : "NN"); break;
    case GroupedOp::wgrad: dense_shape(p.n, p.k, total, "TN"); break;
  }
  return p;
}

std::string epilogue_directive(const std::string& text, const std::string& where) {
  std::string rest = text.substr(0, text.find('#'));
  rest = rest.substr(rest.find_first_not_of(" \t") + std::string_view("epilogue").size());
  const size_t first = rest.find_first_not_of(" \t\r"), last = rest.find_last_not_of(" \t\r");
  rest = first == std::string::npos ? "" : rest.substr(first, last - first + 1);
  if (rest.empty()) fail(where, "an epilogue line without a text; expected `epilogue TEXT` or `epilogue none`");
  if (lower(rest) == "none") return "";
  try {
    epilogue_tensor_uses(rest);  // parses it: a malformed text is reported at its line
  } catch (const Error& e) {
    fail(where, e.what());
  }
  return rest;
}

Suite parse_bench_suite(std::istream& in, const std::string& name) {
  Suite suite{name, {}, {}};
  std::string text, epilogue;
  for (int line = 1; std::getline(in, text); ++line) {
    const std::vector<std::string> fields = line_fields(text);
    if (fields.empty()) continue;
    const std::string where = name + ":" + std::to_string(line);
    if (lower(fields[0]) == "epilogue") {
      epilogue = epilogue_directive(text, where);
    } else if (lower(fields[0]) == "grouped") {
      suite.grouped.push_back(parse_grouped(fields, where));
      suite.grouped.back().dense.line = line;
      suite.grouped.back().dense.epilogue = epilogue;
    } else {
      suite.dense.push_back(parse_problem(fields, where));
      suite.dense.back().line = line;
      suite.dense.back().epilogue = epilogue;
    }
  }
  if (in.bad()) throw Error(ErrorCode::io_error, "cannot read suite file '" + name + "'");
  return suite;
}

std::vector<SuiteProblem> dense_lines(const Suite& suite) {
  if (!suite.grouped.empty())
    fail(suite.name + ":" + std::to_string(suite.grouped[0].dense.line),
         "a grouped line, which only gemmkit bench and python -m gemmkit.bench run; expected M N K [layout] [dtype] "
         "[mode] [batch]");
  for (const SuiteProblem& p : suite.dense) {
    if (!p.epilogue.empty()) {
      fail(suite.name + ":" + std::to_string(p.line),
           "a line under `epilogue " + p.epilogue + "`, which only gemmkit bench times; expected no epilogue lines");
    }
  }
  return suite.dense;
}

std::vector<SuiteProblem> parse_suite(std::istream& in, const std::string& name) {
  return dense_lines(parse_bench_suite(in, name));
}

Suite load_bench_suite(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::io_error, "cannot open suite file '" + path + "'");
  return parse_bench_suite(in, path);
}

std::vector<SuiteProblem> load_suite(const std::string& path) { return dense_lines(load_bench_suite(path)); }

std::string dtype_spec(const SuiteProblem& p) {
  std::string in(dtype_name(p.in_dtype));
  if (p.w4()) {
    in += p.b_dtype() == DType::e2m1 ? ",w4:mxfp4" : ",w4:int4g" + std::to_string(p.group) + (p.zeros ? "z" : "");
    const DType default_out = is_fp8(p.in_dtype) || p.fp4x4() ? DType::bf16 : p.in_dtype;
    return p.out_dtype == default_out ? in : in + ":" + std::string(dtype_name(p.out_dtype));
  }
  if (p.in_b && *p.in_b != p.in_dtype) (in += ",") += dtype_name(*p.in_b);
  if (p.in_dtype == p.out_dtype && !p.in_b) return in;
  return in + ":" + std::string(dtype_name(p.out_dtype));
}


std::string type_spec(const SuiteProblem& p) {
  if (p.w4a8() || p.fp4x4()) return dtype_spec(p) + " " + std::string(scale_mode_name(p.mode_a));
  if (!p.fp8()) return dtype_spec(p);
  return dtype_spec(p) + " " + std::string(scale_mode_name(p.mode));
}

SuiteProblem dense16_problem(const SuiteProblem& sp) {
  SuiteProblem p = sp;
  if (is_fp8(p.in_dtype) || p.fp4x4()) p.in_dtype = DType::bf16;
  p.in_b.reset();
  p.mode = p.mode_a = ScaleMode::none;
  p.group = 0;
  p.zeros = false;
  p.epilogue.clear();
  return p;
}

SuiteProblem fp8_problem(const SuiteProblem& sp) {
  SuiteProblem p = dense16_problem(sp);
  p.in_dtype = DType::e4m3;
  p.mode = sp.w4a8() || sp.fp4x4() ? sp.mode_a : ScaleMode::tensor;
  return p;
}

}  // namespace gemmkit::tools
