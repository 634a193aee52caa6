// The gemmkit CLI's subcommands. Each returns the process exit code.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench_options.h"
#include "bench/chain.h"
#include "bench/report.h"
#include "core/problem.h"
#include "dispatch/plan.h"
#include "reference/device_problem.h"
#include "runtime/device.h"
#include "bench/suite.h"
#include "tuning/gpu_timer.h"

namespace gemmkit::tools {

// Device, clocks and kernel cache; only device `only_device` where it is not -1.
int run_info(int only_device);

// "0.1.0 (commit 1f48db36807c)": gemmkit's version, and the commit where known.
std::string version_text();

// gemmkit --version: gemmkit's version and commit, the CUDA runtime, the driver, each device.
int run_version();

// The device problem a suite line describes.
reference::ProblemSpec to_spec(const SuiteProblem& p);

// The problem a suite line describes, prepared as gemm() prepares it (api/prepare.h: normalised;
// as validated where empty), on `device` at aligned stand-in addresses (nothing is allocated):
// enough to choose, compile or tune its kernel, not to run it.
Problem stand_in_problem(const SuiteProblem& p, int device);

// The configuration gemmkit::gemm picks for a problem on the current device, with " tuned"
// appended where it is a tuning winner.
std::string chosen_config(const reference::DeviceProblem& problem);

// Verifies each problem against the GPU reference; non-zero exit on any failure.
int run_verify(const std::vector<SuiteProblem>& problems, float beta);

// For each FP8 problem: random bf16 data quantised by gemmkit::quantize in the problem's mode,
// multiplied in FP8 and checked against the bf16 product within FP8's error
// (reference/quantized_gemm.h); non-zero exit on any failure. 16-bit problems are an error.
int run_quantize(const std::vector<SuiteProblem>& problems);

struct BenchOptions {
  std::string suite;
  std::string json;  // empty: no JSON file
  int warmup = 5;
  int runs = 30;
  ConfigOverrides overrides;  // forced on our side for every problem
  bool overhead = false;   // time host microseconds per call on one small problem instead of the suite
  std::string overhead_shape = "64,64,64";  // M,N,K of that problem, as parse_overhead_shape takes
  std::vector<int64_t> hint_matrix;  // N and K: run the hint matrix instead of the suite (empty: no)
  std::vector<std::string> chains;   // chain files (bench/chain.h) to time instead of the suite (empty: none)
  int max_sms = 0;                   // grouped rows' SM budget (grouped_gemm's options.max_sms; 0: every SM)
  std::string epilogue;              // dense rows: our side fused with this epilogue, also timed without it
};
int run_bench(const BenchOptions& options);

// How many buffer sets of `bytes` each a problem cycles through on the device: enough that no
// run finds the previous run's operands in L2 (3x the L2, at most 64 sets, within half the memory
// free now; bench/report.h).
int buffer_set_count(double bytes, const runtime::DeviceInfo& info);

// A fresh seed for a buffer set's random inputs.
uint64_t random_seed();

// Buffer sets of one problem, as many as buffer_set_count says, each with fresh random inputs.
std::vector<std::unique_ptr<reference::DeviceProblem>> buffer_sets(const reference::ProblemSpec& spec,
                                                                   const runtime::DeviceInfo& info);

// bench's grouped rows (suite lines `grouped ...`, bench/suite.h; grouped_bench.cpp), timed on
// `stream` with `timer` on the current device (`info`, already checked to be sm_90); progress on
// stderr.
// `overrides` force our side's config as on dense lines; `max_sms` is grouped_gemm's SM budget
// (0: every SM).
std::vector<GroupedRecord> run_grouped_rows(const std::vector<GroupedProblem>& rows, cudaStream_t stream,
                                            const tuning::GpuTimer& timer, const runtime::DeviceInfo& info,
                                            const ConfigOverrides& overrides, int max_sms);

// The plan gemm() (or grouped_gemm) makes for a problem (oriented as gemm() runs it), with what
// --tile, --cluster, --store-buffers and --splits force. Throws Error(invalid_argument) where the
// TMA kernel cannot run the problem, or, grouped, not with the forced tile.
Plan forced_plan(const Problem& normalized, const ConfigOverrides& overrides, const runtime::DeviceInfo& info);

// bench --hint-matrix N K: tunes M = 64, 256 and 4096 of an N x K NT bf16 problem, then times
// each tuned kernel pinned at each of those M, and gemm() dispatching by M's bucket.
int run_hint_matrix(int64_t n, int64_t k, const BenchOptions& options, const runtime::DeviceInfo& info);

// bench --chain: each chain's GEMMs captured into one CUDA graph with gemmkit::gemm and one with
// cuBLASLt, the replays of both timed, alternating, against a copy of as many bytes; on the
// current device (`info`, already checked to be sm_90).
int run_chains(const std::vector<Chain>& chains, const BenchOptions& options, const runtime::DeviceInfo& info);

// gemmkit tune: tunes every problem of a suite on the current device and stores the winners in
// the tuning database; writes the results as JSON to `json` unless it is empty.
int run_tune(const std::string& suite, const std::string& json);

// bench --overhead: host microseconds per call of gemmkit::gemm and of cuBLASLt on `problem`, on
// the current device (`info`, already checked to be sm_90). Writes the result as JSON to `json`
// unless it is empty.
int run_overhead(const SuiteProblem& problem, const std::string& json, const runtime::DeviceInfo& info);

}  // namespace gemmkit::tools
