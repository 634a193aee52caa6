// gemmkit::gemm captured into CUDA graphs and replayed, and called from several threads and
// streams at once, against the double-precision reference. Skips without an sm_90 device.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../thread_failures.h"
#include "gpu_test.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/utility_kernels.h"

namespace gemmkit {
namespace {

using reference::Comparison;
using reference::DeviceProblem;
using reference::ProblemSpec;
using runtime::check;
using testing::fresh_seed;

const char* const kLayouts[] = {"NN", "NT", "TN", "TT"};

// A decode shape (few rows, long K) for which the heuristic splits K.
const ProblemSpec kDecode = {.m = 16, .n = 2112, .k = 7168};

// A non-blocking stream, destroyed with the object.
class Stream {
 public:
  Stream() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// gridDim.x of a kernel node. Asked of the driver: the runtime's query fails on kernels that
// were launched through the driver API, as gemmkit's are.
unsigned grid_x(cudaGraphNode_t node) {
  using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
  static const GetParams get_params = [] {
    void* pointer = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check(cudaGetDriverEntryPointByVersion("cuGraphKernelNodeGetParams", &pointer, 12000, cudaEnableDefault, &found),
          "cudaGetDriverEntryPointByVersion(cuGraphKernelNodeGetParams)");
    if (found != cudaDriverEntryPointSuccess) throw std::runtime_error("no cuGraphKernelNodeGetParams in the driver");
    return reinterpret_cast<GetParams>(pointer);
  }();
  CUDA_KERNEL_NODE_PARAMS params{};
  check(get_params(node, &params), "cuGraphKernelNodeGetParams");
  return params.gridDimX;
}

// One gemmkit::gemm call on a problem's buffers, captured on `stream` and instantiated.
class GemmGraph {
 public:
  GemmGraph(const DeviceProblem& problem, cudaStream_t stream) {
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      gemm(problem.a(), problem.b(), problem.d(), problem.options(stream));
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(stream, &broken);
      if (broken) cudaGraphDestroy(broken);
      throw;
    }
    check(cudaStreamEndCapture(stream, &graph_), "cudaStreamEndCapture");
    const cudaError_t instantiated = cudaGraphInstantiate(&exec_, graph_, 0);
    if (instantiated != cudaSuccess) cudaGraphDestroy(graph_);
    check(instantiated, "cudaGraphInstantiate");
  }
  ~GemmGraph() {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  GemmGraph(const GemmGraph&) = delete;
  GemmGraph& operator=(const GemmGraph&) = delete;

  void launch(cudaStream_t stream) const { check(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch"); }

  // gridDim.x of each kernel the graph launches.
  std::vector<unsigned> kernel_grids() const {
    size_t count = 0;
    check(cudaGraphGetNodes(graph_, nullptr, &count), "cudaGraphGetNodes");
    std::vector<cudaGraphNode_t> nodes(count);
    check(cudaGraphGetNodes(graph_, nodes.data(), &count), "cudaGraphGetNodes");
    std::vector<unsigned> grids;
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type;
      check(cudaGraphNodeGetType(node, &type), "cudaGraphNodeGetType");
      if (type != cudaGraphNodeTypeKernel) continue;
      grids.push_back(grid_x(node));
    }
    return grids;
  }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Elements a view spans from its data pointer (every stride positive).
int64_t span(const TensorView& v) {
  return (v.batch() - 1) * v.batch_stride() + (v.rows() - 1) * v.row_stride() + (v.cols() - 1) * v.col_stride() + 1;
}

// New random A, B (and a separate C) in the problem's own buffers, where a captured graph
// will read them on its next replay.
void refill_inputs(const DeviceProblem& problem, cudaStream_t stream) {
  std::vector<TensorView> inputs = {problem.a(), problem.b()};
  // A C that is D is reset by prepare_output from the problem's own copy, which stays as it was.
  const std::optional<TensorView> c = problem.options(stream).c;
  if (c && c->data != problem.d().data) inputs.push_back(*c);
  const uint64_t seed = fresh_seed();
  for (size_t i = 0; i < inputs.size(); ++i) {
    runtime::fill_random(inputs[i].data, inputs[i].dtype, span(inputs[i]), seed + i, -1.0f, 1.0f, stream);
  }
}

// The problem as gemmkit::gemm plans it (normalised), and the plan it makes (on the calling thread).
Problem normalized_of(const DeviceProblem& problem) {
  return normalize(validate_gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr)));
}
Plan plan_of(const DeviceProblem& problem) { return make_plan(normalized_of(problem)); }

// Poisons D, runs the graph and expects D to match the reference for the inputs as they are.
void expect_replay_correct(DeviceProblem& problem, const GemmGraph& graph, cudaStream_t stream, const std::string& what) {
  problem.prepare_output(stream);
  graph.launch(stream);
  const Comparison result = problem.check(stream);
  EXPECT_TRUE(result.passed()) << problem.spec().describe() << ", " << what << ": " << result.summary();
}

// Replays the graph on the inputs it was captured with, then on new ones: D must follow the
// inputs (the replay recomputes it), and a second replay on the same inputs must give the same
// bytes.
void expect_replays_follow_inputs(DeviceProblem& problem, const GemmGraph& graph, cudaStream_t stream) {
  expect_replay_correct(problem, graph, stream, "first replay");
  const std::vector<char> first = problem.copy_output();
  refill_inputs(problem, stream);
  expect_replay_correct(problem, graph, stream, "replay on new inputs");
  const std::vector<char> second = problem.copy_output();
  // Not EXPECT_NE/EQ: a failure would print every byte of D.
  EXPECT_TRUE(first != second) << problem.spec().describe() << ": D did not change with the inputs";
  problem.prepare_output(stream);
  graph.launch(stream);
  check(cudaStreamSynchronize(stream), "replay");
  EXPECT_TRUE(problem.copy_output() == second) << problem.spec().describe() << ": a replay on the same inputs differs";
}

class GemmGraphs : public testing::GpuTest {
 protected:
  void SetUp() override {
    testing::GpuTest::SetUp();
    if (IsSkipped()) return;
    stream_ = std::make_unique<Stream>();
  }

  // Makes one uncaptured call (the plan, the kernel and the split-K workspace of `stream` now
  // exist) and checks it, then captures the same call.
  std::unique_ptr<GemmGraph> call_then_capture(DeviceProblem& problem, cudaStream_t stream) {
    problem.prepare_output(stream);
    gemm(problem.a(), problem.b(), problem.d(), problem.options(stream));
    const Comparison result = problem.check(stream);
    EXPECT_TRUE(result.passed()) << problem.spec().describe() << ", uncaptured: " << result.summary();
    return std::make_unique<GemmGraph>(problem, stream);
  }

  std::unique_ptr<Stream> stream_;
};

TEST_F(GemmGraphs, ReplayAfterUncapturedCallFollowsInputs) {
  const ProblemSpec specs[] = {
      {.m = 512, .n = 384, .k = 256},
      {.m = 320, .n = 264, .k = 192, .layout = "TN", .in = DType::f16, .out = DType::f16},
      {.m = 200, .n = 136, .k = 160, .layout = "NN", .out = DType::f32},
      {.m = 300, .n = 257, .k = 129, .layout = "TT", .alpha = 0.75f, .beta = -1.5f},
      {.m = 256, .n = 200, .k = 96, .out = DType::f32, .beta = 0.5f, .c_is_d = true},
  };
  for (const ProblemSpec& spec : specs) {
    DeviceProblem problem(spec, fresh_seed());
    const auto graph = call_then_capture(problem, stream_->get());
    expect_replays_follow_inputs(problem, *graph, stream_->get());
  }
}

// The captured call uses the split-K workspace of its capture stream: after an uncaptured call
// on that stream the graph runs split; on a stream gemmkit has not used it cannot allocate one
// during the capture and runs unsplit. Both must be right on every replay.
TEST_F(GemmGraphs, SplitKUsesTheCaptureStreamsWorkspace) {
  const testing::TuningModeGuard untuned(TuningMode::off);  // the cost model's pick splits K
  DeviceProblem problem(kDecode, fresh_seed());
  const Plan plan = plan_of(problem);
  ASSERT_GT(plan.config.splits, 1) << kDecode.describe() << " runs " << plan.config.name() << ": no split-K to test";

  const auto split = call_then_capture(problem, stream_->get());
  const std::vector<unsigned> split_grids = split->kernel_grids();
  ASSERT_EQ(split_grids.size(), 1u);
  // Unsplit, the persistent grid has one CTA per (cluster of) output tile(s) of the problem as
  // planned (decode runs transposed).
  const Problem planned = normalized_of(problem);
  const int64_t cluster = plan.config.cluster_m;
  const int64_t tile_rows = (planned.m + plan.config.tile_m - 1) / plan.config.tile_m;
  const int64_t tile_cols = (planned.n + plan.config.tile_n - 1) / plan.config.tile_n;
  const int64_t unsplit_grid =
      std::min<int64_t>((tile_rows + cluster - 1) / cluster * tile_cols, plan.sm_count / cluster) * cluster;
  EXPECT_GT(int64_t(split_grids[0]), unsplit_grid) << "the captured call did not split K";
  expect_replays_follow_inputs(problem, *split, stream_->get());

  Stream fresh;
  GemmGraph unsplit(problem, fresh.get());
  const std::vector<unsigned> unsplit_grids = unsplit.kernel_grids();
  ASSERT_EQ(unsplit_grids.size(), 1u);
  // Not EQ: a destroyed stream's handle may come back for `fresh`, with that stream's workspace.
  EXPECT_LE(unsplit_grids[0], split_grids[0]);
  expect_replays_follow_inputs(problem, unsplit, fresh.get());
  // The first graph still replays correctly after the second was captured.
  expect_replay_correct(problem, *split, stream_->get(), "split graph replayed last");
}

// The first call of a problem inside the capture: the plan is made, and the kernel compiled
// (or read from the disk cache) and loaded, while the stream is capturing.
TEST_F(GemmGraphs, PlanMadeDuringCapture) {
  const ProblemSpec specs[] = {
      {.m = 1000, .n = 520, .k = 200, .layout = "TN", .in = DType::f16, .out = DType::f32},
      // Odd leading dimension: staged, so the capture runs the fallback kernel (no scratch yet).
      {.m = 333, .n = 77, .k = 91, .layout = "NT", .pad_a = 1},
      // Odd K against weights: read as row classes, whose copies of the tokens have no scratch
      // yet, so the capture runs the realigning TMA kernel.
      {.m = 8, .n = 7000, .k = 4097, .layout = "NT"},
  };
  for (const ProblemSpec& spec : specs) {
    DeviceProblem problem(spec, fresh_seed());
    GemmGraph graph(problem, stream_->get());
    expect_replays_follow_inputs(problem, graph, stream_->get());
  }
}

using testing::Failures;

// Runs each worker on a thread of its own. Every worker first builds its problems, then all
// start calling gemmkit at once, so that first-use paths (plans, kernels, workspaces) race.
// Each worker runs `rounds` of poison + gemm + check per problem on `stream_of(worker)`.
void run_workers(int workers, int rounds, const std::function<std::vector<ProblemSpec>(int)>& problems_of,
                 const std::function<cudaStream_t(int)>& stream_of, Failures& failures) {
  // Drawn here, as fresh_seed's generator is not for several threads at once; each problem
  // takes three consecutive seeds.
  const uint64_t seed = fresh_seed();
  std::latch start(workers);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      const std::string who = "worker " + std::to_string(w) + ": ";
      std::vector<std::unique_ptr<DeviceProblem>> problems;
      try {
        for (const ProblemSpec& spec : problems_of(w)) {
          problems.push_back(std::make_unique<DeviceProblem>(spec, seed + 3 * (16 * w + problems.size())));
        }
      } catch (const std::exception& e) {
        failures.add(who + "setup: " + e.what());
        problems.clear();
      }
      start.arrive_and_wait();
      const cudaStream_t stream = stream_of(w);
      for (int round = 0; round < rounds; ++round) {
        for (const auto& problem : problems) {
          const std::string what = who + problem->spec().describe() + ", round " + std::to_string(round) + ": ";
          try {
            problem->prepare_output(stream);
            gemm(problem->a(), problem->b(), problem->d(), problem->options(stream));
            const Comparison result = problem->check(stream);
            if (!result.passed()) failures.add(what + result.summary());
          } catch (const std::exception& e) {
            failures.add(what + e.what());
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

// Worker w's problems: one shape every worker shares (one plan key and kernel, asked for by all
// at once), a split-K decode shape, and one of its own layout, output type and beta.
std::vector<ProblemSpec> problems_of_worker(int w) {
  ProblemSpec decode = kDecode;
  decode.m = 8 * (w % 3 + 1);
  return {
      {.m = 512, .n = 384, .k = 256},
      decode,
      {.m = 100 + 37 * w, .n = 264, .k = 136, .layout = kLayouts[w % 4], .out = w % 2 ? DType::f32 : DType::bf16,
       .beta = w % 3 == 0 ? 0.5f : 0.0f},
  };
}

using GemmThreads = testing::GpuTest;

TEST_F(GemmThreads, StreamPerThread) {
  constexpr int kWorkers = 6;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int w = 0; w < kWorkers; ++w) streams.push_back(std::make_unique<Stream>());
  Failures failures;
  run_workers(kWorkers, 25, problems_of_worker, [&](int w) { return streams[w]->get(); }, failures);
  EXPECT_EQ(failures.count(), 0u) << failures.all();
}

// Calls from several threads serialised on one stream, which they also share the split-K
// workspace of (grown by whichever decode shape needs more).
TEST_F(GemmThreads, OneSharedStream) {
  constexpr int kWorkers = 6;
  Stream shared;
  Failures failures;
  run_workers(kWorkers, 15, problems_of_worker, [&](int) { return shared.get(); }, failures);
  EXPECT_EQ(failures.count(), 0u) << failures.all();
}

// A thread that has made no CUDA call (as torch's autograd threads are when a backward pass
// starts with gemmkit) has no current context though its device is 0: the call must make the
// device's context current before its driver calls (a module load failed with "invalid device
// context" there).
TEST_F(GemmThreads, FirstCallOnAFreshThread) {
  DeviceProblem problem({.m = 96, .n = 136, .k = 72, .layout = "TN"}, fresh_seed());
  Stream stream;
  Failures failures;
  bool had_context = false;
  std::thread([&] {
    CUdevice device = -1;
    had_context = runtime::driver().ctx_get_device(&device) == CUDA_SUCCESS;
    try {
      {
        runtime::DeviceGuard guard(0);
        if (runtime::driver().ctx_get_device(&device) != CUDA_SUCCESS) failures.add("no current context under the guard");
      }
      problem.prepare_output(stream.get());
      gemm(problem.a(), problem.b(), problem.d(), problem.options(stream.get()));
      const Comparison result = problem.check(stream.get());
      if (!result.passed()) failures.add(result.summary());
    } catch (const std::exception& e) {
      failures.add(e.what());
    }
  }).join();
  if (had_context) GTEST_SKIP() << "a new thread had a current context already: nothing to check";
  EXPECT_EQ(failures.count(), 0u) << failures.all();
}

}  // namespace
}  // namespace gemmkit
