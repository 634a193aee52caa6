// The gemmkit CLI's subcommands. Each returns the process exit code.
#pragma once

#include <string>

#include "reference/device_problem.h"
#include "runtime/device.h"
#include "suite.h"

namespace gemmkit::tools {

int run_info();

// The device problem a suite line describes.
reference::ProblemSpec to_spec(const SuiteProblem& p);

// The configuration gemmkit::gemm picks for a problem on the current device.
std::string chosen_config(const reference::DeviceProblem& problem);

// Verifies each problem against the GPU reference; non-zero exit on any failure.
int run_verify(const std::vector<SuiteProblem>& problems, float beta);

struct BenchOptions {
  std::string suite;
  std::string json;  // empty: no JSON file
  int warmup = 5;
  int runs = 30;
  std::string tile;  // e.g. "128x176": force this tile on every problem (empty: the heuristic's)
  int cluster = 0;   // force this cluster size, 1 or 2 (0: the heuristic's)
  int store_buffers = 0;  // force this many epilogue staging buffers (0: the heuristic's)
  bool overhead = false;   // time host microseconds per call on one small problem instead of the suite
  std::string overhead_shape = "64,64,64";  // M,N,K of that problem, as parse_overhead_shape takes
};
int run_bench(const BenchOptions& options);

// bench --overhead: host microseconds per call of gemmkit::gemm and of cuBLASLt on `problem`, on
// the current device (`info`, already checked to be sm_90). Writes the result as JSON to `json`
// unless it is empty.
int run_overhead(const SuiteProblem& problem, const std::string& json, const runtime::DeviceInfo& info);

}  // namespace gemmkit::tools
