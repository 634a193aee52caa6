// How a grouped GEMM's rows (tokens) fall to its groups (experts): the distributions that suite
// lines name (`balanced`, `skew:R`, `zipf:S`, `random:SEED`, `routed:SEED`), turned into each group's row
// count. The same line gives the same counts on every machine.
#pragma once

#include <cstdint>
#include <vector>

namespace gemmkit::tools {

struct GroupDist {
  enum class Kind { balanced, skew, zipf, random, routed };
  Kind kind = Kind::balanced;
  double value = 0;   // skew: R (> 0), group 0's weight against 1 for each other; zipf: S (>= 0)
  uint64_t seed = 0;  // random, routed
};

// Each of `groups` groups' weight, the share of the rows it draws: balanced 1 each; skew R for
// group 0 and 1 for the others; zipf 1 / (g + 1)^S for group g; random a draw from (0, 1] of
// std::mt19937_64 seeded with SEED, whose sequence the C++ standard fixes; routed 1 each, its
// expectation (its rows are drawn one by one: split_rows).
std::vector<double> group_weights(int64_t groups, const GroupDist& dist);

// Contiguous groups: `total` rows split among `groups` (>= 1) groups in proportion to their
// weights, exactly: each group takes the whole rows of its share, and the rows left over go one
// each to the largest remainders (the lower group first on a tie). The counts sum to `total`;
// zipf's never increase from one group to the next. routed:SEED draws each row's group uniformly
// (std::mt19937_64 seeded with SEED): the spread about a balanced mean of a router's choices
// (128 groups of 256 rows on average: about 210 to 300).
std::vector<int64_t> split_rows(int64_t groups, int64_t total, const GroupDist& dist);

// Masked groups: each group's count within `max_m`, max_m times its weight over the heaviest
// group's, rounded to the nearest. balanced: max_m each; skew:R (R >= 1): max_m for group 0 and
// max_m / R for each other; zipf:S: max_m / (g + 1)^S; random: the heaviest draw max_m, the
// others in proportion; routed: the routed split of G max_m rows, the heaviest group max_m, the
// others in proportion.
std::vector<int64_t> masked_rows(int64_t groups, int64_t max_m, const GroupDist& dist);

}  // namespace gemmkit::tools
