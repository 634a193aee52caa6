// The gemmkit CLI's subcommands. Each returns the process exit code.
#pragma once

#include <string>

#include "reference/device_problem.h"
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
};
int run_bench(const BenchOptions& options);

}  // namespace gemmkit::tools
