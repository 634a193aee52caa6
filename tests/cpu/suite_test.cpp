#include "suite.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <tuple>

#include "gemmkit/error.h"

#ifndef GEMMKIT_SOURCE_DIR
#error "GEMMKIT_SOURCE_DIR must name the repository root"
#endif

using gemmkit::DType;
using gemmkit::Error;
using gemmkit::ErrorCode;
using namespace gemmkit::tools;

namespace {

std::vector<SuiteProblem> parse(const std::string& text) {
  std::istringstream in(text);
  return parse_suite(in, "test.txt");
}

TEST(Suite, DefaultsApplyWhenOnlyShapeIsGiven) {
  auto p = parse("4096 2112 7168\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].m, 4096);
  EXPECT_EQ(p[0].n, 2112);
  EXPECT_EQ(p[0].k, 7168);
  EXPECT_EQ(p[0].layout, "NT");
  EXPECT_EQ(p[0].in_dtype, DType::bf16);
  EXPECT_EQ(p[0].out_dtype, DType::bf16);
  EXPECT_EQ(p[0].batch, 1);
  EXPECT_EQ(p[0].line, 1);
}

TEST(Suite, ParsesEveryField) {
  auto p = parse("1 2 3 tn f16:f32 4\n5 6 7 Tt f16\n");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(std::tie(p[0].m, p[0].n, p[0].k, p[0].batch), std::make_tuple(1, 2, 3, 4));
  EXPECT_EQ(p[0].layout, "TN");  // stored upper-case
  EXPECT_EQ(p[0].in_dtype, DType::f16);
  EXPECT_EQ(p[0].out_dtype, DType::f32);
  EXPECT_EQ(p[1].layout, "TT");
  EXPECT_EQ(p[1].in_dtype, DType::f16);
  EXPECT_EQ(p[1].out_dtype, DType::f16);  // "f16" alone means out = in
  EXPECT_EQ(p[1].batch, 1);
}

TEST(Suite, SkipsCommentsAndBlankLinesAndKeepsLineNumbers) {
  auto p = parse("# header\n\n  \t \n1 2 3 # trailing comment\n\t4\t5 \t6 NN#tight\r\n# end");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].line, 4);
  EXPECT_EQ(p[0].m, 1);
  EXPECT_EQ(p[1].line, 5);
  EXPECT_EQ(std::tie(p[1].m, p[1].n, p[1].k), std::make_tuple(4, 5, 6));
  EXPECT_EQ(p[1].layout, "NN");
  EXPECT_TRUE(parse("").empty());
  EXPECT_TRUE(parse("# only a comment\n").empty());
}

TEST(Suite, AcceptsZeroSizesAnd64BitValues) {
  auto p = parse("0 0 0\n9000000000 1 1 NT bf16 3000000000\n");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(std::tie(p[0].m, p[0].n, p[0].k), std::make_tuple(0, 0, 0));
  EXPECT_EQ(p[1].m, 9000000000LL);
  EXPECT_EQ(p[1].batch, 3000000000LL);
}

// Each bad line sits on line 3, after a comment and a good line, so the line number is checked.
TEST(Suite, RejectsMalformedLinesNamingFileLineAndText) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"-1 2 3", "'-1'"},
      {"1 -2 3", "'-2'"},
      {"1 2 -3", "'-3'"},
      {"12x 2 3", "'12x'"},
      {"abc 2 3", "'abc'"},
      {"1.5 2 3", "'1.5'"},
      {"1 2 0x10", "'0x10'"},
      {"99999999999999999999 1 1", "'99999999999999999999'"},
      {"1 2", "'1 2'"},
      {"1 2 3 NT bf16 1 9", "'1 2 3 NT bf16 1 9'"},
      {"1 2 3 XY", "'XY'"},
      {"1 2 3 N", "'N'"},
      {"1 2 3 bf16", "'bf16'"},   // fields are positional: the fourth is the layout
      {"1 2 3 NT f32", "'f32'"},  // inputs must be 16-bit
      {"1 2 3 NT f32:f32", "'f32:f32'"},
      {"1 2 3 NT fp16", "'fp16'"},
      {"1 2 3 NT bf16:f8", "'bf16:f8'"},
      {"1 2 3 NT bf16:", "'bf16:'"},
      {"1 2 3 NT bf16 0", "'0'"},
      {"1 2 3 NT bf16 -2", "'-2'"},
      {"1 2 3 NT bf16 2x", "'2x'"},
  };
  for (const auto& [line, given] : cases) {
    SCOPED_TRACE(line);
    std::istringstream in("# comment\n1 1 1\n" + line + "\n4 4 4\n");
    try {
      parse_suite(in, "bad.txt");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("bad.txt:3: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(given), std::string::npos) << msg;
      EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
    }
  }
}

TEST(Suite, LoadReportsUnreadableFileAsIoError) {
  const std::string path = "/nonexistent/dir/suite.txt";
  try {
    load_suite(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io_error);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(Suite, LoadReportsDirectoryAsIoError) {
  try {
    load_suite(GEMMKIT_SOURCE_DIR "/bench/suites");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io_error);
    EXPECT_NE(std::string(e.what()).find("bench/suites"), std::string::npos) << e.what();
  }
}

TEST(Suite, ParseProblemTakesTheCommandLineForm) {
  SuiteProblem p = parse_problem({"4096", "4096", "4096"}, "command line");
  EXPECT_EQ(std::tie(p.m, p.n, p.k, p.batch), std::make_tuple(4096, 4096, 4096, 1));
  EXPECT_EQ(p.layout, "NT");
  EXPECT_EQ(p.line, 0);
  p = parse_problem({"1", "2", "3", "nn", "bf16:f16", "8"}, "command line");
  EXPECT_EQ(std::tie(p.m, p.n, p.k, p.batch), std::make_tuple(1, 2, 3, 8));
  EXPECT_EQ(p.layout, "NN");
  EXPECT_EQ(p.in_dtype, DType::bf16);
  EXPECT_EQ(p.out_dtype, DType::f16);
  try {
    parse_problem({"1", "2", "x"}, "command line");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("command line: ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
}

TEST(Suite, DtypeSpecRoundTrips) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bf16", "bf16"},         {"f16", "f16"},           {"bf16:bf16", "bf16"},
      {"bf16:f16", "bf16:f16"}, {"bf16:f32", "bf16:f32"}, {"f16:bf16", "f16:bf16"},
      {"f16:f16", "f16"},       {"f16:f32", "f16:f32"},   {"BF16:F32", "bf16:f32"},
  };
  for (const auto& [given, canonical] : cases) {
    SCOPED_TRACE(given);
    SuiteProblem p = parse("1 1 1 NT " + given).at(0);
    EXPECT_EQ(dtype_spec(p), canonical);
    SuiteProblem q = parse("1 1 1 NT " + dtype_spec(p)).at(0);
    EXPECT_EQ(q.in_dtype, p.in_dtype);
    EXPECT_EQ(q.out_dtype, p.out_dtype);
  }
  SuiteProblem p;
  p.in_dtype = DType::f16;
  p.out_dtype = DType::f32;
  EXPECT_EQ(dtype_spec(p), "f16:f32");
}

using Shape = std::tuple<int64_t, int64_t, int64_t>;

const std::vector<std::pair<int64_t, int64_t>> kNK = {{2112, 7168},  {24576, 1536}, {32768, 512},
                                                      {7168, 16384}, {4096, 7168},  {7168, 2048},
                                                      {8192, 8192},  {28672, 8192}, {8192, 28672}};

void expect_suite(const std::string& file, size_t count, const std::vector<int64_t>& ms) {
  SCOPED_TRACE(file);
  auto problems = load_suite(std::string(GEMMKIT_SOURCE_DIR) + "/bench/suites/" + file);
  EXPECT_EQ(problems.size(), count);
  std::set<Shape> want, got;
  for (int64_t m : ms)
    for (auto [n, k] : kNK) want.insert({m, n, k});
  for (const auto& p : problems) {
    got.insert({p.m, p.n, p.k});
    EXPECT_EQ(p.layout, "NT");
    EXPECT_EQ(dtype_spec(p), "bf16");
    EXPECT_EQ(p.batch, 1);
  }
  EXPECT_EQ(got, want);
}

TEST(Suite, ShippedDenseLargeParses) {
  // The 2 x 9 grid; 8192^3 is one of its entries.
  expect_suite("dense-large.txt", 18, {4096, 8192});
}

TEST(Suite, ShippedDenseDecodeParses) { expect_suite("dense-decode.txt", 36, {1, 16, 64, 128}); }

}  // namespace
