// Chain files for bench --chain: the GEMMs of one model layer, in the suite format, and how many
// layers repeat them, as an LLM's decode step runs them one after another.
#pragma once

#include <istream>
#include <string>
#include <vector>

#include "bench/suite.h"

namespace gemmkit::tools {

struct Chain {
  std::string name;                // as given to parse_chain: the file's path
  std::vector<SuiteProblem> layer;  // one layer's GEMMs, in order
  int layers = 1;                  // times the layer repeats, each time on buffers of its own
};

// The most layers a chain may have: more than any model has, so that a typo fails here rather
// than in running out of device memory.
inline constexpr int kMaxChainLayers = 1024;

// Parses a chain: suite lines (parse_problem) and at most one directive line `layers N`, N from
// 1 to kMaxChainLayers (1 without one), anywhere in the file. Throws
// gemmkit::Error(invalid_argument), "<name>:<line>: ..." for a bad or second `layers` line or a
// bad GEMM line, "<name>: ..." for a chain with no GEMMs.
Chain parse_chain(std::istream& in, const std::string& name);

// Reads and parses the chain at `path`; throws gemmkit::Error(io_error) if it cannot be read.
Chain load_chain(const std::string& path);

// Every GEMM of the chains' layers, chain by chain: what their kernels are compiled for.
std::vector<SuiteProblem> layer_gemms(const std::vector<Chain>& chains);

}  // namespace gemmkit::tools
