// The cuBLAS grouped baseline's plan (baseline/cublas_grouped.h), on the host: how grouped_gemm's
// row-major operands map onto cuBLAS's column-major arguments, and what it declines.
#include "baseline/cublas_grouped.h"

#include <gtest/gtest.h>

namespace gemmkit::baseline {
namespace {

using Call = CublasGrouped::Call;

// Stand-in addresses, never dereferenced.
char* const kA = reinterpret_cast<char*>(uintptr_t(1) << 40);
char* const kB = reinterpret_cast<char*>(uintptr_t(2) << 40);
char* const kD = reinterpret_cast<char*>(uintptr_t(3) << 40);

std::optional<Call> plan(const TensorView& a, const TensorView& b, const TensorView& d, GroupLayout layout,
                         const std::vector<int64_t>& rows, std::string* why) {
  return CublasGrouped::plan(a, b, d, layout, rows, why);
}

TEST(CublasGrouped, ForwardReadsTheWeightsTransposed) {
  // 3 groups of 10, 0 and 6 rows; K = 64, N = 32; weights stored [G, N, K] (B's K contiguous).
  const TensorView a = TensorView::row_major(kA, DType::bf16, 16, 64);
  const TensorView b = TensorView::batched(kB, DType::bf16, 3, 64, 32, 32 * 64, 1, 64);
  const TensorView d = TensorView::row_major(kD, DType::bf16, 16, 32);
  std::string why;
  const std::optional<Call> call = plan(a, b, d, GroupLayout::contiguous, {10, 0, 6}, &why);
  ASSERT_TRUE(call) << why;
  EXPECT_EQ(call->type, CUDA_R_16BF);
  ASSERT_EQ(call->count(), 2);  // the empty group is left out
  // D_g^T (32 x rows) = W_g (K-major, read transposed: 32 x 64) times A_g^T (64 x rows).
  EXPECT_EQ(call->trans_a, std::vector<cublasOperation_t>(2, CUBLAS_OP_T));
  EXPECT_EQ(call->trans_b, std::vector<cublasOperation_t>(2, CUBLAS_OP_N));
  EXPECT_EQ(call->m, std::vector<int>(2, 32));
  EXPECT_EQ(call->n, (std::vector<int>{10, 6}));
  EXPECT_EQ(call->k, std::vector<int>(2, 64));
  EXPECT_EQ(call->lda, std::vector<int>(2, 64));
  EXPECT_EQ(call->ldb, std::vector<int>(2, 64));
  EXPECT_EQ(call->ldc, std::vector<int>(2, 32));
  EXPECT_EQ(call->group_size, std::vector<int>(2, 1));
  EXPECT_EQ(call->alpha, std::vector<float>(2, 1.0f));
  EXPECT_EQ(call->beta, std::vector<float>(2, 0.0f));
  // Their A: weights 0 and 2; their B: A's rows 0 and 10; their C: D's rows 0 and 10.
  const std::vector<const void*> want = {kB, kB + 2 * 32 * 64 * 2, kA, kA + 10 * 64 * 2, kD, kD + 10 * 32 * 2};
  EXPECT_EQ(call->matrices, want);
}

TEST(CublasGrouped, InputGradientReadsTheWeightsAsStored) {
  // dgrad: A = dD [M, 48], weights stored [G, 48, 80] read as B [G, K = 48, N = 80], D = dA [M, 80].
  const TensorView a = TensorView::row_major(kA, DType::f16, 8, 48);
  const TensorView b = TensorView::batched(kB, DType::f16, 2, 48, 80, 48 * 80, 80, 1);
  const TensorView d = TensorView::row_major(kD, DType::f16, 8, 80);
  std::string why;
  const std::optional<Call> call = plan(a, b, d, GroupLayout::contiguous, {3, 5}, &why);
  ASSERT_TRUE(call) << why;
  EXPECT_EQ(call->type, CUDA_R_16F);
  EXPECT_EQ(call->trans_a, std::vector<cublasOperation_t>(2, CUBLAS_OP_N));
  EXPECT_EQ(call->m, std::vector<int>(2, 80));
  EXPECT_EQ(call->k, std::vector<int>(2, 48));
  EXPECT_EQ(call->lda, std::vector<int>(2, 80));
  EXPECT_EQ(call->ldb, std::vector<int>(2, 48));
  EXPECT_EQ(call->ldc, std::vector<int>(2, 80));
}

TEST(CublasGrouped, MaskedGroupsStartEachAtItsOwnMatrix) {
  // A [3, 4, 64], D [3, 4, 32]: group g's rows start at matrix g, whatever the counts before it.
  const TensorView a = TensorView::batched(kA, DType::bf16, 3, 4, 64, 4 * 64, 64, 1);
  const TensorView b = TensorView::batched(kB, DType::bf16, 3, 64, 32, 32 * 64, 1, 64);
  const TensorView d = TensorView::batched(kD, DType::bf16, 3, 4, 32, 4 * 32, 32, 1);
  std::string why;
  const std::optional<Call> call = plan(a, b, d, GroupLayout::masked, {4, 1, 0}, &why);
  ASSERT_TRUE(call) << why;
  EXPECT_EQ(call->n, (std::vector<int>{4, 1}));
  const std::vector<const void*> want = {kB, kB + 32 * 64 * 2, kA, kA + 4 * 64 * 2, kD, kD + 4 * 32 * 2};
  EXPECT_EQ(call->matrices, want);
}

TEST(CublasGrouped, DeclinesWhatCublasCannotRun) {
  const TensorView a = TensorView::row_major(kA, DType::bf16, 16, 64);
  const TensorView b = TensorView::batched(kB, DType::bf16, 2, 64, 32, 32 * 64, 1, 64);
  const TensorView d = TensorView::row_major(kD, DType::bf16, 16, 32);
  TensorView fp8_a = a, fp8_b = b, f32_d = d, column_d = TensorView::col_major(kD, DType::bf16, 16, 32);
  fp8_a.dtype = fp8_b.dtype = DType::e4m3;
  f32_d.dtype = DType::f32;
  const std::vector<std::tuple<TensorView, TensorView, TensorView, std::vector<int64_t>, std::string>> cases = {
      {fp8_a, fp8_b, d, {8, 8}, "cuBLAS's grouped GEMM takes no FP8 inputs"},
      {a, b, f32_d, {8, 8}, "cuBLAS's grouped GEMM takes A and B both bf16 or both f16, and D of their type"},
      {a, b, column_d, {8, 8}, "A and D must be row-major and B must have a unit stride"},
      {a, b, d, {0, 0}, "no group has rows"},
  };
  for (const auto& [case_a, case_b, case_d, rows, reason] : cases) {
    std::string why;
    EXPECT_FALSE(plan(case_a, case_b, case_d, GroupLayout::contiguous, rows, &why));
    EXPECT_EQ(why, reason);
  }
}

}  // namespace
}  // namespace gemmkit::baseline
