// Suite files' `grouped` lines (bench/suite.h): their fields, the dense GEMM each stands beside,
// the distributions' text and errors, and the shipped MoE suites.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <tuple>

#include "bench/suite.h"
#include "gemmkit/error.h"

#ifndef GEMMKIT_SOURCE_DIR
#error "GEMMKIT_SOURCE_DIR must name the repository root"
#endif

namespace gemmkit::tools {
namespace {

Suite parse(const std::string& text) {
  std::istringstream in(text);
  return parse_bench_suite(in, "moe.txt");
}

GroupedProblem grouped(const std::string& line) { return parse(line).grouped.at(0); }

int64_t sum(const std::vector<int64_t>& rows) { return std::accumulate(rows.begin(), rows.end(), int64_t(0)); }

// The error a suite made of `line` alone raises.
std::string parse_error(const std::string& line) {
  try {
    parse(line);
    ADD_FAILURE() << "no error for " << line;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    return e.what();
  }
  return "";
}

TEST(GroupedSuite, DenseAndGroupedLinesMix) {
  const Suite suite = parse("# moe\n4096 2112 7168\ngrouped fwd 8 32768 4096 7168 bf16 balanced\n\n1 2 3 NN\n");
  EXPECT_EQ(suite.name, "moe.txt");
  ASSERT_EQ(suite.dense.size(), 2u);
  EXPECT_EQ(suite.dense[0].line, 2);
  EXPECT_EQ(suite.dense[1].line, 5);
  EXPECT_EQ(suite.dense[1].layout, "NN");
  ASSERT_EQ(suite.grouped.size(), 1u);
  const GroupedProblem& p = suite.grouped[0];
  EXPECT_EQ(p.op, GroupedOp::fwd);
  EXPECT_EQ(std::tie(p.m, p.n, p.k), std::make_tuple(32768, 4096, 7168));
  EXPECT_EQ(p.groups(), 8);
  EXPECT_EQ(p.rows, std::vector<int64_t>(8, 4096));
  EXPECT_EQ(p.dense.line, 3);
  EXPECT_EQ(type_spec(p.dense), "bf16");
}

TEST(GroupedSuite, EachOpStandsBesideTheDenseGemmOfItsWork) {
  // {line, dense m, n, k, layout}: fwd and masked multiply the rows by weights stored [N, K]; dgrad
  // multiplies dD [M, N] by them stored [N, K], contracting N; wgrad is dD^T [N, M] times X [M, K].
  const std::vector<std::tuple<std::string, int64_t, int64_t, int64_t, std::string>> cases = {
      {"grouped fwd 8 32768 4096 7168 bf16 skew:10", 32768, 4096, 7168, "NT"},
      {"grouped dgrad 8 32768 4096 7168 bf16 zipf:1.2", 32768, 7168, 4096, "NN"},
      {"grouped wgrad 8 32768 4096 7168 bf16 balanced", 4096, 7168, 32768, "TN"},
      {"grouped masked 128 64 3072 4096 bf16 balanced", 128 * 64, 3072, 4096, "NT"},
      {"grouped masked 4 64 3072 4096 bf16 zipf:1", 64 + 32 + 21 + 16, 3072, 4096, "NT"},
  };
  for (const auto& [line, m, n, k, layout] : cases) {
    SCOPED_TRACE(line);
    const GroupedProblem p = grouped(line);
    EXPECT_EQ(std::tie(p.dense.m, p.dense.n, p.dense.k, p.dense.layout), std::tie(m, n, k, layout));
    EXPECT_EQ(p.dense.batch, 1);
  }
}

TEST(GroupedSuite, RowsFollowTheDistribution) {
  const GroupedProblem contiguous = grouped("grouped fwd 8 32768 4096 7168 bf16 zipf:1.2");
  EXPECT_EQ(sum(contiguous.rows), 32768);
  EXPECT_EQ(contiguous.rows, split_rows(8, 32768, contiguous.dist));
  const GroupedProblem masked = grouped("grouped masked 8 32 4096 7168 bf16 skew:4");
  EXPECT_EQ(masked.rows, (std::vector<int64_t>{32, 8, 8, 8, 8, 8, 8, 8}));
}

TEST(GroupedSuite, TakesFp8TypesAndModes) {
  const GroupedProblem block = grouped("GROUPED FWD 8 32768 4096 7168 e4m3:bf16 Block balanced");
  EXPECT_EQ(block.dense.in_dtype, DType::e4m3);
  EXPECT_EQ(block.dense.out_dtype, DType::bf16);
  EXPECT_EQ(block.dense.mode, ScaleMode::block);
  EXPECT_EQ(type_spec(block.dense), "e4m3:bf16 block");
  EXPECT_EQ(grouped("grouped fwd 8 64 64 64 e4m3 balanced").dense.mode, ScaleMode::tensor);
  EXPECT_EQ(grouped("grouped masked 8 64 64 64 e4m3,e5m2:f32 rowwise balanced").dense.b_dtype(), DType::e5m2);
  EXPECT_EQ(type_spec(grouped("grouped dgrad 8 64 64 64 f16:f32 balanced").dense), "f16:f32");
}

// 4-bit weights on grouped lines, spelled as on dense lines: each group's weights [N, K] as a
// dense line's B, the format setting B's mode, a W4A8 line's mode field A's.
TEST(GroupedSuite, TakesFourBitWeightsAsDenseLinesSpellThem) {
  struct Case {
    std::string line, type;
    DType a, b;
    ScaleMode mode, mode_a;
    int64_t group;
    bool zeros;
  };
  const std::vector<Case> cases = {
      {"grouped masked 128 4 5760 2880 bf16,w4:mxfp4 balanced", "bf16,w4:mxfp4", DType::bf16, DType::e2m1,
       ScaleMode::mx, ScaleMode::none, 32, false},
      {"grouped fwd 8 128 4096 7168 bf16,w4:int4g128 balanced", "bf16,w4:int4g128", DType::bf16, DType::u4,
       ScaleMode::group, ScaleMode::none, 128, false},
      {"grouped masked 8 16 4096 7168 f16,w4:int4g64z:f32 random:1", "f16,w4:int4g64z:f32", DType::f16, DType::u4,
       ScaleMode::group, ScaleMode::none, 64, true},
      {"grouped masked 8 16 4096 7168 e4m3,w4:int4g128 balanced", "e4m3,w4:int4g128 rowwise", DType::e4m3, DType::u4,
       ScaleMode::group, ScaleMode::rowwise, 128, false},
      {"grouped masked 8 16 4096 7168 e4m3,w4:int4g128 Tensor balanced", "e4m3,w4:int4g128 tensor", DType::e4m3,
       DType::u4, ScaleMode::group, ScaleMode::tensor, 128, false},
      {"grouped fwd 8 128 4096 7168 e4m3,w4:int4g128z block skew:2", "e4m3,w4:int4g128z block", DType::e4m3, DType::u4,
       ScaleMode::group, ScaleMode::block, 128, true},
      {"grouped fwd 128 4096 2880 2880 E4M3,W4:MXFP4 rowwise random:1", "e4m3,w4:mxfp4 rowwise", DType::e4m3,
       DType::e2m1, ScaleMode::mx, ScaleMode::rowwise, 32, false},
      // A's mx exponents (A8W4 in MX) against weights in groups of 32 of K, as on dense lines.
      {"grouped masked 128 4 5760 2880 e4m3,w4:mxfp4 MX balanced", "e4m3,w4:mxfp4 mx", DType::e4m3, DType::e2m1,
       ScaleMode::mx, ScaleMode::mx, 32, false},
      {"grouped fwd 8 128 4096 7168 e4m3,w4:int4g32z mx routed:1", "e4m3,w4:int4g32z mx", DType::e4m3, DType::u4,
       ScaleMode::group, ScaleMode::mx, 32, true},
      {"grouped fwd 8 128 64 33 e4m3,w4:int4g32:f32 mx balanced", "e4m3,w4:int4g32:f32 mx", DType::e4m3, DType::u4,
       ScaleMode::group, ScaleMode::mx, 32, false},  // K = 33: two groups of 32
      // MXFP4 activations (FP4 x FP4) against weights in groups of 32 of K, mx named or not, as on dense lines.
      {"grouped masked 128 4 5760 2880 e2m1,w4:mxfp4 balanced", "e2m1,w4:mxfp4 mx", DType::e2m1, DType::e2m1,
       ScaleMode::mx, ScaleMode::mx, 32, false},
      {"grouped fwd 128 4096 2880 2880 E2M1,W4:MXFP4 MX random:1", "e2m1,w4:mxfp4 mx", DType::e2m1, DType::e2m1,
       ScaleMode::mx, ScaleMode::mx, 32, false},
      {"grouped fwd 8 128 4096 7168 e2m1,w4:int4g32z mx routed:1", "e2m1,w4:int4g32z mx", DType::e2m1, DType::u4,
       ScaleMode::group, ScaleMode::mx, 32, true},
      {"grouped masked 8 16 64 34 e2m1,w4:int4g32:f32 balanced", "e2m1,w4:int4g32:f32 mx", DType::e2m1, DType::u4,
       ScaleMode::group, ScaleMode::mx, 32, false},  // K = 34: two groups of 32
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.line);
    const GroupedProblem p = grouped(c.line);
    const SuiteProblem& t = p.dense;
    EXPECT_TRUE(t.w4());
    EXPECT_EQ(type_spec(t), c.type);
    EXPECT_EQ(t.in_dtype, c.a);
    EXPECT_EQ(t.b_dtype(), c.b);
    EXPECT_EQ(std::tie(t.mode, t.mode_a, t.group, t.zeros), std::tie(c.mode, c.mode_a, c.group, c.zeros));
    // The dense floor: every group's rows against one expert's weights, stored N x K.
    EXPECT_EQ(std::tie(t.m, t.n, t.k, t.layout), std::make_tuple(sum(p.rows), p.n, p.k, std::string("NT")));
  }
  // OUT defaults as on dense lines: A's type, bf16 for e4m3 A.
  EXPECT_EQ(grouped("grouped masked 8 16 64 64 f16,w4:int4g64 balanced").dense.out_dtype, DType::f16);
  EXPECT_EQ(grouped("grouped masked 8 16 64 64 e4m3,w4:int4g128 balanced").dense.out_dtype, DType::bf16);
  EXPECT_EQ(grouped("grouped masked 8 16 64 64 f16,w4:int4g64z:f32 balanced").dense.out_dtype, DType::f32);
}

// Masked decode at max_m 1 with random weights: the experts whose count rounds to 0 read no
// weights. Bytes: every row's A and D, and each busy expert's packed weights with their scales
// (and zero points) as a dense line's B counts them.
TEST(GroupedSuite, FourBitBytesCountThePackedWeightsOfBusyGroups) {
  const GroupedProblem mx = grouped("grouped masked 128 1 5760 2880 e4m3,w4:mxfp4 random:1");
  const int64_t rows = sum(mx.rows);
  const int64_t busy = std::count_if(mx.rows.begin(), mx.rows.end(), [](int64_t r) { return r > 0; });
  ASSERT_GT(busy, 0);
  ASSERT_LT(busy, 128);
  EXPECT_EQ(rows, busy);  // max_m 1: a busy expert has one row
  // e4m3 A a byte, bf16 D; e2m1 weights half a byte and a ue8m0 scale per 32 of K.
  EXPECT_DOUBLE_EQ(mx.bytes(), double(rows) * 2880 + double(busy) * (5760.0 * 2880 / 2 + 5760.0 * 90) +
                                   double(rows) * 5760 * 2);
  EXPECT_DOUBLE_EQ(weight_bytes(5760, 2880, DType::e2m1), 5760.0 * 2880 / 2 + 5760.0 * 90);
  // MXFP4 activations: half a byte an element and a ue8m0 exponent per 32 of K a row, as e2m1 weights.
  const GroupedProblem fp4 = grouped("grouped masked 128 1 5760 2880 e2m1,w4:mxfp4 random:1");
  EXPECT_EQ(fp4.rows, mx.rows);
  EXPECT_DOUBLE_EQ(fp4.bytes(), double(rows) * (2880.0 / 2 + 90) + double(busy) * (5760.0 * 2880 / 2 + 5760.0 * 90) +
                                    double(rows) * 5760 * 2);
  // u4 in groups of 128 with zero points: bf16 scales and zeros per 128 of K (ceil(200 / 128) = 2).
  const GroupedProblem int4 = grouped("grouped fwd 2 10 64 200 bf16,w4:int4g128z skew:1000");
  EXPECT_EQ(int4.rows, (std::vector<int64_t>{10, 0}));
  EXPECT_DOUBLE_EQ(int4.bytes(), 10.0 * 200 * 2 + (64.0 * 200 / 2 + 2 * 64 * 2 * 2) + 10.0 * 64 * 2);
  // 16- and 8-bit weights as before: dtype_size() bytes an element.
  EXPECT_DOUBLE_EQ(weight_bytes(64, 200, DType::bf16), 64.0 * 200 * 2);
}

TEST(GroupedSuite, BadFourBitLinesNameTheToken) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"grouped dgrad 8 64 64 64 bf16,w4:int4g128 balanced",
       "4-bit weights 'bf16,w4:int4g128' on a grouped 'dgrad' line; expected fwd or masked"},
      {"grouped wgrad 8 64 64 64 e4m3,w4:mxfp4 rowwise balanced",
       "4-bit weights 'e4m3,w4:mxfp4' on a grouped 'wgrad' line; expected fwd or masked"},
      {"grouped masked 8 4 64 64 bf16,w4:int4g96 balanced",
       "group size '96' in dtype 'bf16,w4:int4g96'; expected 32 or a power of two >= 64"},
      {"grouped masked 8 4 64 64 bf16,w4:int4 balanced", "unknown 4-bit weight format 'int4' in dtype 'bf16,w4:int4'"},
      {"grouped masked 8 4 64 64 bf16,w4:nf4 balanced", "unknown 4-bit weight format 'nf4' in dtype 'bf16,w4:nf4'"},
      {"grouped masked 8 4 64 64 bf16,w4:mxfp4z balanced",
       "4-bit weight format 'mxfp4z' in dtype 'bf16,w4:mxfp4z'; expected mxfp4 alone"},
      {"grouped masked 8 4 64 64 e5m2,w4:mxfp4 balanced",
       "activation type 'e5m2' in dtype 'e5m2,w4:mxfp4' with 4-bit weights; expected bf16, f16, e4m3 or e2m1"},
      {"grouped masked 8 4 64 64 w4:mxfp4 balanced", "dtype 'w4:mxfp4' names no activation type"},
      {"grouped masked 8 4 64 64 bf16,w4:int4g128:e4m3 balanced",
       "output type 'e4m3' in dtype 'bf16,w4:int4g128:e4m3'; expected bf16, f16 or f32"},
      {"grouped masked 8 4 64 64 bf16,w4:mxfp4 rowwise balanced",
       "scaling mode 'rowwise' with 4-bit weights 'bf16,w4:mxfp4'; the weight format sets the mode: group for int4, "
       "mx for mxfp4"},
      {"grouped masked 8 4 64 64 bf16,w4:int4g128 group balanced",
       "scaling mode 'group' with 4-bit weights 'bf16,w4:int4g128'"},
      // mx activation scales (A8W4 in MX) only against weights in groups of 32 of K, as on dense lines.
      {"grouped masked 8 4 64 256 e4m3,w4:int4g128 mx balanced",
       "scaling mode 'mx' for the e4m3 activations of 'e4m3,w4:int4g128' against weights in groups of 128 (mx "
       "exponents go with weights in groups of 32 of K: mxfp4, int4g32); expected tensor, rowwise, block or mx (A's "
       "scales, block 1x128, mx 1x32 ue8m0 against weights in groups of 32; the weight format sets B's)"},
      {"grouped fwd 8 128 64 64 e4m3,w4:int4g64z MX balanced",
       "scaling mode 'MX' for the e4m3 activations of 'e4m3,w4:int4g64z' against weights in groups of 64, one "
       "covering all of K = 64 (mx exponents go with weights in groups of 32 of K"},
      {"grouped masked 8 4 64 32 e4m3,w4:int4g32 mx balanced",  // one group covers K, as gemm() has it
       "scaling mode 'mx' for the e4m3 activations of 'e4m3,w4:int4g32' against weights in groups of 32, one "
       "covering all of K = 32 (mx exponents go with weights in groups of 32 of K"},
      {"grouped masked 8 4 64 64 e4m3,w4:mxfp4 group balanced",
       "scaling mode 'group' for the e4m3 activations of 'e4m3,w4:mxfp4'; expected tensor, rowwise, block or mx"},
      {"grouped masked 8 4 64 64 e4m3,w4:int4g128 rows balanced",
       "unknown scaling mode 'rows' for the e4m3 activations of 'e4m3,w4:int4g128'; expected tensor, rowwise, "
       "block or mx"},
      {"grouped masked 8 4 64 64 e4m3,w4:int4g128 2 balanced",
       "unknown scaling mode '2' for the e4m3 activations of 'e4m3,w4:int4g128'"},
      // MXFP4 activations: mx their only mode, against weights in groups of 32 of K, forward only.
      {"grouped masked 8 4 64 64 e2m1,w4:mxfp4 rowwise balanced",
       "scaling mode 'rowwise' for the e2m1 activations of 'e2m1,w4:mxfp4'; expected mx (MXFP4 activations: one "
       "ue8m0 exponent per 32 of K)"},
      {"grouped fwd 8 64 64 64 e2m1,w4:int4g32 rows balanced",
       "unknown scaling mode 'rows' for the e2m1 activations of 'e2m1,w4:int4g32'; expected mx"},
      {"grouped masked 8 4 64 256 e2m1,w4:int4g128 balanced",
       "4-bit weight format 'int4g128' with e2m1 activations in dtype 'e2m1,w4:int4g128'; expected mxfp4, int4g32 or "
       "int4g32z (MXFP4 activations' exponents cover 32 of K, as the weights' scales must)"},
      {"grouped masked 8 4 64 32 e2m1,w4:int4g32 balanced",  // one group covers K, as grouped_gemm has it
       "e2m1 activations 'e2m1,w4:int4g32' with K = 32, which one group of int4g32 covers; expected K > 32 (or mxfp4 "
       "weights), as grouped_gemm takes it"},
      {"grouped wgrad 8 64 64 64 e2m1,w4:mxfp4 balanced",
       "4-bit weights 'e2m1,w4:mxfp4' on a grouped 'wgrad' line; expected fwd or masked"},
  };
  for (const auto& [line, message] : cases) {
    SCOPED_TRACE(line);
    const std::string error = parse_error(line);
    EXPECT_EQ(error.rfind("moe.txt:1: ", 0), 0u) << error;
    EXPECT_NE(error.find(message), std::string::npos) << error;
  }
  // The whole message of one, and a mode field's place on a line without one taken by nothing else.
  EXPECT_EQ(parse_error("grouped masked 8 4 64 64 bf16,w4:mxfp4 tensor balanced"),
            "moe.txt:1: scaling mode 'tensor' with 4-bit weights 'bf16,w4:mxfp4'; the weight format sets the mode: "
            "group for int4, mx for mxfp4");
}

TEST(GroupedSuite, DistributionsReadBackAsWritten) {
  for (const std::string text : {"balanced", "skew:10", "skew:2.5", "zipf:1.2", "zipf:0", "random:7", "random:0",
                                 "routed:3"}) {
    EXPECT_EQ(dist_spec(parse_dist(text, "here")), text);
  }
  EXPECT_EQ(dist_spec(parse_dist("SKEW:10", "here")), "skew:10");
  EXPECT_EQ(dist_spec(parse_dist("Balanced", "here")), "balanced");
  const GroupDist random = parse_dist("random:18446744073709551", "here");
  EXPECT_EQ(random.kind, GroupDist::Kind::random);
  EXPECT_EQ(random.seed, 18446744073709551u);
}

TEST(GroupedSuite, BadDistributionsSayWhatIsExpected) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"flat", "unknown distribution 'flat'; expected balanced, skew:R, zipf:S, random:SEED or routed:SEED"},
      {"skew", "unknown distribution 'skew'; expected balanced, skew:R, zipf:S, random:SEED or routed:SEED"},
      {"balanced:2", "unknown distribution 'balanced:2'; expected balanced, skew:R, zipf:S, random:SEED or routed:SEED"},
      {"skew:", "skew ratio '' is not a number; expected a number > 0"},
      {"skew:ten", "skew ratio 'ten' is not a number; expected a number > 0"},
      {"skew:0", "skew ratio '0' is too small; expected a number > 0"},
      {"skew:-2", "skew ratio '-2' is too small; expected a number > 0"},
      {"skew:inf", "skew ratio 'inf' is not a number; expected a number > 0"},
      {"zipf:1.2x", "zipf exponent '1.2x' is not a number; expected a number >= 0"},
      {"zipf:-0.5", "zipf exponent '-0.5' is too small; expected a number >= 0"},
      {"zipf:nan", "zipf exponent 'nan' is not a number; expected a number >= 0"},
      {"random:x", "random seed 'x' is not an integer; expected an integer >= 0"},
      {"random:-1", "random seed '-1' is too small; expected an integer >= 0"},
      {"random:1.5", "random seed '1.5' is not an integer; expected an integer >= 0"},
  };
  for (const auto& [dist, message] : cases) {
    SCOPED_TRACE(dist);
    EXPECT_EQ(parse_error("grouped fwd 8 64 64 64 bf16 " + dist), "moe.txt:1: " + message);
  }
}

TEST(GroupedSuite, BadLinesNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"grouped fwd 8 64 64 64 bf16",
       "expected 8 or 9 fields for a grouped line (grouped OP G M N K dtype [mode] dist), got 7: "
       "'grouped fwd 8 64 64 64 bf16'"},
      {"grouped fwd 8 64 64 64 e4m3 block balanced 2", "expected 8 or 9 fields"},
      {"grouped bwd 8 64 64 64 bf16 balanced", "unknown grouped op 'bwd'; expected fwd, dgrad, wgrad or masked"},
      {"grouped fwd 0 64 64 64 bf16 balanced", "G '0' is too small; expected an integer >= 1"},
      {"grouped fwd 1025 64 64 64 bf16 balanced", "G '1025' is too large; expected at most 1024 groups"},
      {"grouped fwd 8 -1 64 64 bf16 balanced", "M '-1' is too small"},
      {"grouped masked 8 x 64 64 bf16 balanced", "max_m 'x' is not an integer"},
      {"grouped fwd 8 64 64 k bf16 balanced", "K 'k' is not an integer"},
      {"grouped fwd 8 64 64 64 f32 balanced", "unknown dtype 'f32'"},
      {"grouped fwd 8 64 64 64 bf16 block balanced", "scaling mode 'block' with bf16 inputs"},
      {"grouped fwd 8 64 64 64 e4m3 mx balanced", "unknown scaling mode 'mx' for a grouped line; expected tensor, rowwise or block"},
      {"grouped fwd 8 64 64 64 e4m3 blocky balanced", "unknown scaling mode 'blocky'"},
      {"grouped fwd 8 4611686018427387904 64 64 bf16 balanced", "overflows 64-bit addressing"},
  };
  for (const auto& [line, message] : cases) {
    SCOPED_TRACE(line);
    const std::string error = parse_error("1 1 1\n" + line);
    EXPECT_EQ(error.rfind("moe.txt:2: ", 0), 0u) << error;
    EXPECT_NE(error.find(message), std::string::npos) << error;
  }
}

TEST(GroupedSuite, DenseOnlyReadersRejectGroupedLines) {
  std::istringstream in("1 1 1\n# experts\ngrouped fwd 8 64 64 64 bf16 balanced\n");
  try {
    parse_suite(in, "moe.txt");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(std::string(e.what()),
              "moe.txt:3: a grouped line, which only gemmkit bench and python -m gemmkit.bench run; expected M N K "
              "[layout] [dtype] [mode] [batch]");
  }
  EXPECT_EQ(dense_lines(parse("1 1 1\n2 2 2\n")).size(), 2u);
}

// The shipped suites, loaded as gemmkit bench loads them.
Suite shipped(const std::string& file) {
  return load_bench_suite(std::string(GEMMKIT_SOURCE_DIR) + "/bench/suites/" + file);
}

TEST(Suite, EpilogueLinesApplyToTheDenseLinesBelowThem) {
  std::istringstream in("1 1 1\n"
                        "  Epilogue   silu(acc + bias[n])   # a comment\n"
                        "2 2 2\n3 3 3\n"
                        "epilogue none\n"
                        "4 4 4\n"
                        "epilogue h = acc; out[m, n] = h; h * g[m, n]\n"
                        "5 5 5\n");
  const Suite suite = parse_bench_suite(in, "fused.txt");
  ASSERT_EQ(suite.dense.size(), 5u);
  const char* expected[] = {"", "silu(acc + bias[n])", "silu(acc + bias[n])", "", "h = acc; out[m, n] = h; h * g[m, n]"};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(suite.dense[i].epilogue, expected[i]) << i;
  EXPECT_EQ(suite.dense[4].line, 8);
}

// Grouped lines take the epilogue above them too (gemmkit bench times them fused).
TEST(Suite, GroupedLinesTakeTheEpilogueAboveThem) {
  std::istringstream in("epilogue silu(acc) * acc2\ngrouped fwd 8 64 128 64 bf16 balanced\nepilogue none\n"
                        "grouped fwd 8 64 64 64 bf16 balanced\n");
  const Suite suite = parse_bench_suite(in, "fused.txt");
  ASSERT_EQ(suite.grouped.size(), 2u);
  EXPECT_EQ(suite.grouped[0].dense.epilogue, "silu(acc) * acc2");
  EXPECT_EQ(suite.grouped[1].dense.epilogue, "");
}

TEST(Suite, EpilogueLinesAreCheckedAndKeptFromOtherReaders) {
  const std::pair<std::string, std::string> cases[] = {
      {"epilogue silu(acc + bias[k])\n1 1 1\n", "fused.txt:1: epilogue: column"},
      {"epilogue\n1 1 1\n", "fused.txt:1: an epilogue line without a text; expected `epilogue TEXT` or `epilogue none`"}};
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    std::istringstream in(text);
    try {
      parse_bench_suite(in, "fused.txt");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_EQ(std::string(e.what()).rfind(message, 0), 0u) << e.what();
    }
  }
  std::istringstream in("1 1 1\nepilogue relu(acc)\n2 2 2\n");
  try {
    parse_suite(in, "fused.txt");  // tune and verify read dense lines only, without epilogues
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "fused.txt:3: a line under `epilogue relu(acc)`, which only gemmkit bench times; expected no epilogue "
              "lines");
  }
}

// epilogue.txt: dense-large under each of the two dense targets' epilogues, its M = 4096 half
// under the two gelu_tanh forms cuBLASLt fuses too, the dgelu backward lines, then moe.txt's
// balanced up-projections with SwiGLU and down-projections with router weights; then the FP8
// outputs: the M = 4096 half plain, one SwiGLU line and two grouped SwiGLU rows, D e4m3; then two
// grouped SwiGLU rows of block-scaled FP8 inputs.
TEST(Suite, ShippedEpilogueHoldsDenseLargeUnderEachEpilogue) {
  const Suite suite = shipped("epilogue.txt");
  const Suite large = shipped("dense-large.txt");
  const size_t n = large.dense.size(), half = n / 2;
  ASSERT_EQ(suite.dense.size(), 2 * n + 2 * half + 5 + half + 1);
  const char* texts[] = {"silu(acc + bias[n])", "gelu(acc + bias[n]) + r[m, n]", "gelu_tanh(acc + bias[n])",
                         "h = acc + bias[n]; pre[m, n] = h; gelu_tanh(h)"};
  for (size_t i = 0; i < 2 * n + 2 * half; ++i) {
    const SuiteProblem& p = suite.dense[i];
    const size_t block = i < 2 * n ? i / n : 2 + (i - 2 * n) / half;
    const SuiteProblem& q = large.dense[i < 2 * n ? i % n : (i - 2 * n) % half];
    EXPECT_EQ(std::make_tuple(p.m, p.n, p.k, p.layout, p.in_dtype), std::make_tuple(q.m, q.n, q.k, q.layout, q.in_dtype));
    EXPECT_EQ(q.m, i < 2 * n ? q.m : 4096);
    EXPECT_EQ(p.epilogue, texts[block]) << i;
  }
  const size_t fp8 = 2 * n + 2 * half + 5;
  for (size_t i = 2 * n + 2 * half; i < fp8; ++i) {
    EXPECT_EQ(suite.dense[i].epilogue, "dh = acc * dgelu_tanh(pre[m, n]); db[n] = sum(dh); dh");
  }
  for (size_t i = fp8; i < suite.dense.size(); ++i) {
    const SuiteProblem& p = suite.dense[i];
    EXPECT_EQ(p.out_dtype, DType::e4m3) << i;
    EXPECT_EQ(p.epilogue, i < fp8 + half ? "" : "silu(acc) * acc2") << i;
    if (i < fp8 + half) EXPECT_EQ(std::make_tuple(p.m, p.n, p.k), std::make_tuple(large.dense[i - fp8].m, large.dense[i - fp8].n, large.dense[i - fp8].k));
  }
  ASSERT_EQ(suite.grouped.size(), 11u);
  for (size_t i = 0; i < 11; ++i) {
    EXPECT_EQ(suite.grouped[i].dense.epilogue, i < 4 || i >= 7 ? "silu(acc) * acc2" : "acc * route[m]") << i;
    EXPECT_EQ(suite.grouped[i].dense.out_dtype, i == 7 || i == 8 ? DType::e4m3 : DType::bf16) << i;
    EXPECT_EQ(suite.grouped[i].dense.in_dtype, i >= 9 ? DType::e4m3 : DType::bf16) << i;
    EXPECT_EQ(suite.grouped[i].dense.mode, i >= 9 ? ScaleMode::block : ScaleMode::none) << i;
    EXPECT_EQ(dist_spec(suite.grouped[i].dist), "balanced");
  }
}

TEST(GroupedSuite, BytesCountTheRowsAndTheWeightsOfBusyGroups) {
  // 2 groups of 64 rows, K = 128, N = 256, bf16: A 128 x 128, weights 2 x 128 x 256, D 128 x 256.
  EXPECT_EQ(grouped("grouped fwd 2 128 256 128 bf16 balanced").bytes(), 2.0 * (128 * 128 + 2 * 128 * 256 + 128 * 256));
  // dgrad reads dD [M, N] and writes dA [M, K].
  EXPECT_EQ(grouped("grouped dgrad 2 128 256 128 bf16 balanced").bytes(), 2.0 * (128 * 256 + 2 * 128 * 256 + 128 * 128));
  // FP8 inputs are one byte; masked: only the counted rows, only groups with rows (skew:1000
  // leaves the others none of max_m = 4).
  EXPECT_EQ(grouped("grouped masked 4 4 256 128 e4m3:bf16 skew:1000").bytes(), 4.0 * 128 + 128 * 256 + 2.0 * 4 * 256);
  // wgrad reads dD and X and writes a gradient per group.
  EXPECT_EQ(grouped("grouped wgrad 2 128 256 128 bf16 balanced").bytes(), 2.0 * (128 * 256 + 128 * 128 + 2 * 256 * 128));
}


TEST(GroupedSuite, ShippedMoeHoldsEveryShapePassAndDistribution) {
  const Suite suite = shipped("moe.txt");
  EXPECT_TRUE(suite.dense.empty());
  // (G, M, N, K) of DeepSeek-V3 up, down and up with 32 experts, Qwen3 up and down, gpt-oss up
  // and down.
  using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t>;
  const std::vector<Shape> shapes = {{8, 32768, 4096, 7168},    {8, 32768, 7168, 2048},   {32, 16384, 4096, 7168},
                                     {128, 32768, 3072, 4096},  {128, 32768, 4096, 1536}, {128, 16384, 5760, 2880},
                                     {32, 16384, 2880, 2880}};
  std::map<std::string, std::set<std::tuple<Shape, std::string>>> passes;  // "op dtype" -> shapes x dists
  for (const GroupedProblem& p : suite.grouped) {
    passes[std::string(grouped_op_name(p.op)) + " " + type_spec(p.dense)].insert({{p.groups(), p.m, p.n, p.k}, dist_spec(p.dist)});
  }
  const auto grid = [](const std::vector<Shape>& of) {
    std::set<std::tuple<Shape, std::string>> all;
    for (const Shape& s : of)
      for (const char* dist : {"balanced", "skew:10", "zipf:1.2"}) all.insert({s, dist});
    return all;
  };
  EXPECT_EQ(passes.size(), 9u);
  for (const char* pass : {"fwd bf16", "dgrad bf16", "wgrad bf16", "fwd e4m3:bf16 block"}) {
    EXPECT_EQ(passes[pass], grid(shapes)) << pass;
  }
  EXPECT_EQ(passes["fwd e4m3:bf16 tensor"], grid({shapes.begin(), shapes.begin() + 3}));
  // FP8 gradients of every shape, balanced.
  std::set<std::tuple<Shape, std::string>> balanced;
  for (const Shape& shape : shapes) balanced.insert({shape, "balanced"});
  for (const char* pass : {"dgrad e4m3:bf16 block", "wgrad e4m3:bf16 rowwise"}) EXPECT_EQ(passes[pass], balanced) << pass;
  // Masked forward of every shape, balanced: each group a batch of M / G rows.
  std::set<std::tuple<Shape, std::string>> masked;
  for (const auto& [g, m, n, k] : shapes) masked.insert({{g, m / g, n, k}, "balanced"});
  for (const char* pass : {"masked bf16", "masked e4m3:bf16 block"}) EXPECT_EQ(passes[pass], masked) << pass;
  EXPECT_EQ(suite.grouped.size(), 4 * 21u + 9u + 4 * 7u);
}

// lowbit.txt's grouped rows: gpt-oss-120b's 128 MXFP4 experts (up 5760 x 2880, down 2880 x 2880)
// under bf16 and e4m3 activations, masked decode (max_m 1, 4, 16 balanced; up at max_m 1 random)
// and contiguous prefill (4096 rows balanced, 16384 random); DeepSeek-V3's up with int4 g128
// weights, masked 8 x 16, W4A8 and W4A16. Its dense lines are suite_test's.
TEST(GroupedSuite, ShippedLowbitHoldsGroupedFourBitRows) {
  const Suite suite = shipped("lowbit.txt");
  using Row = std::tuple<std::string, int64_t, int64_t, int64_t, int64_t, std::string, std::string>;
  std::set<Row> want, got;
  for (const char* type : {"bf16,w4:mxfp4", "e4m3,w4:mxfp4 rowwise"}) {
    for (int64_t n : {5760, 2880}) {
      for (int64_t max_m : {1, 4, 16}) want.insert({"masked", 128, max_m, n, 2880, type, "balanced"});
      want.insert({"fwd", 128, 4096, n, 2880, type, "balanced"});
      want.insert({"fwd", 128, 16384, n, 2880, type, "random:1"});
    }
    want.insert({"masked", 128, 1, 5760, 2880, type, "random:1"});
  }
  want.insert({"masked", 8, 16, 4096, 7168, "e4m3,w4:int4g128 rowwise", "balanced"});
  want.insert({"masked", 8, 16, 4096, 7168, "bf16,w4:int4g128", "balanced"});
  for (const GroupedProblem& p : suite.grouped) {
    got.insert({std::string(grouped_op_name(p.op)), p.groups(), p.m, p.n, p.k, type_spec(p.dense), dist_spec(p.dist)});
    EXPECT_TRUE(p.dense.w4());
    EXPECT_EQ(p.dense.out_dtype, DType::bf16);
  }
  EXPECT_EQ(suite.grouped.size(), want.size());
  EXPECT_EQ(got, want);
  EXPECT_EQ(suite.grouped.size(), 24u);
}

TEST(GroupedSuite, ShippedMoeDecodeIsMaskedUpTo64TokensAnExpert) {
  const Suite suite = shipped("moe-decode.txt");
  EXPECT_TRUE(suite.dense.empty());
  std::set<int64_t> groups, max_ms;
  for (const GroupedProblem& p : suite.grouped) {
    EXPECT_EQ(p.op, GroupedOp::masked);
    EXPECT_EQ(type_spec(p.dense), "bf16");
    groups.insert(p.groups());
    max_ms.insert(p.m);
    EXPECT_LE(*std::max_element(p.rows.begin(), p.rows.end()), p.m);
  }
  EXPECT_EQ(groups, (std::set<int64_t>{8, 128}));
  EXPECT_EQ(max_ms, (std::set<int64_t>{1, 8, 32, 64}));
  EXPECT_EQ(suite.grouped.size(), 48u);
}

}  // namespace
}  // namespace gemmkit::tools
