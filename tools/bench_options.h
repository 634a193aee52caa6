// Values of bench's options that need more checking than CLI11 gives; kept apart so the CPU
// tests can reach them.
#pragma once

#include <string>

#include "dispatch/config.h"
#include "suite.h"

namespace gemmkit::tools {

// The tile named by --tile ("128x176"), which must be one the kernel is built for.
// Throws Error(invalid_argument) naming --tile and the shapes it could be.
TileShape parse_tile(const std::string& text);

// The problem named by --overhead-shape: "M,N,K", three positive integers; NT, bf16, batch 1.
// Throws Error(invalid_argument) naming --overhead-shape and the text given.
SuiteProblem parse_overhead_shape(const std::string& text);

}  // namespace gemmkit::tools
