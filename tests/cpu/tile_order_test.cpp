// The TMA kernel's tile order divides work-unit numbers by divisors the host prepares
// (runtime/launch.h, fast_divisor): n / d as a multiply and a shift, for every n below 2^31.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "runtime/launch.h"

namespace gemmkit::runtime {
namespace {

uint32_t quotient(uint32_t n, FastDivisor d) { return uint32_t((uint64_t(n) * d.mul) >> d.shift); }

// Dividends where a rounding error would show first: around multiples of d and at the top of the range.
std::vector<uint32_t> dividends(int64_t d) {
  std::vector<uint32_t> n = {0, 1, 2, uint32_t(kMaxWorkUnits - 1), uint32_t(kMaxWorkUnits - 2)};
  const int64_t top = (kMaxWorkUnits - 1) / d * d;  // the largest multiple of d in range
  for (int64_t m : {d, 2 * d, 3 * d, 1000 * d, top / 2 / d * d, top}) {
    for (int64_t delta : {-1, 0, 1}) {
      if (m + delta >= 0 && m + delta < kMaxWorkUnits) n.push_back(uint32_t(m + delta));
    }
  }
  return n;
}

TEST(FastDivisor, QuotientsMatchDivisionForSmallDivisors) {
  for (int64_t d = 1; d <= 5000; ++d) {
    const FastDivisor f = fast_divisor(d);
    for (uint32_t n : dividends(d)) ASSERT_EQ(quotient(n, f), n / uint32_t(d)) << n << " / " << d;
    for (uint32_t n = 0; n < 3 * uint32_t(d) + 7; n += 1 + uint32_t(d) / 97) {
      ASSERT_EQ(quotient(n, f), n / uint32_t(d)) << n << " / " << d;
    }
  }
}

TEST(FastDivisor, QuotientsMatchDivisionAroundPowersOfTwoAndAtTheTop) {
  std::vector<int64_t> divisors = {kMaxWorkUnits - 1, kMaxWorkUnits - 2, 3 * (int64_t(1) << 29) + 1, 1000003, 65537};
  for (int p = 1; p < 31; ++p) {
    for (int64_t delta : {-1, 0, 1}) divisors.push_back((int64_t(1) << p) + delta);
  }
  for (int64_t d : divisors) {
    const FastDivisor f = fast_divisor(d);
    EXPECT_LT(f.shift, 64u) << d;
    for (uint32_t n : dividends(d)) ASSERT_EQ(quotient(n, f), n / uint32_t(d)) << n << " / " << d;
  }
}

}  // namespace
}  // namespace gemmkit::runtime
