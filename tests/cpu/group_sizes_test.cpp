#include "bench/group_sizes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

using namespace gemmkit::tools;
using Kind = GroupDist::Kind;

namespace {

int64_t sum(const std::vector<int64_t>& rows) { return std::accumulate(rows.begin(), rows.end(), int64_t(0)); }

const std::vector<GroupDist> kDists = {
    {Kind::balanced, 0, 0}, {Kind::skew, 10, 0}, {Kind::skew, 0.5, 0}, {Kind::zipf, 1.2, 0},
    {Kind::zipf, 0, 0},     {Kind::random, 0, 1}, {Kind::random, 0, 12345}, {Kind::routed, 0, 1},
};

TEST(GroupSizes, SplitsSumExactlyToTheTotal) {
  for (const GroupDist& dist : kDists) {
    for (int64_t groups : {1, 3, 8, 32, 128, 1024}) {
      for (int64_t total : {0, 1, 7, 100, 4096, 32768, 65537}) {
        SCOPED_TRACE(testing::Message() << "kind " << int(dist.kind) << ", G " << groups << ", total " << total);
        const std::vector<int64_t> rows = split_rows(groups, total, dist);
        ASSERT_EQ(rows.size(), size_t(groups));
        EXPECT_EQ(sum(rows), total);
        EXPECT_GE(*std::min_element(rows.begin(), rows.end()), 0);
      }
    }
  }
}

TEST(GroupSizes, BalancedGroupsDifferByAtMostOneRow) {
  EXPECT_EQ(split_rows(8, 32768, {}), std::vector<int64_t>(8, 4096));
  // The rows left over go to the lowest groups.
  EXPECT_EQ(split_rows(4, 10, {}), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(split_rows(8, 3, {}), (std::vector<int64_t>{1, 1, 1, 0, 0, 0, 0, 0}));
}

TEST(GroupSizes, SkewGivesGroupZeroRTimesTheRowsOfEachOther) {
  for (double ratio : {10.0, 2.5, 0.5}) {
    SCOPED_TRACE(ratio);
    const std::vector<int64_t> rows = split_rows(8, 32768, {Kind::skew, ratio, 0});
    // Each count is its share rounded up or down, so the ratio holds within one row each side.
    for (size_t g = 1; g < rows.size(); ++g) {
      EXPECT_LE(std::abs(double(rows[0]) - ratio * double(rows[g])), ratio + 1.0) << rows[0] << " vs " << rows[g];
    }
  }
  // 32768 * 10/17 = 19275.3; the others 1927.5 each.
  const std::vector<int64_t> rows = split_rows(8, 32768, {Kind::skew, 10, 0});
  EXPECT_EQ(rows[0], 19275);
  EXPECT_EQ(std::count(rows.begin(), rows.end(), 1928), 4);
  EXPECT_EQ(std::count(rows.begin(), rows.end(), 1927), 3);
}

TEST(GroupSizes, ZipfNeverIncreasesAndFollowsItsLaw) {
  for (int64_t groups : {8, 32, 128}) {
    for (int64_t total : {16384, 32768, 100}) {
      const std::vector<int64_t> rows = split_rows(groups, total, {Kind::zipf, 1.2, 0});
      EXPECT_TRUE(std::is_sorted(rows.rbegin(), rows.rend())) << "G " << groups << ", total " << total;
      EXPECT_GT(rows.front(), rows.back());
    }
  }
  // Group 1 gets about 1 / 2^1.2 = 0.435 of group 0's rows.
  const std::vector<int64_t> rows = split_rows(8, 32768, {Kind::zipf, 1.2, 0});
  EXPECT_NEAR(double(rows[1]) / double(rows[0]), 0.435, 0.001);
  // S = 0 is balanced.
  EXPECT_EQ(split_rows(8, 32768, {Kind::zipf, 0, 0}), split_rows(8, 32768, {}));
}

TEST(GroupSizes, TheSameDistributionGivesTheSameRows) {
  for (const GroupDist& dist : kDists) {
    EXPECT_EQ(split_rows(128, 32768, dist), split_rows(128, 32768, dist));
    EXPECT_EQ(masked_rows(128, 64, dist), masked_rows(128, 64, dist));
  }
  // mt19937_64's sequence is fixed by the standard, so these are the same everywhere.
  const std::vector<int64_t> rows = split_rows(4, 1000, {Kind::random, 0, 7});
  EXPECT_EQ(rows, split_rows(4, 1000, {Kind::random, 0, 7}));
  EXPECT_NE(rows, split_rows(4, 1000, {Kind::random, 0, 8}));
  EXPECT_NE(rows, split_rows(4, 1000, {}));
}

TEST(GroupSizes, RandomWeightsLieInZeroToOne) {
  const std::vector<double> weights = group_weights(1024, {Kind::random, 0, 3});
  EXPECT_GT(*std::min_element(weights.begin(), weights.end()), 0.0);
  EXPECT_LE(*std::max_element(weights.begin(), weights.end()), 1.0);
  // Uneven, as a router's loads are: the spread is most of (0, 1].
  EXPECT_LT(*std::min_element(weights.begin(), weights.end()), 0.05);
  EXPECT_GT(*std::max_element(weights.begin(), weights.end()), 0.95);
}

TEST(GroupSizes, RoutedRowsSpreadAboutABalancedMean) {
  // 32768 rows over 128 groups: binomial counts of mean 256 and deviation 16.
  const std::vector<int64_t> rows = split_rows(128, 32768, {Kind::routed, 0, 5});
  EXPECT_EQ(sum(rows), 32768);
  EXPECT_GT(*std::min_element(rows.begin(), rows.end()), 256 - 6 * 16);
  EXPECT_LT(*std::max_element(rows.begin(), rows.end()), 256 + 6 * 16);
  EXPECT_GT(*std::max_element(rows.begin(), rows.end()) - *std::min_element(rows.begin(), rows.end()), 2 * 16);
  EXPECT_NE(rows, split_rows(128, 32768, {Kind::routed, 0, 6}));
}

TEST(GroupSizes, MaskedCountsStayWithinMaxM) {
  for (const GroupDist& dist : kDists) {
    for (int64_t max_m : {0, 1, 8, 32, 64}) {
      const std::vector<int64_t> rows = masked_rows(128, max_m, dist);
      ASSERT_EQ(rows.size(), 128u);
      EXPECT_EQ(*std::max_element(rows.begin(), rows.end()), max_m) << "the heaviest group fills max_m";
      EXPECT_GE(*std::min_element(rows.begin(), rows.end()), 0);
    }
  }
  EXPECT_EQ(masked_rows(8, 64, {}), std::vector<int64_t>(8, 64));
  EXPECT_EQ(masked_rows(4, 64, {Kind::skew, 10, 0}), (std::vector<int64_t>{64, 6, 6, 6}));
  EXPECT_EQ(masked_rows(4, 64, {Kind::zipf, 1, 0}), (std::vector<int64_t>{64, 32, 21, 16}));
  EXPECT_EQ(masked_rows(4, 1, {Kind::skew, 10, 0}), (std::vector<int64_t>{1, 0, 0, 0}));
}

}  // namespace
