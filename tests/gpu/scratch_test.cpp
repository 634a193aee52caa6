// gemmkit's scratch from an allocator of the caller's (gemmkit/scratch.h): split-K and staged
// calls take it from the allocator and give all of it back, with results as the reference's; a
// call that needs none does not call it; staged and split calls captured into a CUDA graph, on a
// stream gemmkit has no buffers for, take theirs from it too, run the kernels they run uncaptured,
// and replay right; a failing allocator's error reaches the caller with nothing kept. Skips
// without an sm_90 device.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "gemmkit/error.h"
#include "gemmkit/gemm.h"
#include "gemmkit/scratch.h"
#include "gpu_test.h"
#include "runtime/driver.h"

namespace gemmkit {
namespace {

using reference::DeviceProblem;
using reference::ProblemSpec;
using runtime::check;
using testing::expect_correct;
using testing::fresh_seed;

struct AllocatorFailure : std::runtime_error {
  AllocatorFailure() : std::runtime_error("no scratch today") {}
};

// Stream-ordered memory (cudaMallocAsync, cudaFreeAsync on the call's stream), counted; the
// `fail_at`-th allocation (from 1) throws AllocatorFailure, or returns nullptr with `null`.
struct CountingAllocator {
  std::mutex mutex;
  int allocations = 0, releases = 0;
  std::map<void*, size_t> live;  // allocated, not released: its bytes
  int fail_at = 0;
  bool null = false;

  static void* allocate(void* context, size_t bytes, cudaStream_t stream) {
    auto& self = *static_cast<CountingAllocator*>(context);
    std::lock_guard<std::mutex> lock(self.mutex);
    if (++self.allocations == self.fail_at) {
      if (self.null) return nullptr;
      throw AllocatorFailure();
    }
    void* data = nullptr;
    check(cudaMallocAsync(&data, bytes, stream), "cudaMallocAsync (test scratch)");
    self.live[data] = bytes;
    return data;
  }

  static void release(void* context, void* data, size_t bytes, cudaStream_t stream) {
    auto& self = *static_cast<CountingAllocator*>(context);
    std::lock_guard<std::mutex> lock(self.mutex);
    ++self.releases;
    auto it = self.live.find(data);
    if (it == self.live.end() || it->second != bytes) ADD_FAILURE() << "released what was not allocated so";
    if (it != self.live.end()) self.live.erase(it);
    cudaFreeAsync(data, stream);
  }
};

// Sets a CountingAllocator for one test, and gemmkit's own scratch again after it.
class ScratchAllocators : public testing::GpuTest {
 protected:
  void SetUp() override {
    testing::GpuTest::SetUp();
    if (IsSkipped()) return;
    const ScratchAllocator allocator{CountingAllocator::allocate, CountingAllocator::release, &counting_};
    set_scratch_allocator(&allocator);
  }
  void TearDown() override {
    set_scratch_allocator(nullptr);
    testing::GpuTest::TearDown();
  }

  // Everything allocated so far was released.
  void expect_all_released(const std::string& what) {
    EXPECT_EQ(counting_.releases, counting_.allocations) << what;
    EXPECT_TRUE(counting_.live.empty()) << what;
  }

  CountingAllocator counting_;
};

// A decode shape for which the cost model splits K (as in concurrency_test.cpp).
const ProblemSpec kDecode = {.m = 16, .n = 2112, .k = 7168};

KernelConfig planned(const ProblemSpec& spec) {
  DeviceProblem problem(spec, 1);
  return make_plan(normalize(validate_gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr)))).config;
}

bool stages(const KernelConfig& config) { return config.stage_a || config.stage_b || config.row_classes; }

// The allocations of an uncaptured launch of `config`: the split-K partials (the counters are the
// stream's), A's copy, and B's (or the row classes' copies).
int allocations_of(const KernelConfig& config) {
  return (config.splits > 1 ? 1 : 0) + (config.stage_a ? 1 : 0) + (config.stage_b || config.row_classes ? 1 : 0);
}

// The graph's nodes of `type`.
size_t nodes_of(cudaGraph_t graph, cudaGraphNodeType type) {
  size_t count = 0;
  check(cudaGraphGetNodes(graph, nullptr, &count), "cudaGraphGetNodes");
  std::vector<cudaGraphNode_t> nodes(count);
  check(cudaGraphGetNodes(graph, nodes.data(), &count), "cudaGraphGetNodes");
  size_t found = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t;
    check(cudaGraphNodeGetType(node, &t), "cudaGraphNodeGetType");
    found += t == type ? 1 : 0;
  }
  return found;
}

TEST_F(ScratchAllocators, SplitAndStagedCallsTakeTheirScratchAndGiveItBack) {
  const testing::TuningModeGuard untuned(TuningMode::off);  // the cost model's pick splits kDecode
  ASSERT_GT(planned(kDecode).splits, 1) << kDecode.describe() << ": no split-K to test";
  const ProblemSpec staged_a = {.m = 150, .n = 200, .k = 1031, .layout = "NT", .pad_a = 2};
  ASSERT_TRUE(planned(staged_a).stage_a) << staged_a.describe();
  // FP8 operands that are not K-major: both staged.
  const ProblemSpec fp8_tn = {.m = 300, .n = 200, .k = 1024, .layout = "TN", .in = DType::e4m3,
                              .scale_a = ScaleMode::block, .scale_b = ScaleMode::block};
  ASSERT_TRUE(planned(fp8_tn).stage_a && planned(fp8_tn).stage_b) << fp8_tn.describe();
  // Decode tokens against weights of odd K: the tokens copied for row classes.
  const ProblemSpec row_classes = {.m = 8, .n = 4096, .k = 4097};
  ASSERT_TRUE(planned(row_classes).row_classes) << row_classes.describe();
  for (const ProblemSpec& spec : {kDecode, staged_a, fp8_tn, row_classes}) {
    counting_.allocations = counting_.releases = 0;
    expect_correct(spec);
    EXPECT_EQ(counting_.allocations, allocations_of(planned(spec))) << spec.describe();
    expect_all_released(spec.describe());
  }
}

TEST_F(ScratchAllocators, CallsThatNeedNoScratchDoNotCallIt) {
  const testing::TuningModeGuard untuned(TuningMode::off);
  const ProblemSpec specs[] = {{.m = 2048, .n = 2048, .k = 1024}, {.m = 1, .n = 20000, .k = 2048}};
  for (const ProblemSpec& spec : specs) {
    const KernelConfig config = planned(spec);
    ASSERT_EQ(allocations_of(config), 0) << spec.describe() << " runs " << config.name();
    expect_correct(spec);
  }
  EXPECT_EQ(counting_.allocations, 0);
}

// A staged call and a split one, each captured first thing on a new stream (its kernels already
// loaded by an uncaptured call on another): the staging copies and the TMA kernel (not the
// fallback kernel), and a split kernel after a memset of counters of its own (not the stream's,
// which it has none of), all their scratch the allocator's.
TEST_F(ScratchAllocators, CapturedCallsTakeTheirScratchFromIt) {
  const testing::TuningModeGuard untuned(TuningMode::off);
  const ProblemSpec staged = {.m = 333, .n = 77, .k = 91, .layout = "NT", .pad_a = 1};
  ASSERT_TRUE(planned(staged).stage_a) << staged.describe();
  ASSERT_GT(planned(kDecode).splits, 1) << kDecode.describe();
  for (const ProblemSpec& spec : {staged, kDecode}) {
    const std::string what = spec.describe();
    const KernelConfig config = planned(spec);
    const bool split = config.splits > 1;
    DeviceProblem problem(spec, fresh_seed());
    gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
    check(cudaDeviceSynchronize(), "uncaptured call");
    counting_.allocations = counting_.releases = 0;
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    gemm(problem.a(), problem.b(), problem.d(), problem.options(stream));
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess) << what;
    EXPECT_EQ(counting_.allocations, allocations_of(config) + (split ? 1 : 0)) << what;
    expect_all_released(what);
    EXPECT_EQ(nodes_of(graph, cudaGraphNodeTypeKernel), stages(config) ? 2u : 1u) << what;
    EXPECT_EQ(nodes_of(graph, cudaGraphNodeTypeMemset), split ? 1u : 0u) << what;
    testing::expect_replay_correct(problem, graph, stream);
    cudaStreamDestroy(stream);
  }
}

// An allocator that throws: its exception, as it was, and what was allocated before it is given
// back; one that returns nullptr: Error(cuda_error) naming the scratch. FP8 TN stages A, then B.
TEST_F(ScratchAllocators, FailuresReachTheCallerWithNothingKept) {
  const ProblemSpec spec = {.m = 300, .n = 200, .k = 1024, .layout = "TN", .in = DType::e4m3,
                            .scale_a = ScaleMode::block, .scale_b = ScaleMode::block};
  const KernelConfig config = planned(spec);
  ASSERT_TRUE(config.stage_a && config.stage_b && config.splits == 1) << spec.describe() << " runs " << config.name();
  DeviceProblem problem(spec, fresh_seed());
  counting_.fail_at = 2;
  EXPECT_THROW(gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr)), AllocatorFailure);
  EXPECT_EQ(counting_.allocations, 2);
  EXPECT_EQ(counting_.releases, 1);
  EXPECT_TRUE(counting_.live.empty());
  counting_.allocations = counting_.releases = 0;
  counting_.null = true;
  try {
    gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
    ADD_FAILURE() << "no error where the allocator returned nullptr";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::cuda_error);
    EXPECT_NE(std::string(e.what()).find("staged B"), std::string::npos) << e.what();
  }
  EXPECT_EQ(counting_.releases, 1);
  EXPECT_TRUE(counting_.live.empty());
  check(cudaDeviceSynchronize(), "after the failures");
  counting_.fail_at = 0;
  expect_correct(spec);
}

}  // namespace
}  // namespace gemmkit
