// Shared pieces of the GPU tests: skipping without an sm_90 device, one checked GEMM run, and a
// refused call's untouched D.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "api/validate.h"
#include "dispatch/plan.h"
#include "gemmkit/tuning.h"
#include "reference/device_problem.h"
#include "runtime/device.h"
#include "runtime/kernel_cache.h"

namespace gemmkit::testing {

// Base of every GPU test: skips, with the reason, unless an sm_90 device is present.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (runtime::device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test skipped";
    const runtime::DeviceInfo& info = runtime::device_info(0);
    if (info.cc_major != 9 || info.cc_minor != 0) GTEST_SKIP() << info.name << " is not sm_90: GPU test skipped";
  }
  // No kernel the test loaded (nor one loaded before it in the process) spills or keeps a stack.
  void TearDown() override {
    for (const runtime::LocalMemoryUse& use : runtime::kernels_using_local_memory()) {
      ADD_FAILURE() << use.kernel << " uses " << use.bytes_per_thread << " bytes of local memory per thread";
    }
  }
};

// Sets the tuning mode for one test and restores the previous one afterwards.
class TuningModeGuard {
 public:
  explicit TuningModeGuard(TuningMode mode) : previous_(tuning_mode()) { set_tuning_mode(mode); }
  ~TuningModeGuard() { set_tuning_mode(previous_); }
  TuningModeGuard(const TuningModeGuard&) = delete;
  TuningModeGuard& operator=(const TuningModeGuard&) = delete;

 private:
  TuningMode previous_;
};

inline uint64_t fresh_seed() {
  static std::random_device device;
  return (uint64_t(device()) << 32) | device();
}

// Runs gemmkit::gemm (or the forced config) on fresh random inputs with D poisoned, and
// expects it to match the double-precision reference. A forced config stores D as the problem
// it runs allows (directly, or by TMA by rows or by columns); it runs on the normalised problem,
// or `transposed`, on that transposed (as a plan that transposes runs it).
inline void expect_correct(const reference::ProblemSpec& spec, const KernelConfig* forced = nullptr,
                           bool transposed = false) {
  reference::DeviceProblem problem(spec, fresh_seed());
  problem.prepare_output(nullptr);
  std::string config = "gemmkit::gemm";
  if (forced) {
    Problem p = validate_gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
    const Problem run = transposed ? transposed_problem(normalize(p)) : normalize(p);
    const KernelConfig allowed = problem_config(run);
    KernelConfig stored = *forced;
    stored.tma_store = stored.tma_store && allowed.tma_store;
    stored.d_by_columns = allowed.d_by_columns;
    run_plan(make_plan(run, &stored), run, nullptr);
    config = stored.name();
  } else {
    gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << spec.describe();
  const reference::Comparison result = problem.check(nullptr);
  EXPECT_TRUE(result.passed()) << spec.describe() << " [" << config << "]: " << result.summary();
}

// The problem's D is left as prepare_output poisoned it (a refused call wrote nothing).
inline void expect_d_untouched(const reference::DeviceProblem& problem) {
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<char> d = problem.copy_output();
  EXPECT_EQ(d, std::vector<char>(d.size(), char(0xff))) << problem.spec().describe() << ": D was written";
}

// Replays a captured graph of `problem`'s GEMM with D poisoned, expects the reference's result,
// and destroys the graph.
inline void expect_replay_correct(reference::DeviceProblem& problem, cudaGraph_t graph, cudaStream_t stream) {
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  problem.prepare_output(stream);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const reference::Comparison result = problem.check(stream);
  EXPECT_TRUE(result.passed()) << result.summary();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace gemmkit::testing
