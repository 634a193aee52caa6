// gemmkit bench --overhead: host time per call of gemmkit::gemm and of cuBLASLt on one small
// problem, and of a bare launch of an empty kernel like ours, the floor under our time. Calls go
// back to back with no synchronisation, queued behind a spin kernel that outlasts them, so the
// time is what the calling thread spends per call (checks, plan lookup, launch), not the GPU's:
// onto an idle stream the GPU would run the calls as they came, and where it ran them slower than
// the host issued them, the host would wait for room in the stream's queue. The host's own
// spread remains (H100: a bare launch's median 2.6-3.5 us from run to run).
#include <chrono>
#include <cstdio>
#include <random>

#include "api/validate.h"
#include "baseline/cublaslt.h"
#include "commands.h"
#include "gemmkit/error.h"
#include "bench/report.h"
#include "runtime/driver.h"
#include "runtime/utility_kernels.h"

namespace gemmkit::tools {
namespace {

constexpr int kWarmupCalls = 100;  // the first calls compile our kernel and plan cuBLASLt's
constexpr int kCalls = 500;        // per repeat and side: few enough to queue behind the spin
constexpr int kRepeats = 10;
constexpr int64_t kSpinMicroseconds = 20000;  // several times kCalls' host time

// Host microseconds per call over kCalls back-to-back calls, queued behind a spin of
// `spin_cycles`. The stream is drained before, so that the spin starts at once, and after, so
// the next measurement starts from the same state.
template <class Call>
double host_us_per_call(const Call& call, int64_t spin_cycles, cudaStream_t stream) {
  runtime::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  runtime::gpu_spin(spin_cycles, stream);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) call();
  const auto stop = std::chrono::steady_clock::now();
  runtime::check(cudaStreamSynchronize(stream), "overhead calls");
  return std::chrono::duration<double, std::micro>(stop - start).count() / kCalls;
}

}  // namespace

int run_overhead(const SuiteProblem& sp, const std::string& json, const runtime::DeviceInfo& info) {
  std::printf("device %d: %s; host microseconds per call, %d back-to-back calls x %d repeats per side\n",
              info.ordinal, info.name.c_str(), kCalls, kRepeats);
  cudaStream_t stream = nullptr;
  runtime::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::random_device seeds;
  const reference::DeviceProblem problem(to_spec(sp), (uint64_t(seeds()) << 32) | seeds());
  // Views and options built once, as a caller would hold them, so only gemm() itself is timed.
  const TensorView a = problem.a(), b = problem.b(), d = problem.d();
  const GemmOptions options = problem.options(stream);
  Problem p = validate_gemm(a, b, d, options);
  p.device = info.ordinal;

  OverheadResult result;
  result.shape = std::to_string(sp.m) + "x" + std::to_string(sp.n) + "x" + std::to_string(sp.k) + " " + sp.layout + " " +
                 dtype_spec(sp);
  result.calls = kCalls;
  baseline::CublasLt cublaslt(info.ordinal);
  auto ours = [&] { gemm(a, b, d, options); };
  auto theirs = [&] { cublaslt.run(p, stream); };
  // Our TMA kernel's launch: a persistent grid of one CTA per SM, 384 threads (a producer and two
  // consumer warpgroups, 128-row tiles).
  const runtime::LoadedKernel& empty = runtime::empty_kernel();
  auto bare = [&] { runtime::launch_empty(empty, unsigned(info.sm_count), 384, stream); };
  bool with_baseline = cublaslt.supports(p);
  if (with_baseline) {
    try {
      theirs();  // plans it; throws if cuBLASLt has no algorithm
    } catch (const Error& e) {
      std::fprintf(stderr, "cuBLASLt cannot run %s: %s\n", result.shape.c_str(), e.what());
      with_baseline = false;
    }
  }
  for (int i = 0; i < kWarmupCalls; ++i) {
    ours();
    if (with_baseline) theirs();
    bare();
  }
  // Sides alternate repeat by repeat, so both see the same clocks.
  const int64_t spin_cycles = int64_t(info.sm_clock_khz) / 1000 * kSpinMicroseconds;
  for (int r = 0; r < kRepeats; ++r) {
    result.ours_us.push_back(host_us_per_call(ours, spin_cycles, stream));
    if (with_baseline) result.baseline_us.push_back(host_us_per_call(theirs, spin_cycles, stream));
    result.bare_us.push_back(host_us_per_call(bare, spin_cycles, stream));
  }
  cudaStreamDestroy(stream);

  std::printf("%s", format_overhead_table(result).c_str());
  if (!json.empty()) write_json(json, overhead_json(result), "bench");
  std::printf("%s\n", format_overhead_summary(result).c_str());
  return 0;
}

}  // namespace gemmkit::tools
