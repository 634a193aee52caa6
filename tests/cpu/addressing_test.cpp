// Problems at and past the limit of 64-bit addressing: checked size arithmetic, the errors that
// name the sizes, and that the largest problems within the limit go through validation and the
// cost model without overflowing (the sanitizer build, scripts/sanitize.sh, would stop on it).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "api/validate.h"
#include "core/checked_math.h"
#include "dispatch/cost_model.h"
#include "dispatch/operand_access.h"
#include "dispatch/plan.h"
#include "core/problem.h"
#include "gemmkit/error.h"
#include "reference/device_problem.h"

namespace gemmkit {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(CheckedMath, ProductsAndSums) {
  EXPECT_EQ(checked_product({}), 1);
  EXPECT_EQ(checked_product({3, 5, 7}), 105);
  EXPECT_EQ(checked_product({int64_t(1) << 31, int64_t(1) << 31}), int64_t(1) << 62);
  EXPECT_EQ(checked_product({int64_t(1) << 32, int64_t(1) << 32}), std::nullopt);
  EXPECT_EQ(checked_product({int64_t(1) << 32, int64_t(1) << 31}), std::nullopt);  // 2^63
  EXPECT_EQ(checked_product({kMax, 1}), kMax);
  EXPECT_EQ(checked_product({kMax, kMax, 0}), 0) << "a zero anywhere makes it empty";
  EXPECT_EQ(checked_sum(kMax - 1, 1), kMax);
  EXPECT_EQ(checked_sum(kMax, 1), std::nullopt);
}

TEST(CheckedMath, ProductTextIsExact) {
  EXPECT_EQ(product_text({int64_t(1) << 32, int64_t(1) << 32}), "2^64");
  EXPECT_EQ(product_text({int64_t(1) << 32, 1, int64_t(1) << 31}), "2^63");
  EXPECT_EQ(product_text({kMax, 4}), "36893488147419103228");
  EXPECT_EQ(product_text({3037000500, 3037000500}), "9223372037000250000");
  EXPECT_EQ(product_text({kMax, kMax, kMax}), "more than 2^127");
  EXPECT_EQ(product_text({1024, 1024}), "1048576") << "small powers of two read better in digits";
  EXPECT_EQ(product_text({kMax, 0}), "0");
}

// The message of check_addressable(m, n, k, batch, bytes), or "" where it accepts.
std::string addressing_error(int64_t m, int64_t n, int64_t k, int64_t batch, int bytes) {
  try {
    check_addressable(m, n, k, batch, bytes);
    return "";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    return e.what();
  }
}

TEST(CheckAddressable, NamesTheSizesAndTheProductThatOverflows) {
  const int64_t two32 = int64_t(1) << 32, two31 = int64_t(1) << 31;
  EXPECT_EQ(addressing_error(two32, two32, 8, 1, 2),
            "problem 4294967296 x 4294967296 x 8: M x N = 2^64 elements overflows 64-bit addressing");
  EXPECT_EQ(addressing_error(two32, 1, two31, 2, 2),
            "problem 4294967296 x 1 x 2147483648 (batch 2): M x K = 2^63 elements overflows 64-bit addressing");
  EXPECT_EQ(addressing_error(65536, 65536, 1, two31, 2),
            "problem 65536 x 65536 x 1 (batch 2147483648): batch x M x N = 2^63 elements overflows 64-bit "
            "addressing");
  EXPECT_EQ(addressing_error(1, two31, two31, 1, 4),
            "problem 1 x 2147483648 x 2147483648: K x N x 4 bytes = 2^64 bytes overflows 64-bit addressing");
  // An empty problem still steps along its sizes (tile counts): each must be addressable too.
  EXPECT_EQ(addressing_error(0, 0, kMax, 1, 4),
            "problem 0 x 0 x 9223372036854775807: K x 4 bytes = 36893488147419103228 bytes overflows 64-bit "
            "addressing");
}

TEST(CheckAddressable, AcceptsEverythingWithinTheLimit) {
  const int64_t two31 = int64_t(1) << 31;
  EXPECT_EQ(addressing_error(0, 0, 0, 1, 4), "");
  EXPECT_EQ(addressing_error(two31, two31, two31 / 2, 1, 1), "");  // 2^62 elements of one byte
  EXPECT_EQ(addressing_error(kMax, 0, 0, 1, 1), "");               // one byte each
  EXPECT_EQ(addressing_error(0, kMax / 2, 0, kMax, 2), "");
  EXPECT_EQ(addressing_error(1, 1, 1, kMax, 1), "");
}

// The largest problem within the limit the TMA kernel takes (sizes below 2^31): validation, the
// cost model's candidates and a plan's problem all come out without overflowing, and a
// split's partial tiles, which would need 2^63 bytes, are not offered.
TEST(CheckAddressable, LargestTmaProblemsGoThroughTheCostModel) {
  const int64_t m = (int64_t(1) << 31) - 8, n = int64_t(1) << 30, k = int64_t(1) << 30;
  char* base = reinterpret_cast<char*>(uintptr_t(1) << 40);
  const TensorView a = TensorView::row_major(base, DType::bf16, m, k);
  const TensorView b = TensorView::matrix(base, DType::bf16, k, n, 1, k);  // stored N x K
  const TensorView d = TensorView::row_major(base, DType::bf16, m, n);
  const Problem p = normalize(validate_gemm(a, b, d, GemmOptions{}));
  const DeviceLimits limits{132, DeviceLimits{}.smem_per_block};
  const std::vector<Candidate> ranked = rank_candidates(p, limits);
  ASSERT_FALSE(ranked.empty());
  for (const Candidate& c : ranked) EXPECT_EQ(c.config.splits, 1) << c.config.name();
  EXPECT_EQ(choose_config(p, limits), ranked.front().config);
  EXPECT_NO_THROW(transposing_pays(p, limits));
}

TEST(CheckAddressable, DeviceProblemRefusesBeforeAllocating) {
  reference::ProblemSpec spec;  // no GPU needed: the check comes before any CUDA call
  spec.m = spec.n = int64_t(1) << 32;
  spec.k = 8;
  try {
    reference::DeviceProblem problem(spec, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_STREQ(e.what(), "problem 4294967296 x 4294967296 x 8: M x N = 2^64 elements overflows 64-bit addressing");
  }
  spec.m = 16;
  spec.n = 16;
  spec.pad_a = kMax - 8;  // the padding takes A's span past the limit
  try {
    reference::DeviceProblem problem(spec, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("overflows 64-bit addressing"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gemmkit
