#include "bench/report.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <limits>
#include <utility>

#include "api/prepare.h"
#include "dispatch/plan.h"
#include "tuning/gpu_timer.h"

namespace gemmkit::tools {

using tuning::median;

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// printf-style formatting of one number; NaN (no measurement) prints as "-".
std::string num(const char* fmt, double v) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// Explicit null, so readers see null rather than a NaN number that only dump() hides.
nlohmann::json json_num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

// An empty text (none) as null.
nlohmann::json json_text(const std::string& text) { return text.empty() ? nlohmann::json(nullptr) : nlohmann::json(text); }

using Row = std::vector<std::string>;

// Rows padded to their columns' widths; left(c) says which columns align left (text), the rest
// align right (numbers).
std::string align_columns(const std::vector<Row>& rows, const std::function<bool(size_t)>& left) {
  const size_t cols = rows[0].size();
  std::vector<size_t> width(cols, 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < cols; ++c) width[c] = std::max(width[c], row[c].size());

  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < cols; ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      if (c > 0) line += "  ";
      line += left(c) ? row[c] + pad : pad + row[c];
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }
  return out;
}

double min_of(const std::vector<double>& v) {
  return v.empty() ? nan : *std::min_element(v.begin(), v.end());
}

double max_of(const std::vector<double>& v) {
  return v.empty() ? nan : *std::max_element(v.begin(), v.end());
}

// A copy bandwidth that is NaN, infinite or not positive was not measured.
bool measured(double copy_gbps) { return std::isfinite(copy_gbps) && copy_gbps > 0; }

// num / den of two times; NaN when either is unknown (NaN) or not positive.
double ratio(double num, double den) {
  const bool known = std::isfinite(num) && num > 0 && std::isfinite(den) && den > 0;
  return known ? num / den : nan;
}

// A ratio that has a place in a geomean: not missing (NaN) nor nonsensical.
bool usable(double ratio) { return std::isfinite(ratio) && ratio > 0; }

// Geomean and worst (the lowest, or the highest where higher is worse) over the usable ratios,
// each with what it names.
RatioSummary summarize_ratios(const std::vector<std::pair<std::string, double>>& ratios, bool higher_is_worse = false) {
  RatioSummary s;
  double log_sum = 0;
  for (const auto& [name, value] : ratios) {
    if (!usable(value)) continue;
    log_sum += std::log(value);
    if (s.count == 0 || (higher_is_worse ? value > s.worst : value < s.worst)) {
      s.worst = value;
      s.worst_name = name;
    }
    ++s.count;
  }
  if (s.count > 0) s.geomean = std::exp(log_sum / s.count);
  return s;
}

// One entry of a summary: what it names and its speedup over the baseline.
struct Speedup {
  std::string name;
  double value;
  bool stand_in;  // the baseline ran a stand-in
};

// What a summary calls a row whose baseline may have run a stand-in: its name, then
// " (<baseline_note>)" where it did.
Speedup speedup_entry(const std::string& name, double value, const std::string& baseline_note) {
  return {baseline_note.empty() ? name : name + " (" + baseline_note + ")", value, !baseline_note.empty()};
}

// The speedups' geomean and worst, and how many of those summarized ran against a stand-in.
std::pair<RatioSummary, int> summarize_speedup_ratios(const std::vector<Speedup>& speedups) {
  std::vector<std::pair<std::string, double>> ratios;
  int stand_ins = 0;
  for (const Speedup& e : speedups) {
    ratios.emplace_back(e.name, e.value);
    stand_ins += e.stand_in && usable(e.value);
  }
  return {summarize_ratios(ratios), stand_ins};
}

BenchSummary summarize_speedups(const std::vector<Speedup>& speedups) {
  const auto [r, stand_ins] = summarize_speedup_ratios(speedups);
  return {r.geomean, r.worst_name, r.worst, r.count, stand_ins};
}

// " (6 of them against a stand-in)", or nothing without stand-ins.
std::string stand_ins_text(int stand_ins) {
  return stand_ins == 0 ? "" : " (" + std::to_string(stand_ins) + " of them against a stand-in)";
}

// A table's baseline times that ran a stand-in: "*" after the time, and a line "* <baseline> us:
// <note>" under the table for each distinct note, in order of appearance.
class StandInNotes {
 public:
  std::string mark(const std::string& note) {
    if (note.empty()) return "";
    if (std::find(notes_.begin(), notes_.end(), note) == notes_.end()) notes_.push_back(note);
    return "*";
  }
  std::string lines(const std::string& baseline) const {
    std::string text;
    for (const std::string& note : notes_) text += "* " + baseline + " us: " + note + "\n";
    return text;
  }

 private:
  std::vector<std::string> notes_;
};

// "4096x2112x7168": the sizes joined by x. Appended piece by piece: GCC 12 warns (-Wrestrict,
// wrongly) about "x" + std::to_string(...).
std::string dims_text(std::initializer_list<int64_t> sizes) {
  std::string s;
  for (int64_t v : sizes) s.append(s.empty() ? "" : "x").append(std::to_string(v));
  return s;
}

// "[3]": the mark of a table's third note. Appended piece by piece, as dims_text is.
std::string note_mark(size_t number) { return std::string("[").append(std::to_string(number)).append("]"); }

// "4096x2112x7168 NT bf16": what a summary calls a record.
std::string record_name(const BenchRecord& r) { return shape_name(r) + " " + r.layout + " " + r.dtype; }

// Our fused time over another time of the same record (`of`: the unfused time, the baseline's
// fused time) on the records of one epilogue text; above 1 ours costs more, so the highest is
// the worst.
RatioSummary fused_ratios(const std::vector<BenchRecord>& records, const std::string& text, double BenchRecord::*of) {
  std::vector<std::pair<std::string, double>> ratios;
  for (const BenchRecord& r : records) {
    if (r.epilogue == text) ratios.emplace_back(record_name(r), ratio(r.ours_us, r.*of));
  }
  return summarize_ratios(ratios, /*higher_is_worse=*/true);
}

// The summary line; `noun` names what was counted ("shape", "chain").
std::string summary_line(const BenchSummary& s, const std::string& baseline, const std::string& noun) {
  if (s.count == 0) return "summary: no " + noun + "s with a " + baseline + " baseline";
  return "summary: " + std::to_string(s.count) + " " + noun + (s.count == 1 ? "" : "s") +
         ", geomean speedup " + num("%.2fx", s.geomean_speedup) + " over " + baseline + stand_ins_text(s.stand_ins) +
         ", worst " +
         num("%.2fx", s.worst_speedup) + " at " + s.worst_shape;
}

}  // namespace

void set_dense_times(BenchRecord& r, double dense16_us, double dense16_baseline_us, double fp8_us,
                     double fp8_baseline_us) {
  r.dense16_us = dense16_us;
  r.dense16_baseline_us = dense16_baseline_us;
  r.fp8_us = fp8_us;
  r.fp8_baseline_us = fp8_baseline_us;
  r.baseline_us = dense16_baseline_us;
  r.baseline_note = std::isnan(dense16_baseline_us) ? "" : "16-bit GEMM of the same shape";
  r.speedup = r.baseline_us / r.ours_us;  // as bench has it: NaN without a baseline
}

void set_w4a8_dense_times(BenchRecord& r, double dense16_us, double dense16_baseline_us, double fp8_us,
                          double fp8_baseline_us, const std::string& fp8_scaling) {
  set_dense_times(r, dense16_us, dense16_baseline_us, fp8_us, fp8_baseline_us);
  if (std::isnan(fp8_baseline_us)) return;
  r.baseline_us = fp8_baseline_us;
  r.baseline_note = "FP8 GEMM of the same shape, " + fp8_scaling;
  r.speedup = r.baseline_us / r.ours_us;
}

void set_grouped_stand_in(GroupedRecord& r, double us, const std::string& fp8_scaling) {
  r.baseline_us = us;
  r.baseline_note = std::isnan(us) ? ""
                    : fp8_scaling.empty()
                        ? "gemmkit's 16-bit grouped GEMM of the same groups"
                        : "gemmkit's FP8 grouped GEMM of the same groups, " + fp8_scaling;
}

std::string chosen_config(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options) {
  int device = 0;
  cudaGetDevice(&device);
  const api::PreparedGemm prepared = api::prepare_gemm(a, b, d, options, device);
  if (prepared.empty) return "none (empty)";
  const Plan plan = make_plan(prepared.problem);
  return plan.config.name() + (plan.transposed ? " transposed" : "") + (plan.tuned ? " tuned" : "") +
         (plan.widens_weights_first ? " on widened weights" : "");
}

double gemm_tflops(int64_t m, int64_t n, int64_t k, int64_t batch, double us) {
  // In double: 2*M*N*K*batch can overflow int64 for large batched shapes.
  const double flops = 2.0 * double(m) * double(n) * double(k) * double(batch);
  return flops / (us * 1e-6) / 1e12;
}

double gemm_gbps(int64_t m, int64_t n, int64_t k, int64_t batch, int in_bytes, int out_bytes,
                 double us) {
  const double per_batch = (double(m) * double(k) + double(k) * double(n)) * in_bytes +
                           double(m) * double(n) * out_bytes;
  return per_batch * double(batch) / (us * 1e-6) / 1e9;
}

double copy_gbps(double bytes, double us) { return 2.0 * bytes / (us * 1e-6) / 1e9; }

double copy_fraction(double gbps, double copy_gbps) {
  return measured(copy_gbps) ? gbps / copy_gbps : nan;
}

double sized_copy_fraction(const BenchRecord& r) { return ratio(r.copy_us, r.ours_us); }

std::string format_copy_bandwidth(double copy_gbps) {
  if (!measured(copy_gbps)) return "copy bandwidth unknown";
  return "copy bandwidth " + num("%.0f", copy_gbps) + " GB/s (device-to-device, read + write)";
}

std::string shape_name(const BenchRecord& r) {
  return r.batch > 1 ? dims_text({r.m, r.n, r.k, r.batch}) : dims_text({r.m, r.n, r.k});
}

std::string format_table(const std::vector<BenchRecord>& records, double copy_gbps, const std::string& baseline) {
  // The dense GEMMs of 4-bit weights' shapes have columns where some record has them, the
  // baseline's fused epilogue where some record has an epilogue.
  const bool dense =
      std::any_of(records.begin(), records.end(), [](const BenchRecord& r) { return std::isfinite(r.dense16_us); });
  const bool fused = std::any_of(records.begin(), records.end(), [](const BenchRecord& r) { return !r.epilogue.empty(); });
  Row header = {"shape", "layout", "dtype", "ours us", baseline + " us", "speedup"};
  if (dense) header.insert(header.end(), {"16-bit us", "fp8 us", baseline + "-fp8 us"});
  if (fused) header.insert(header.end(), {baseline + "-fused us", "ours/" + baseline + "-fused"});
  header.insert(header.end(), {"TFLOP/s", "GB/s", "%copy", "%copy@size", "config"});
  std::vector<Row> rows = {header};
  StandInNotes stand_ins;
  for (const auto& r : records) {
    Row row = {shape_name(r), r.layout, r.dtype, num("%.2f", r.ours_us),
               num("%.2f", r.baseline_us) + stand_ins.mark(r.baseline_note), num("%.2fx", r.speedup)};
    if (dense) row.insert(row.end(), {num("%.2f", r.dense16_us), num("%.2f", r.fp8_us), num("%.2f", r.fp8_baseline_us)});
    if (fused) row.insert(row.end(), {num("%.2f", r.baseline_fused_us), num("%.2fx", ratio(r.ours_us, r.baseline_fused_us))});
    row.insert(row.end(), {num("%.1f", r.tflops), num("%.1f", r.gbps), num("%.1f", 100 * copy_fraction(r.gbps, copy_gbps)),
                           num("%.1f", 100 * sized_copy_fraction(r)), r.config});
    rows.push_back(row);
  }
  // Text columns (the first three and config) align left, numbers right.
  const size_t config = rows[0].size() - 1;
  return align_columns(rows, [&](size_t c) { return c < 3 || c == config; }) + stand_ins.lines(baseline);
}

BenchSummary summarize(const std::vector<BenchRecord>& records) {
  std::vector<Speedup> speedups;
  for (const auto& r : records) speedups.push_back(speedup_entry(record_name(r), r.speedup, r.baseline_note));
  return summarize_speedups(speedups);
}

std::string format_summary(const BenchSummary& s, const std::string& baseline) { return summary_line(s, baseline, "shape"); }

std::string format_fused_summary(const std::vector<BenchRecord>& records, const std::string& baseline) {
  std::vector<std::string> texts;  // in order of first appearance
  for (const BenchRecord& r : records) {
    if (!r.epilogue.empty() && std::find(texts.begin(), texts.end(), r.epilogue) == texts.end()) texts.push_back(r.epilogue);
  }
  std::string lines;
  for (const std::string& text : texts) {
    std::string parts, baseline_epilogue;
    for (const BenchRecord& r : records) {
      if (r.epilogue == text && baseline_epilogue.empty()) baseline_epilogue = r.baseline_epilogue;
    }
    const auto part = [&](double BenchRecord::*of, const std::string& what) {
      const RatioSummary s = fused_ratios(records, text, of);
      if (s.count == 0) return;
      parts += (parts.empty() ? "" : "; ") + std::to_string(s.count) + " shapes, fused over " + what + " " +
               num("%.3fx", s.geomean) + " geomean, worst " + num("%.3fx", s.worst) + " at " + s.worst_name;
    };
    part(&BenchRecord::unfused_us, "unfused");
    part(&BenchRecord::baseline_fused_us, baseline + "'s " + baseline_epilogue);
    if (!parts.empty()) lines += "fused epilogue '" + text + "': " + parts + "\n";
  }
  return lines;
}

nlohmann::json to_json(const std::vector<BenchRecord>& records, const BenchSummary& s, double copy_gbps,
                       const std::string& baseline) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& r : records)
    list.push_back({{"m", r.m},
                    {"n", r.n},
                    {"k", r.k},
                    {"batch", r.batch},
                    {"layout", r.layout},
                    {"dtype", r.dtype},
                    {"ours_us", json_num(r.ours_us)},
                    {"baseline_us", json_num(r.baseline_us)},
                    {"baseline_note", json_text(r.baseline_note)},
                    {"speedup", json_num(r.speedup)},
                    {"tflops", json_num(r.tflops)},
                    {"gbps", json_num(r.gbps)},
                    {"copy_fraction", json_num(copy_fraction(r.gbps, copy_gbps))},
                    {"copy_us", json_num(r.copy_us)},
                    {"sized_copy_fraction", json_num(sized_copy_fraction(r))},
                    {"config", r.config},
                    {"unfused_us", json_num(r.unfused_us)},
                    {"epilogue", json_text(r.epilogue)},
                    {"baseline_epilogue", json_text(r.baseline_epilogue)},
                    {"baseline_fused_us", json_num(r.baseline_fused_us)},
                    {"fused_over_baseline_fused", json_num(ratio(r.ours_us, r.baseline_fused_us))},
                    {"dense16_us", json_num(r.dense16_us)},
                    {"dense16_baseline_us", json_num(r.dense16_baseline_us)},
                    {"fp8_us", json_num(r.fp8_us)},
                    {"fp8_baseline_us", json_num(r.fp8_baseline_us)}});
  nlohmann::json summary = {
      {"count", s.count},
      {"stand_ins", s.stand_ins},
      {"geomean_speedup", json_num(s.geomean_speedup)},
      {"worst_shape", s.count > 0 ? nlohmann::json(s.worst_shape) : nlohmann::json(nullptr)},
      {"worst_speedup", json_num(s.worst_speedup)},
      {"copy_gbps", json_num(measured(copy_gbps) ? copy_gbps : nan)},
      {"baseline", baseline}};
  return {{"records", list}, {"summary", summary}};
}

double memory_floor_us(double bytes, double copy_gbps) { return measured(copy_gbps) ? bytes / copy_gbps / 1e3 : nan; }

double roofline_fraction(const GroupedRecord& r, double copy_gbps) {
  // fmax takes the known floor where the other is NaN.
  return ratio(std::fmax(r.dense_us, memory_floor_us(r.bytes, copy_gbps)), r.ours_us);
}

double memory_fraction(const GroupedRecord& r, double copy_gbps) {
  return ratio(memory_floor_us(r.bytes, copy_gbps), r.ours_us);
}

double grouped_speedup(const GroupedRecord& r) { return ratio(r.baseline_us, r.ours_us); }

std::string grouped_name(const GroupedRecord& r) {
  return r.op + " G=" + std::to_string(r.groups) + " " + dims_text({r.m, r.n, r.k}) + " " + r.dtype + " " + r.dist +
         (r.epilogue.empty() ? "" : " [" + r.epilogue + "]");
}

std::string format_grouped_table(const std::vector<GroupedRecord>& records, double copy_gbps,
                                 const std::string& baseline) {
  std::vector<Row> rows = {{"op", "G", "MxNxK", "dtype", "dist", "ours us", "TFLOP/s", "dense us", "memory us",
                            "%memory", "roofline", baseline + " us", "speedup", "note"}};
  std::vector<std::string> notes;  // distinct, in order of appearance
  StandInNotes stand_ins;
  for (const GroupedRecord& r : records) {
    std::string marker;
    if (!r.note.empty()) {
      auto at = std::find(notes.begin(), notes.end(), r.note);
      if (at == notes.end()) at = notes.insert(at, r.note);
      marker = note_mark(at - notes.begin() + 1);
    }
    rows.push_back({r.op, std::to_string(r.groups), dims_text({r.m, r.n, r.k}), r.dtype, r.dist, num("%.2f", r.ours_us),
                    num("%.1f", gemm_tflops(r.rows, r.n, r.k, 1, r.ours_us)), num("%.2f", r.dense_us),
                    num("%.2f", memory_floor_us(r.bytes, copy_gbps)), num("%.1f", 100 * memory_fraction(r, copy_gbps)),
                    num("%.2f", roofline_fraction(r, copy_gbps)),
                    num("%.2f", r.baseline_us) + stand_ins.mark(r.baseline_note), num("%.2fx", grouped_speedup(r)),
                    marker});
  }
  // Text columns (op, MxNxK, dtype, dist, note) align left, numbers right.
  std::string table = align_columns(rows, [](size_t c) { return c == 0 || (c >= 2 && c <= 4) || c == 13; });
  table += stand_ins.lines(baseline);
  for (size_t i = 0; i < notes.size(); ++i) table += note_mark(i + 1) + " " + notes[i] + "\n";
  return table;
}

GroupedSummary summarize_grouped(const std::vector<GroupedRecord>& records, double copy_gbps) {
  std::vector<std::pair<std::string, double>> fractions;
  std::vector<Speedup> speedups;
  for (const GroupedRecord& r : records) {
    fractions.emplace_back(grouped_name(r), roofline_fraction(r, copy_gbps));
    speedups.push_back(speedup_entry(grouped_name(r), grouped_speedup(r), r.baseline_note));
  }
  const auto [speedup, stand_ins] = summarize_speedup_ratios(speedups);
  std::vector<std::pair<std::string, double>> fused;
  for (const GroupedRecord& r : records) {
    if (!r.epilogue.empty()) fused.emplace_back(grouped_name(r), ratio(r.ours_us, r.unfused_us));
  }
  return {summarize_ratios(fractions), speedup, stand_ins, summarize_ratios(fused, /*higher_is_worse=*/true)};
}

std::string format_grouped_summary(const GroupedSummary& s, const std::string& baseline) {
  // "N rows<which>, geomean <what> X, worst Y at <row>", or "no rows<which>".
  // (`extra` after <which> where there are rows.)
  const auto line = [](const RatioSummary& r, const std::string& which, const std::string& what, const char* format,
                       const std::string& extra = "") {
    if (r.count == 0) return "grouped summary: no rows" + which;
    return "grouped summary: " + std::to_string(r.count) + (r.count == 1 ? " row" : " rows") + which + extra +
           ", geomean " + what + " " + num(format, r.geomean) + ", worst " + num(format, r.worst) + " at " +
           r.worst_name;
  };
  std::string text = line(s.roofline, " run", "roofline fraction", "%.2f") + "\n" +
                     line(s.speedup, " with a " + baseline + " baseline", "speedup", "%.2fx", stand_ins_text(s.stand_ins));
  if (s.fused.count > 0) text += "\n" + line(s.fused, " with a fused epilogue", "fused over unfused", "%.3fx");
  return text;
}

nlohmann::json grouped_json(const std::vector<GroupedRecord>& records, const GroupedSummary& s, double copy_gbps,
                            const std::string& baseline) {
  nlohmann::json list = nlohmann::json::array();
  for (const GroupedRecord& r : records) {
    list.push_back({{"op", r.op},
                    {"groups", r.groups},
                    {"m", r.m},
                    {"n", r.n},
                    {"k", r.k},
                    {"dtype", r.dtype},
                    {"dist", r.dist},
                    {"rows", r.rows},
                    {"bytes", r.bytes},
                    {"ours_us", json_num(r.ours_us)},
                    {"tflops", json_num(gemm_tflops(r.rows, r.n, r.k, 1, r.ours_us))},
                    {"dense_us", json_num(r.dense_us)},
                    {"memory_us", json_num(memory_floor_us(r.bytes, copy_gbps))},
                    {"memory_fraction", json_num(memory_fraction(r, copy_gbps))},
                    {"roofline_fraction", json_num(roofline_fraction(r, copy_gbps))},
                    {"baseline_us", json_num(r.baseline_us)},
                    {"baseline_note", json_text(r.baseline_note)},
                    {"speedup", json_num(grouped_speedup(r))},
                    {"epilogue", json_text(r.epilogue)},
                    {"unfused_us", json_num(r.unfused_us)},
                    {"fused_over_unfused", json_num(ratio(r.ours_us, r.unfused_us))},
                    {"note", json_text(r.note)}});
  }
  const auto summary = [](const RatioSummary& r) {
    return nlohmann::json{{"count", r.count},
                          {"geomean", json_num(r.geomean)},
                          {"worst", json_num(r.worst)},
                          {"worst_row", r.count > 0 ? nlohmann::json(r.worst_name) : nlohmann::json(nullptr)}};
  };
  nlohmann::json speedup = summary(s.speedup);
  speedup["stand_ins"] = s.stand_ins;
  return {{"records", list},
          {"summary",
           {{"roofline", summary(s.roofline)}, {"speedup", speedup}, {"fused", summary(s.fused)},
            {"baseline", baseline}}}};
}

double chain_speedup(const ChainRecord& r) { return ratio(r.baseline_us, r.ours_us); }

std::string format_chain_table(const std::vector<ChainRecord>& records) {
  std::vector<Row> rows = {{"chain", "GEMMs", "MB", "ours us", "cuBLASLt us", "speedup", "ours %copy", "cuBLASLt %copy"}};
  for (const ChainRecord& r : records) {
    rows.push_back({r.name, std::to_string(r.gemms), num("%.1f", r.bytes / 1e6), num("%.2f", r.ours_us),
                    num("%.2f", r.baseline_us), num("%.2fx", chain_speedup(r)),
                    num("%.1f", 100 * ratio(r.copy_us, r.ours_us)), num("%.1f", 100 * ratio(r.copy_us, r.baseline_us))});
  }
  return align_columns(rows, [](size_t c) { return c == 0; });
}

BenchSummary summarize_chains(const std::vector<ChainRecord>& records) {
  std::vector<Speedup> speedups;
  for (const ChainRecord& r : records) speedups.push_back({r.name, chain_speedup(r), false});
  return summarize_speedups(speedups);
}

std::string format_chain_summary(const BenchSummary& s) { return summary_line(s, "cuBLASLt", "chain"); }

nlohmann::json chain_json(const std::vector<ChainRecord>& records, const BenchSummary& s) {
  nlohmann::json list = nlohmann::json::array();
  for (const ChainRecord& r : records) {
    list.push_back({{"name", r.name},
                    {"gemms", r.gemms},
                    {"bytes", r.bytes},
                    {"ours_us", json_num(r.ours_us)},
                    {"baseline_us", json_num(r.baseline_us)},
                    {"speedup", json_num(chain_speedup(r))},
                    {"copy_us", json_num(r.copy_us)},
                    {"ours_copy_fraction", json_num(ratio(r.copy_us, r.ours_us))},
                    {"baseline_copy_fraction", json_num(ratio(r.copy_us, r.baseline_us))}});
  }
  nlohmann::json summary = {{"count", s.count},
                            {"geomean_speedup", json_num(s.geomean_speedup)},
                            {"worst_chain", s.count > 0 ? nlohmann::json(s.worst_shape) : nlohmann::json(nullptr)},
                            {"worst_speedup", json_num(s.worst_speedup)},
                            {"baseline", "cuBLASLt"}};
  return {{"chains", list}, {"summary", summary}};
}

int buffer_set_count(double set_bytes, double l2_bytes, double free_bytes) {
  const double bytes = std::max(set_bytes, 1.0);
  const int wanted = int(std::ceil(3.0 * l2_bytes / bytes));
  const int affordable = int(0.5 * free_bytes / bytes);
  return std::clamp(std::min(wanted, affordable), 1, 64);
}

std::string format_overhead_table(const OverheadResult& r) {
  auto row = [](const char* side, const std::vector<double>& us) {
    return Row{side, num("%.2f", median(us)), num("%.2f", min_of(us)), num("%.2f", max_of(us))};
  };
  const std::vector<Row> rows = {{"side", "median us", "min us", "max us"},
                                 row("ours", r.ours_us),
                                 row("cuBLASLt", r.baseline_us),
                                 row("bare launch", r.bare_us)};
  return align_columns(rows, [](size_t c) { return c == 0; });
}

std::string format_overhead_summary(const OverheadResult& r) {
  const double ours = median(r.ours_us), baseline = median(r.baseline_us), bare = median(r.bare_us);
  const std::string theirs =
      r.baseline_us.empty() ? "cuBLASLt cannot run it" : "cuBLASLt " + num("%.2f", baseline) + " us per call";
  const std::string over_theirs = r.baseline_us.empty() ? "" : ", ours / cuBLASLt " + num("%.2fx", ours / baseline);
  return "overhead: ours " + num("%.2f", ours) + " us per call, " + theirs + ", bare launch " + num("%.2f", bare) +
         " us per call; ours - bare " + num("%.2f", ours - bare) + " us" + over_theirs + " (" + r.shape + ", " +
         std::to_string(r.calls) + " calls x " + std::to_string(r.ours_us.size()) + ", median)";
}

nlohmann::json overhead_json(const OverheadResult& r) {
  const double ours = median(r.ours_us), baseline = median(r.baseline_us), bare = median(r.bare_us);
  return {{"overhead",
           {{"ours_us", json_num(ours)},
            {"baseline_us", json_num(baseline)},
            {"bare_us", json_num(bare)},
            {"ours_minus_bare_us", json_num(ours - bare)},
            {"ours_over_baseline", json_num(ours / baseline)},
            {"calls", r.calls},
            {"repeats", r.ours_us.size()},
            {"shape", r.shape}}}};
}

PickSummary summarize_picks(const std::vector<TuneRecord>& records) {
  PickSummary s;
  s.count = int(records.size());
  if (records.empty()) {
    s.median = s.p90 = s.worst = nan;
    return s;
  }
  std::vector<double> ratios;
  for (const TuneRecord& r : records) {
    const double ratio = r.pick_us / r.best_us;
    ratios.push_back(ratio);
    if (ratios.size() == 1 || ratio > s.worst) {
      s.worst = ratio;
      s.worst_shape = r.shape;
    }
    s.within_10_percent += ratio <= 1.10;
  }
  s.median = median(ratios);
  std::sort(ratios.begin(), ratios.end());
  s.p90 = ratios[size_t(std::ceil(0.9 * double(ratios.size()))) - 1];
  return s;
}

std::string format_tune_table(const std::vector<TuneRecord>& records) {
  std::vector<Row> rows = {{"shape", "tuned best", "us", "model's pick", "us", "pick/best"}};
  for (const TuneRecord& r : records) {
    rows.push_back({r.shape, r.best_config, num("%.2f", r.best_us), r.pick_config, num("%.2f", r.pick_us),
                    num("%.2fx", r.pick_us / r.best_us)});
  }
  return align_columns(rows, [](size_t c) { return c == 0 || c == 1 || c == 3; });
}

std::string format_pick_summary(const PickSummary& s) {
  if (s.count == 0) return "cost model's pick against the tuned best: no problems tuned";
  return "cost model's pick against the tuned best over " + std::to_string(s.count) + " problems: median " +
         num("%.2fx", s.median) + ", p90 " + num("%.2fx", s.p90) + ", worst " + num("%.2fx", s.worst) + " at " +
         s.worst_shape + "; " + std::to_string(s.within_10_percent) + " of " + std::to_string(s.count) +
         " within 10%";
}

nlohmann::json tune_json(const std::vector<TuneRecord>& records, const PickSummary& s) {
  nlohmann::json list = nlohmann::json::array();
  for (const TuneRecord& r : records) {
    list.push_back({{"shape", r.shape},
                    {"best_config", r.best_config},
                    {"best_us", json_num(r.best_us)},
                    {"pick_config", r.pick_config},
                    {"pick_us", json_num(r.pick_us)},
                    {"pick_over_best", json_num(r.pick_us / r.best_us)},
                    {"candidates", r.candidates}});
  }
  nlohmann::json summary = {{"count", s.count},
                            {"median", json_num(s.median)},
                            {"p90", json_num(s.p90)},
                            {"worst", json_num(s.worst)},
                            {"worst_shape", s.count > 0 ? nlohmann::json(s.worst_shape) : nlohmann::json(nullptr)},
                            {"within_10_percent", s.within_10_percent}};
  return {{"records", list}, {"summary", summary}};
}

std::string format_hint_matrix(const std::vector<HintCell>& cells) {
  std::vector<int64_t> hints, ms;
  for (const HintCell& c : cells) {
    if (std::find(hints.begin(), hints.end(), c.hint) == hints.end()) hints.push_back(c.hint);
    if (std::find(ms.begin(), ms.end(), c.m) == ms.end()) ms.push_back(c.m);
  }
  Row header = {"tuned for M ="};
  for (int64_t m : ms) header.push_back("run at M = " + std::to_string(m));
  std::vector<Row> rows = {header};
  for (int64_t hint : hints) {
    Row row = {std::to_string(hint)};
    for (int64_t m : ms) {
      auto cell = std::find_if(cells.begin(), cells.end(), [&](const HintCell& c) { return c.hint == hint && c.m == m; });
      row.push_back(cell == cells.end() ? "-" : num("%.2f", cell->pinned_us) + " / " + num("%.2f", cell->dispatch_us));
    }
    rows.push_back(row);
  }
  return align_columns(rows, [](size_t c) { return c == 0; });
}

nlohmann::json hint_matrix_json(const std::vector<HintCell>& cells) {
  nlohmann::json list = nlohmann::json::array();
  for (const HintCell& c : cells) {
    list.push_back({{"hint", c.hint}, {"m", c.m}, {"pinned_us", json_num(c.pinned_us)}, {"dispatch_us", json_num(c.dispatch_us)}});
  }
  return {{"cells", list}};
}

}  // namespace gemmkit::tools
