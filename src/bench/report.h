// Benchmark results: per-shape records, a text table, a one-line summary and JSON; the same for
// bench --overhead's host times.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gemmkit/gemm.h"

namespace gemmkit::tools {

struct BenchRecord {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  std::string layout, dtype;  // dtype as type_spec(): dtype_spec(), then FP8's mode ("e4m3:bf16 block")
  // Medians in microseconds. baseline_us is NaN when cuBLASLt has no algorithm for the shape.
  double ours_us = 0, baseline_us = 0;
  // Empty where cuBLASLt ran the same problem; else what it ran instead, e.g. "per-tensor
  // stand-in" where it rejects an FP8 row's scaling and ran per-tensor scales on the same shape.
  std::string baseline_note;
  double speedup = 0;           // baseline_us / ours_us (NaN if baseline missing)
  double tflops = 0, gbps = 0;  // of our kernel
  // Median of a device-to-device copy that moves as many bytes (half read, half written): what
  // moving this problem's bytes costs at its size, launch and ramp-up included. NaN: not timed.
  double copy_us = std::numeric_limits<double>::quiet_NaN();
  std::string config;           // our kernel configuration, e.g. "tma 128x256x64 s4"
  // bench --epilogue or a suite's `epilogue` line: the text fused into our side (empty: none);
  // ours_us is then our GEMM with it, unfused_us our GEMM without it on the same buffers (NaN:
  // not timed).
  std::string epilogue;
  double unfused_us = std::numeric_limits<double>::quiet_NaN();
  // The baseline's own fused epilogue where one computes `epilogue` (bench: cuBLASLt's, matched
  // by baseline/cublaslt_epilogue.h): its name, e.g. "GELU_AUX_BIAS" (empty: none matches), and
  // its median on the same buffers (NaN: no match, or the baseline could not run it).
  std::string baseline_epilogue;
  double baseline_fused_us = std::numeric_limits<double>::quiet_NaN();
  // A line with 4-bit weights (bench: cuBLASLt has no such GEMM) against dense GEMMs of its shape,
  // layout, batch and output type, each on buffers of its own: both operands 16-bit (A's type,
  // bf16 for an e4m3 A), ours and cuBLASLt's (which bench also makes baseline_us, noted), and
  // both operands e4m3 with per-tensor scales (W4A8 lines: scaled as A is), ours and cuBLASLt's
  // (a W4A8 line's baseline_us, noted, where it ran). NaN: not such a line, or the baseline could
  // not run it.
  double dense16_us = std::numeric_limits<double>::quiet_NaN();
  double dense16_baseline_us = std::numeric_limits<double>::quiet_NaN();
  double fp8_us = std::numeric_limits<double>::quiet_NaN();
  double fp8_baseline_us = std::numeric_limits<double>::quiet_NaN();
};

// A line with 4-bit weights, which the baseline cannot run: the medians of the dense GEMMs of its
// shape (BenchRecord::dense16_us and the rest; NaN where not run), and the baseline's 16-bit one
// as its baseline_us and speedup, noted "16-bit GEMM of the same shape" where it ran.
void set_dense_times(BenchRecord& r, double dense16_us, double dense16_baseline_us, double fp8_us,
                     double fp8_baseline_us);

// The same for a W4A8 line (e4m3 activations against 4-bit weights), except that the baseline's
// FP8 GEMM is its baseline_us where it ran, noted "FP8 GEMM of the same shape, " and `fp8_scaling`
// (how the baseline scaled it, e.g. "rowwise scales"); where it did not, its 16-bit one, as
// set_dense_times has it.
void set_w4a8_dense_times(BenchRecord& r, double dense16_us, double dense16_baseline_us, double fp8_us,
                          double fp8_baseline_us, const std::string& fp8_scaling);

// The configuration gemmkit::gemm picks for a problem on the current device, with " tuned"
// appended where it is a tuning winner: a record's config.
std::string chosen_config(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options);

// 2*M*N*K*batch floating-point operations in `us` microseconds, in TFLOP/s.
double gemm_tflops(int64_t m, int64_t n, int64_t k, int64_t batch, double us);
// A, B (in_bytes per element) and D (out_bytes) each moved once per batch entry, in GB/s (1e9).
double gemm_gbps(int64_t m, int64_t n, int64_t k, int64_t batch, int in_bytes, int out_bytes,
                 double us);

// A device-to-device copy of `bytes` in `us` microseconds; each byte is read and written, so
// both count. In GB/s (1e9).
double copy_gbps(double bytes, double us);
// gbps as a fraction of the copy bandwidth; NaN when either is unknown (NaN) or copy_gbps <= 0.
double copy_fraction(double gbps, double copy_gbps);
// Our bandwidth as a fraction of a copy's that moves as many bytes: copy_us / ours_us; NaN when
// either is unknown or not positive.
double sized_copy_fraction(const BenchRecord& r);
// "copy bandwidth 3012 GB/s (device-to-device, read + write)", or "copy bandwidth unknown".
std::string format_copy_bandwidth(double copy_gbps);

// "MxNxK", with "xB" appended when batch > 1.
std::string shape_name(const BenchRecord& r);

// Aligned text table, a header row first; missing values print as "-". The "%copy" column is
// each record's GB/s as a percentage of copy_gbps (NaN: not measured), "%copy@size" the same
// against a copy of the record's own size (sized_copy_fraction). A record with a baseline_note
// has "*" after its baseline time, and a line "* <baseline> us: <note>" follows the table for
// each distinct note. `baseline` names what the records' baseline_us timed (the CLI's cuBLASLt;
// torch in the Python package's bench). Where a record has a dense16_us (4-bit weights), three
// columns follow the speedup: our 16-bit and FP8 GEMMs of its shape ("16-bit us", "fp8 us") and
// the baseline's FP8 one ("cuBLASLt-fp8 us"). Where a record has an epilogue, two columns follow
// those: the baseline's fused time ("cuBLASLt-fused us") and ours (fused) over it.
std::string format_table(const std::vector<BenchRecord>& records, double copy_gbps,
                         const std::string& baseline = "cuBLASLt");

// Over the records with a finite, positive speedup, whatever cuBLASLt ran. With none: count 0
// and NaN values.
struct BenchSummary {
  double geomean_speedup;
  std::string worst_shape;  // e.g. "4096x2112x7168 NT bf16", then " (<baseline_note>)" if any
  double worst_speedup;
  int count;
  int stand_ins = 0;  // how many of the count have a baseline_note (cuBLASLt ran a stand-in)
};
BenchSummary summarize(const std::vector<BenchRecord>& records);

// One line, e.g. "summary: 18 shapes, geomean speedup 1.03x over cuBLASLt, worst 0.91x at ...";
// with stand-ins, "over cuBLASLt (6 of them against a stand-in), worst ...".
std::string format_summary(const BenchSummary& s, const std::string& baseline = "cuBLASLt");

// A line per epilogue text, in order of first appearance, over the records timed both ways:
// "fused epilogue 'TEXT': 18 shapes, fused over unfused 1.021x geomean, worst 1.068x at
// 4096x28672x4096 NT bf16" (our time with the epilogue over our time without; above 1 it costs),
// then, over the records with the baseline's fused time, "; 18 shapes, fused over cuBLASLt's
// GELU_BIAS 0.970x geomean, worst 1.010x at ..." (below 1 ours is faster); each line ending in a
// newline. Empty where no record has either.
std::string format_fused_summary(const std::vector<BenchRecord>& records, const std::string& baseline = "cuBLASLt");

// {"records": [{m, n, k, batch, layout, dtype, ours_us, baseline_us, baseline_note, speedup,
// tflops, gbps, copy_fraction, copy_us, sized_copy_fraction, config, unfused_us, epilogue,
// baseline_epilogue, baseline_fused_us, fused_over_baseline_fused, dense16_us,
// dense16_baseline_us, fp8_us, fp8_baseline_us}, ...], "summary": {count, stand_ins,
// geomean_speedup, worst_shape, worst_speedup, copy_gbps, baseline}}; NaN and empty texts
// (baseline_note, epilogue, baseline_epilogue) are null.
nlohmann::json to_json(const std::vector<BenchRecord>& records, const BenchSummary& s,
                       double copy_gbps, const std::string& baseline = "cuBLASLt");

// One grouped row of bench (a suite's `grouped` line, bench/suite.h): gemmkit::grouped_gemm
// against two floors, the dense GEMM of every group's rows at once and moving the row's bytes at
// the copy bandwidth, and against a baseline, cuBLAS's grouped GEMM (torch's in the Python
// package's bench).
struct GroupedRecord {
  std::string op;                           // fwd, dgrad, wgrad or masked
  int64_t groups = 0, m = 0, n = 0, k = 0;  // the line's G, M (masked: max_m), N and K
  std::string dtype;                        // as type_spec()
  std::string dist;                         // as dist_spec(), e.g. "skew:10"
  int64_t rows = 0;   // every group's rows together: the work is 2 * rows * N * K flops
  double bytes = 0;   // what the groups' GEMMs read and write at the least (GroupedProblem::bytes)
  // Medians in microseconds: ours, the dense floor, the baseline. NaN where not timed: every time
  // of a row not run, baseline_us where the baseline cannot run the row.
  double ours_us = std::numeric_limits<double>::quiet_NaN();
  double dense_us = std::numeric_limits<double>::quiet_NaN();
  double baseline_us = std::numeric_limits<double>::quiet_NaN();
  // The line's fused epilogue (bench/suite.h; empty: none), which ours_us includes, and our
  // grouped GEMM without it (NaN without an epilogue).
  std::string epilogue;
  double unfused_us = std::numeric_limits<double>::quiet_NaN();
  // Why the row ("not run: ...") or its baseline is missing, or what the baseline ran instead of
  // the row's own product; empty where both ran it.
  std::string note;
  // Empty where the baseline ran the row; else the stand-in it is, set by set_grouped_stand_in:
  // a row with 4-bit weights has gemmkit's grouped GEMM of the same groups in 16-bit or FP8 as
  // its baseline, starred in the table as a dense row's stand-in is.
  std::string baseline_note;
};

// A grouped row with 4-bit weights, for which no cuBLAS grouped GEMM exists: gemmkit's own grouped
// GEMM of the same groups (grouped_stand_in) timed at `us` becomes its baseline_us, noted
// "gemmkit's 16-bit grouped GEMM of the same groups" (`fp8_scaling` empty: a W4A16 row's, or a
// W4A8 row's where the FP8 one did not run) or "gemmkit's FP8 grouped GEMM of the same groups, "
// and `fp8_scaling` (e.g. "rowwise scales"), as set_w4a8_dense_times notes a dense W4A8 line's.
// NaN: no baseline and no note.
void set_grouped_stand_in(GroupedRecord& r, double us, const std::string& fp8_scaling);

// Moving `bytes` at the copy bandwidth (copy_gbps counts each byte read and written), in
// microseconds; NaN when the bandwidth is unknown.
double memory_floor_us(double bytes, double copy_gbps);
// The larger floor (dense GEMM or memory) over our time: 1 at the floor; NaN where we did not
// run or neither floor is known.
double roofline_fraction(const GroupedRecord& r, double copy_gbps);
// The memory floor over our time: the share of the copy bandwidth our time moves the row's bytes
// at (a dense row's %copy); NaN where we did not run or the bandwidth is unknown.
double memory_fraction(const GroupedRecord& r, double copy_gbps);
// baseline_us / ours_us; NaN when either is unknown.
double grouped_speedup(const GroupedRecord& r);
// "fwd G=8 32768x4096x7168 bf16 skew:10"
std::string grouped_name(const GroupedRecord& r);

// Aligned table, one row per record: op, G, MxNxK, dtype, dist, ours us and TFLOP/s, the dense
// and memory floors, the memory floor's share of our time (%memory), the roofline fraction, the
// baseline's us (the column named after `baseline`) and the speedup over it. A record with a
// baseline_note has "*" after its baseline time, and a line "* <baseline> us: <note>" follows
// the table for each distinct one; a record with a note has its number ([1], [2], ...) in the
// last column, and a line "[n] <note>" follows for each distinct note. Missing values print as
// "-".
std::string format_grouped_table(const std::vector<GroupedRecord>& records, double copy_gbps,
                                 const std::string& baseline = "cuBLAS");

// The geometric mean and the smallest of some ratios, over the finite, positive ones, and what
// the smallest names. With none: count 0 and NaN values.
struct RatioSummary {
  int count = 0;
  double geomean = std::numeric_limits<double>::quiet_NaN();
  double worst = std::numeric_limits<double>::quiet_NaN();
  std::string worst_name;
};

// Over grouped records: the roofline fractions of the rows run, and the speedups over the
// baseline of those it ran too. Rows not run count in neither.
struct GroupedSummary {
  RatioSummary roofline, speedup;
  int stand_ins = 0;  // of speedup's count, the rows whose baseline is a stand-in (baseline_note)
  RatioSummary fused;  // ours over our unfused time, on rows with an epilogue (the highest worst)
};
GroupedSummary summarize_grouped(const std::vector<GroupedRecord>& records, double copy_gbps);

// Two lines: "grouped summary: 21 rows run, geomean roofline fraction 0.81, worst 0.52 at <row>"
// and "grouped summary: 14 rows with a cuBLAS baseline, geomean speedup 1.20x, worst 0.95x at
// <row>" (`baseline` naming it; with stand-ins, "baseline (6 of them against a stand-in),
// geomean ...", and a worst row against one named with its baseline_note, as format_summary has
// them); "no rows run" / "no rows with a cuBLAS baseline" where there are none. Where rows have an epilogue, a third: "grouped summary: 4 rows with a fused epilogue,
// geomean fused over unfused 1.012x, worst 1.030x at <row>".
std::string format_grouped_summary(const GroupedSummary& s, const std::string& baseline = "cuBLAS");

// {"records": [{op, groups, m, n, k, dtype, dist, rows, bytes, ours_us, tflops, dense_us,
// memory_us, memory_fraction, roofline_fraction, baseline_us, baseline_note, speedup, epilogue,
// unfused_us, fused_over_unfused, note}, ...], "summary": {"roofline": {count, geomean, worst,
// worst_row}, "speedup": {the same, and stand_ins}, "fused": {as roofline}, baseline}}; NaN and
// empty texts (note, baseline_note, epilogue) are null.
nlohmann::json grouped_json(const std::vector<GroupedRecord>& records, const GroupedSummary& s, double copy_gbps,
                            const std::string& baseline = "cuBLAS");

// One chain of bench --chain: its GEMMs replayed from one CUDA graph per side.
struct ChainRecord {
  std::string name;  // the chain file's name without directory and extension, e.g. "llama3-8b-m1"
  int gemms = 0;     // GEMMs per replay: the layer's, times the layers
  double bytes = 0;  // A, B and D of every GEMM: what a replay reads and writes at the least
  // Medians in microseconds per replay: baseline_us NaN where cuBLASLt cannot run a GEMM of the
  // chain, copy_us where no copy of `bytes` was timed.
  double ours_us = 0;
  double baseline_us = std::numeric_limits<double>::quiet_NaN();
  double copy_us = std::numeric_limits<double>::quiet_NaN();
};

// baseline_us / ours_us; NaN when either is unknown or not positive.
double chain_speedup(const ChainRecord& r);

// Aligned table, one row per chain: GEMMs, MB, both sides' us per replay, speedup, and the share
// of the copy each side reaches (copy_us / its us, in percent); missing values print as "-".
std::string format_chain_table(const std::vector<ChainRecord>& records);

// As summarize(), over the chains with a finite, positive speedup; worst_shape names a chain.
BenchSummary summarize_chains(const std::vector<ChainRecord>& records);

// "summary: 8 chains, geomean speedup 1.02x over cuBLASLt, worst 0.95x at llama3-8b-m1".
std::string format_chain_summary(const BenchSummary& s);

// {"chains": [{name, gemms, bytes, ours_us, baseline_us, speedup, copy_us, ours_copy_fraction,
// baseline_copy_fraction}, ...], "summary": {count, geomean_speedup, worst_chain, worst_speedup,
// baseline}}; NaN is null.
nlohmann::json chain_json(const std::vector<ChainRecord>& records, const BenchSummary& s);

// How many buffer sets of `set_bytes` a bench problem cycles through: enough to cover 3x the L2,
// so that no run finds the previous run's operands there, within half the free memory, 1 to 64.
int buffer_set_count(double set_bytes, double l2_bytes, double free_bytes);

// Host time per call of gemmkit::gemm and of cuBLASLt on one small problem (bench --overhead),
// and of a bare launch: an empty kernel with our kernel's parameter block, grid and block,
// launched as ours is, the floor under our time.
struct OverheadResult {
  std::string shape;  // e.g. "64x64x64 NT bf16"
  int calls = 0;      // back-to-back calls per repeat
  // Microseconds per call, one value per repeat; baseline_us is empty when cuBLASLt cannot run
  // the problem.
  std::vector<double> ours_us, baseline_us, bare_us;
};

// One row per side (ours, cuBLASLt, bare launch): median, min and max microseconds per call over
// the repeats.
std::string format_overhead_table(const OverheadResult& r);

// "overhead: ours 2.41 us per call, cuBLASLt 4.87 us per call, bare launch 1.90 us per call;
// ours - bare 0.51 us, ours / cuBLASLt 0.49x (64x64x64 NT bf16, 2000 calls x 5, median)"; without
// a baseline, "cuBLASLt cannot run it" and no ratio.
std::string format_overhead_summary(const OverheadResult& r);

// {"overhead": {ours_us, baseline_us, bare_us, ours_minus_bare_us, ours_over_baseline, calls,
// repeats, shape}}, medians; what is missing (no baseline) is null.
nlohmann::json overhead_json(const OverheadResult& r);

// One problem of `gemmkit tune`: the tuned best and the cost model's untuned pick.
struct TuneRecord {
  std::string shape;  // e.g. "4096x2112x7168 NT bf16"
  std::string best_config, pick_config;
  double best_us = 0, pick_us = 0;  // medians
  int candidates = 0;
};

// How far the cost model's pick is from the tuned best (pick_us / best_us, 1 when it is the
// best) over the records: median, 90th percentile (nearest rank), worst, and how many are
// within 10%. With no records: count 0 and NaN values.
struct PickSummary {
  int count = 0;
  double median = 0, p90 = 0, worst = 0;
  std::string worst_shape;
  int within_10_percent = 0;
};
PickSummary summarize_picks(const std::vector<TuneRecord>& records);

// Aligned table: shape, best config and us, the model's pick and us, pick / best.
std::string format_tune_table(const std::vector<TuneRecord>& records);

// "cost model's pick against the tuned best over 54 problems: median 1.00x, p90 1.06x, worst
// 1.21x at 128x7168x16384 NT bf16; 50 of 54 within 10%".
std::string format_pick_summary(const PickSummary& s);

// {"records": [{shape, best_config, best_us, pick_config, pick_us, pick_over_best,
// candidates}, ...], "summary": {count, median, p90, worst, worst_shape, within_10_percent}}.
nlohmann::json tune_json(const std::vector<TuneRecord>& records, const PickSummary& s);

// bench --hint-matrix: the kernel tuned for M = hint run at M = m, pinned, and gemm()
// dispatching by m's bucket.
struct HintCell {
  int64_t hint = 0, m = 0;
  double pinned_us = 0, dispatch_us = 0;
};

// One row per hint, one column per runtime M, each cell "pinned / dispatch" microseconds.
std::string format_hint_matrix(const std::vector<HintCell>& cells);

// {"cells": [{hint, m, pinned_us, dispatch_us}, ...]}; NaN is null.
nlohmann::json hint_matrix_json(const std::vector<HintCell>& cells);

}  // namespace gemmkit::tools
