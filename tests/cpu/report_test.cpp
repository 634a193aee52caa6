#include "report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

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
  auto j = to_json(records, summarize(records));
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
  EXPECT_EQ(r0["config"], "tma 128x256x64 s4");

  const auto& r1 = j["records"][1];
  EXPECT_TRUE(r1["baseline_us"].is_null());
  EXPECT_TRUE(r1["speedup"].is_null());
  EXPECT_DOUBLE_EQ(r1["ours_us"].get<double>(), 5.0);

  EXPECT_EQ(j["summary"]["count"], 1);
  EXPECT_NEAR(j["summary"]["geomean_speedup"].get<double>(), 1.1, 1e-12);
  EXPECT_EQ(j["summary"]["worst_shape"], "4096x2112x7168x2 NT bf16");
  // Serialized text carries null too, and parses back.
  const std::string text = j.dump();
  EXPECT_NE(text.find("\"baseline_us\":null"), std::string::npos) << text;
  EXPECT_EQ(nlohmann::json::parse(text), j);

  auto empty = to_json({}, summarize({}));
  EXPECT_TRUE(empty["records"].is_array());
  EXPECT_TRUE(empty["summary"]["geomean_speedup"].is_null());
}

TEST(Report, TableHasHeaderEveryRecordAndAlignedColumns) {
  std::vector<BenchRecord> records = {record(4096, 2112, 7168, 123.456, 130.0, "tma 128x256x64 s4"),
                                      record(1, 16, 64, 7.5, kNaN, "simt 64x64x32 s2", 8)};
  const std::string table = format_table(records);
  std::istringstream in(table);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u);  // header + one row per record

  for (const char* column : {"shape", "layout", "dtype", "ours us", "cuBLASLt us", "speedup",
                             "TFLOP/s", "GB/s", "config"})
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

}  // namespace
