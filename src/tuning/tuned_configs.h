// What dispatch asks of tuning: the mode, the process's tuning database, the problem class a
// winner is stored under, and the config to run for a problem.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "dispatch/cost_model.h"
#include "dispatch/operand_access.h"
#include "runtime/device.h"
#include "tuning/autotuner.h"
#include "tuning/tuning_db.h"

namespace gemmkit::tuning {

// The database of this process, at TuningDatabase::default_path(), read on first use.
TuningDatabase& database();

// Changes whenever what dispatch would choose may have changed (the mode was set, a winner
// was stored in this process): plan caches made under another generation are stale.
uint64_t generation();

// "NVIDIA H100 80GB HBM3|sm_90|gemmkit 0.1.0": what a winner is only valid for.
std::string scope(const runtime::DeviceInfo& info);

// The bucket a runtime M falls in: M rounded up to a power of two.
int64_t m_bucket(int64_t m);

// The class of a normalised problem, e.g. "KK bf16>bf16 c- b00 tma n7168 k2048 batch1 m64":
// majorness, types, C, batching and store path (from problem_config), N, K, batch, M's bucket.
std::string problem_key(const Problem& p);

// A config's knobs as text, e.g. "128x256 s4 g8 c2 k1 b2" (tile, stages, raster group, cluster,
// split count, store buffers), and that text applied back onto the facts of a problem's config
// (nullopt if it does not parse).
std::string tuned_fields(const KernelKnobs& knobs);
std::optional<KernelConfig> with_tuned_fields(KernelConfig base, std::string_view text);

// `db`'s winner for a normalised problem's class on this device, if it has one that fits;
// nullopt also where the problem needs the fallback kernel.
std::optional<KernelConfig> tuned_config(const Problem& p, const runtime::DeviceInfo& info,
                                         const TuningDatabase& db = database());

// Stores `config`, timed at `us`, in `db` as the winner of p's class on this device. Returns
// false when the database file cannot be written; `db` keeps the winner in memory all the same.
bool store_winner(const Problem& p, const runtime::DeviceInfo& info, const KernelConfig& config, double us,
                  TuningDatabase& db = database());

// Online tuning of a normalised problem the TMA kernel runs: `db`'s winner for p's class, else
// the fastest config `tuner` (tune() in the library) times, stored in `db` as the winner, so
// that a class is tuned once per process even where the file cannot be written. Tunings run
// one at a time. nullopt where the tuner throws gemmkit::Error, with a line on stderr.
std::optional<KernelConfig> tuned_online(const Problem& p, const runtime::DeviceInfo& info, TuningDatabase& db,
                                         const std::function<TuneResult(const Problem&)>& tuner);

struct Dispatch {
  KernelConfig config;
  bool tuned = false;  // from the database, or tuned online by this call
};

// The config gemm() runs for a normalised problem on `info`'s device under the tuning mode.
// `stream` is the caller's: online tuning is skipped while it is being captured. Online tuning
// times candidates with `runner` (tune()).
Dispatch dispatch_config(const Problem& p, const runtime::DeviceInfo& info, cudaStream_t stream,
                         const CandidateRunner& runner);

}  // namespace gemmkit::tuning
