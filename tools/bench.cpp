// gemmkit bench: our kernels and cuBLASLt on the same buffers, in one process.
//
// For each problem: enough buffer sets that cycling through them evicts L2 between uses of a
// set; warm-up runs; then timed runs of ours and cuBLASLt, alternating, each between two
// events; the medians are reported. Once at the start, the device-to-device copy bandwidth, the
// yardstick for each problem's GB/s. --overhead times host calls instead (overhead.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>

#include "api/validate.h"
#include "baseline/cublaslt.h"
#include "bench_options.h"
#include "codegen/kernel_source.h"
#include "commands.h"
#include "dispatch/plan.h"
#include "gemmkit/error.h"
#include "reference/gpu_reference.h"
#include "report.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"

namespace gemmkit::tools {
namespace {

// Without a GPU: compile every kernel the suite would launch on an H100/H200 (132 SMs,
// 227 KB of shared memory), so the cache is warm and the kernels are known to build.
int compile_only(const std::vector<SuiteProblem>& problems) {
  std::set<KernelConfig> configs;
  for (const SuiteProblem& sp : problems) {
    // Aligned stand-in addresses: only the layout matters for the choice of kernel.
    reference::ProblemSpec spec = to_spec(sp);
    auto* fake = reinterpret_cast<char*>(uintptr_t(1) << 40);
    auto view = [&](int64_t rows, int64_t cols, bool transposed, DType type, char* data) {
      return transposed ? TensorView::matrix(data, type, rows, cols, 1, rows) : TensorView::row_major(data, type, rows, cols);
    };
    const int64_t gap = int64_t(1) << 38;
    TensorView a = view(spec.m, spec.k, spec.layout[0] == 'T', spec.in, fake);
    TensorView b = view(spec.k, spec.n, spec.layout[1] == 'T', spec.in, fake + gap);
    TensorView d = view(spec.m, spec.n, false, spec.out, fake + 2 * gap);
    if (spec.batch > 1) {
      a = TensorView::batched(a.data, a.dtype, spec.batch, a.rows(), a.cols(), spec.m * spec.k, a.row_stride(), a.col_stride());
      b = TensorView::batched(b.data, b.dtype, spec.batch, b.rows(), b.cols(), spec.k * spec.n, b.row_stride(), b.col_stride());
      d = TensorView::batched(d.data, d.dtype, spec.batch, d.rows(), d.cols(), spec.m * spec.n, d.row_stride(), d.col_stride());
    }
    const Problem p = normalize(validate_gemm(a, b, d, {}));
    if (p.m > 0 && p.n > 0) configs.insert(choose_config(p, DeviceLimits{}));
  }
  int compiled = 0;
  for (const KernelConfig& config : configs) {
    compiled += runtime::precompile_kernel(codegen::gemm_source(config), codegen::gemm_kernel_name(config));
  }
  std::printf("no CUDA device, nothing timed: compiled %d kernels (%zu needed, the rest were cached) for %zu problems into %s\n",
              compiled, configs.size(), problems.size(), runtime::kernel_disk_cache().directory().c_str());
  return 0;
}

// The plan gemm() makes for a problem, with what --tile, --cluster and --store-buffers force.
Plan forced_plan(const Problem& normalized, const BenchOptions& options, const runtime::DeviceInfo& info) {
  KernelConfig config = make_plan(normalized).config;
  if (config.kind != KernelKind::tma) {
    throw Error(ErrorCode::invalid_argument,
                "bench: --tile, --cluster and --store-buffers need problems the TMA kernel can run (aligned operands, K > 0)");
  }
  if (!options.tile.empty()) {
    const TileShape tile = parse_tile(options.tile);
    config.tile_m = tile.m;
    config.tile_n = tile.n;
  }
  if (options.cluster > 0) config.cluster_m = options.cluster;
  if (options.store_buffers > 0) config.store_buffers = options.store_buffers;
  config.stages = max_stages(config, info.smem_per_block_optin);
  return make_plan(normalized, &config);
}

// Times several launchers on one stream, alternating between them run by run so each sees the
// same clocks and temperature; all runs are queued behind a spin kernel so the host's launch
// cost does not leak into the GPU timings.
class Timer {
 public:
  Timer(cudaStream_t stream, int warmup, int runs, int sm_clock_khz)
      : stream_(stream), warmup_(warmup), runs_(runs), spin_cycles_(int64_t(sm_clock_khz) * 20) {}  // ~20 ms

  // Median microseconds of each launcher; launch(set) runs on buffer set `set` of `sets`.
  // Every run, whichever side, takes the next set in turn: a side never runs on the buffers the
  // other side has just pulled into L2.
  std::vector<double> median_us(int sets, const std::vector<std::function<void(int)>>& launchers) {
    const size_t count = launchers.size();
    for (size_t i = 0; i < size_t(warmup_) * count; ++i) launchers[i % count](int(i % sets));
    runtime::check(cudaStreamSynchronize(stream_), "warm-up runs");
    std::vector<cudaEvent_t> events(size_t(runs_) * count + 1);
    for (cudaEvent_t& e : events) runtime::check(cudaEventCreate(&e), "cudaEventCreate");
    reference::gpu_spin(spin_cycles_, stream_);
    runtime::check(cudaEventRecord(events[0], stream_), "cudaEventRecord");
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      launchers[i % count](int((size_t(warmup_) * count + i) % sets));
      runtime::check(cudaEventRecord(events[i + 1], stream_), "cudaEventRecord");
    }
    runtime::check(cudaStreamSynchronize(stream_), "timed runs");
    std::vector<std::vector<double>> us(count);
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      float ms = 0;
      runtime::check(cudaEventElapsedTime(&ms, events[i], events[i + 1]), "cudaEventElapsedTime");
      us[i % count].push_back(ms * 1e3);
    }
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    std::vector<double> medians;
    for (auto& values : us) medians.push_back(median(values));
    return medians;
  }

 private:
  cudaStream_t stream_;
  int warmup_, runs_;
  int64_t spin_cycles_;
};

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};

// Device-to-device copy bandwidth (read + write) in GB/s, the most a memory-bound GEMM can
// approach: the median of 10 copies of up to 1 GiB after 3 warm-ups. NaN when too little memory
// is free to copy far past L2.
double measure_copy_gbps(cudaStream_t stream, int sm_clock_khz) {
  size_t free_bytes = 0, total_bytes = 0;
  runtime::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  const size_t mib = size_t(1) << 20;
  const size_t bytes = std::min(1024 * mib, free_bytes / 4 / mib * mib);  // two buffers, half of what is free
  if (bytes < 256 * mib) return NAN;
  void* src = nullptr;
  void* dst = nullptr;
  runtime::check(cudaMalloc(&src, bytes), "cudaMalloc (copy bandwidth)");
  const std::unique_ptr<void, CudaFree> src_owner(src);
  runtime::check(cudaMalloc(&dst, bytes), "cudaMalloc (copy bandwidth)");
  const std::unique_ptr<void, CudaFree> dst_owner(dst);
  Timer timer(stream, 3, 10, sm_clock_khz);
  const double us = timer.median_us(1, {[&](int) {
    runtime::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
  }})[0];
  return copy_gbps(double(bytes), us);
}

}  // namespace

int run_bench(const BenchOptions& options) {
  // --overhead times one small problem in place of the suite; bad options fail with or without a GPU.
  const std::vector<SuiteProblem> problems =
      options.overhead ? std::vector{parse_overhead_shape(options.overhead_shape)} : load_suite(options.suite);
  if (!options.tile.empty()) parse_tile(options.tile);
  const bool force = !options.tile.empty() || options.cluster > 0 || options.store_buffers > 0;
  if (runtime::device_count() == 0) return compile_only(problems);

  int device = 0;
  runtime::check(cudaGetDevice(&device), "cudaGetDevice");
  const runtime::DeviceInfo& info = runtime::device_info(device);
  runtime::require_sm90(info);
  if (options.overhead) return run_overhead(problems[0], options.json, info);

  cudaStream_t stream = nullptr;
  runtime::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const double copy = measure_copy_gbps(stream, info.sm_clock_khz);
  std::printf("device %d: %s, %d SMs, L2 %d MB; %s; %d warm-up and %d timed runs per problem, median\n", device,
              info.name.c_str(), info.sm_count, info.l2_bytes >> 20, format_copy_bandwidth(copy).c_str(),
              options.warmup, options.runs);
  baseline::CublasLt cublaslt(device);
  Timer timer(stream, options.warmup, options.runs, info.sm_clock_khz);
  std::random_device seeds;
  std::vector<BenchRecord> records;

  for (const SuiteProblem& sp : problems) {
    const reference::ProblemSpec spec = to_spec(sp);
    const int in_bytes = dtype_size(spec.in), out_bytes = dtype_size(spec.out);
    const double set_bytes = double(spec.batch) * (double(spec.m * spec.k + spec.k * spec.n) * in_bytes +
                                                   double(spec.m * spec.n) * out_bytes);
    size_t free_bytes = 0, total_bytes = 0;
    runtime::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    const int wanted = int(std::ceil(3.0 * info.l2_bytes / std::max(set_bytes, 1.0)));
    const int affordable = int(0.5 * double(free_bytes) / std::max(set_bytes, 1.0));
    const int sets = std::clamp(std::min(wanted, affordable), 1, 64);

    std::vector<std::unique_ptr<reference::DeviceProblem>> pool;
    std::vector<Problem> lt_problems;
    for (int s = 0; s < sets; ++s) {
      pool.push_back(std::make_unique<reference::DeviceProblem>(spec, (uint64_t(seeds()) << 32) | seeds()));
      Problem p = validate_gemm(pool.back()->a(), pool.back()->b(), pool.back()->d(), pool.back()->options(stream));
      p.device = device;
      lt_problems.push_back(p);
    }
    const std::optional<Plan> forced = force ? std::optional(forced_plan(normalize(lt_problems[0]), options, info)) : std::nullopt;

    BenchRecord record;
    record.m = spec.m;
    record.n = spec.n;
    record.k = spec.k;
    record.batch = spec.batch;
    record.layout = spec.layout;
    record.dtype = dtype_spec(sp);
    record.config = forced ? forced->config.name() : chosen_config(*pool[0]);
    std::vector<std::function<void(int)>> launchers = {[&](int s) {
      if (forced) return run_plan(*forced, normalize(lt_problems[size_t(s)]), stream);
      const auto& problem = *pool[size_t(s)];
      gemm(problem.a(), problem.b(), problem.d(), problem.options(stream));
    }};
    if (cublaslt.supports(lt_problems[0])) {
      try {
        cublaslt.run(lt_problems[0], stream);  // plans it; throws if cuBLASLt has no algorithm
        launchers.push_back([&](int s) { cublaslt.run(lt_problems[size_t(s)], stream); });
      } catch (const Error& e) {
        std::fprintf(stderr, "cuBLASLt cannot run %s: %s\n", spec.describe().c_str(), e.what());
      }
    }
    const std::vector<double> medians = timer.median_us(sets, launchers);
    record.ours_us = medians[0];
    record.baseline_us = medians.size() > 1 ? medians[1] : NAN;
    record.speedup = record.baseline_us / record.ours_us;
    record.tflops = gemm_tflops(spec.m, spec.n, spec.k, spec.batch, record.ours_us);
    record.gbps = gemm_gbps(spec.m, spec.n, spec.k, spec.batch, in_bytes, out_bytes, record.ours_us);
    records.push_back(record);
    std::fprintf(stderr, "  %s %s: ours %.1f us, cuBLASLt %.1f us (%d buffer sets)\n", shape_name(record).c_str(),
                 record.config.c_str(), record.ours_us, record.baseline_us, sets);
  }
  cudaStreamDestroy(stream);

  const BenchSummary summary = summarize(records);
  std::printf("%s", format_table(records, copy).c_str());
  if (!options.json.empty()) {
    std::ofstream out(options.json);
    out << to_json(records, summary, copy).dump(2) << "\n";
    if (!out) throw Error(ErrorCode::io_error, "bench: cannot write " + options.json);
  }
  std::printf("%s\n", format_summary(summary).c_str());
  return 0;
}

}  // namespace gemmkit::tools
