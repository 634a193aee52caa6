// bench's grouped rows (bench/report.h): floors, roofline fraction, speedup, table, summary and
// JSON, on hand-made records.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "bench/report.h"

namespace gemmkit::tools {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kCopyGbps = 3000.0;

// A bf16 forward row of G = 8, 32768 x 4096 x 7168: 1.2e9 bytes, 1.92e15 flops.
GroupedRecord forward(double ours, double dense, double baseline, const std::string& dist = "balanced") {
  GroupedRecord r;
  r.op = "fwd";
  r.groups = 8;
  r.m = r.rows = 32768;
  r.n = 4096;
  r.k = 7168;
  r.dtype = "bf16";
  r.dist = dist;
  r.bytes = 1.2e9;
  r.ours_us = ours;
  r.dense_us = dense;
  r.baseline_us = baseline;
  return r;
}

GroupedRecord not_run(const std::string& op, const std::string& note) {
  GroupedRecord r = forward(kNaN, kNaN, kNaN);
  r.op = op;
  r.note = note;
  return r;
}

std::vector<std::string> lines(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(GroupedReport, TheMemoryFloorMovesTheBytesAtTheCopyBandwidth) {
  // 1.2e9 bytes at 3000 GB/s (read + write counted) = 400 us.
  EXPECT_DOUBLE_EQ(memory_floor_us(1.2e9, kCopyGbps), 400.0);
  EXPECT_TRUE(std::isnan(memory_floor_us(1.2e9, kNaN)));
  EXPECT_TRUE(std::isnan(memory_floor_us(1.2e9, 0.0)));
}

TEST(GroupedReport, TheRooflineFractionTakesTheLargerFloor) {
  // The dense floor (3000 us) is above the memory floor (400 us).
  EXPECT_DOUBLE_EQ(roofline_fraction(forward(4000, 3000, 5000), kCopyGbps), 0.75);
  // A memory-bound row: its memory floor is the larger.
  EXPECT_DOUBLE_EQ(roofline_fraction(forward(800, 100, 900), kCopyGbps), 0.5);
  // One floor unknown: the other stands; both unknown, or ours missing: NaN.
  EXPECT_DOUBLE_EQ(roofline_fraction(forward(800, 100, 900), kNaN), 0.125);
  EXPECT_DOUBLE_EQ(roofline_fraction(forward(800, kNaN, 900), kCopyGbps), 0.5);
  EXPECT_TRUE(std::isnan(roofline_fraction(forward(800, kNaN, 900), kNaN)));
  EXPECT_TRUE(std::isnan(roofline_fraction(forward(kNaN, 3000, 900), kCopyGbps)));
}

TEST(GroupedReport, SpeedupIsTheBaselineOverOurs) {
  EXPECT_DOUBLE_EQ(grouped_speedup(forward(4000, 3000, 5000)), 1.25);
  EXPECT_TRUE(std::isnan(grouped_speedup(forward(4000, 3000, kNaN))));
  EXPECT_EQ(grouped_name(forward(1, 1, 1, "skew:10")), "fwd G=8 32768x4096x7168 bf16 skew:10");
}

TEST(GroupedReport, TableHasAColumnEachAndNumberedNotes) {
  GroupedRecord fp8 = forward(2000, 1600, kNaN, "zipf:1.2");
  fp8.dtype = "e4m3:bf16 block";
  fp8.note = "cuBLAS's grouped GEMM has no FP8";
  const std::vector<GroupedRecord> records = {forward(4000, 3000, 5000), fp8,
                                              not_run("wgrad", "not run: gemmkit has no weight-gradient kernel yet"),
                                              not_run("wgrad", "not run: gemmkit has no weight-gradient kernel yet")};
  const std::vector<std::string> table = lines(format_grouped_table(records, kCopyGbps));
  ASSERT_EQ(table.size(), 7u);  // header, 4 rows, 2 notes
  for (const char* column : {"op", "G", "MxNxK", "dtype", "dist", "ours us", "TFLOP/s", "dense us", "memory us",
                             "%memory", "roofline", "cuBLAS us", "speedup", "note"}) {
    EXPECT_NE(table[0].find(column), std::string::npos) << column;
  }
  // 2 * 32768 * 4096 * 7168 flops in 4000 us: 481.0 TFLOP/s; the memory floor 10% of our time.
  for (const char* cell : {"fwd", "32768x4096x7168", "bf16", "balanced", "4000.00", "481.0", "3000.00", "400.00",
                           "10.0", "0.75", "5000.00", "1.25x"}) {
    EXPECT_NE(table[1].find(cell), std::string::npos) << cell << " in " << table[1];
  }
  EXPECT_EQ(table[1].find('['), std::string::npos);
  EXPECT_NE(table[2].find("e4m3:bf16 block"), std::string::npos);
  EXPECT_EQ(table[2].substr(table[2].size() - 3), "[1]");
  EXPECT_EQ(table[3].substr(table[3].size() - 3), "[2]");
  EXPECT_EQ(table[4].substr(table[4].size() - 3), "[2]");  // a note seen before keeps its number
  EXPECT_NE(table[3].find("wgrad"), std::string::npos);
  EXPECT_EQ(table[5], "[1] cuBLAS's grouped GEMM has no FP8");
  EXPECT_EQ(table[6], "[2] not run: gemmkit has no weight-gradient kernel yet");
  // Columns line up: every row as long as the header up to its last number.
  EXPECT_EQ(table[1].find("0.75") + 4, table[0].find("roofline") + 8);
}

// A row with 4-bit weights: gemmkit's grouped GEMM of the same groups in 16-bit or FP8 as its
// baseline, starred as a dense row's stand-in is, counted apart in the summary, in the JSON.
GroupedRecord four_bit(double ours, double stand_in_us, const std::string& fp8_scaling) {
  GroupedRecord r = forward(ours, 100, kNaN);
  r.op = "masked";
  r.groups = 128;
  r.m = 4;
  r.rows = 512;
  r.n = 5760;
  r.k = 2880;
  r.dtype = fp8_scaling.empty() ? "bf16,w4:mxfp4" : "e4m3,w4:mxfp4 rowwise";
  r.bytes = 1.2e9;  // 400 us at the copy bandwidth
  set_grouped_stand_in(r, stand_in_us, fp8_scaling);
  return r;
}

TEST(GroupedReport, FourBitRowsStarTheirStandInBaseline) {
  const GroupedRecord w4a16 = four_bit(500, 1000, ""), w4a8 = four_bit(800, 600, "rowwise scales");
  EXPECT_EQ(w4a16.baseline_note, "gemmkit's 16-bit grouped GEMM of the same groups");
  EXPECT_EQ(w4a8.baseline_note, "gemmkit's FP8 grouped GEMM of the same groups, rowwise scales");
  EXPECT_DOUBLE_EQ(w4a16.baseline_us, 1000.0);
  EXPECT_DOUBLE_EQ(grouped_speedup(w4a16), 2.0);
  EXPECT_DOUBLE_EQ(memory_fraction(w4a16, kCopyGbps), 0.8);
  EXPECT_TRUE(std::isnan(memory_fraction(w4a16, kNaN)));
  const GroupedRecord none = four_bit(500, kNaN, "");
  EXPECT_TRUE(none.baseline_note.empty() && std::isnan(none.baseline_us));

  const std::vector<GroupedRecord> records = {forward(4000, 3000, 5000), w4a16, w4a8, four_bit(700, 1400, "")};
  const std::vector<std::string> table = lines(format_grouped_table(records, kCopyGbps));
  ASSERT_EQ(table.size(), 7u);  // header, 4 rows, 2 stand-ins' lines
  EXPECT_NE(table[2].find("1000.00*"), std::string::npos) << table[2];
  EXPECT_NE(table[2].find("80.0"), std::string::npos) << table[2];  // %memory: 400 us of 500
  EXPECT_NE(table[3].find("600.00*"), std::string::npos) << table[3];
  EXPECT_EQ(table[1].find('*'), std::string::npos);
  EXPECT_EQ(table[5], "* cuBLAS us: gemmkit's 16-bit grouped GEMM of the same groups");
  EXPECT_EQ(table[6], "* cuBLAS us: gemmkit's FP8 grouped GEMM of the same groups, rowwise scales");

  const GroupedSummary s = summarize_grouped(records, kCopyGbps);
  EXPECT_EQ(s.speedup.count, 4);
  EXPECT_EQ(s.stand_ins, 3);
  EXPECT_EQ(s.speedup.worst_name,
            "masked G=128 4x5760x2880 e4m3,w4:mxfp4 rowwise balanced (gemmkit's FP8 grouped GEMM of the same groups, "
            "rowwise scales)");
  const std::string summary = format_grouped_summary(s);
  EXPECT_NE(summary.find("\ngrouped summary: 4 rows with a cuBLAS baseline (3 of them against a stand-in), geomean "
                         "speedup "),
            std::string::npos)
      << summary;
  const nlohmann::json j = grouped_json(records, s, kCopyGbps);
  EXPECT_EQ(j["records"][1]["baseline_note"], "gemmkit's 16-bit grouped GEMM of the same groups");
  EXPECT_DOUBLE_EQ(j["records"][1]["memory_fraction"].get<double>(), 0.8);
  EXPECT_EQ(j["summary"]["speedup"]["stand_ins"], 3);
}

TEST(GroupedReport, SummaryLeavesOutWhatDidNotRun) {
  GroupedRecord no_baseline = forward(3200, 1600, kNaN, "zipf:1.2");  // fraction 0.5, no speedup
  const std::vector<GroupedRecord> records = {forward(4000, 3000, 5000, "balanced"),  // 0.75, 1.25x
                                              forward(3000, 3000, 2700, "skew:10"),   // 1.00, 0.90x
                                              no_baseline, not_run("wgrad", "not run: no kernel")};
  const GroupedSummary s = summarize_grouped(records, kCopyGbps);
  EXPECT_EQ(s.roofline.count, 3);
  EXPECT_NEAR(s.roofline.geomean, std::cbrt(0.75 * 1.0 * 0.5), 1e-12);
  EXPECT_DOUBLE_EQ(s.roofline.worst, 0.5);
  EXPECT_EQ(s.roofline.worst_name, "fwd G=8 32768x4096x7168 bf16 zipf:1.2");
  EXPECT_EQ(s.speedup.count, 2);
  EXPECT_NEAR(s.speedup.geomean, std::sqrt(1.25 * 0.9), 1e-12);
  EXPECT_DOUBLE_EQ(s.speedup.worst, 0.9);
  EXPECT_EQ(s.speedup.worst_name, "fwd G=8 32768x4096x7168 bf16 skew:10");
  EXPECT_EQ(format_grouped_summary(s),
            "grouped summary: 3 rows run, geomean roofline fraction 0.72, worst 0.50 at fwd G=8 32768x4096x7168 bf16 "
            "zipf:1.2\n"
            "grouped summary: 2 rows with a cuBLAS baseline, geomean speedup 1.06x, worst 0.90x at fwd G=8 "
            "32768x4096x7168 bf16 skew:10");

  const GroupedSummary none = summarize_grouped({not_run("wgrad", "not run: no kernel")}, kCopyGbps);
  EXPECT_EQ(none.roofline.count, 0);
  EXPECT_TRUE(std::isnan(none.speedup.geomean));
  EXPECT_EQ(format_grouped_summary(none), "grouped summary: no rows run\ngrouped summary: no rows with a cuBLAS baseline");
}

// Rows with an epilogue: named with it, our fused time over our unfused one summarized (the
// highest worst) and in the JSON.
TEST(GroupedReport, FusedRowsReportTheirEpilogueOverTheUnfusedTime) {
  std::vector<GroupedRecord> records = {forward(4040, 3000, 5000, "balanced"), forward(3000, 3000, 2700, "skew:10"),
                                        forward(3000, 3000, 2700, "zipf:1.2")};
  records[0].epilogue = records[1].epilogue = "silu(acc) * acc2";
  records[0].unfused_us = 4000;  // 1.01x
  records[1].unfused_us = 2500;  // 1.20x
  const GroupedSummary s = summarize_grouped(records, kCopyGbps);
  EXPECT_EQ(s.fused.count, 2);
  EXPECT_NEAR(s.fused.geomean, std::sqrt(1.01 * 1.2), 1e-12);
  EXPECT_DOUBLE_EQ(s.fused.worst, 1.2);
  EXPECT_EQ(s.fused.worst_name, "fwd G=8 32768x4096x7168 bf16 skew:10 [silu(acc) * acc2]");
  const std::string text = format_grouped_summary(s);
  EXPECT_NE(text.find("\ngrouped summary: 2 rows with a fused epilogue, geomean fused over unfused 1.101x, worst "
                      "1.200x at fwd G=8 32768x4096x7168 bf16 skew:10 [silu(acc) * acc2]"),
            std::string::npos)
      << text;
  const nlohmann::json j = grouped_json(records, s, kCopyGbps);
  EXPECT_EQ(j["records"][0]["epilogue"], "silu(acc) * acc2");
  EXPECT_DOUBLE_EQ(j["records"][0]["unfused_us"].get<double>(), 4000.0);
  EXPECT_DOUBLE_EQ(j["records"][0]["fused_over_unfused"].get<double>(), 1.01);
  EXPECT_EQ(j["summary"]["fused"]["count"], 2);
}

TEST(GroupedReport, TheBaselineIsNamedWhereverItAppears) {
  // python -m gemmkit.bench names torch where gemmkit bench has cuBLAS.
  const std::vector<GroupedRecord> records = {forward(4000, 3000, 5000)};
  const GroupedSummary s = summarize_grouped(records, kCopyGbps);
  const std::string table = format_grouped_table(records, kCopyGbps, "torch");
  EXPECT_NE(table.find("torch us"), std::string::npos) << table;
  EXPECT_EQ(table.find("cuBLAS"), std::string::npos) << table;
  EXPECT_NE(format_grouped_summary(s, "torch").find("1 row with a torch baseline, geomean speedup 1.25x"),
            std::string::npos);
  EXPECT_EQ(grouped_json(records, s, kCopyGbps, "torch")["summary"]["baseline"], "torch");
}

TEST(GroupedReport, JsonHasEveryFieldAndNullForWhatIsMissing) {
  const std::vector<GroupedRecord> records = {forward(4000, 3000, 5000), not_run("wgrad", "not run: no kernel")};
  const nlohmann::json j = grouped_json(records, summarize_grouped(records, kCopyGbps), kCopyGbps);
  ASSERT_EQ(j["records"].size(), 2u);
  const nlohmann::json& r = j["records"][0];
  EXPECT_EQ(r["op"], "fwd");
  EXPECT_EQ(r["groups"], 8);
  EXPECT_EQ(r["m"], 32768);
  EXPECT_EQ(r["n"], 4096);
  EXPECT_EQ(r["k"], 7168);
  EXPECT_EQ(r["rows"], 32768);
  EXPECT_EQ(r["dtype"], "bf16");
  EXPECT_EQ(r["dist"], "balanced");
  EXPECT_DOUBLE_EQ(r["bytes"].get<double>(), 1.2e9);
  EXPECT_DOUBLE_EQ(r["ours_us"].get<double>(), 4000.0);
  EXPECT_NEAR(r["tflops"].get<double>(), 2.0 * 32768 * 4096 * 7168 / 4000e-6 / 1e12, 1e-9);
  EXPECT_DOUBLE_EQ(r["dense_us"].get<double>(), 3000.0);
  EXPECT_DOUBLE_EQ(r["memory_us"].get<double>(), 400.0);
  EXPECT_DOUBLE_EQ(r["roofline_fraction"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(r["baseline_us"].get<double>(), 5000.0);
  EXPECT_DOUBLE_EQ(r["speedup"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(r["memory_fraction"].get<double>(), 0.1);
  EXPECT_TRUE(r["note"].is_null());
  for (const char* field : {"epilogue", "unfused_us", "fused_over_unfused", "baseline_note"}) {
    EXPECT_TRUE(r[field].is_null()) << field;
  }
  EXPECT_EQ(r.size(), 22u);  // the fields above, nothing else

  const nlohmann::json& missing = j["records"][1];
  for (const char* field : {"ours_us", "tflops", "dense_us", "memory_fraction", "roofline_fraction", "baseline_us",
                            "speedup"}) {
    EXPECT_TRUE(missing[field].is_null()) << field;
  }
  EXPECT_EQ(missing["note"], "not run: no kernel");

  const nlohmann::json& summary = j["summary"];
  EXPECT_EQ(summary["roofline"]["count"], 1);
  EXPECT_DOUBLE_EQ(summary["roofline"]["geomean"].get<double>(), 0.75);
  EXPECT_EQ(summary["roofline"]["worst_row"], "fwd G=8 32768x4096x7168 bf16 balanced");
  EXPECT_DOUBLE_EQ(summary["speedup"]["worst"].get<double>(), 1.25);
  EXPECT_EQ(summary["speedup"]["stand_ins"], 0);
  EXPECT_EQ(summary["baseline"], "cuBLAS");
  EXPECT_EQ(summary["fused"]["count"], 0);
  EXPECT_EQ(summary.size(), 4u);

  const nlohmann::json empty = grouped_json({}, summarize_grouped({}, kNaN), kNaN);
  EXPECT_TRUE(empty["records"].is_array());
  EXPECT_TRUE(empty["summary"]["speedup"]["worst_row"].is_null());
}

}  // namespace
}  // namespace gemmkit::tools
