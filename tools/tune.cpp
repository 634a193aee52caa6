// gemmkit tune: for each problem of a suite, times the autotuner's candidates on the GPU and
// stores the fastest in the tuning database, with progress (bench/progress.h) per problem; then a table of
// each winner against the cost model's untuned pick, and how far that pick is from the best.
#include <cstdio>
#include <string>

#include "commands.h"
#include "dispatch/plan.h"
#include "gemmkit/error.h"
#include "bench/progress.h"
#include "bench/report.h"
#include "runtime/driver.h"
#include "bench/suite_lookup.h"
#include "tuning/autotuner.h"
#include "tuning/tuned_configs.h"

namespace gemmkit::tools {
namespace {

std::string label(const SuiteProblem& p) {
  char shape[96];
  std::snprintf(shape, sizeof shape, p.batch > 1 ? "%lldx%lldx%lldx%lld" : "%lldx%lldx%lld", static_cast<long long>(p.m),
                static_cast<long long>(p.n), static_cast<long long>(p.k), static_cast<long long>(p.batch));
  return std::string(shape) + " " + p.layout + " " + type_spec(p);
}

}  // namespace

int run_tune(const std::string& suite, const std::string& json) {
  const std::vector<SuiteProblem> problems = load_named_suite(suite);
  runtime::require_device();
  int device = 0;
  runtime::check(cudaGetDevice(&device), "cudaGetDevice");
  const runtime::DeviceInfo& info = runtime::device_info(device);
  runtime::require_sm90(info);
  TuningDatabase& db = tuning::database();
  std::fprintf(stderr, "tuning %zu problems on device %d (%s); winners go to %s\n", problems.size(), device,
               info.name.c_str(), db.path().c_str());

  std::vector<TuneRecord> records;
  Progress progress(problems.size());
  for (size_t i = 0; i < problems.size(); ++i) {
    const std::string name = label(problems[i]);
    progress.begin(name);
    const Problem p = oriented(stand_in_problem(problems[i], device));  // as gemm() runs it
    const std::string bar = progress.counter(i + 1);
    if (p.m == 0 || p.n == 0 || p.batch == 0 || problem_config(p).kind != KernelKind::tma) {
      progress.note(bar + " " + name + ": nothing to tune (empty, or run by the GEMV or fallback kernel)");
      progress.done("");
      continue;
    }
    const tuning::TuneResult result = tuning::tune(p, prepare_candidate);
    const tuning::Timed& best = result.timed.front();
    if (!tuning::store_winner(p, info, best.config, best.us)) {
      throw Error(ErrorCode::io_error, "tune: cannot write the tuning database " + db.path().string());
    }
    TuneRecord record{name, best.config.name(), result.first_pick.config.name(), best.us, result.first_pick.us,
                      int(result.timed.size())};
    char line[256];
    std::snprintf(line, sizeof line, "%s %s: best %s %.2f us of %d candidates; model's pick %.2fx", bar.c_str(), name.c_str(),
                  record.best_config.c_str(), record.best_us, record.candidates, record.pick_us / record.best_us);
    progress.done(line);
    records.push_back(record);
  }
  progress.finish();

  const PickSummary summary = summarize_picks(records);
  std::printf("%s", format_tune_table(records).c_str());
  if (!json.empty()) write_json(json, tune_json(records, summary), "tune");
  std::printf("%s\n", format_pick_summary(summary).c_str());
  return 0;
}

}  // namespace gemmkit::tools
