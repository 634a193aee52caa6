// Values of bench's options (and tune's --json) that need more checking than the argument parser
// gives; kept apart so the CPU tests can reach them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "bench/suite.h"
#include "dispatch/cost_model.h"
#include "dispatch/operand_access.h"

namespace gemmkit::tools {

// The tile named by --tile ("128x176"), which must be one the kernel is built for.
// Throws Error(invalid_argument) naming --tile and the shapes it could be.
TileShape parse_tile(const std::string& text);

// What --tile, --cluster, --store-buffers and --splits force on our side of bench.
struct ConfigOverrides {
  std::string tile;       // e.g. "128x176" (empty: the heuristic's)
  int cluster = 0;        // CTAs per cluster, 1 or 2 (0: the heuristic's)
  int store_buffers = 0;  // epilogue staging buffers per consumer, 1-8 (0: the heuristic's)
  int splits = 0;         // split-K parts, 1-kMaxSplits (0: the heuristic's)
  bool any() const { return !tile.empty() || cluster > 0 || store_buffers > 0 || splits > 0; }
};

// `chosen`, a TMA config, with the overrides applied and the most stages that fit in
// `smem_limit`; realigned operands are staged on a forced cluster or a tile that does not realign. A split count stays only where the new tile is narrow enough for split-K (forcing
// one on a wider tile is an error). Throws Error(invalid_argument) naming the options where the
// result is not a config the kernel is built for.
KernelConfig apply_overrides(KernelConfig chosen, const ConfigOverrides& overrides, int smem_limit);

// What bench compiled without a GPU: "compiled 2 kernels for 5 configurations (1 was cached)",
// `kernels` the distinct binaries the configurations need, `compiled` those not in the cache.
std::string compile_summary(int compiled, size_t kernels, size_t configs);

// The problem named by --overhead-shape: "M,N,K", three positive integers; NT, bf16, batch 1.
// Throws Error(invalid_argument) naming --overhead-shape and the text given.
SuiteProblem parse_overhead_shape(const std::string& text);

// Checks that --json's `path` can be written, before `command` runs for minutes and then cannot
// keep its results. Leaves the file as it was: an existing one is opened for appending and not
// written, a new one is created and removed. Throws Error(io_error) naming --json, the path and why.
void check_writable(const std::string& path, const std::string& command);

// Writes `json` to `path`, replacing what it held. Throws Error(io_error) where it cannot.
void write_json(const std::string& path, const nlohmann::json& json, const std::string& command);

}  // namespace gemmkit::tools
