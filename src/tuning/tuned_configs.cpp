#include "tuning/tuned_configs.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "gemmkit/error.h"
#include "gemmkit/tuning.h"
#include "tuning/autotuner.h"

#ifndef GEMMKIT_VERSION
#error "GEMMKIT_VERSION must be defined by the build"
#endif

namespace gemmkit {
namespace {

std::atomic<uint64_t> tuning_generation{0};

TuningMode mode_from_environment() {
  const char* value = std::getenv("GEMMKIT_TUNING");
  const std::string_view text = value ? value : "";
  if (text.empty() || text == "database") return TuningMode::database;
  if (text == "off") return TuningMode::off;
  if (text == "online") return TuningMode::online;
  throw Error(ErrorCode::invalid_argument,
              "GEMMKIT_TUNING: got \"" + std::string(text) + "\"; expected off, database or online");
}

// Read from the environment on first use; set_tuning_mode replaces it.
std::atomic<int>& mode_slot() {
  static std::atomic<int> slot{int(mode_from_environment())};
  return slot;
}

}  // namespace

TuningMode tuning_mode() { return TuningMode(mode_slot().load(std::memory_order_relaxed)); }

void set_tuning_mode(TuningMode mode) {
  mode_slot().store(int(mode), std::memory_order_relaxed);
  tuning_generation.fetch_add(1, std::memory_order_release);
}

}  // namespace gemmkit

namespace gemmkit::tuning {
namespace {

const char* store_name(const KernelConfig& c) {
  return !c.tma_store ? "direct" : c.d_by_columns ? "tma-columns" : "tma";
}

}  // namespace

TuningDatabase& database() {
  static TuningDatabase db(TuningDatabase::default_path());
  return db;
}

uint64_t generation() { return tuning_generation.load(std::memory_order_acquire); }

std::string scope(const runtime::DeviceInfo& info) {
  return info.name + "|sm_" + std::to_string(info.cc_major) + std::to_string(info.cc_minor) + "|gemmkit " +
         GEMMKIT_VERSION;
}

int64_t m_bucket(int64_t m) {
  int64_t bucket = 1;
  while (bucket < m) bucket *= 2;
  return bucket;
}

std::string problem_key(const Problem& p) {
  const KernelConfig base = problem_config(p);
  std::ostringstream key;
  key << (base.a_k_major ? 'K' : 'M') << (base.b_k_major ? 'K' : 'N') << ' ' << dtype_name(base.in);
  if (is_fp8(base.in)) {
    key << '*' << dtype_name(base.in_b) << " scales" << int(base.scale_a) << '.' << base.scale_a_mn << '/'
        << int(base.scale_b) << '.' << base.scale_b_mn;
  }
  key << '>' << dtype_name(base.out) << " c" << (base.has_c ? dtype_name(base.c) : "-") << " b" << base.a_batched
      << base.b_batched << ' ' << store_name(base) << " n" << p.n << " k" << p.k << " batch" << p.batch << " m"
      << m_bucket(p.m);
  return key.str();
}

std::string tuned_fields(const KernelKnobs& knobs) {
  std::ostringstream text;
  text << knobs.tile_m << 'x' << knobs.tile_n << " s" << knobs.stages << " g" << knobs.group_m << " c"
       << knobs.cluster_m << " k" << knobs.splits << " b" << knobs.store_buffers;
  return text.str();
}

std::optional<KernelConfig> with_tuned_fields(KernelConfig base, std::string_view text) {
  std::istringstream in{std::string(text)};
  KernelKnobs knobs;
  char x = 0, s = 0, g = 0, c = 0, k = 0, b = 0;
  in >> knobs.tile_m >> x >> knobs.tile_n >> s >> knobs.stages >> g >> knobs.group_m >> c >> knobs.cluster_m >> k >>
      knobs.splits >> b >> knobs.store_buffers;
  const bool parsed = bool(in) && (in >> std::ws).eof() && x == 'x' && s == 's' && g == 'g' && c == 'c' &&
                      k == 'k' && b == 'b';
  if (!parsed) return std::nullopt;
  static_cast<KernelKnobs&>(base) = knobs;
  return with_tile(base, {knobs.tile_m, knobs.tile_n});
}

std::optional<KernelConfig> tuned_config(const Problem& p, const runtime::DeviceInfo& info,
                                         const TuningDatabase& db) {
  const KernelConfig base = problem_config(p);
  if (base.kind != KernelKind::tma) return std::nullopt;
  const std::optional<TuningEntry> entry = db.find(scope(info), problem_key(p));
  if (!entry) return std::nullopt;
  const std::optional<KernelConfig> config = with_tuned_fields(base, entry->config);
  if (!config || !fits(*config, {info.sm_count, info.smem_per_block_optin})) return std::nullopt;
  return config;
}

bool store_winner(const Problem& p, const runtime::DeviceInfo& info, const KernelConfig& config, double us,
                  TuningDatabase& db) {
  const bool stored = db.put(scope(info), problem_key(p), {tuned_fields(config), us});
  tuning_generation.fetch_add(1, std::memory_order_release);
  return stored;
}

std::optional<KernelConfig> tuned_online(const Problem& p, const runtime::DeviceInfo& info, TuningDatabase& db,
                                         const std::function<TuneResult(const Problem&)>& tuner) {
  // One tuning at a time, so that tunings do not share the GPU and skew each other's timings;
  // a thread that waited finds the winner another one stored.
  static std::mutex tuning;
  std::lock_guard<std::mutex> lock(tuning);
  if (auto tuned = tuned_config(p, info, db)) return tuned;
  try {
    const TuneResult result = tuner(p);
    // Where the file cannot be written, db keeps the winner in memory (and says so once).
    store_winner(p, info, result.timed.front().config, result.timed.front().us, db);
    return result.timed.front().config;
  } catch (const Error& e) {
    // Tuning is an optimisation: the call goes on with the cost model's pick.
    std::fprintf(stderr, "gemmkit: online tuning of %s failed (%s); using the cost model's pick\n",
                 problem_key(p).c_str(), e.what());
    return std::nullopt;
  }
}

Dispatch dispatch_config(const Problem& p, const runtime::DeviceInfo& info, cudaStream_t stream,
                         const CandidateRunner& runner) {
  const DeviceLimits limits{info.sm_count, info.smem_per_block_optin, info.l2_bytes};
  const TuningMode mode = tuning_mode();
  // Dual GEMMs and 4-bit weights have no tuned class of their own yet: the cost model picks their tiles.
  const KernelConfig facts = problem_config(p);
  if (mode == TuningMode::off || p.dual() || facts.widens() || facts.kind != KernelKind::tma) {
    return {choose_config(p, limits), false};
  }
  if (auto tuned = tuned_config(p, info)) return {*tuned, true};
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  // Online tuning times the candidates on scratch operands; a fused epilogue would write its outputs
  // into the caller's tensors meanwhile: it takes the tuned knobs of its class, or the cost model's.
  if (mode != TuningMode::online || p.epilogue.fused() || cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone) {
    return {choose_config(p, limits), false};
  }
  const auto tuner = [&runner](const Problem& q) { return tune(q, runner); };
  if (auto tuned = tuned_online(p, info, database(), tuner)) return {*tuned, true};
  return {choose_config(p, limits), false};
}

}  // namespace gemmkit::tuning
