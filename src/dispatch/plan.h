// From a validated problem to a launch: normalise, pick a config, get its kernel, run it.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "dispatch/cost_model.h"
#include "dispatch/operand_access.h"
#include "runtime/kernel_cache.h"

namespace gemmkit {

// The kernels write D row by row. A D whose columns are contiguous instead is computed as
// D^T = B^T A^T, which is the same memory with A and B swapped and every operand transposed.
// So is N = 1 with A's K contiguous: transposed, it is one row against A stored M x K, which the
// GEMV kernel takes. So is decode, 1 to kNarrowMaxN rows of A against at least 128 columns of B,
// 16-bit and both K-major: transposed, B's columns (the weights) fill wgmma's 64 rows and A's
// rows (the tokens) a narrow tile's N (core/kernel_config.h), where untransposed they would fill 2 to 32 of
// 64 rows (H100: 8x1280x8192 17.6 against 14.7 us, 8x4096x4096 20.4 against 18.1). One row
// stays on the GEMV where B is aligned and wider than 16384, or unaligned and not read as row
// classes; 33 to kRowClassesMaxN rows are transposed where B is read as row classes (plan.cpp).
Problem normalize(const Problem& p);

struct Plan {
  KernelConfig config;
  bool tuned = false;  // the config is a tuning winner (see gemmkit/tuning.h)
  bool transposed = false;  // the config runs the problem transposed (oriented)
  const runtime::LoadedKernel* kernel = nullptr;  // null where an e4m3 D runs through f32 values (plan.cpp)
  int sm_count = 0;
  // Many tokens against 4-bit weights: run_plan widens the weights into a copy first, and runs
  // the plan of the GEMM on it (config, kernel and orientation above; plan.cpp).
  bool widens_weights_first = false;
};

// A normalised problem as its plan runs it: transposed where transposing_pays (cost_model.h) on its
// device, else as it is.
Problem oriented(const Problem& normalized);

// The plan for a normalised problem on its device (the current device), compiling and loading
// the kernel on first use. The config is for the problem oriented (unless `forced`, which runs
// on the problem as it is): the tuning winner for the problem's class or the cost
// model's pick, as the tuning mode says (tuned_configs.h); online tuning happens here, unless
// `stream`, the caller's, is being captured. Plans are cached by everything the choice depends
// on, so a repeated problem costs one hash lookup. `forced` replaces the choice (benchmarks,
// tuning and tests).
Plan make_plan(const Problem& normalized, const KernelConfig* forced = nullptr, cudaStream_t stream = nullptr);

// Runs `normalized` (transposed where the plan says so).
void run_plan(const Plan& plan, const Problem& normalized, cudaStream_t stream);

// The autotuner's runner (tuning::CandidateRunner): `config`'s plan for sets[0], forced, and
// what runs it on set i. Online tuning here, and the CLI's tune and hint matrix, pass it to
// tuning::tune.
std::function<void(int)> prepare_candidate(const KernelConfig& config, const std::vector<Problem>& sets,
                                           cudaStream_t stream);

}  // namespace gemmkit
