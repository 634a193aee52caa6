// Which kernel configuration gemmkit::gemm runs for a problem: the cost model's pick, or the
// fastest one measured on this kind of device, from the tuning database.
//
// The database is a file ($GEMMKIT_TUNING_DB, by default tuning.db in the kernel cache
// directory) that holds a winner per device name, compute capability, gemmkit version and
// problem class: layout, types, N, K, batch and the bucket of M (M rounded up to a power of
// two), so that a model run at many batch sizes gets a kernel tuned for each. `gemmkit tune
// --suite FILE` fills it; gemm() reads it on first use. Several processes may share it.
#pragma once

namespace gemmkit {

enum class TuningMode {
  off,       // always the cost model's pick; the database is not read
  database,  // the database's winner for the problem's class where it has one, else the
             // cost model's pick (the default)
  online,    // as database, and a class without a winner is tuned on its first call: that
             // call times the candidates on scratch buffers of its own (it synchronises the
             // device and can take seconds), stores the winner and uses it
};

// The mode starts as $GEMMKIT_TUNING says: "off", "database" or "online" (unset or empty:
// database); any other value makes this, and so gemm(), throw Error(invalid_argument).
// Online tuning is skipped for calls on a stream that is being captured into a CUDA graph.
TuningMode tuning_mode();

// Sets the mode for every thread of the process; plans made under the old mode are dropped.
void set_tuning_mode(TuningMode mode);

}  // namespace gemmkit
