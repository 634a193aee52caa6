#include "bench/report.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <limits>
#include <sstream>

#include "tuning/gpu_timer.h"

using namespace gemmkit::tools;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

BenchRecord record(int64_t m, int64_t n, int64_t k, double ours, double baseline,
                   const std::string& config, int64_t batch = 1) {
  BenchRecord r;
  r.m = m;
  r.n = n;
  r.k = k;
  r.batch = batch;
  r.layout = "NT";
  r.dtype = "bf16";
  r.ours_us = ours;
  r.baseline_us = baseline;
  r.speedup = baseline / ours;
  r.tflops = gemm_tflops(m, n, k, batch, ours);
  r.gbps = gemm_gbps(m, n, k, batch, 2, 2, ours);
  r.config = config;
  return r;
}

// The cell of `line` under the right-aligned column `name` of `header`.
std::string cell_under(const std::string& header, const std::string& line, const std::string& name) {
  const size_t end = header.find(name) + name.size();
  const std::string head = line.substr(0, end);
  return head.substr(head.find_last_of(' ') + 1);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

OverheadResult overhead(std::vector<double> ours, std::vector<double> baseline, std::vector<double> bare) {
  OverheadResult r;
  r.shape = "64x64x64 NT bf16";
  r.calls = 2000;
  r.ours_us = std::move(ours);
  r.baseline_us = std::move(baseline);
  r.bare_us = std::move(bare);
  return r;
}

// Medians: ours 2.41, cuBLASLt 4.87, bare launch 1.90.
OverheadResult sample_overhead() {
  return overhead({2.5, 2.41, 2.3, 2.6, 2.40}, {5.0, 4.87, 4.9, 4.8, 4.85}, {1.95, 1.9, 1.8, 2.0, 1.85});
}

TEST(Report, TflopsFollowsTheFormula) {
  // 2 * 1000^3 flops in 2000 us = 2e9 / 2e-3 s = 1e12 flop/s.
  EXPECT_DOUBLE_EQ(gemm_tflops(1000, 1000, 1000, 1, 2000.0), 1.0);
  // Batch multiplies the work.
  EXPECT_DOUBLE_EQ(gemm_tflops(1000, 1000, 1000, 4, 2000.0), 4.0);
  // Unequal sizes: 2 * 4096 * 2112 * 7168 * 3 flops in 250 us.
  const double want = 2.0 * 4096 * 2112 * 7168 * 3 / 250e-6 / 1e12;
  EXPECT_NEAR(gemm_tflops(4096, 2112, 7168, 3, 250.0), want, want * 1e-12);
}

TEST(Report, GbpsCountsEachOperandOnce) {
  // M=10 N=20 K=30: A 10*30*2 = 600 B, B 30*20*2 = 1200 B, D 10*20*4 = 800 B; 2600 B in 1 us.
  EXPECT_NEAR(gemm_gbps(10, 20, 30, 1, 2, 4, 1.0), 2.6, 1e-12);
  // Same with batch 5 in 10 us: 13000 B / 1e-5 s = 1.3 GB/s.
  EXPECT_NEAR(gemm_gbps(10, 20, 30, 5, 2, 4, 10.0), 1.3, 1e-12);
  // Swapped element sizes: A 300*4 = 1200 B, B 600*4 = 2400 B, D 200*2 = 400 B; 4000 B in 1 us.
  EXPECT_NEAR(gemm_gbps(10, 20, 30, 1, 4, 2, 1.0), 4.0, 1e-12);
}

TEST(Report, CopyBandwidthCountsReadAndWrite) {
  // 1e9 bytes copied in 1000 us: 1e9 read + 1e9 written in 1e-3 s = 2000 GB/s.
  EXPECT_NEAR(copy_gbps(1e9, 1000.0), 2000.0, 1e-9);
  // 1 GiB in 700 us.
  EXPECT_NEAR(copy_gbps(1073741824.0, 700.0), 2.0 * 1073741824.0 / 700e-6 / 1e9, 1e-9);
}

TEST(Report, CopyFractionIsOursOverTheCopyBandwidth) {
  EXPECT_DOUBLE_EQ(copy_fraction(1500.0, 3000.0), 0.5);
  EXPECT_DOUBLE_EQ(copy_fraction(3300.0, 3000.0), 1.1);  // above 1 is reported, not clamped
  EXPECT_TRUE(std::isnan(copy_fraction(1500.0, kNaN)));  // copy bandwidth not measured
  EXPECT_TRUE(std::isnan(copy_fraction(1500.0, 0.0)));
  EXPECT_TRUE(std::isnan(copy_fraction(kNaN, 3000.0)));
}

TEST(Report, CopyBandwidthLine) {
  EXPECT_EQ(format_copy_bandwidth(3012.4), "copy bandwidth 3012 GB/s (device-to-device, read + write)");
  EXPECT_EQ(format_copy_bandwidth(kNaN), "copy bandwidth unknown");
  EXPECT_EQ(format_copy_bandwidth(0.0), "copy bandwidth unknown");
}

TEST(Report, MedianOfOddEvenAndNoValues) {
  EXPECT_DOUBLE_EQ(gemmkit::tuning::median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_DOUBLE_EQ(gemmkit::tuning::median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_DOUBLE_EQ(gemmkit::tuning::median({7.0}), 7.0);
  EXPECT_TRUE(std::isnan(gemmkit::tuning::median({})));
}

TEST(Report, GeomeanOfKnownSpeedups) {
  auto s = summarize({record(1, 1, 1, 1.0, 2.0, "a"), record(2, 2, 2, 2.0, 1.0, "b")});
  EXPECT_EQ(s.count, 2);
  EXPECT_NEAR(s.geomean_speedup, 1.0, 1e-12);
  s = summarize({record(1, 1, 1, 1.0, 2.0, "a"), record(2, 2, 2, 1.0, 8.0, "b")});
  EXPECT_NEAR(s.geomean_speedup, 4.0, 1e-12);  // sqrt(2 * 8), not the mean 5
}

TEST(Report, WorstShapeIsTheSmallestSpeedup) {
  auto s = summarize({record(1, 2, 3, 1.0, 1.2, "a"), record(4096, 2112, 7168, 1.0, 0.8, "b"),
                      record(7, 8, 9, 1.0, 1.0, "c"), record(5, 5, 5, 1.0, 0.9, "d", 4)});
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.worst_speedup, 0.8);
  EXPECT_EQ(s.worst_shape, "4096x2112x7168 NT bf16");
  const std::string line = format_summary(s);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(line.find("4 shapes"), std::string::npos) << line;
  EXPECT_NE(line.find("0.80x at 4096x2112x7168 NT bf16"), std::string::npos) << line;
  std::ostringstream geomean;
  geomean.precision(2);
  geomean << std::fixed << std::pow(1.2 * 0.8 * 1.0 * 0.9, 0.25) << "x";
  EXPECT_NE(line.find("geomean speedup " + geomean.str()), std::string::npos) << line;
}

TEST(Report, MissingBaselineIsLeftOutOfSummary) {
  auto with = summarize({record(1, 1, 1, 1.0, 2.0, "a"), record(2, 2, 2, 1.0, 0.5, "b"),
                         record(3, 3, 3, 1.0, kNaN, "c")});
  EXPECT_EQ(with.count, 2);
  EXPECT_NEAR(with.geomean_speedup, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(with.worst_speedup, 0.5);
  EXPECT_EQ(with.worst_shape, "2x2x2 NT bf16");

  auto none = summarize({record(3, 3, 3, 1.0, kNaN, "c")});
  EXPECT_EQ(none.count, 0);
  EXPECT_TRUE(std::isnan(none.geomean_speedup));
  EXPECT_NE(format_summary(none).find("summary:"), std::string::npos);
}

TEST(Report, JsonHasEveryFieldAndNullForNaN) {
  std::vector<BenchRecord> records = {
      record(4096, 2112, 7168, 100.0, 110.0, "tma 128x256x64 s4", 2),
      record(1, 2112, 7168, 5.0, kNaN, "tma 64x128x64 s6")};
  records[1].copy_us = 4.0;
  auto j = to_json(records, summarize(records), 3000.0);
  ASSERT_EQ(j["records"].size(), 2u);
  const auto& r0 = j["records"][0];
  EXPECT_EQ(r0["m"], 4096);
  EXPECT_EQ(r0["n"], 2112);
  EXPECT_EQ(r0["k"], 7168);
  EXPECT_EQ(r0["batch"], 2);
  EXPECT_EQ(r0["layout"], "NT");
  EXPECT_EQ(r0["dtype"], "bf16");
  EXPECT_DOUBLE_EQ(r0["ours_us"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(r0["baseline_us"].get<double>(), 110.0);
  EXPECT_DOUBLE_EQ(r0["speedup"].get<double>(), 1.1);
  EXPECT_DOUBLE_EQ(r0["tflops"].get<double>(), records[0].tflops);
  EXPECT_DOUBLE_EQ(r0["gbps"].get<double>(), records[0].gbps);
  EXPECT_DOUBLE_EQ(r0["copy_fraction"].get<double>(), records[0].gbps / 3000.0);
  EXPECT_TRUE(r0["copy_us"].is_null());  // no copy timed
  EXPECT_TRUE(r0["sized_copy_fraction"].is_null());
  EXPECT_EQ(r0["config"], "tma 128x256x64 s4");
  EXPECT_TRUE(r0["baseline_note"].is_null());  // cuBLASLt ran the same problem
  EXPECT_TRUE(r0["unfused_us"].is_null());     // no --epilogue
  EXPECT_TRUE(r0["epilogue"].is_null());
  EXPECT_TRUE(r0["baseline_epilogue"].is_null());  // nor cuBLASLt's own fused epilogue
  EXPECT_TRUE(r0["baseline_fused_us"].is_null());
  EXPECT_TRUE(r0["fused_over_baseline_fused"].is_null());
  for (const char* key : {"dense16_us", "dense16_baseline_us", "fp8_us", "fp8_baseline_us"})
    EXPECT_TRUE(r0.at(key).is_null()) << key;  // not a line with 4-bit weights
  EXPECT_EQ(r0.size(), 25u);  // the fields above, nothing else

  const auto& r1 = j["records"][1];
  EXPECT_TRUE(r1["baseline_us"].is_null());
  EXPECT_TRUE(r1["speedup"].is_null());
  EXPECT_DOUBLE_EQ(r1["ours_us"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(r1["copy_fraction"].get<double>(), records[1].gbps / 3000.0);
  EXPECT_DOUBLE_EQ(r1["copy_us"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(r1["sized_copy_fraction"].get<double>(), 0.8);

  EXPECT_EQ(j["summary"]["count"], 1);
  EXPECT_NEAR(j["summary"]["geomean_speedup"].get<double>(), 1.1, 1e-12);
  EXPECT_EQ(j["summary"]["worst_shape"], "4096x2112x7168x2 NT bf16");
  EXPECT_DOUBLE_EQ(j["summary"]["copy_gbps"].get<double>(), 3000.0);
  EXPECT_EQ(j["summary"]["stand_ins"], 0);
  EXPECT_EQ(j["summary"]["baseline"], "cuBLASLt");
  EXPECT_EQ(j["summary"].size(), 7u);
  // Serialized text carries null too, and parses back.
  const std::string text = j.dump();
  EXPECT_NE(text.find("\"baseline_us\":null"), std::string::npos) << text;
  EXPECT_EQ(nlohmann::json::parse(text), j);

  auto empty = to_json({}, summarize({}), kNaN);
  EXPECT_TRUE(empty["records"].is_array());
  EXPECT_TRUE(empty["summary"]["geomean_speedup"].is_null());
}

// FP8 rows where cuBLASLt ran per-tensor scales in place of the row's own scaling.
std::vector<BenchRecord> fp8_records() {
  std::vector<BenchRecord> records = {record(4096, 7168, 2048, 10.0, 12.0, "tma 128x256x128 s4"),
                                      record(1, 2112, 7168, 8.0, 4.0, "gemv"),
                                      record(16, 2112, 7168, 9.0, 18.0, "tma 64x128x128 s6"),
                                      record(64, 2112, 7168, 9.0, kNaN, "tma 64x128x128 s6")};
  for (auto& r : records) r.dtype = "e4m3:bf16 block";
  records[1].baseline_note = records[2].baseline_note = "per-tensor stand-in";
  return records;
}

TEST(Report, StandInsAreMarkedInTheTable) {
  const std::vector<BenchRecord> records = fp8_records();
  const std::vector<std::string> lines = lines_of(format_table(records, 3000.0));
  ASSERT_EQ(lines.size(), 6u);  // header, four rows, one footnote per distinct note
  const std::string& header = lines[0];
  EXPECT_EQ(cell_under(header, lines[1], "cuBLASLt us"), "12.00");
  EXPECT_EQ(cell_under(header, lines[2], "cuBLASLt us"), "4.00*");
  EXPECT_EQ(cell_under(header, lines[3], "cuBLASLt us"), "18.00*");
  EXPECT_EQ(cell_under(header, lines[4], "cuBLASLt us"), "-");
  EXPECT_EQ(cell_under(header, lines[2], "speedup"), "0.50x");  // against whatever ran
  EXPECT_NE(lines[1].find("e4m3:bf16 block"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[5], "* cuBLASLt us: per-tensor stand-in");
  // The config column still starts at the same place on every row.
  const size_t at = header.find("config");
  EXPECT_EQ(lines[1].find("tma 128x256x128 s4"), at);
  EXPECT_EQ(lines[2].find("gemv"), at);

  // No notes, no footnote, no marker.
  std::vector<BenchRecord> plain = records;
  for (auto& r : plain) r.baseline_note.clear();
  const std::string table = format_table(plain, 3000.0);
  EXPECT_EQ(lines_of(table).size(), 5u);
  EXPECT_EQ(table.find('*'), std::string::npos) << table;
}

TEST(Report, SummaryCountsStandInsAndKeepsTheirSpeedups) {
  const std::vector<BenchRecord> records = fp8_records();
  const BenchSummary s = summarize(records);
  EXPECT_EQ(s.count, 3);  // the row without a baseline is left out
  EXPECT_EQ(s.stand_ins, 2);
  EXPECT_NEAR(s.geomean_speedup, std::cbrt(1.2 * 0.5 * 2.0), 1e-12);
  EXPECT_DOUBLE_EQ(s.worst_speedup, 0.5);
  EXPECT_EQ(s.worst_shape, "1x2112x7168 NT e4m3:bf16 block (per-tensor stand-in)");
  const std::string line = format_summary(s);
  EXPECT_NE(line.find("3 shapes"), std::string::npos) << line;
  EXPECT_NE(line.find("over cuBLASLt (2 of them against a stand-in), worst 0.50x at 1x2112x7168"), std::string::npos)
      << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);

  // Without stand-ins the line is as it always was.
  EXPECT_EQ(format_summary(summarize({record(1, 1, 1, 1.0, 2.0, "a")})),
            "summary: 1 shape, geomean speedup 2.00x over cuBLASLt, worst 2.00x at 1x1x1 NT bf16");
}

TEST(Report, JsonCarriesBaselineNotesAndTheStandInCount) {
  const std::vector<BenchRecord> records = fp8_records();
  const nlohmann::json j = to_json(records, summarize(records), 3000.0);
  ASSERT_EQ(j["records"].size(), 4u);
  EXPECT_TRUE(j["records"][0]["baseline_note"].is_null());
  EXPECT_EQ(j["records"][1]["baseline_note"], "per-tensor stand-in");
  EXPECT_EQ(j["records"][2]["baseline_note"], "per-tensor stand-in");
  EXPECT_EQ(j["records"][1]["dtype"], "e4m3:bf16 block");
  EXPECT_DOUBLE_EQ(j["records"][1]["speedup"].get<double>(), 0.5);
  EXPECT_EQ(j["summary"]["count"], 3);
  EXPECT_EQ(j["summary"]["stand_ins"], 2);
  EXPECT_EQ(j["summary"]["worst_shape"], "1x2112x7168 NT e4m3:bf16 block (per-tensor stand-in)");
  EXPECT_EQ(nlohmann::json::parse(j.dump()), j);
}

// Records of bench lines with 4-bit weights: the dense GEMMs of their shape, cuBLASLt's 16-bit one
// the baseline where it ran.
BenchRecord w4_record(int64_t m, double ours, double dense16, double dense16_baseline, double fp8, double fp8_baseline) {
  BenchRecord r = record(m, 8192, 8192, ours, kNaN, "tma 64x8 s16 widen");
  r.dtype = "bf16,w4:int4g128";
  set_dense_times(r, dense16, dense16_baseline, fp8, fp8_baseline);
  return r;
}

// A bf16 line, then 4-bit lines: every time; no cuBLASLt FP8 time; no cuBLASLt 16-bit time.
std::vector<BenchRecord> w4_records() {
  return {record(4096, 2112, 7168, 123.456, 130.0, "tma 128x256x64 s4"), w4_record(1, 25.0, 40.0, 38.0, 22.0, 21.5),
          w4_record(16, 84.0, 44.0, 42.0, 30.0, kNaN), w4_record(4096, 700.0, 650.0, kNaN, 400.0, 380.0)};
}

TEST(Report, W4RecordsTakeTheBaselines16BitGemmAsAStandIn) {
  const std::vector<BenchRecord> records = w4_records();
  const BenchRecord& r = records[1];
  EXPECT_DOUBLE_EQ(r.dense16_us, 40.0);
  EXPECT_DOUBLE_EQ(r.dense16_baseline_us, 38.0);
  EXPECT_DOUBLE_EQ(r.fp8_us, 22.0);
  EXPECT_DOUBLE_EQ(r.fp8_baseline_us, 21.5);
  EXPECT_DOUBLE_EQ(r.baseline_us, 38.0);
  EXPECT_DOUBLE_EQ(r.speedup, 38.0 / 25.0);
  EXPECT_EQ(r.baseline_note, "16-bit GEMM of the same shape");
  // Without the baseline's 16-bit time: no baseline, nothing noted.
  EXPECT_TRUE(std::isnan(records[3].baseline_us));
  EXPECT_TRUE(std::isnan(records[3].speedup));
  EXPECT_EQ(records[3].baseline_note, "");
  EXPECT_DOUBLE_EQ(records[3].dense16_us, 650.0);
  // Other records have none of it.
  for (double us : {records[0].dense16_us, records[0].dense16_baseline_us, records[0].fp8_us, records[0].fp8_baseline_us})
    EXPECT_TRUE(std::isnan(us));
}

TEST(Report, W4a8RecordsTakeTheBaselinesFp8GemmWhereItRan) {
  BenchRecord r = record(16, 28672, 8192, 20.0, kNaN, "tma 64x16 s8 widen");
  r.dtype = "e4m3,w4:int4g128 rowwise";
  set_w4a8_dense_times(r, 60.0, 58.0, 32.0, 30.0, "rowwise scales");
  EXPECT_DOUBLE_EQ(r.baseline_us, 30.0);
  EXPECT_DOUBLE_EQ(r.speedup, 1.5);
  EXPECT_EQ(r.baseline_note, "FP8 GEMM of the same shape, rowwise scales");
  EXPECT_DOUBLE_EQ(r.dense16_us, 60.0);
  EXPECT_DOUBLE_EQ(r.dense16_baseline_us, 58.0);
  EXPECT_DOUBLE_EQ(r.fp8_us, 32.0);
  EXPECT_DOUBLE_EQ(r.fp8_baseline_us, 30.0);
  // Without the baseline's FP8 time its 16-bit one stands in, as on 16-bit lines; without either, none.
  set_w4a8_dense_times(r, 60.0, 58.0, 32.0, kNaN, "rowwise scales");
  EXPECT_DOUBLE_EQ(r.baseline_us, 58.0);
  EXPECT_EQ(r.baseline_note, "16-bit GEMM of the same shape");
  set_w4a8_dense_times(r, 60.0, kNaN, 32.0, kNaN, "rowwise scales");
  EXPECT_TRUE(std::isnan(r.baseline_us) && std::isnan(r.speedup));
  EXPECT_EQ(r.baseline_note, "");
  // The note is the table's footnote.
  set_w4a8_dense_times(r, 60.0, 58.0, 32.0, 31.0, "per-tensor stand-in for rowwise scales");
  const std::vector<std::string> lines = lines_of(format_table({r}, 3000.0));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(cell_under(lines[0], lines[1], "cuBLASLt us"), "31.00*");
  EXPECT_EQ(lines[2], "* cuBLASLt us: FP8 GEMM of the same shape, per-tensor stand-in for rowwise scales");
}

TEST(Report, W4RowsShowTheDenseGemmsOfTheirShape) {
  std::vector<BenchRecord> records = w4_records();
  const std::vector<std::string> lines = lines_of(format_table(records, 3000.0));
  ASSERT_EQ(lines.size(), 6u);  // header, four rows, one footnote
  const std::string& header = lines[0];
  // After the speedup over the baseline, before TFLOP/s.
  EXPECT_LT(header.find("speedup"), header.find("16-bit us"));
  EXPECT_LT(header.find("16-bit us"), header.find(" fp8 us"));
  EXPECT_LT(header.find(" fp8 us"), header.find("cuBLASLt-fp8 us"));
  EXPECT_LT(header.find("cuBLASLt-fp8 us"), header.find("TFLOP/s"));
  const std::vector<std::vector<std::string>> cells = {
      // cuBLASLt us, speedup, 16-bit us, fp8 us, cuBLASLt-fp8 us
      {"130.00", "1.05x", "-", "-", "-"},
      {"38.00*", "1.52x", "40.00", "22.00", "21.50"},
      {"42.00*", "0.50x", "44.00", "30.00", "-"},
      {"-", "-", "650.00", "400.00", "380.00"}};
  for (size_t i = 0; i < cells.size(); ++i) {
    const std::string& line = lines[i + 1];
    EXPECT_EQ(cell_under(header, line, "cuBLASLt us"), cells[i][0]) << line;
    EXPECT_EQ(cell_under(header, line, "speedup"), cells[i][1]) << line;
    EXPECT_EQ(cell_under(header, line, "16-bit us"), cells[i][2]) << line;
    EXPECT_EQ(cell_under(header, line, " fp8 us"), cells[i][3]) << line;
    EXPECT_EQ(cell_under(header, line, "cuBLASLt-fp8 us"), cells[i][4]) << line;
  }
  EXPECT_EQ(lines[5], "* cuBLASLt us: 16-bit GEMM of the same shape");
  const size_t at = header.find("config");
  EXPECT_EQ(lines[1].find("tma 128x256x64 s4"), at);
  EXPECT_EQ(lines[2].find("tma 64x8 s16 widen"), at);

  // Named after the baseline; before the fused epilogue's columns.
  EXPECT_NE(format_table(records, 3000.0, "torch").find("torch-fp8 us"), std::string::npos);
  records[2].epilogue = "silu(acc)";
  const std::string fused = lines_of(format_table(records, 3000.0))[0];
  EXPECT_LT(fused.find("cuBLASLt-fp8 us"), fused.find("cuBLASLt-fused us"));

  // Without a dense16_us, no such columns.
  for (BenchRecord& r : records) r.dense16_us = kNaN;
  const std::string table = format_table(records, 3000.0);
  for (const char* column : {"16-bit us", "fp8 us"}) EXPECT_EQ(table.find(column), std::string::npos) << column;
}

// Tables without lines with 4-bit weights, as they were before those lines had columns.
TEST(Report, TablesWithoutW4RowsAreUnchanged) {
  std::vector<BenchRecord> records = {record(4096, 2112, 7168, 123.456, 130.0, "tma 128x256x64 s4"),
                                      record(1, 16, 64, 7.5, kNaN, "simt 64x64x32 s2", 8),
                                      record(1, 2112, 7168, 8.0, 4.0, "gemv")};
  records[2].dtype = "e4m3:bf16 block";
  records[2].baseline_note = "per-tensor stand-in";
  records[2].copy_us = 6.0;
  EXPECT_EQ(format_table(records, 3000.0),
            "shape           layout  dtype            ours us  cuBLASLt us  speedup  TFLOP/s    GB/s  %copy  %copy@size  config\n"
            "4096x2112x7168  NT      bf16              123.46       130.00    1.05x   1004.5   861.0   28.7           -  tma 128x256x64 s4\n"
            "1x16x64x8       NT      bf16                7.50            -        -      0.0     2.4    0.1           -  simt 64x64x32 s2\n"
            "1x2112x7168     NT      e4m3:bf16 block     8.00        4.00*    0.50x      3.8  3787.0  126.2        75.0  gemv\n"
            "* cuBLASLt us: per-tensor stand-in\n");
  records[0].epilogue = "gelu_tanh(acc + bias[n])";
  records[0].baseline_epilogue = "GELU_BIAS";
  records[0].baseline_fused_us = 125.0;
  EXPECT_EQ(format_table(records, kNaN, "torch"),
            "shape           layout  dtype            ours us  torch us  speedup  torch-fused us  ours/torch-fused  TFLOP/s    GB/s  %copy  %copy@size  config\n"
            "4096x2112x7168  NT      bf16              123.46    130.00    1.05x          125.00             0.99x   1004.5   861.0      -           -  tma 128x256x64 s4\n"
            "1x16x64x8       NT      bf16                7.50         -        -               -                 -      0.0     2.4      -           -  simt 64x64x32 s2\n"
            "1x2112x7168     NT      e4m3:bf16 block     8.00     4.00*    0.50x               -                 -      3.8  3787.0      -        75.0  gemv\n"
            "* torch us: per-tensor stand-in\n");
}

TEST(Report, JsonCarriesTheDenseGemmsOfW4Rows) {
  const std::vector<BenchRecord> records = w4_records();
  const nlohmann::json j = to_json(records, summarize(records), 3000.0);
  ASSERT_EQ(j["records"].size(), 4u);
  const auto& w4 = j["records"][1];
  EXPECT_DOUBLE_EQ(w4["dense16_us"].get<double>(), 40.0);
  EXPECT_DOUBLE_EQ(w4["dense16_baseline_us"].get<double>(), 38.0);
  EXPECT_DOUBLE_EQ(w4["fp8_us"].get<double>(), 22.0);
  EXPECT_DOUBLE_EQ(w4["fp8_baseline_us"].get<double>(), 21.5);
  EXPECT_DOUBLE_EQ(w4["baseline_us"].get<double>(), 38.0);  // the 16-bit GEMM's, noted
  EXPECT_EQ(w4["baseline_note"], "16-bit GEMM of the same shape");
  EXPECT_DOUBLE_EQ(j["records"][2]["fp8_us"].get<double>(), 30.0);
  EXPECT_TRUE(j["records"][2]["fp8_baseline_us"].is_null());
  EXPECT_DOUBLE_EQ(j["records"][3]["dense16_us"].get<double>(), 650.0);
  EXPECT_TRUE(j["records"][3]["dense16_baseline_us"].is_null());
  EXPECT_TRUE(j["records"][3]["baseline_us"].is_null());
  EXPECT_TRUE(j["records"][3]["baseline_note"].is_null());
  for (const char* key : {"dense16_us", "dense16_baseline_us", "fp8_us", "fp8_baseline_us"})
    EXPECT_TRUE(j["records"][0].at(key).is_null()) << key;
  EXPECT_NE(j.dump().find("\"fp8_baseline_us\":null"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(j.dump()), j);
}

TEST(Report, SummaryCountsW4RowsAgainstTheStandIn) {
  const std::vector<BenchRecord> records = w4_records();
  const BenchSummary s = summarize(records);
  EXPECT_EQ(s.count, 3);  // the 4-bit line without cuBLASLt's 16-bit time is left out
  EXPECT_EQ(s.stand_ins, 2);
  EXPECT_NEAR(s.geomean_speedup, std::cbrt(130.0 / 123.456 * 38.0 / 25.0 * 42.0 / 84.0), 1e-12);
  EXPECT_DOUBLE_EQ(s.worst_speedup, 0.5);
  EXPECT_EQ(s.worst_shape, "16x8192x8192 NT bf16,w4:int4g128 (16-bit GEMM of the same shape)");
  EXPECT_EQ(format_summary(s),
            "summary: 3 shapes, geomean speedup 0.93x over cuBLASLt (2 of them against a stand-in), worst 0.50x at "
            "16x8192x8192 NT bf16,w4:int4g128 (16-bit GEMM of the same shape)");
  const nlohmann::json j = to_json(records, s, 3000.0);
  EXPECT_EQ(j["summary"]["count"], 3);
  EXPECT_EQ(j["summary"]["stand_ins"], 2);
}

TEST(Report, GbpsOfFp8CountsOneBytePerInputElement) {
  // M=10 N=20 K=30: A 300 B, B 600 B (one byte each), D 200 * 2 = 400 B; 1300 B in 1 us.
  EXPECT_NEAR(gemm_gbps(10, 20, 30, 1, 1, 2, 1.0), 1.3, 1e-12);
}

TEST(Report, JsonCopyFieldsAreNullWhenCopyBandwidthIsUnknown) {
  std::vector<BenchRecord> records = {record(4096, 2112, 7168, 100.0, 110.0, "tma 128x256x64 s4")};
  for (double unknown : {kNaN, 0.0}) {
    auto j = to_json(records, summarize(records), unknown);
    EXPECT_TRUE(j["summary"].contains("copy_gbps"));
    EXPECT_TRUE(j["summary"]["copy_gbps"].is_null());
    EXPECT_TRUE(j["records"][0].contains("copy_fraction"));
    EXPECT_TRUE(j["records"][0]["copy_fraction"].is_null());
    EXPECT_DOUBLE_EQ(j["records"][0]["gbps"].get<double>(), records[0].gbps);  // still there
    EXPECT_NE(j.dump().find("\"copy_gbps\":null"), std::string::npos);
  }
}

TEST(Report, TableHasHeaderEveryRecordAndAlignedColumns) {
  std::vector<BenchRecord> records = {record(4096, 2112, 7168, 123.456, 130.0, "tma 128x256x64 s4"),
                                      record(1, 16, 64, 7.5, kNaN, "simt 64x64x32 s2", 8)};
  const std::vector<std::string> lines = lines_of(format_table(records, 3000.0));
  ASSERT_EQ(lines.size(), 3u);  // header + one row per record

  for (const char* column : {"shape", "layout", "dtype", "ours us", "cuBLASLt us", "speedup",
                             "TFLOP/s", "GB/s", "%copy", "%copy@size", "config"})
    EXPECT_NE(lines[0].find(column), std::string::npos) << column;
  EXPECT_NE(lines[1].find("4096x2112x7168 "), std::string::npos);
  EXPECT_NE(lines[1].find("123.46"), std::string::npos);
  EXPECT_NE(lines[2].find("1x16x64x8"), std::string::npos);  // batch shown
  EXPECT_NE(lines[2].find(" - "), std::string::npos);        // missing baseline

  // The config column starts at the same place on every line.
  const size_t at = lines[0].find("config");
  EXPECT_EQ(lines[1].find("tma 128x256x64 s4"), at);
  EXPECT_EQ(lines[2].find("simt 64x64x32 s2"), at);
}

TEST(Report, CopyColumnIsGbpsAsAPercentOfTheCopyBandwidth) {
  std::vector<BenchRecord> records = {record(1, 4096, 7168, 20.0, 21.0, "tma 64x128x64 s6"),
                                      record(16, 4096, 7168, 25.0, kNaN, "tma 64x128x64 s6")};
  records[0].gbps = 1500.0;
  records[1].gbps = 2712.3;
  std::vector<std::string> lines = lines_of(format_table(records, 3000.0));
  ASSERT_EQ(lines.size(), 3u);
  const std::string& header = lines[0];
  // Right after GB/s, before config.
  EXPECT_LT(header.find("GB/s"), header.find("%copy"));
  EXPECT_LT(header.find("%copy"), header.find("config"));
  EXPECT_EQ(cell_under(header, lines[1], "%copy"), "50.0");
  EXPECT_EQ(cell_under(header, lines[2], "%copy"), "90.4");
  EXPECT_EQ(cell_under(header, lines[1], "GB/s"), "1500.0");
  EXPECT_EQ(cell_under(header, lines[2], "GB/s"), "2712.3");

  // Not measured: a dash in every row, the other columns as before.
  lines = lines_of(format_table(records, kNaN));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(cell_under(lines[0], lines[1], "%copy"), "-");
  EXPECT_EQ(cell_under(lines[0], lines[2], "%copy"), "-");
  EXPECT_EQ(cell_under(lines[0], lines[1], "GB/s"), "1500.0");
  EXPECT_NE(lines[1].find("tma 64x128x64 s6"), std::string::npos);
}

TEST(Report, SizedCopyFractionIsTheCopyTimeOverOurs) {
  BenchRecord r = record(1, 2112, 7168, 20.0, 18.0, "gemv simt");
  EXPECT_TRUE(std::isnan(sized_copy_fraction(r)));  // no copy timed
  r.copy_us = 17.0;
  EXPECT_DOUBLE_EQ(sized_copy_fraction(r), 0.85);
  r.copy_us = 25.0;
  EXPECT_DOUBLE_EQ(sized_copy_fraction(r), 1.25);  // above 1 is reported, not clamped
  r.copy_us = 0.0;
  EXPECT_TRUE(std::isnan(sized_copy_fraction(r)));
  r.copy_us = 17.0;
  r.ours_us = kNaN;
  EXPECT_TRUE(std::isnan(sized_copy_fraction(r)));
}

TEST(Report, SizedCopyColumnFollowsTheCopyColumn) {
  std::vector<BenchRecord> records = {record(1, 4096, 7168, 20.0, 21.0, "gemv simt"),
                                      record(16, 4096, 7168, 25.0, kNaN, "tma 64x128x64 s6")};
  records[0].copy_us = 17.0;
  const std::vector<std::string> lines = lines_of(format_table(records, 3000.0));
  ASSERT_EQ(lines.size(), 3u);
  const std::string& header = lines[0];
  EXPECT_LT(header.find("%copy "), header.find("%copy@size"));
  EXPECT_LT(header.find("%copy@size"), header.find("config"));
  EXPECT_EQ(cell_under(header, lines[1], "%copy@size"), "85.0");
  EXPECT_EQ(cell_under(header, lines[2], "%copy@size"), "-");  // no copy timed
}

TEST(Report, OverheadSummaryGivesMediansTheirDifferenceAndRatioShapeAndCounts) {
  OverheadResult r = sample_overhead();
  EXPECT_EQ(format_overhead_summary(r),
            "overhead: ours 2.41 us per call, cuBLASLt 4.87 us per call, bare launch 1.90 us per call; ours - bare 0.51 us, "
            "ours / cuBLASLt 0.49x (64x64x64 NT bf16, 2000 calls x 5, median)");
  r.baseline_us.clear();
  r.ours_us = {3.0, 1.0, 2.0};
  r.bare_us = {1.5, 1.5, 1.0};
  r.calls = 100;
  EXPECT_EQ(format_overhead_summary(r),
            "overhead: ours 2.00 us per call, cuBLASLt cannot run it, bare launch 1.50 us per call; ours - bare 0.50 us "
            "(64x64x64 NT bf16, 100 calls x 3, median)");
}

TEST(Report, OverheadTableHasOneRowPerSide) {
  OverheadResult r = sample_overhead();
  std::vector<std::string> lines = lines_of(format_overhead_table(r));
  ASSERT_EQ(lines.size(), 4u);
  // Side, then median, min and max.
  const std::vector<std::vector<std::string>> rows = {
      {"ours", "2.41", "2.30", "2.60"}, {"cuBLASLt", "4.87", "4.80", "5.00"}, {"bare launch", "1.90", "1.80", "2.00"}};
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string& line = lines[i + 1];
    EXPECT_EQ(line.rfind(rows[i][0] + " ", 0), 0u) << line;
    EXPECT_EQ(cell_under(lines[0], line, "median us"), rows[i][1]) << line;
    EXPECT_EQ(cell_under(lines[0], line, "min us"), rows[i][2]) << line;
    EXPECT_EQ(cell_under(lines[0], line, "max us"), rows[i][3]) << line;
  }

  r.baseline_us.clear();
  lines = lines_of(format_overhead_table(r));
  ASSERT_EQ(lines.size(), 4u);
  for (const char* column : {"median us", "min us", "max us"})
    EXPECT_EQ(cell_under(lines[0], lines[2], column), "-") << column;
}

TEST(Report, OverheadJsonHasMediansAndCounts) {
  OverheadResult r = sample_overhead();
  auto j = overhead_json(r);
  ASSERT_EQ(j.size(), 1u);
  const auto& o = j["overhead"];
  EXPECT_DOUBLE_EQ(o["ours_us"].get<double>(), 2.41);
  EXPECT_DOUBLE_EQ(o["baseline_us"].get<double>(), 4.87);
  EXPECT_DOUBLE_EQ(o["bare_us"].get<double>(), 1.9);
  EXPECT_DOUBLE_EQ(o["ours_minus_bare_us"].get<double>(), 2.41 - 1.9);
  EXPECT_DOUBLE_EQ(o["ours_over_baseline"].get<double>(), 2.41 / 4.87);
  EXPECT_EQ(o["calls"], 2000);
  EXPECT_EQ(o["repeats"], 5);
  EXPECT_EQ(o["shape"], "64x64x64 NT bf16");
  EXPECT_EQ(o.size(), 8u);

  r.baseline_us.clear();
  j = overhead_json(r);
  EXPECT_TRUE(j["overhead"]["baseline_us"].is_null());
  EXPECT_TRUE(j["overhead"]["ours_over_baseline"].is_null());
  EXPECT_NE(j.dump().find("\"baseline_us\":null"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(j.dump()), j);
}

ChainRecord chain(const std::string& name, double ours, double baseline, double copy) {
  ChainRecord r;
  r.name = name;
  r.gemms = 16;
  r.bytes = 856.3e6;
  r.ours_us = ours;
  r.baseline_us = baseline;
  r.copy_us = copy;
  return r;
}

TEST(ReportChain, TableHasARowPerChainWithSpeedupAndCopyShares) {
  const std::vector<ChainRecord> records = {chain("llama3-70b-tp8-m1", 400.0, 440.0, 300.0),
                                            chain("llama3-8b-m1", 800.0, kNaN, kNaN)};
  const std::vector<std::string> lines = lines_of(format_chain_table(records));
  ASSERT_EQ(lines.size(), 3u);
  const std::string& header = lines[0];
  EXPECT_EQ(lines[1].rfind("llama3-70b-tp8-m1 ", 0), 0u) << lines[1];
  const std::vector<std::pair<std::string, std::string>> cells = {
      {"GEMMs", "16"},      {"MB", "856.3"},        {"ours us", "400.00"},        {"cuBLASLt us", "440.00"},
      {"speedup", "1.10x"}, {"ours %copy", "75.0"}, {"cuBLASLt %copy", "68.2"}};  // 300 / 400 and 300 / 440
  for (const auto& [column, value] : cells) EXPECT_EQ(cell_under(header, lines[1], column), value) << column;
  // No baseline, no copy: dashes.
  for (const char* column : {"cuBLASLt us", "speedup", "ours %copy", "cuBLASLt %copy"})
    EXPECT_EQ(cell_under(header, lines[2], column), "-") << column;
}

TEST(ReportChain, SummaryOverChainsWithABaseline) {
  const std::vector<ChainRecord> records = {chain("a", 100.0, 200.0, 50.0), chain("b", 100.0, 50.0, 50.0),
                                            chain("c", 100.0, kNaN, 50.0)};
  const BenchSummary s = summarize_chains(records);
  EXPECT_EQ(s.count, 2);
  EXPECT_DOUBLE_EQ(s.geomean_speedup, 1.0);  // sqrt(2 * 0.5)
  EXPECT_EQ(s.worst_shape, "b");
  EXPECT_EQ(format_chain_summary(s), "summary: 2 chains, geomean speedup 1.00x over cuBLASLt, worst 0.50x at b");
  EXPECT_EQ(format_chain_summary(summarize_chains({records[0]})),
            "summary: 1 chain, geomean speedup 2.00x over cuBLASLt, worst 2.00x at a");
  EXPECT_EQ(format_chain_summary(summarize_chains({})), "summary: no chains with a cuBLASLt baseline");
  EXPECT_DOUBLE_EQ(chain_speedup(records[0]), 2.0);
  EXPECT_TRUE(std::isnan(chain_speedup(records[2])));
}

TEST(ReportChain, JsonHasEveryChainAndTheSummary) {
  const std::vector<ChainRecord> records = {chain("a", 400.0, 440.0, 300.0), chain("b", 800.0, kNaN, kNaN)};
  const nlohmann::json j = chain_json(records, summarize_chains(records));
  ASSERT_EQ(j["chains"].size(), 2u);
  const auto& a = j["chains"][0];
  EXPECT_EQ(a["name"], "a");
  EXPECT_EQ(a["gemms"], 16);
  EXPECT_DOUBLE_EQ(a["bytes"].get<double>(), 856.3e6);
  EXPECT_DOUBLE_EQ(a["ours_us"].get<double>(), 400.0);
  EXPECT_DOUBLE_EQ(a["baseline_us"].get<double>(), 440.0);
  EXPECT_DOUBLE_EQ(a["speedup"].get<double>(), 1.1);
  EXPECT_DOUBLE_EQ(a["copy_us"].get<double>(), 300.0);
  EXPECT_DOUBLE_EQ(a["ours_copy_fraction"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(a["baseline_copy_fraction"].get<double>(), 300.0 / 440.0);
  for (const char* key : {"baseline_us", "speedup", "copy_us", "ours_copy_fraction", "baseline_copy_fraction"})
    EXPECT_TRUE(j["chains"][1][key].is_null()) << key;
  const auto& s = j["summary"];
  EXPECT_EQ(s["count"], 1);
  EXPECT_DOUBLE_EQ(s["geomean_speedup"].get<double>(), 1.1);
  EXPECT_EQ(s["worst_chain"], "a");
  EXPECT_EQ(s["baseline"], "cuBLASLt");
  EXPECT_TRUE(chain_json({}, summarize_chains({}))["summary"]["worst_chain"].is_null());
  EXPECT_EQ(nlohmann::json::parse(j.dump()), j);
}

TuneRecord tuned(const std::string& shape, double best_us, double pick_us) {
  return {shape, "tma best", "tma pick", best_us, pick_us, 12};
}

// Ratios 1.0, 1.05, 1.2, 1.0, 1.5 (pick / best): sorted 1, 1, 1.05, 1.2, 1.5.
TEST(ReportTune, PickSummaryOverRatios) {
  const std::vector<TuneRecord> records = {tuned("a", 10, 10), tuned("b", 20, 21), tuned("c", 5, 6), tuned("d", 1, 1),
                                           tuned("e", 2, 3)};
  const PickSummary s = summarize_picks(records);
  EXPECT_EQ(s.count, 5);
  EXPECT_DOUBLE_EQ(s.median, 1.05);
  EXPECT_DOUBLE_EQ(s.p90, 1.5) << "nearest rank: the 5th of 5";
  EXPECT_DOUBLE_EQ(s.worst, 1.5);
  EXPECT_EQ(s.worst_shape, "e");
  EXPECT_EQ(s.within_10_percent, 3);
  EXPECT_EQ(format_pick_summary(s),
            "cost model's pick against the tuned best over 5 problems: median 1.05x, p90 1.50x, worst 1.50x at e; 3 "
            "of 5 within 10%");

  const PickSummary none = summarize_picks({});
  EXPECT_EQ(none.count, 0);
  EXPECT_TRUE(std::isnan(none.median));
  EXPECT_EQ(format_pick_summary(none), "cost model's pick against the tuned best: no problems tuned");
}

TEST(ReportTune, TableAndJsonCarryEveryRecord) {
  const std::vector<TuneRecord> records = {tuned("64x7168x2048 NT bf16", 10, 12.5)};
  const std::vector<std::string> lines = lines_of(format_tune_table(records));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(cell_under(lines[0], lines[1], "pick/best"), "1.25x");
  EXPECT_NE(lines[1].find("tma best"), std::string::npos);
  EXPECT_NE(lines[1].find("tma pick"), std::string::npos);

  const nlohmann::json j = tune_json(records, summarize_picks(records));
  ASSERT_EQ(j["records"].size(), 1u);
  EXPECT_EQ(j["records"][0]["shape"], "64x7168x2048 NT bf16");
  EXPECT_DOUBLE_EQ(j["records"][0]["pick_over_best"].get<double>(), 1.25);
  EXPECT_EQ(j["records"][0]["candidates"], 12);
  EXPECT_EQ(j["summary"]["within_10_percent"], 0);
  EXPECT_EQ(j["summary"]["worst_shape"], "64x7168x2048 NT bf16");
}

TEST(ReportHintMatrix, RowPerHintColumnPerRuntimeM) {
  std::vector<HintCell> cells;
  for (int64_t hint : {64, 256}) {
    for (int64_t m : {64, 256}) cells.push_back({hint, m, double(hint + m), double(m) / 10});
  }
  const std::vector<std::string> lines = lines_of(format_hint_matrix(cells));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].find("tuned for M ="), 0u);
  EXPECT_NE(lines[0].find("run at M = 256"), std::string::npos);
  EXPECT_EQ(lines[1].substr(0, 2), "64");
  EXPECT_NE(lines[1].find("128.00 / 6.40"), std::string::npos);
  EXPECT_NE(lines[1].find("320.00 / 25.60"), std::string::npos);
  EXPECT_LT(lines[1].find("128.00 / 6.40"), lines[1].find("320.00 / 25.60")) << "columns in order of M";
  EXPECT_NE(lines[2].find("512.00 / 25.60"), std::string::npos);

  const nlohmann::json j = hint_matrix_json(cells);
  ASSERT_EQ(j["cells"].size(), 4u);
  EXPECT_EQ(j["cells"][3]["hint"], 256);
  EXPECT_EQ(j["cells"][3]["m"], 256);
  EXPECT_DOUBLE_EQ(j["cells"][3]["pinned_us"].get<double>(), 512.0);
  EXPECT_DOUBLE_EQ(j["cells"][3]["dispatch_us"].get<double>(), 25.6);
}

}  // namespace

TEST(Report, TheBaselineIsNamedWhereverItAppears) {
  const std::vector<BenchRecord> records = fp8_records();
  const std::vector<std::string> lines = lines_of(format_table(records, 3000.0, "torch"));
  EXPECT_EQ(cell_under(lines[0], lines[2], "torch us"), "4.00*");
  EXPECT_EQ(lines[5], "* torch us: per-tensor stand-in");
  EXPECT_NE(format_summary(summarize(records), "torch").find("over torch (2 of them"), std::string::npos);
  EXPECT_EQ(format_summary(summarize({}), "torch"), "summary: no shapes with a torch baseline");
  EXPECT_EQ(to_json(records, summarize(records), 3000.0, "torch")["summary"]["baseline"], "torch");
  EXPECT_EQ(to_json(records, summarize(records), 3000.0)["summary"]["baseline"], "cuBLASLt");
}

TEST(Report, BufferSetsCoverThreeL2sWithinHalfTheFreeMemory) {
  const double l2 = 50e6;
  EXPECT_EQ(buffer_set_count(150e6, l2, 80e9), 1);   // one set is already 3x the L2
  EXPECT_EQ(buffer_set_count(10e6, l2, 80e9), 15);   // ceil(150 / 10)
  EXPECT_EQ(buffer_set_count(11e6, l2, 80e9), 14);   // ceil(150 / 11)
  EXPECT_EQ(buffer_set_count(1e3, l2, 80e9), 64);    // at most 64
  EXPECT_EQ(buffer_set_count(10e6, l2, 100e6), 5);   // half of 100 MB free holds 5
  EXPECT_EQ(buffer_set_count(10e9, l2, 1e9), 1);     // at least one
}

namespace {

// bench --epilogue: fused time over unfused, geomean and worst, over the records with both.
TEST(Report, FusedSummaryIsFusedOverUnfusedPerEpilogue) {
  std::vector<BenchRecord> records = {record(4096, 4096, 4096, 110.0, 100.0, "tma"),
                                      record(8192, 2112, 7168, 202.0, 200.0, "tma"),
                                      record(1, 4096, 4096, 10.0, 10.0, "gemv simt"),
                                      record(2048, 2048, 512, 150.0, 50.0, "tma")};
  records[0].unfused_us = 100.0;  // 1.10x
  records[1].unfused_us = 200.0;  // 1.01x; the third was not timed unfused
  records[3].unfused_us = 50.0;   // 3.00x, under another epilogue
  records[0].epilogue = records[1].epilogue = records[2].epilogue = "silu(acc + bias[n])";
  records[3].epilogue = "gelu(acc) + r[m, n]";
  const std::string lines = format_fused_summary(records);
  const size_t second = lines.find('\n') + 1;
  ASSERT_EQ(std::count(lines.begin(), lines.end(), '\n'), 2) << lines;
  const std::string first_line = lines.substr(0, second), second_line = lines.substr(second);
  EXPECT_NE(first_line.find("fused epilogue 'silu(acc + bias[n])': 2 shapes"), std::string::npos) << lines;
  EXPECT_NE(first_line.find(" 1.054x geomean"), std::string::npos) << lines;  // sqrt(1.10 * 1.01)
  EXPECT_NE(first_line.find("worst 1.100x at 4096x4096x4096 NT bf16"), std::string::npos) << lines;
  EXPECT_NE(second_line.find("fused epilogue 'gelu(acc) + r[m, n]': 1 shapes, fused over unfused 3.000x"),
            std::string::npos) << lines;
  records[0].unfused_us = records[1].unfused_us = records[3].unfused_us = kNaN;
  EXPECT_EQ(format_fused_summary(records), "");
}

// Fused records against cuBLASLt's own fused epilogue (GELU_BIAS here): 110 over 100, 202 over
// 220, the third matched none.
std::vector<BenchRecord> fused_records() {
  std::vector<BenchRecord> records = {record(4096, 4096, 4096, 110.0, 100.0, "tma 128x224"),
                                      record(8192, 2112, 7168, 202.0, 200.0, "tma 192x176"),
                                      record(4096, 2112, 7168, 150.0, 140.0, "tma 128x224")};
  records[0].epilogue = records[1].epilogue = "gelu_tanh(acc + bias[n])";
  records[2].epilogue = "silu(acc + bias[n])";
  records[0].baseline_epilogue = records[1].baseline_epilogue = "GELU_BIAS";
  records[0].baseline_fused_us = 100.0;
  records[1].baseline_fused_us = 220.0;
  return records;
}

TEST(Report, FusedRecordsShowTheBaselinesFusedTimeAndOursOverIt) {
  const std::vector<BenchRecord> records = fused_records();
  const std::vector<std::string> lines = lines_of(format_table(records, 3000.0));
  ASSERT_EQ(lines.size(), 4u);
  const std::string& header = lines[0];
  // After the speedup over the plain GEMM, before TFLOP/s.
  EXPECT_LT(header.find("speedup"), header.find("cuBLASLt-fused us"));
  EXPECT_LT(header.find("cuBLASLt-fused us"), header.find("ours/cuBLASLt-fused"));
  EXPECT_LT(header.find("ours/cuBLASLt-fused"), header.find("TFLOP/s"));
  EXPECT_EQ(cell_under(header, lines[1], "cuBLASLt us"), "100.00");  // the plain GEMM's, as before
  EXPECT_EQ(cell_under(header, lines[1], "cuBLASLt-fused us"), "100.00");
  EXPECT_EQ(cell_under(header, lines[1], "ours/cuBLASLt-fused"), "1.10x");
  EXPECT_EQ(cell_under(header, lines[2], "cuBLASLt-fused us"), "220.00");
  EXPECT_EQ(cell_under(header, lines[2], "ours/cuBLASLt-fused"), "0.92x");
  EXPECT_EQ(cell_under(header, lines[3], "cuBLASLt-fused us"), "-");  // no cuBLASLt epilogue matches
  EXPECT_EQ(cell_under(header, lines[3], "ours/cuBLASLt-fused"), "-");
  const size_t at = header.find("config");
  EXPECT_EQ(lines[1].find("tma 128x224"), at);
  EXPECT_EQ(lines[3].find("tma 128x224"), at);
  // Named after the baseline; no such columns without an epilogue.
  EXPECT_NE(format_table(records, 3000.0, "torch").find("ours/torch-fused"), std::string::npos);
  std::vector<BenchRecord> plain = records;
  for (BenchRecord& r : plain) r.epilogue.clear();
  EXPECT_EQ(format_table(plain, 3000.0).find("fused"), std::string::npos);

  const nlohmann::json j = to_json(records, summarize(records), 3000.0);
  EXPECT_EQ(j["records"][0]["baseline_epilogue"], "GELU_BIAS");
  EXPECT_DOUBLE_EQ(j["records"][0]["baseline_fused_us"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(j["records"][0]["fused_over_baseline_fused"].get<double>(), 1.1);
  EXPECT_DOUBLE_EQ(j["records"][1]["fused_over_baseline_fused"].get<double>(), 202.0 / 220.0);
  EXPECT_EQ(j["records"][2]["epilogue"], "silu(acc + bias[n])");
  EXPECT_TRUE(j["records"][2]["baseline_epilogue"].is_null());
  EXPECT_TRUE(j["records"][2]["baseline_fused_us"].is_null());
  EXPECT_TRUE(j["records"][2]["fused_over_baseline_fused"].is_null());
  EXPECT_EQ(nlohmann::json::parse(j.dump()), j);
}

TEST(Report, FusedSummaryAddsOursOverTheBaselinesFusedEpilogue) {
  std::vector<BenchRecord> records = fused_records();
  records[0].unfused_us = 100.0;  // 1.10x
  records[1].unfused_us = 200.0;  // 1.01x
  const std::string lines = format_fused_summary(records);
  ASSERT_EQ(std::count(lines.begin(), lines.end(), '\n'), 1) << lines;  // the silu records have neither
  EXPECT_EQ(lines,
            "fused epilogue 'gelu_tanh(acc + bias[n])': 2 shapes, fused over unfused 1.054x geomean, worst 1.100x at "
            "4096x4096x4096 NT bf16; 2 shapes, fused over cuBLASLt's GELU_BIAS 1.005x geomean, worst 1.100x at "
            "4096x4096x4096 NT bf16\n");  // sqrt(1.10 * 1.01), sqrt(1.10 * 202 / 220)
  // Only the baseline's: a part of its own, named after the baseline.
  records[0].unfused_us = records[1].unfused_us = kNaN;
  records[0].baseline_fused_us = 220.0;  // 0.50x
  EXPECT_EQ(format_fused_summary(records, "torch"),
            "fused epilogue 'gelu_tanh(acc + bias[n])': 2 shapes, fused over torch's GELU_BIAS 0.678x geomean, worst "
            "0.918x at 8192x2112x7168 NT bf16\n");  // sqrt(0.5 * 202 / 220)
}

}  // namespace
