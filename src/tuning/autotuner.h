// The autotuner: times candidate configs for a problem on the live GPU and ranks them.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "dispatch/cost_model.h"
#include "dispatch/operand_access.h"

namespace gemmkit::tuning {

// The configs worth timing for a normalised problem: the cost model's eight best, the best of
// each tile shape it weighed, and, where tiles outnumber the SMs, the pick with a narrower and
// a wider raster group. The model's pick comes first. Empty where the fallback kernel runs.
std::vector<KernelConfig> tuning_candidates(const Problem& p, const DeviceLimits& limits);

// Compiles the configs' kernels into the disk cache, several at once (NVRTC is thread-safe), so
// that loading them one by one afterwards is quick. Needs no GPU.
void precompile(const std::vector<KernelConfig>& configs);

struct Timed {
  KernelConfig config;
  double us;  // median microseconds
};

struct TuneResult {
  std::vector<Timed> timed;  // every candidate, fastest first
  Timed first_pick;          // the cost model's pick (what runs untuned)
};

// What launches a candidate on buffer set `set` (an index into the sets it was prepared for).
using Launcher = std::function<void(int set)>;

// Prepares a candidate config for `sets` (buffer sets of one problem, normalised) on `stream`,
// compiling and loading its kernel, and returns its launcher. Dispatch supplies it
// (prepare_candidate in dispatch/plan.h), so that tuning does not call back into the planner.
using CandidateRunner =
    std::function<Launcher(const KernelConfig& config, const std::vector<Problem>& sets, cudaStream_t stream)>;

// Times tuning_candidates(p) with GpuTimer's discipline (2 warm-up and 15 timed runs each,
// alternating, over enough buffer sets to keep L2 from flattering any) on scratch buffers of
// p's shape, majorness, batching and types, on p's device, which must be current. The
// candidates are compiled in parallel first, then prepared by `runner`, in order. Throws
// Error(invalid_argument) where p needs the fallback kernel, Error(cuda_error) where the scratch
// buffers do not fit in memory.
TuneResult tune(const Problem& p, const CandidateRunner& runner);

}  // namespace gemmkit::tuning
