// gemmkit bench --hint-matrix N K: why dispatch keeps a winner per M bucket. The kernel tuned
// for one M (the "hint") is timed at other M, pinned, next to gemm() choosing by the runtime M's
// bucket; with dispatch, each runtime M runs its own bucket's winner whatever the hint was.
#include <cstdio>
#include <functional>

#include "api/prepare.h"
#include "commands.h"
#include "dispatch/plan.h"
#include "gemmkit/error.h"
#include "gemmkit/tuning.h"
#include "bench/report.h"
#include "runtime/driver.h"
#include "tuning/autotuner.h"
#include "tuning/gpu_timer.h"
#include "tuning/tuned_configs.h"

namespace gemmkit::tools {

int run_hint_matrix(int64_t n, int64_t k, const BenchOptions& options, const runtime::DeviceInfo& info) {
  const std::vector<int64_t> hints = {64, 256, 4096};
  auto problem = [&](int64_t m) {
    SuiteProblem sp;
    sp.m = m;
    sp.n = n;
    sp.k = k;
    return sp;
  };
  // Dispatch by bucket reads the winners from the database.
  if (tuning_mode() == TuningMode::off) set_tuning_mode(TuningMode::database);
  std::vector<KernelConfig> tuned;
  for (int64_t hint : hints) {
    const Problem p = stand_in_problem(problem(hint), info.ordinal);
    if (problem_config(p).kind != KernelKind::tma) {
      throw Error(ErrorCode::invalid_argument, "bench --hint-matrix: N and K must let the TMA kernel run (multiples of 8)");
    }
    const tuning::Timed best = tuning::tune(p, prepare_candidate).timed.front();
    if (!tuning::store_winner(p, info, best.config, best.us)) {
      throw Error(ErrorCode::io_error, "bench --hint-matrix: cannot write the tuning database " +
                                           tuning::database().path().string());
    }
    tuned.push_back(best.config);
    std::printf("tuned for M = %lld: %s (%.2f us)\n", static_cast<long long>(hint), best.config.name().c_str(), best.us);
  }

  cudaStream_t stream = nullptr;
  runtime::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const tuning::GpuTimer timer(stream, options.warmup, options.runs, info.sm_clock_khz);
  std::vector<HintCell> cells;
  for (int64_t m : hints) {
    const auto sets = buffer_sets(to_spec(problem(m)), info);
    std::vector<Problem> normalized;
    for (const auto& set : sets) {
      normalized.push_back(api::prepare_gemm(set->a(), set->b(), set->d(), set->options(stream), info.ordinal).problem);
    }
    std::vector<std::function<void(int)>> launchers;
    for (const KernelConfig& config : tuned) {
      const Plan pinned = make_plan(normalized[0], &config);
      launchers.push_back([&, pinned](int s) { run_plan(pinned, normalized[size_t(s)], stream); });
    }
    launchers.push_back([&](int s) {
      const auto& set = *sets[size_t(s)];
      gemm(set.a(), set.b(), set.d(), set.options(stream));
    });
    const std::vector<double> us = timer.median_us(int(sets.size()), launchers);
    for (size_t h = 0; h < hints.size(); ++h) cells.push_back({hints[h], m, us[h], us.back()});
    std::printf("dispatch at M = %lld runs %s\n", static_cast<long long>(m), chosen_config(*sets[0]).c_str());
  }
  cudaStreamDestroy(stream);

  std::printf("hint matrix, N = %lld, K = %lld, NT bf16, microseconds: pinned to the hint's kernel / gemm() dispatching by M\n%s",
              static_cast<long long>(n), static_cast<long long>(k), format_hint_matrix(cells).c_str());
  if (!options.json.empty()) write_json(options.json, hint_matrix_json(cells), "bench");
  return 0;
}

}  // namespace gemmkit::tools
