// The autotuner on the GPU: it times every candidate, every candidate it may pick computes the
// right answer, and online tuning stores a winner that later calls use (but never tunes inside
// a CUDA-graph capture). Skips without an sm_90 device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "dispatch/plan.h"
#include "gpu_test.h"
#include "tuning/autotuner.h"
#include "tuning/tuned_configs.h"

namespace gemmkit {
namespace {

using reference::ProblemSpec;
using testing::expect_correct;

class Autotuner : public testing::GpuTest {
 protected:
  static Problem normalized(const reference::DeviceProblem& problem) {
    Problem p = validate_gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
    return normalize(p);
  }

  static DeviceLimits limits() {
    const runtime::DeviceInfo& info = runtime::device_info(0);
    return {info.sm_count, info.smem_per_block_optin, info.l2_bytes};
  }

  // A problem class no database holds yet: an N no one tunes for, drawn afresh each run.
  static ProblemSpec untuned_spec(int64_t m) {
    std::mt19937_64 random(testing::fresh_seed());
    for (;;) {
      const ProblemSpec spec{.m = m, .n = 8 * int64_t(1000 + random() % 50000), .k = 200, .layout = "NT"};
      reference::DeviceProblem problem(spec, 1);
      if (!tuning::tuned_config(normalized(problem), runtime::device_info(0))) return spec;
    }
  }
};

TEST_F(Autotuner, TimesEveryCandidateAndRanksThem) {
  reference::DeviceProblem problem({.m = 16, .n = 2112, .k = 7168, .layout = "NT"}, testing::fresh_seed());
  const Problem p = normalized(problem);
  const std::vector<KernelConfig> candidates = tuning::tuning_candidates(p, limits());
  const tuning::TuneResult result = tuning::tune(p, prepare_candidate);
  ASSERT_EQ(result.timed.size(), candidates.size());
  EXPECT_EQ(result.first_pick.config, choose_config(p, limits()));
  for (size_t i = 0; i < result.timed.size(); ++i) {
    EXPECT_TRUE(std::isfinite(result.timed[i].us) && result.timed[i].us > 0) << result.timed[i].config.name();
    if (i > 0) EXPECT_LE(result.timed[i - 1].us, result.timed[i].us);
    EXPECT_NE(std::find(candidates.begin(), candidates.end(), result.timed[i].config), candidates.end());
  }
  EXPECT_GE(result.first_pick.us, result.timed.front().us);
}

// Whatever wins must be right: every candidate of a split-K decode shape, of a shape with many
// tiles (raster-group variants), of one wave of 5 x 16 tiles (4-row groups, the last one short),
// and of an N-major B with C.
TEST_F(Autotuner, EveryCandidateIsCorrect) {
  const ProblemSpec specs[] = {
      {.m = 16, .n = 2112, .k = 7168, .layout = "NT"},
      {.m = 4096, .n = 2048, .k = 128, .layout = "NT"},
      {.m = 300, .n = 2047, .k = 1000, .layout = "NT"},
      {.m = 200, .n = 1000, .k = 1000, .layout = "NN", .out = DType::f32, .beta = 0.5f, .align_leading = true},
  };
  for (const ProblemSpec& spec : specs) {
    reference::DeviceProblem problem(spec, 1);
    const std::vector<KernelConfig> candidates = tuning::tuning_candidates(normalized(problem), limits());
    tuning::precompile(candidates);
    for (const KernelConfig& config : candidates) {
      expect_correct(spec, &config);
    }
  }
}

// FP8 problems tune on scratch inputs with scales of their modes (block scales change the
// stage size, mx the tiles allowed); every candidate is right, and the winner's class key
// names the modes.
TEST_F(Autotuner, Fp8ProblemsTuneWithTheirScales) {
  for (ScaleMode mode : {ScaleMode::block, ScaleMode::mx}) {
    const ProblemSpec spec{.m = 16, .n = 2112, .k = 7168, .layout = "NT", .in = DType::e4m3, .scale_a = mode,
                           .scale_b = mode};
    reference::DeviceProblem problem(spec, 1);
    const Problem p = normalized(problem);
    const tuning::TuneResult result = tuning::tune(p, prepare_candidate);
    ASSERT_FALSE(result.timed.empty());
    for (const tuning::Timed& timed : result.timed) {
      EXPECT_TRUE(std::isfinite(timed.us) && timed.us > 0) << timed.config.name();
      EXPECT_EQ(timed.config.scale_a, mode);
    }
    for (const KernelConfig& config : tuning::tuning_candidates(p, limits())) expect_correct(spec, &config);
    EXPECT_NE(tuning::problem_key(p).find("scales"), std::string::npos) << tuning::problem_key(p);
  }
}

TEST_F(Autotuner, OnlineTuningStoresAWinnerThatLaterCallsUse) {
  const ProblemSpec spec = untuned_spec(48);
  testing::TuningModeGuard online(TuningMode::online);
  expect_correct(spec);  // tunes, then runs the winner
  reference::DeviceProblem problem(spec, 1);
  const Problem p = normalized(problem);
  ASSERT_TRUE(tuning::tuned_config(p, runtime::device_info(0)).has_value()) << tuning::problem_key(p);
  EXPECT_TRUE(make_plan(p).tuned);

  // Another M of the same bucket uses that winner without tuning again.
  ProblemSpec same_bucket = spec;
  same_bucket.m = 33;
  reference::DeviceProblem other(same_bucket, 1);
  EXPECT_EQ(make_plan(normalized(other)).config, *tuning::tuned_config(p, runtime::device_info(0)));
  expect_correct(same_bucket);

  set_tuning_mode(TuningMode::off);
  EXPECT_FALSE(make_plan(p).tuned) << "off ignores the database";
}

TEST_F(Autotuner, NoOnlineTuningDuringGraphCapture) {
  const ProblemSpec spec = untuned_spec(20);
  const testing::TuningModeGuard online(TuningMode::online);
  reference::DeviceProblem problem(spec, testing::fresh_seed());
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  gemm(problem.a(), problem.b(), problem.d(), problem.options(stream));
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_FALSE(tuning::tuned_config(normalized(problem), runtime::device_info(0)).has_value());
  testing::expect_replay_correct(problem, graph, stream);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace gemmkit
