// Benchmark suites: plain-text lists of GEMM problems, one `M N K [layout] [dtype] [mode] [batch]`
// a line.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <vector>

#include "gemmkit/gemm.h"
#include "gemmkit/tensor.h"

namespace gemmkit::tools {

struct SuiteProblem {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  std::string layout = "NT";  // NN, NT, TN or TT; row-major convention, first letter A, second B
  DType in_dtype = DType::bf16, out_dtype = DType::bf16;
  std::optional<DType> in_b;  // B's type where it differs from A's (e4m3 x e5m2); FP8 only
  // How both FP8 operands are scaled (gemmkit/gemm.h): tensor unless the line names another
  // mode; none for 16-bit inputs.
  ScaleMode mode = ScaleMode::none;
  int line = 0;  // 1-based line in the file; 0 for a problem given on the command line

  DType b_dtype() const { return in_b.value_or(in_dtype); }
  bool fp8() const;  // A is e4m3 or e5m2 (and then so is B)
};

// Parses one problem from its fields: M, N, K, then optionally layout, dtype, scaling mode and
// batch, in that order. The dtype is IN or IN:OUT: IN is bf16, f16, e4m3, e5m2 or A,B (two 8-bit
// types, e.g. e4m3,e5m2); OUT is bf16, f16 or f32 and defaults to IN for 16-bit inputs and to bf16
// for 8-bit ones. fp16/float16, bfloat16 and fp32/float32 are accepted, in any case. The mode
// (tensor, rowwise, block or mx) may follow an 8-bit dtype only and defaults to tensor; a sixth
// field that is a number is the batch. `where` prefixes every error message, e.g. "dense.txt:12"
// or "command line". Throws gemmkit::Error(invalid_argument) on anything malformed, and on a
// problem too large for 64-bit addressing (check_addressable in core/problem.h).
SuiteProblem parse_problem(const std::vector<std::string>& fields, const std::string& where);

// Parses a whole field as a base-10 integer no smaller than `min`; `what` names it and `where`
// prefixes the error message. Throws gemmkit::Error(invalid_argument) otherwise.
int64_t parse_int(const std::string& field, const char* what, int64_t min, const std::string& where);

// The whitespace-separated fields of one suite line, a `#` comment dropped; none for a blank line.
std::vector<std::string> line_fields(std::string text);

// Parses a whole suite; `name` is used in error messages ("<name>:<line>: ...").
std::vector<SuiteProblem> parse_suite(std::istream& in, const std::string& name);

// Reads and parses the suite at `path`; throws gemmkit::Error(io_error) if it cannot be read.
std::vector<SuiteProblem> load_suite(const std::string& path);

// The dtype field, canonical: "bf16" when 16-bit input and output types match, else "IN:OUT",
// e.g. "bf16:f32"; FP8 always as "IN:OUT", e.g. "e4m3:bf16" or "e4m3,e5m2:f32". Parses back as
// given.
std::string dtype_spec(const SuiteProblem& p);

// The dtype and, for FP8, the mode, as a suite line has them: "bf16", "e4m3:bf16 block".
std::string type_spec(const SuiteProblem& p);

}  // namespace gemmkit::tools
