#include "tuning/autotuner.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "codegen/kernel_source.h"
#include "core/checked_math.h"
#include "gemmkit/error.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "runtime/utility_kernels.h"
#include "tuning/gpu_timer.h"

namespace gemmkit::tuning {
namespace {

constexpr size_t kTopByCost = 8;
constexpr int kWarmupRuns = 2;
constexpr int kTimedRuns = 15;
constexpr int kMaxBufferSets = 16;

// x (at least 1) rounded up to a multiple of `step` elements.
int64_t round_up(int64_t x, int64_t step) { return ceil_div(std::max<int64_t>(x, 1), step) * step; }

}  // namespace

void precompile(const std::vector<KernelConfig>& configs) {
  std::set<KernelConfig> distinct;
  for (const KernelConfig& c : configs) distinct.insert(compiled(c));
  const std::vector<KernelConfig> work(distinct.begin(), distinct.end());
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto worker = [&] {
    for (size_t i = next++; i < work.size(); i = next++) {
      try {
        runtime::precompile_kernel(codegen::gemm_source(work[i]), codegen::gemm_kernel_name(work[i]));
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    }
  };
  const size_t count = std::min<size_t>(work.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < count; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

namespace {

// A stream per device for tuning, kept for the life of the process (split-K workspaces are
// kept per stream, so a fresh stream per tuning would leave one behind each time).
cudaStream_t tuning_stream(int device) {
  static std::mutex mutex;
  static std::map<int, cudaStream_t> streams;
  std::lock_guard<std::mutex> lock(mutex);
  cudaStream_t& stream = streams[device];
  if (!stream) runtime::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate (tuning)");
  return stream;
}

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};

// One operand of the scratch problem: `count` matrices of `elements` elements each, random in
// [lo, hi) unless it is D, and where it goes in the problem.
struct ScratchOperand {
  MatrixRef view;
  int64_t elements = 0, count = 1;
  bool random = true;
  float lo = -1.0f, hi = 1.0f;
  MatrixRef& (*target)(Problem&) = nullptr;
  int64_t bytes() const { return elements * count * dtype_size(view.dtype); }
};

// Operands laid out as `base` expects (majorness, batching, types), packed with every leading
// dimension rounded up to 8 elements and 16 bytes so that TMA can address them; FP8 scales row-major, shaped
// as the problem's are, in [0.5, 2) (ue8m0: powers of two from 1/4 to 2).
std::vector<ScratchOperand> scratch_layout(const Problem& p, const KernelConfig& base) {
  auto operand = [&](DType type, int64_t rows, int64_t cols, bool cols_contiguous, bool batched) {
    ScratchOperand o;
    o.view.dtype = type;
    const int64_t ld = round_up(cols_contiguous ? cols : rows, std::max(8, 16 / dtype_size(type)));
    o.view.row_stride = cols_contiguous ? ld : 1;
    o.view.col_stride = cols_contiguous ? 1 : ld;
    o.elements = ld * (cols_contiguous ? rows : cols);
    o.count = batched ? p.batch : 1;
    o.view.batch_stride = batched ? o.elements : 0;
    return o;
  };
  std::vector<ScratchOperand> operands = {
      operand(base.in, p.m, p.k, base.a_k_major, base.a_batched),
      operand(base.in_b, p.k, p.n, !base.b_k_major, base.b_batched),
      operand(base.out, p.m, p.n, true, p.batch > 1),
  };
  operands[0].target = [](Problem& q) -> MatrixRef& { return q.a; };
  operands[1].target = [](Problem& q) -> MatrixRef& { return q.b; };
  operands[2].target = [](Problem& q) -> MatrixRef& { return q.d; };
  operands[2].random = false;  // D is written, not read
  if (base.has_c) {
    operands.push_back(operand(base.c, p.m, p.n, true, p.batch > 1));
    operands.back().target = [](Problem& q) -> MatrixRef& { return q.c; };
  }
  auto scales = [&](const ScaleRef& s, int64_t rows, int64_t cols, MatrixRef& (*target)(Problem&)) {
    if (s.mode == ScaleMode::none) return;
    ScratchOperand o = operand(s.m.dtype, ceil_div(rows, s.block_rows), ceil_div(cols, s.block_cols), true,
                               p.batch > 1 && s.m.batch_stride != 0);
    o.lo = s.mode == ScaleMode::mx ? 0.25f : 0.5f;
    o.hi = s.mode == ScaleMode::mx ? 4.0f : 2.0f;
    o.target = target;
    operands.push_back(o);
  };
  scales(p.scale_a, p.m, p.k, [](Problem& q) -> MatrixRef& { return q.scale_a.m; });
  scales(p.scale_b, p.k, p.n, [](Problem& q) -> MatrixRef& { return q.scale_b.m; });
  return operands;
}

// Buffer sets of the scratch problem, with random inputs, and the problem on each.
class ScratchProblems {
 public:
  ScratchProblems(const Problem& p, const KernelConfig& base, const runtime::DeviceInfo& info, cudaStream_t stream) {
    const std::vector<ScratchOperand> layout = scratch_layout(p, base);
    int64_t set_bytes = 0;
    for (const ScratchOperand& o : layout) set_bytes += o.bytes();
    size_t free_bytes = 0, total_bytes = 0;
    runtime::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    const int64_t wanted = ceil_div(3 * int64_t(info.l2_bytes), set_bytes);
    const int64_t affordable = int64_t(0.4 * double(free_bytes)) / set_bytes;
    if (affordable < 1) {
      throw Error(ErrorCode::cuda_error, "tuning: scratch buffers of " + std::to_string(set_bytes >> 20) +
                                             " MiB do not fit in 40% of the device's free memory");
    }
    const int sets = int(std::clamp<int64_t>(std::min(wanted, affordable), 1, kMaxBufferSets));
    std::random_device seeds;
    for (int s = 0; s < sets; ++s) {
      Problem q = p;
      if (!base.has_c) q.c = MatrixRef{};
      for (const ScratchOperand& o : layout) {
        void* data = nullptr;
        runtime::check(cudaMalloc(&data, size_t(o.bytes())), "cudaMalloc (tuning scratch)");
        buffers_.emplace_back(data);
        MatrixRef& ref = o.target(q);
        ref = o.view;
        ref.data = data;
        if (o.random) {
          runtime::fill_random(data, o.view.dtype, o.elements * o.count, (uint64_t(seeds()) << 32) | seeds(), o.lo, o.hi,
                               stream);
        }
      }
      q.alpha = 1.0f;
      q.beta = base.has_c ? 0.5f : 0.0f;
      problems_.push_back(q);
    }
    runtime::check(cudaStreamSynchronize(stream), "tuning scratch fill");
  }

  const std::vector<Problem>& problems() const { return problems_; }

 private:
  std::vector<std::unique_ptr<void, CudaFree>> buffers_;
  std::vector<Problem> problems_;
};

}  // namespace

std::vector<KernelConfig> tuning_candidates(const Problem& p, const DeviceLimits& limits) {
  const std::vector<Candidate> ranked = rank_candidates(p, limits);
  std::vector<KernelConfig> chosen;
  auto add = [&](const KernelConfig& c) {
    if (std::find(chosen.begin(), chosen.end(), c) == chosen.end()) chosen.push_back(c);
  };
  for (size_t i = 0; i < ranked.size() && i < kTopByCost; ++i) add(ranked[i].config);
  for (TileShape tile : tile_shapes()) {
    auto best = std::find_if(ranked.begin(), ranked.end(), [&](const Candidate& c) {
      return c.config.tile_m == tile.m && c.config.tile_n == tile.n;
    });
    if (best != ranked.end()) add(best->config);
  }
  if (!ranked.empty()) {
    // Raster groups of the pick. Over several waves a group's rows of A must stay in L2 while it
    // walks B (raster_group_rows): a group half and twice as tall. In one wave every tile runs at
    // once, and the group decides only which tiles neighbouring CTAs take, and so how many of
    // their L2 reads are shared (short_groups_pay): there, the choice the model did not make.
    const KernelConfig& pick = ranked.front().config;
    const int64_t tiles_m = ceil_div(p.m, pick.tile_m), tiles_n = ceil_div(p.n, pick.tile_n);
    std::vector<int> groups;
    if (tiles_m * tiles_n * p.batch > limits.sm_count) {
      groups = {pick.group_m / 2, pick.group_m * 2};
    } else if (tiles_m > kOneWaveGroupRows && tiles_n > 1) {
      groups = {pick.group_m == kOneWaveGroupRows ? raster_group_rows(p, pick.tile_m, limits) : kOneWaveGroupRows};
    }
    for (int group : groups) {
      KernelConfig variant = pick;
      variant.group_m = group;
      if (fits(variant, limits)) add(variant);
    }
  }
  return chosen;
}

TuneResult tune(const Problem& p, const CandidateRunner& runner) {
  const runtime::DeviceInfo& info = runtime::device_info(p.device);
  runtime::require_sm90(info);
  if (is_4bit(p.a.dtype) || is_4bit(p.b.dtype)) {
    throw Error(ErrorCode::invalid_argument, "tuning: 4-bit weights are not tuned yet (the cost model picks their tiles)");
  }
  const std::vector<KernelConfig> candidates = tuning_candidates(p, {info.sm_count, info.smem_per_block_optin});
  if (candidates.empty()) {
    throw Error(ErrorCode::invalid_argument, "tuning: only the fallback kernel can run this problem");
  }
  precompile(candidates);
  const cudaStream_t stream = tuning_stream(p.device);
  const ScratchProblems scratch(p, problem_config(p), info, stream);
  const std::vector<Problem>& problems = scratch.problems();

  std::vector<Launcher> launchers;
  for (const KernelConfig& c : candidates) launchers.push_back(runner(c, problems, stream));
  const GpuTimer timer(stream, kWarmupRuns, kTimedRuns, info.sm_clock_khz);
  const std::vector<double> us = timer.median_us(int(problems.size()), launchers);

  TuneResult result;
  for (size_t i = 0; i < candidates.size(); ++i) result.timed.push_back({candidates[i], us[i]});
  result.first_pick = result.timed.front();
  std::stable_sort(result.timed.begin(), result.timed.end(), [](const Timed& x, const Timed& y) { return x.us < y.us; });
  return result;
}

}  // namespace gemmkit::tuning
