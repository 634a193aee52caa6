// What gemmkit bench and python -m gemmkit.bench decide alike about a grouped row before timing
// it (bench/grouped_row.h): its record and the rows gemmkit does not run, the sizes on the device
// and the bytes of a buffer set.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

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

}  // namespace
}  // namespace gemmkit::tools
