// Benchmark suites: plain-text lists of GEMM problems, one `M N K [layout] [dtype] [batch]` a line.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "gemmkit/tensor.h"

namespace gemmkit::tools {

struct SuiteProblem {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  std::string layout = "NT";  // NN, NT, TN or TT; row-major convention, first letter A, second B
  DType in_dtype = DType::bf16, out_dtype = DType::bf16;
  int line = 0;  // 1-based line in the file; 0 for a problem given on the command line
};

// Parses one problem from its fields: M, N, K, then optionally layout, dtype and batch, in that
// order. `where` prefixes every error message, e.g. "dense.txt:12" or "command line".
// Throws gemmkit::Error(invalid_argument) on anything malformed.
SuiteProblem parse_problem(const std::vector<std::string>& fields, const std::string& where);

// Parses a whole suite; `name` is used in error messages ("<name>:<line>: ...").
std::vector<SuiteProblem> parse_suite(std::istream& in, const std::string& name);

// Reads and parses the suite at `path`; throws gemmkit::Error(io_error) if it cannot be read.
std::vector<SuiteProblem> load_suite(const std::string& path);

// "bf16" when input and output types match, else "IN:OUT", e.g. "bf16:f32". Parses back as given.
std::string dtype_spec(const SuiteProblem& p);

}  // namespace gemmkit::tools
