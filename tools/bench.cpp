// gemmkit bench: our kernels and cuBLASLt on the same buffers, in one process.
//
// For each problem: enough buffer sets that cycling through them evicts L2 between uses of a
// set; warm-up runs; then timed runs of ours and cuBLASLt (with a fused epilogue, also cuBLASLt's
// own fused epilogue where one computes it, and our GEMM without it), alternating, each after an
// empty kernel it cannot overlap and between two events (tuning/gpu_timer.h); the medians are
// reported. A line with 4-bit weights, which cuBLASLt cannot run, then times the dense GEMMs of its
// shape (16-bit and FP8, ours and cuBLASLt's) on buffer sets of their own, cuBLASLt's 16-bit one
// its baseline (W4A8 lines: its FP8 one, see w4_dense_times). Once at the start, the
// device-to-device copy bandwidth, the
// yardstick for each problem's GB/s; and after each problem's runs, a copy that moves as many
// bytes, the yardstick at its size. A suite's grouped lines run after its dense ones
// (grouped_bench.cpp). --overhead times host calls instead (overhead.cpp), --chain chains of GEMMs
// replayed from CUDA graphs (chain_bench.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "api/prepare.h"
#include "api/validate.h"
#include "baseline/cublaslt.h"
#include "baseline/cublaslt_epilogue.h"
#include "bench_buffers.h"
#include "bench_options.h"
#include "bench/chain.h"
#include "codegen/kernel_source.h"
#include "commands.h"
#include "dispatch/plan.h"
#include "epilogue/program.h"
#include "gemmkit/error.h"
#include "bench/progress.h"
#include "bench/report.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "bench/suite_lookup.h"
#include "tuning/gpu_timer.h"

namespace gemmkit::tools {
namespace {

// Without a GPU: compile every kernel the suite would launch on an H100/H200 (132 SMs,
// 227 KB of shared memory), so the cache is warm and the kernels are known to build.
int compile_only(const std::vector<SuiteProblem>& problems) {
  std::set<KernelConfig> configs;
  for (const SuiteProblem& sp : problems) {
    const Problem p = stand_in_problem(sp, 0);
    if (p.m > 0 && p.n > 0) {
      configs.insert(choose_config(transposing_pays(p, DeviceLimits{}) ? transposed_problem(p) : p, DeviceLimits{}));
    }
  }
  // Configurations that differ only in what the kernel takes at run time share one binary.
  std::set<std::pair<std::string, std::string>> kernels;
  for (const KernelConfig& config : configs) kernels.emplace(codegen::gemm_source(config), codegen::gemm_kernel_name(config));
  int compiled = 0;
  for (const auto& [source, name] : kernels) compiled += runtime::precompile_kernel(source, name);
  std::printf("no CUDA device, nothing timed: %s, for %zu problems, into %s\n",
              compile_summary(compiled, kernels.size(), configs.size()).c_str(), problems.size(),
              runtime::kernel_disk_cache().directory().c_str());
  return 0;
}

// Device-to-device copy bandwidth (read + write) in GB/s, the most a memory-bound GEMM can
// approach: the median of 10 copies of up to 1 GiB after 3 warm-ups. NaN when too little memory
// is free to copy far past L2.
double measure_copy_gbps(cudaStream_t stream, int sm_clock_khz) {
  size_t free_bytes = 0, total_bytes = 0;
  runtime::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  const size_t mib = size_t(1) << 20;
  const size_t bytes = std::min(1024 * mib, free_bytes / 4 / mib * mib);  // source and destination, half of what is free
  if (bytes < 256 * mib) return NAN;
  const CopyBuffers copies(2.0 * double(bytes), 1);
  if (!copies.memory) return NAN;
  tuning::GpuTimer timer(stream, 3, 10, sm_clock_khz);
  const double us = timer.median_us(1, {[&](int) { copies.copy(0, stream); }})[0];
  return copy_gbps(double(copies.half), us);
}

// cuBLASLt's TFLOP/s on one 8192x8192x8192 NT problem of each input type the suite has (bf16,
// and e4m3 with per-tensor scales where it has FP8 problems): a measured compute roof for plots.
// The median of 10 runs after 3 warm-ups, each run a few milliseconds; NaN where cuBLASLt cannot
// run the problem.
std::map<std::string, double> measure_peaks(const std::vector<SuiteProblem>& problems, baseline::CublasLt& cublaslt,
                                            cudaStream_t stream, const runtime::DeviceInfo& info) {
  std::vector<DType> types = {DType::bf16};
  if (std::any_of(problems.begin(), problems.end(), [](const SuiteProblem& p) { return p.fp8() || p.w4a8() || p.fp4x4(); })) {
    types.push_back(DType::e4m3);
  }
  constexpr int64_t kSize = 8192;
  tuning::GpuTimer timer(stream, 3, 10, info.sm_clock_khz);
  std::map<std::string, double> peaks;
  for (DType type : types) {
    SuiteProblem sp;
    sp.m = sp.n = sp.k = kSize;
    sp.in_dtype = type;
    sp.out_dtype = DType::bf16;
    if (sp.fp8()) sp.mode = ScaleMode::tensor;
    const reference::DeviceProblem buffers(bench_spec(sp), 1);
    Problem p = validate_gemm(buffers.a(), buffers.b(), buffers.d(), buffers.options(stream));
    p.device = info.ordinal;
    double tflops = NAN;
    try {
      if (cublaslt.supports(p)) {
        const double us = timer.median_us(1, {[&](int) { cublaslt.run(p, stream); }})[0];
        tflops = gemm_tflops(kSize, kSize, kSize, 1, us);
      }
    } catch (const Error&) {
      // No algorithm for it: the roof stays unmeasured (NaN, null in the JSON).
    }
    peaks[std::string(dtype_name(type))] = tflops;
  }
  return peaks;
}

// Medians of ours and cuBLASLt on a problem of the suite's kind, on buffer sets of its own as a
// line's are, alternating. Where cuBLASLt rejects an FP8 problem's scaling it runs per-tensor
// scales on the same buffers, noted "per-tensor stand-in" as on FP8 lines; its time is NaN where
// it cannot run the problem at all (noted where it has no algorithm for it).
struct DenseTimes {
  double ours_us = NAN, baseline_us = NAN;
  std::string baseline_note;
};

DenseTimes time_both(const SuiteProblem& sp, baseline::CublasLt& cublaslt, const tuning::GpuTimer& timer,
                     cudaStream_t stream, const runtime::DeviceInfo& info, Progress& progress) {
  const reference::ProblemSpec spec = bench_spec(sp);
  const std::vector<std::unique_ptr<reference::DeviceProblem>> pool = buffer_sets(spec, info);
  std::vector<GemmOptions> options;
  std::vector<Problem> lt_problems;
  for (const auto& set : pool) {
    options.push_back(set->options(stream));
    Problem p = validate_gemm(set->a(), set->b(), set->d(), options.back());
    p.device = info.ordinal;
    lt_problems.push_back(p);
  }
  std::vector<std::function<void(int)>> launchers = {[&](int s) {
    const reference::DeviceProblem& set = *pool[size_t(s)];
    gemm(set.a(), set.b(), set.d(), options[size_t(s)]);
  }};
  DenseTimes times;
  const auto plans = [&]() {  // plans it; false, noted, where cuBLASLt has no algorithm
    try {
      cublaslt.run(lt_problems[0], stream);
      return true;
    } catch (const Error& e) {
      progress.note("cuBLASLt cannot run " + spec.describe() + ": " + e.what());
      return false;
    }
  };
  bool with_baseline = cublaslt.supports(lt_problems[0]) && plans();
  if (!with_baseline && sp.fp8()) {
    for (Problem& p : lt_problems) p = cublaslt.per_tensor_stand_in(p);
    with_baseline = cublaslt.supports(lt_problems[0]) && plans();
    if (with_baseline) times.baseline_note = "per-tensor stand-in";
  }
  if (with_baseline) launchers.push_back([&](int s) { cublaslt.run(lt_problems[size_t(s)], stream); });
  const std::vector<double> medians = timer.median_us(int(pool.size()), launchers);
  times.ours_us = medians[0];
  if (with_baseline) times.baseline_us = medians[1];
  return times;
}

// A line with 4-bit weights: the dense GEMMs of its shape timed and set on its record. The
// starred baseline is cuBLASLt's 16-bit GEMM for 16-bit activations. For a W4A8 line it is
// cuBLASLt's FP8 GEMM with A scaled as the line's is (or its per-tensor stand-in where cuBLASLt
// takes no such scales, as it takes no mx (MXFP8) on Hopper: noted "per-tensor stand-in for mx
// scales"): the line multiplies the same e4m3 activations on the same FP8 tensor cores, and what
// it replaces in a model is that W8A8 GEMM, whose weights move twice the bytes; against the 16-bit
// GEMM it would be credited for the 8-bit activations and math, which are not its weights'
// doing. An FP4 x FP4 line (e2m1 A, mx exponents) is set against the same: the FP8 GEMM in mx,
// which cuBLASLt runs per-tensor as a stand-in, noted so (gemmkit widens the activations to e4m3
// and runs its A8W4 in MX). Where cuBLASLt runs no FP8 GEMM of the shape, the 16-bit one stands in.
void w4_dense_times(const SuiteProblem& sp, BenchRecord& record, baseline::CublasLt& cublaslt,
                    const tuning::GpuTimer& timer, cudaStream_t stream, const runtime::DeviceInfo& info,
                    Progress& progress) {
  const DenseTimes dense16 = time_both(dense16_problem(sp), cublaslt, timer, stream, info, progress);
  const DenseTimes fp8 = time_both(fp8_problem(sp), cublaslt, timer, stream, info, progress);
  if (!sp.w4a8() && !sp.fp4x4()) return set_dense_times(record, dense16.ours_us, dense16.baseline_us, fp8.ours_us, fp8.baseline_us);
  const std::string scales = std::string(scale_mode_name(sp.mode_a)) + " scales";
  set_w4a8_dense_times(record, dense16.ours_us, dense16.baseline_us, fp8.ours_us, fp8.baseline_us,
                       fp8.baseline_note.empty() ? scales : fp8.baseline_note + " for " + scales);
}

// "bf16 712 TFLOP/s, e4m3 1325 TFLOP/s"
std::string format_peaks(const std::map<std::string, double>& peaks) {
  std::string text;
  for (const auto& [type, tflops] : peaks) {
    char entry[64];
    std::snprintf(entry, sizeof entry, "%s%s %.0f TFLOP/s", text.empty() ? "" : ", ", type.c_str(), tflops);
    text += entry;
  }
  return text;
}

}  // namespace

Plan forced_plan(const Problem& normalized, const ConfigOverrides& overrides, const runtime::DeviceInfo& info) {
  const KernelConfig chosen = make_plan(normalized).config;
  if (chosen.kind != KernelKind::tma) {
    throw Error(ErrorCode::invalid_argument,
                "bench: --tile, --cluster, --store-buffers and --splits need problems the TMA kernel can run (aligned operands, K > 0)");
  }
  const KernelConfig config = apply_overrides(chosen, overrides, info.smem_per_block_optin);
  if (config.grouped() && !tile_takes_groups({config.tile_m, config.tile_n}, config)) {
    throw Error(ErrorCode::invalid_argument, "bench: --tile " + std::to_string(config.tile_m) + "x" +
                                                 std::to_string(config.tile_n) + " takes no groups of this kind");
  }
  return make_plan(normalized, &config);
}

int buffer_set_count(double bytes, const runtime::DeviceInfo& info) {
  size_t free_bytes = 0, total_bytes = 0;
  runtime::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return buffer_set_count(bytes, info.l2_bytes, double(free_bytes));
}

uint64_t random_seed() {
  static std::random_device seeds;
  return (uint64_t(seeds()) << 32) | seeds();
}

std::vector<std::unique_ptr<reference::DeviceProblem>> buffer_sets(const reference::ProblemSpec& spec,
                                                                   const runtime::DeviceInfo& info) {
  std::vector<std::unique_ptr<reference::DeviceProblem>> pool;
  for (int s = buffer_set_count(set_bytes(spec), info); s > 0; --s) {
    pool.push_back(std::make_unique<reference::DeviceProblem>(spec, random_seed()));
  }
  return pool;
}

int run_bench(const BenchOptions& options) {
  // --overhead times one small problem in place of the suite, --chain the chains' GEMMs; bad
  // options and files fail with or without a GPU.
  std::vector<Chain> chains;
  for (const std::string& name : options.chains) chains.push_back(load_chain(find_chain(name)));
  const bool hint_matrix = !options.hint_matrix.empty();
  Suite suite;
  if (options.overhead) {
    suite.dense = {parse_overhead_shape(options.overhead_shape)};
  } else if (!chains.empty()) {
    suite.dense = layer_gemms(chains);
  } else if (!hint_matrix) {
    suite = load_named_bench_suite(options.suite);
  }
  const std::vector<SuiteProblem>& problems = suite.dense;
  // Every dense GEMM the suite runs: its dense lines and its grouped rows' dense floors. (The
  // grouped kernels compile when they first run.)
  std::vector<SuiteProblem> dense_gemms = problems;
  for (const GroupedProblem& g : suite.grouped) dense_gemms.push_back(g.dense);
  const bool force = options.overrides.any();
  if (hint_matrix) runtime::require_device();  // it tunes: nothing to do without a GPU
  if (runtime::device_count() == 0) return compile_only(dense_gemms);

  int device = 0;
  runtime::check(cudaGetDevice(&device), "cudaGetDevice");
  const runtime::DeviceInfo& info = runtime::device_info(device);
  runtime::require_sm90(info);
  if (options.overhead) return run_overhead(problems[0], options.json, info);
  if (hint_matrix) return run_hint_matrix(options.hint_matrix[0], options.hint_matrix[1], options, info);
  if (!chains.empty()) return run_chains(chains, options, info);

  cudaStream_t stream = nullptr;
  runtime::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const double copy = measure_copy_gbps(stream, info.sm_clock_khz);
  baseline::CublasLt cublaslt(device);
  const std::map<std::string, double> peaks = measure_peaks(dense_gemms, cublaslt, stream, info);
  std::printf("device %d: %s, %d SMs, L2 %d MB; %s; %d warm-up and %d timed runs per problem, median\n", device,
              info.name.c_str(), info.sm_count, info.l2_bytes >> 20, format_copy_bandwidth(copy).c_str(),
              options.warmup, options.runs);
  std::printf("compute roof (cuBLASLt, 8192x8192x8192 NT): %s\n", format_peaks(peaks).c_str());
  tuning::GpuTimer timer(stream, options.warmup, options.runs, info.sm_clock_khz);
  std::vector<BenchRecord> records;

  Progress progress(problems.size());
  for (const SuiteProblem& sp : problems) {
    const reference::ProblemSpec spec = bench_spec(sp);
    progress.begin(spec.describe());
    const bool fp8 = sp.fp8();  // both operands FP8: cuBLASLt may run a per-tensor stand-in
    const std::vector<std::unique_ptr<reference::DeviceProblem>> pool = buffer_sets(spec, info);
    const int sets = int(pool.size());
    // --epilogue (else the suite line's): our side fused, its tensors per buffer set; our GEMM
    // without it timed too.
    // An epilogue that reads acc2 makes the line a dual GEMM (SwiGLU): its N is the accumulators'
    // columns, B's and B2's side by side, so that cuBLASLt and our unfused GEMM run the plain GEMM
    // of the same flops; our side runs the dual GEMM on the halves (dual_views).
    const std::string& epilogue_text = options.epilogue.empty() ? sp.epilogue : options.epilogue;
    const bool fused = !epilogue_text.empty();
    // An e4m3 D, quantised in 1x128 blocks with its scales: cuBLASLt and our unfused GEMM write a
    // bf16 D of the same shape instead, each set its own (plain_d), so that the line measures what
    // the FP8 output costs over the GEMM it comes from.
    const bool quantized = spec.out == DType::e4m3;
    const bool compared = fused || quantized;  // our GEMM without the line's extras timed too
    std::vector<std::unique_ptr<void, CudaFree>> plain_memory;
    std::vector<TensorView> plain_d;
    for (size_t s = 0; quantized && s < pool.size(); ++s) {
      void* memory = nullptr;
      runtime::check(cudaMalloc(&memory, size_t(spec.batch * spec.m * spec.n) * 2), "cudaMalloc(bf16 D)");
      plain_memory.emplace_back(memory);
      plain_d.push_back(spec.batch == 1 ? TensorView::row_major(memory, DType::bf16, spec.m, spec.n)
                                        : TensorView::batched(memory, DType::bf16, spec.batch, spec.m, spec.n,
                                                              spec.m * spec.n, spec.n, 1));
    }
    // A set's plain GEMM: its D, or the bf16 one.
    const auto plain = [&](size_t s) {
      GemmOptions o = pool[s]->options(stream);
      o.scale_d = {};
      return std::pair{quantized ? plain_d[s] : pool[s]->d(), o};
    };
    const bool dual = fused && epilogue::reads_acc2(epilogue::parse(epilogue_text));
    reference::ProblemSpec fused_spec = spec;  // D as the epilogue sees it
    if (dual) fused_spec.n = spec.n / 2;
    std::vector<std::unique_ptr<EpilogueBuffers>> epilogues;
    std::vector<GemmOptions> ours;  // each set's options on our side
    std::vector<DualViews> halves;  // each set's dual operands
    for (const auto& set : pool) {
      ours.push_back(set->options(stream));
      if (!fused) continue;
      epilogues.push_back(std::make_unique<EpilogueBuffers>(epilogue_text, fused_spec, random_seed()));
      ours.back().epilogue = epilogues.back()->epilogue();
      if (!dual) continue;
      halves.push_back(dual_views(*set));
      ours.back().b2 = halves.back().b2;
      ours.back().scale_b = halves.back().scale_b;
      ours.back().scale_b2 = halves.back().scale_b2;
      if (quantized) {  // the scales of D's first N columns: the first ceil(N / 128) of a row's
        TensorView& scales = ours.back().scale_d.scales;
        scales.sizes[scales.rank - 1] = (fused_spec.n + 127) / 128;
      }
    }
    // Our side's B and D: the set's, or a dual GEMM's halves.
    const auto our_b = [&](size_t s) { return dual ? halves[s].b : pool[s]->b(); };
    const auto our_d = [&](size_t s) { return dual ? halves[s].d : pool[s]->d(); };
    std::vector<Problem> lt_problems;
    for (size_t s = 0; s < pool.size(); ++s) {
      const auto [d, o] = plain(s);
      Problem p = validate_gemm(pool[s]->a(), pool[s]->b(), d, o);
      p.device = device;
      lt_problems.push_back(p);
    }
    // Forced plans run the problems as gemm() orients them, worked out once here: orienting asks
    // the cost model twice, which has no place inside the timed launches.
    std::vector<Problem> forced_problems;
    if (force) {
      for (const auto& set : pool) {
        const size_t s = forced_problems.size();
        const api::PreparedGemm prepared = api::prepare_gemm(set->a(), our_b(s), our_d(s), ours[s], device);
        forced_problems.push_back(oriented(prepared.problem));
      }
    }
    const std::optional<Plan> forced = force ? std::optional(forced_plan(forced_problems[0], options.overrides, info)) : std::nullopt;

    BenchRecord record;
    record.m = spec.m;
    record.n = spec.n;
    record.k = spec.k;
    record.batch = spec.batch;
    record.layout = spec.layout;
    record.dtype = type_spec(sp);
    record.epilogue = quantized ? (fused ? epilogue_text : "acc") + " -> e4m3 1x128" : epilogue_text;
    record.config = forced ? forced->config.name() : chosen_config(pool[0]->a(), our_b(0), our_d(0), ours[0]);
    std::vector<std::function<void(int)>> launchers = {[&](int s) {
      if (forced) return run_plan(*forced, forced_problems[size_t(s)], stream);
      gemm(pool[size_t(s)]->a(), our_b(size_t(s)), our_d(size_t(s)), ours[size_t(s)]);
    }};
    // cuBLASLt runs the same problems where it can. Where it rejects an FP8 row's scaling (mode,
    // scale layout or shape, e.g. block scales at M = 1), it runs the row with per-tensor scales
    // on the same shape and buffers instead, and the record says so.
    std::vector<Problem> lt_runs = lt_problems;
    std::string why;
    bool threw = false;
    const auto plan_baseline = [&](const baseline::LtEpilogue& epilogue) {
      try {
        cublaslt.run(lt_runs[0], stream, epilogue);  // plans it; throws if cuBLASLt has no algorithm
        return true;
      } catch (const Error& e) {
        why = e.what();
        threw = true;
        return false;
      }
    };
    bool with_baseline = cublaslt.supports(lt_runs[0], &why) && plan_baseline({});
    if (!with_baseline && fp8) {
      const std::string own_why = why;
      for (Problem& p : lt_runs) p = cublaslt.per_tensor_stand_in(p);
      if (cublaslt.supports(lt_runs[0], &why) && plan_baseline({})) {
        with_baseline = true;
        record.baseline_note = "per-tensor stand-in";
        progress.note("cuBLASLt cannot run " + spec.describe() + " (" + own_why + "): timing it with per-tensor scales instead");
      } else {
        progress.note("cuBLASLt cannot run " + spec.describe() + " (" + own_why + "), nor with per-tensor scales (" + why + ")");
      }
    } else if (!with_baseline && threw) {
      progress.note("cuBLASLt cannot run " + spec.describe() + ": " + why);
    }
    if (with_baseline) launchers.push_back([&](int s) { cublaslt.run(lt_runs[size_t(s)], stream); });
    // cuBLASLt's own fused epilogue where one computes the text (baseline/cublaslt_epilogue.h),
    // on the problems it runs plain, with each set's epilogue tensors: those our side reads and
    // writes.
    std::vector<baseline::LtEpilogue> lt_epilogues;
    for (const auto& buffers : epilogues) {
      if (auto lt = baseline::lt_epilogue(buffers->epilogue())) lt_epilogues.push_back(*lt);
    }
    const bool with_lt_fused = !lt_epilogues.empty() && with_baseline &&
                               cublaslt.supports(lt_runs[0], lt_epilogues[0], &why) && plan_baseline(lt_epilogues[0]);
    if (!lt_epilogues.empty()) {
      record.baseline_epilogue = baseline::lt_epilogue_name(lt_epilogues[0].kind);
      if (with_baseline && !with_lt_fused) {
        progress.note("cuBLASLt's " + record.baseline_epilogue + " epilogue cannot run " + spec.describe() + ": " + why);
      }
    }
    if (with_lt_fused) {
      launchers.push_back([&](int s) { cublaslt.run(lt_runs[size_t(s)], stream, lt_epilogues[size_t(s)]); });
    }
    if (compared) {
      launchers.push_back([&](int s) {
        const auto [d, o] = plain(size_t(s));
        gemm(pool[size_t(s)]->a(), pool[size_t(s)]->b(), d, o);
      });
    }
    const std::vector<double> medians = timer.median_us(sets, launchers);
    record.ours_us = medians[0];
    record.baseline_us = with_baseline ? medians[1] : NAN;
    if (with_lt_fused) record.baseline_fused_us = medians[2];
    if (compared) record.unfused_us = medians.back();
    // 4-bit weights, which cuBLASLt cannot run: the dense GEMMs of the shape, one of cuBLASLt's
    // the baseline, noted as a stand-in.
    if (sp.w4()) w4_dense_times(sp, record, cublaslt, timer, stream, info, progress);
    // Timed apart: a run right after a copy would pay for writing back the copy's dirty lines.
    const CopyBuffers copies(set_bytes(spec), sets);
    if (copies.memory) record.copy_us = timer.median_us(sets, {[&](int s) { copies.copy(s, stream); }})[0];
    record.speedup = record.baseline_us / record.ours_us;
    record.tflops = gemm_tflops(spec.m, spec.n, spec.k, spec.batch, record.ours_us);
    record.gbps = sp.bytes() / (record.ours_us * 1e-6) / 1e9;
    records.push_back(record);
    char line[768], unfused[64] = "", lt_fused[64] = "", dense[160] = "";
    if (compared) std::snprintf(unfused, sizeof unfused, " (unfused %.1f us)", record.unfused_us);
    if (with_lt_fused) {
      std::snprintf(lt_fused, sizeof lt_fused, ", %s %.1f us", record.baseline_epilogue.c_str(), record.baseline_fused_us);
    }
    if (sp.w4()) {
      std::snprintf(dense, sizeof dense, "; 16-bit: ours %.1f us, cuBLASLt %.1f us; fp8 %s: ours %.1f us, cuBLASLt %.1f us",
                    record.dense16_us, record.dense16_baseline_us,
                    std::string(scale_mode_name(fp8_problem(sp).mode)).c_str(), record.fp8_us, record.fp8_baseline_us);
    }
    std::snprintf(line, sizeof line, "  %s %s %s: ours %.1f us%s, cuBLASLt %.1f us%s%s, copy %.1f us (%d buffer sets)%s",
                  shape_name(record).c_str(), record.dtype.c_str(), record.config.c_str(), record.ours_us, unfused,
                  record.baseline_us, record.baseline_note.empty() ? "" : (" (" + record.baseline_note + ")").c_str(),
                  lt_fused, record.copy_us, sets, dense);
    progress.done(line);
  }
  progress.finish();
  const std::vector<GroupedRecord> grouped =
      suite.grouped.empty() ? std::vector<GroupedRecord>{} : run_grouped_rows(suite.grouped, stream, timer, info, options.overrides, options.max_sms);
  cudaStreamDestroy(stream);

  const BenchSummary summary = summarize(records);
  const GroupedSummary grouped_summary = summarize_grouped(grouped, copy);
  if (!records.empty()) std::printf("%s", format_table(records, copy).c_str());
  if (!grouped.empty()) std::printf("%s%s", records.empty() ? "" : "\n", format_grouped_table(grouped, copy).c_str());
  if (!options.json.empty()) {
    nlohmann::json json = to_json(records, summary, copy);
    if (!grouped.empty()) json["grouped"] = grouped_json(grouped, grouped_summary, copy);
    nlohmann::json& about = json["summary"];
    about["device"] = info.name;
    about["driver"] = runtime::driver_description();
    about["gemmkit"] = version_text();
    if (!options.epilogue.empty()) about["epilogue"] = options.epilogue;
    about["peak_tflops"] = nlohmann::json::object();
    for (const auto& [type, tflops] : peaks) {
      about["peak_tflops"][type] = std::isfinite(tflops) ? nlohmann::json(tflops) : nlohmann::json(nullptr);
    }
    write_json(options.json, json, "bench");
  }
  if (!records.empty()) std::printf("%s\n", format_summary(summary).c_str());
  std::printf("%s", format_fused_summary(records).c_str());
  if (!grouped.empty()) std::printf("%s\n", format_grouped_summary(grouped_summary).c_str());
  return 0;
}

}  // namespace gemmkit::tools
