// What gemmkit bench and python -m gemmkit.bench decide alike about a grouped row before timing
// it (bench/grouped_row.h): its record and the rows gemmkit does not run, the sizes on the device
// and the bytes of a buffer set.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <tuple>

#include "bench/grouped_row.h"

namespace gemmkit::tools {
namespace {

GroupedProblem grouped_row(const std::string& line) {
  std::istringstream in(line);
  return parse_bench_suite(in, "row.txt").grouped.at(0);
}

TEST(GroupedRow, TheRecordCarriesTheLine) {
  const GroupedRecord r = grouped_record(grouped_row("grouped fwd 4 1000 256 512 e4m3:bf16 block skew:3"));
  EXPECT_EQ(r.op, "fwd");
  EXPECT_EQ(r.groups, 4);
  EXPECT_EQ(r.m, 1000);
  EXPECT_EQ(r.n, 256);
  EXPECT_EQ(r.k, 512);
  EXPECT_EQ(r.dtype, "e4m3:bf16 block");
  EXPECT_EQ(r.dist, "skew:3");
  EXPECT_EQ(r.rows, 1000);
  // 1000 rows of A (512 bytes) and D (256 x 2), and 4 groups' weights of 256 x 512 bytes.
  EXPECT_DOUBLE_EQ(r.bytes, 1000.0 * 512 + 4.0 * 256 * 512 + 1000.0 * 512);
  EXPECT_EQ(r.note, "");
  EXPECT_TRUE(std::isnan(r.ours_us) && std::isnan(r.dense_us) && std::isnan(r.baseline_us));
  // masked: every group's rows, from max_m.
  EXPECT_EQ(grouped_record(grouped_row("grouped masked 8 64 256 512 bf16 balanced")).rows, 8 * 64);
}

TEST(GroupedRow, Fp8WeightGradientsRunWithTensorOrRowwiseScalesOnly) {
  EXPECT_EQ(grouped_record(grouped_row("grouped wgrad 4 1000 256 512 e4m3 block balanced")).note.rfind("not run: ", 0), 0u);
  EXPECT_EQ(grouped_record(grouped_row("grouped wgrad 4 1000 256 512 e4m3 rowwise balanced")).note, "");
  EXPECT_EQ(grouped_record(grouped_row("grouped dgrad 4 1000 256 512 e4m3 block balanced")).note, "");
}

TEST(GroupedRow, SizesAreEndsOrCounts) {
  // skew:3 over 4 groups of 600 rows: 300, then 100 each.
  EXPECT_EQ(group_size_values(grouped_row("grouped fwd 4 600 64 64 bf16 skew:3")),
            (std::vector<int32_t>{300, 400, 500, 600}));
  EXPECT_EQ(group_size_values(grouped_row("grouped wgrad 4 600 64 64 bf16 skew:3")),
            (std::vector<int32_t>{300, 400, 500, 600}));
  // masked skew:4: max_m for group 0, max_m / 4 for the others.
  EXPECT_EQ(group_size_values(grouped_row("grouped masked 3 64 64 64 bf16 skew:4")), (std::vector<int32_t>{64, 16, 16}));
}

TEST(GroupedRow, ASetHoldsTheDenseGemmAndTheGroupsBuffers) {
  // fwd bf16, G = 2, 100 rows, N = 32, K = 16: the dense 100 x 32 x 16 GEMM, and per group a
  // 1 x 32 x 16 one (its weights, one row of A and D).
  EXPECT_DOUBLE_EQ(grouped_set_bytes(grouped_row("grouped fwd 2 100 32 16 bf16 balanced")),
                   2.0 * (100 * 16 + 16 * 32 + 100 * 32) + 2 * 2.0 * (16 + 16 * 32 + 32));
  // masked: the dense GEMM of every group's rows, and the groups' A, weights and D in full.
  EXPECT_DOUBLE_EQ(grouped_set_bytes(grouped_row("grouped masked 2 8 32 16 bf16 balanced")),
                   2.0 * (16 * 16 + 16 * 32 + 16 * 32) + 2 * 2.0 * (8 * 16 + 16 * 32 + 8 * 32));
  // wgrad: the dense N x K x M GEMM (32 x 16 x 100), and the groups' gradients, N x K each, with
  // one column of A and row of B.
  EXPECT_DOUBLE_EQ(grouped_set_bytes(grouped_row("grouped wgrad 2 100 32 16 bf16 balanced")),
                   2.0 * (32 * 100 + 100 * 16 + 32 * 16) + 2 * 2.0 * (32 + 16 + 32 * 16));
}

TEST(GroupedRow, AFourBitRowCarriesItsTypesAndPackedBytes) {
  const GroupedProblem p = grouped_row("grouped masked 4 2 256 512 e4m3,w4:int4g128z skew:2");
  const GroupedRecord r = grouped_record(p);
  EXPECT_EQ(r.dtype, "e4m3,w4:int4g128z rowwise");
  EXPECT_EQ(r.rows, 2 + 3 * 1);
  // A a byte, D two; each of the 4 busy experts' weights 256 x 512 / 2 bytes, with 4 bf16 scales
  // and zero points a column.
  EXPECT_DOUBLE_EQ(r.bytes, 5.0 * 512 + 4 * (256.0 * 512 / 2 + 256 * 4 * 2 * 2) + 5.0 * 256 * 2);
  EXPECT_EQ(r.note, "");
  // A set: the dense GEMM of the 5 rows and the groups' A, packed weights and D in full.
  const double dense = 5.0 * 512 + (256.0 * 512 / 2 + 256 * 4 * 4) + 5.0 * 256 * 2;
  EXPECT_DOUBLE_EQ(grouped_set_bytes(p), dense + 4 * (2.0 * 512 + (256.0 * 512 / 2 + 256 * 4 * 4) + 2.0 * 256 * 2));
}

// The stand-in baseline of a row with 4-bit weights: the same groups in 16-bit (W4A16), or e4m3
// with A's scaling for both operands (W4A8), its epilogue kept.
TEST(GroupedRow, AFourBitRowStandsBesideItsGroupsIn16BitOrFp8) {
  std::istringstream in("epilogue silu(acc) * acc2\ngrouped masked 128 4 5760 2880 e4m3,w4:mxfp4 block random:1\n");
  const GroupedProblem w4a8 = parse_bench_suite(in, "row.txt").grouped.at(0);
  const GroupedProblem fp8 = grouped_stand_in(w4a8, true);
  EXPECT_EQ(type_spec(fp8.dense), "e4m3:bf16 block");
  EXPECT_FALSE(fp8.dense.w4());
  EXPECT_EQ(fp8.dense.epilogue, "silu(acc) * acc2");
  EXPECT_EQ(fp8.rows, w4a8.rows);
  EXPECT_EQ(std::tie(fp8.op, fp8.m, fp8.n, fp8.k), std::tie(w4a8.op, w4a8.m, w4a8.n, w4a8.k));
  EXPECT_EQ(std::tie(fp8.dense.m, fp8.dense.n, fp8.dense.k, fp8.dense.layout, fp8.dense.line),
            std::tie(w4a8.dense.m, w4a8.dense.n, w4a8.dense.k, w4a8.dense.layout, w4a8.dense.line));
  const GroupedProblem dense16 = grouped_stand_in(w4a8, false);
  EXPECT_EQ(type_spec(dense16.dense), "bf16");
  EXPECT_EQ(grouped_record(dense16).note, "");
  EXPECT_EQ(type_spec(grouped_stand_in(grouped_row("grouped fwd 8 64 64 128 f16,w4:int4g64z:f32 balanced"), false).dense),
            "f16:f32");
  EXPECT_EQ(type_spec(grouped_stand_in(grouped_row("grouped fwd 8 64 64 128 e4m3,w4:int4g128 balanced"), true).dense),
            "e4m3:bf16 rowwise");
}

}  // namespace
}  // namespace gemmkit::tools
