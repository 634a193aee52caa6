#include "bench/group_sizes.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace gemmkit::tools {

std::vector<double> group_weights(int64_t groups, const GroupDist& dist) {
  std::vector<double> weights(size_t(groups), 1.0);
  std::mt19937_64 draws(dist.seed);
  for (size_t g = 0; g < weights.size(); ++g) {
    switch (dist.kind) {
      case GroupDist::Kind::balanced: break;
      case GroupDist::Kind::skew: weights[g] = g == 0 ? dist.value : 1.0; break;
      case GroupDist::Kind::zipf: weights[g] = 1.0 / std::pow(double(g + 1), dist.value); break;
      // The top 53 bits, plus one, in units of 2^-53: (0, 1], never 0, so that every group can
      // be the heaviest.
      case GroupDist::Kind::random: weights[g] = double((draws() >> 11) + 1) * 0x1p-53; break;
      case GroupDist::Kind::routed: break;
    }
  }
  return weights;
}

namespace {

std::vector<int64_t> routed_rows(int64_t groups, int64_t total, uint64_t seed) {
  std::mt19937_64 draws(seed);
  std::vector<int64_t> rows(size_t(groups), 0);
  for (int64_t r = 0; r < total; ++r) ++rows[size_t(draws() % uint64_t(groups))];
  return rows;
}

}  // namespace

std::vector<int64_t> split_rows(int64_t groups, int64_t total, const GroupDist& dist) {
  if (dist.kind == GroupDist::Kind::routed) return routed_rows(groups, total, dist.seed);
  const std::vector<double> weights = group_weights(groups, dist);
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> rows(weights.size());
  std::vector<double> remainder(weights.size());
  for (size_t g = 0; g < weights.size(); ++g) {
    const double share = double(total) * weights[g] / sum;
    rows[g] = int64_t(std::floor(share));
    remainder[g] = share - double(rows[g]);
  }
  // The whole shares add up to at most `total`, and fall short by less than one row a group.
  const int64_t left = total - std::accumulate(rows.begin(), rows.end(), int64_t(0));
  std::vector<size_t> order(weights.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return remainder[x] > remainder[y]; });
  for (int64_t i = 0; i < left; ++i) ++rows[order[size_t(i)]];
  return rows;
}

std::vector<int64_t> masked_rows(int64_t groups, int64_t max_m, const GroupDist& dist) {
  std::vector<double> weights = group_weights(groups, dist);
  if (dist.kind == GroupDist::Kind::routed) {
    const std::vector<int64_t> drawn = routed_rows(groups, groups * std::max<int64_t>(max_m, 1), dist.seed);
    weights.assign(drawn.begin(), drawn.end());
  }
  const double heaviest = *std::max_element(weights.begin(), weights.end());
  std::vector<int64_t> rows;
  for (double w : weights) rows.push_back(std::llround(double(max_m) * (w / heaviest)));
  return rows;
}

}  // namespace gemmkit::tools
