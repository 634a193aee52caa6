// gemmkit bench --chain: a decode step of an LLM runs its GEMMs one after another, replayed from a
// CUDA graph. For each chain: one uncaptured run of each side (ours plans, compiles and sizes its
// workspaces, cuBLASLt plans), then the chain captured into one graph with gemmkit::gemm and one
// with cuBLASLt on the same buffers; warm-up replays, then timed replays of both, alternating,
// each between two events, medians reported, and a copy of as many bytes as the yardstick.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <type_traits>

#include "api/validate.h"
#include "baseline/cublaslt.h"
#include "bench_buffers.h"
#include "commands.h"
#include "gemmkit/error.h"
#include "bench/report.h"
#include "runtime/driver.h"
#include "tuning/gpu_timer.h"

namespace gemmkit::tools {
namespace {

struct GraphExecDestroy {
  void operator()(cudaGraphExec_t exec) const { cudaGraphExecDestroy(exec); }
};
using GraphExec = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDestroy>;

// `calls` captured on `stream` into one graph, instantiated. Thread-local mode, as the library's
// own graph tests use: this thread may not allocate or synchronise meanwhile (which would break
// the capture), other threads may.
GraphExec capture(cudaStream_t stream, const std::function<void()>& calls) {
  runtime::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  calls();
  cudaGraph_t graph = nullptr;
  runtime::check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph does not need it
  runtime::check(instantiated, "cudaGraphInstantiate");
  return GraphExec(exec);
}

// One chain: every GEMM of every layer on buffers of its own, as a model's layers have weights
// of their own. No rotation of buffer sets as in the suite bench: the shipped chains move several
// times the L2 per replay, so a replay finds little of its operands left in L2 by the one before
// (the GEMMs it runs last are the furthest from those it starts with). A smaller chain gets a note.
ChainRecord time_chain(const Chain& chain, cudaStream_t stream, baseline::CublasLt& cublaslt, const tuning::GpuTimer& timer,
                       const runtime::DeviceInfo& info) {
  ChainRecord record;
  record.name = std::filesystem::path(chain.name).stem().string();
  std::random_device seeds;
  std::vector<std::unique_ptr<reference::DeviceProblem>> gemms;
  std::vector<Problem> lt_problems;
  for (int layer = 0; layer < chain.layers; ++layer) {
    for (const SuiteProblem& sp : chain.layer) {
      const reference::ProblemSpec spec = bench_spec(sp);
      const auto& g = gemms.emplace_back(std::make_unique<reference::DeviceProblem>(spec, (uint64_t(seeds()) << 32) | seeds()));
      Problem p = validate_gemm(g->a(), g->b(), g->d(), g->options(stream));
      p.device = info.ordinal;
      lt_problems.push_back(p);
      record.bytes += set_bytes(spec);
    }
  }
  record.gemms = int(gemms.size());
  if (record.bytes < 3.0 * info.l2_bytes) {
    std::fprintf(stderr, "note: %s moves %.0f MB per replay, under 3x the L2: replays may find operands left in L2\n",
                 record.name.c_str(), record.bytes / 1e6);
  }

  const auto ours = [&] {
    for (const auto& g : gemms) gemm(g->a(), g->b(), g->d(), g->options(stream));
  };
  const auto theirs = [&] {
    for (const Problem& p : lt_problems) cublaslt.run(p, stream);
  };
  ours();  // plans, loads the kernels and grows the stream's workspaces: the capture allocates nothing
  std::string why;
  bool with_baseline =
      std::all_of(lt_problems.begin(), lt_problems.end(), [&](const Problem& p) { return cublaslt.supports(p, &why); });
  if (with_baseline) {
    try {
      theirs();  // plans each shape; throws if cuBLASLt has no algorithm for one
    } catch (const Error& e) {
      why = e.what();
      with_baseline = false;
    }
  }
  if (!with_baseline) {
    std::fprintf(stderr, "cuBLASLt cannot run every GEMM of %s (%s): no baseline for it\n", record.name.c_str(), why.c_str());
  }
  runtime::check(cudaStreamSynchronize(stream), "uncaptured chain");

  const GraphExec our_graph = capture(stream, ours);
  const GraphExec their_graph = with_baseline ? capture(stream, theirs) : nullptr;
  const auto replay = [stream](const GraphExec& graph) {
    return [stream, exec = graph.get()](int) { runtime::check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch"); };
  };
  std::vector<std::function<void(int)>> launchers = {replay(our_graph)};
  if (with_baseline) launchers.push_back(replay(their_graph));
  const std::vector<double> medians = timer.median_us(1, launchers);
  record.ours_us = medians[0];
  if (with_baseline) record.baseline_us = medians[1];
  // Timed apart: a replay right after a copy would pay for writing back the copy's dirty lines.
  const CopyBuffers copies(record.bytes, 1);
  if (copies.memory) record.copy_us = timer.median_us(1, {[&](int) { copies.copy(0, stream); }})[0];
  std::fprintf(stderr, "  %s: %d GEMMs, ours %.1f us, cuBLASLt %.1f us, copy %.1f us per replay\n", record.name.c_str(),
               record.gemms, record.ours_us, record.baseline_us, record.copy_us);
  return record;
}

}  // namespace

int run_chains(const std::vector<Chain>& chains, const BenchOptions& options, const runtime::DeviceInfo& info) {
  std::printf("device %d: %s, %d SMs, L2 %d MB; each chain one CUDA graph per side, %d warm-up and %d timed replays, median\n",
              info.ordinal, info.name.c_str(), info.sm_count, info.l2_bytes >> 20, options.warmup, options.runs);
  cudaStream_t stream = nullptr;
  runtime::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  baseline::CublasLt cublaslt(info.ordinal);
  const tuning::GpuTimer timer(stream, options.warmup, options.runs, info.sm_clock_khz);
  std::vector<ChainRecord> records;
  for (const Chain& chain : chains) records.push_back(time_chain(chain, stream, cublaslt, timer, info));
  cudaStreamDestroy(stream);

  const BenchSummary summary = summarize_chains(records);
  std::printf("%s", format_chain_table(records).c_str());
  if (!options.json.empty()) write_json(options.json, chain_json(records, summary), "bench");
  std::printf("%s\n", format_chain_summary(summary).c_str());
  return 0;
}

}  // namespace gemmkit::tools
