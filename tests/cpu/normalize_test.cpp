// Problem normalisation (dispatch/plan.h): which problems are computed transposed.
#include <gtest/gtest.h>

#include <cstdint>

#include "config_tests.h"
#include "dispatch/plan.h"

namespace gemmkit {
namespace {

using namespace config_tests;

TEST(ConfigNormalize, ColumnMajorDIsComputedTransposed) {
  constexpr int64_t M = 64, N = 32, K = 48;
  Problem p;
  p.m = M;
  p.n = N;
  p.k = K;
  p.batch = 2;
  p.alpha = 2.0f;
  p.beta = 0.5f;
  p.a = {address(0), DType::bf16, M * K, K, 1};
  p.b = {address(1), DType::bf16, K * N, N, 1};
  p.d = {address(2), DType::f32, M * N, 1, M};
  p.c = {address(3), DType::f16, M * N, 1, M};

  const Problem t = normalize(p);
  EXPECT_EQ(t.m, N);
  EXPECT_EQ(t.n, M);
  EXPECT_EQ(t.k, K);
  EXPECT_EQ(t.batch, 2);
  EXPECT_EQ(t.alpha, 2.0f);
  EXPECT_EQ(t.beta, 0.5f);
  // A' = B^T: N x K
  EXPECT_EQ(t.a.data, p.b.data);
  EXPECT_EQ(t.a.row_stride, 1);
  EXPECT_EQ(t.a.col_stride, N);
  EXPECT_EQ(t.a.batch_stride, K * N);
  // B' = A^T: K x M
  EXPECT_EQ(t.b.data, p.a.data);
  EXPECT_EQ(t.b.row_stride, 1);
  EXPECT_EQ(t.b.col_stride, K);
  EXPECT_EQ(t.b.batch_stride, M * K);
  // D' = D^T and C' = C^T: N x M, row-major
  EXPECT_EQ(t.d.data, p.d.data);
  EXPECT_EQ(t.d.row_stride, M);
  EXPECT_EQ(t.d.col_stride, 1);
  EXPECT_EQ(t.c.data, p.c.data);
  EXPECT_EQ(t.c.dtype, DType::f16);
  EXPECT_EQ(t.c.row_stride, M);
  EXPECT_EQ(t.c.col_stride, 1);
}

void expect_same(const MatrixRef& x, const MatrixRef& y) {
  EXPECT_EQ(x.data, y.data);
  EXPECT_EQ(x.dtype, y.dtype);
  EXPECT_EQ(x.batch_stride, y.batch_stride);
  EXPECT_EQ(x.row_stride, y.row_stride);
  EXPECT_EQ(x.col_stride, y.col_stride);
}

// N = 1 with A's K contiguous becomes one row against A stored M x K: the GEMV kernel's case.
TEST(ConfigNormalize, ColumnVectorBecomesARowForTheGemv) {
  Problem p = problem(4096, 1, 7168);  // A row-major: K contiguous
  const Problem t = normalize(p);
  EXPECT_EQ(t.m, 1);
  EXPECT_EQ(t.n, 4096);
  EXPECT_EQ(t.a.data, p.b.data);
  EXPECT_EQ(t.b.data, p.a.data);
  EXPECT_EQ(t.b.row_stride, 1) << "B^T = A^T walks K contiguously";
  EXPECT_EQ(t.b.col_stride, 7168);
  EXPECT_EQ(choose_config(t, {}).kind, KernelKind::gemv);

  Problem a_by_columns = problem(4096, 1, 7168);
  a_by_columns.a = col_major(0, DType::bf16, 4096);
  EXPECT_EQ(normalize(a_by_columns).m, 4096) << "A's K not contiguous: no GEMV, left as it is";
}

// Decode, 1 to 32 rows of A against at least 128 columns of B, 16-bit and both K-major, is
// computed transposed, for narrow tiles; one row against very wide aligned B, or unaligned B that
// row classes do not take, is left to the GEMV, and what a narrow tile cannot take is left as it is.
TEST(ConfigNormalize, DecodeIsComputedTransposedForNarrowTiles) {
  auto nt = [](int64_t m, int64_t n, int64_t k) {
    Problem p = problem(m, n, k);
    p.b = col_major(1, DType::bf16, k);
    return p;
  };
  for (int64_t m : {1, 2, 8, 32}) {
    const Problem p = nt(m, 1280, 8192);
    const Problem t = normalize(p);
    EXPECT_EQ(t.m, 1280);
    EXPECT_EQ(t.n, m);
    EXPECT_EQ(t.a.data, p.b.data);
    EXPECT_EQ(t.a.col_stride, 1) << "A' = B^T, K contiguous";
    EXPECT_EQ(t.b.data, p.a.data);
    EXPECT_EQ(t.b.row_stride, 1) << "B' = A^T, K contiguous";
    EXPECT_EQ(t.d.row_stride, 1) << "D' = D^T";
    const KernelConfig c = choose_config(t, {});
    EXPECT_TRUE(is_narrow({c.tile_m, c.tile_n})) << c.name();
  }
  EXPECT_EQ(normalize(nt(1, 16385, 8192)).m, 1) << "the GEMV's: wider than 16384";
  const Problem unaligned = nt(1, 1280, 8191);
  EXPECT_EQ(normalize(unaligned).m, 1280) << "B unaligned, read as row classes";
  EXPECT_TRUE(choose_config(normalize(unaligned), {}).row_classes);
  EXPECT_EQ(normalize(nt(1, 1284, 8191)).m, 1) << "the GEMV's: B unaligned, N not a multiple of 8";
  EXPECT_EQ(normalize(nt(1, 28672, 4097)).m, 28672) << "B unaligned and wide: row classes all the same";
  EXPECT_EQ(normalize(nt(33, 1280, 8192)).m, 33);
  EXPECT_EQ(normalize(nt(8, 127, 8192)).m, 8);
  EXPECT_EQ(normalize(problem(8, 1280, 8192)).m, 8) << "B N-major";
  Problem fp8 = nt(8, 1280, 8192);
  fp8.a.dtype = fp8.b.dtype = DType::e4m3;
  EXPECT_EQ(normalize(fp8).m, 8);
}

TEST(ConfigNormalize, RowMajorDIsUnchanged) {
  Problem p = problem(64, 32, 48);
  p.b = col_major(1, DType::bf16, 48);
  const Problem t = normalize(p);
  EXPECT_EQ(t.m, p.m);
  EXPECT_EQ(t.n, p.n);
  EXPECT_EQ(t.k, p.k);
  expect_same(t.a, p.a);
  expect_same(t.b, p.b);
  expect_same(t.d, p.d);
  expect_same(t.c, p.c);
}

}  // namespace
}  // namespace gemmkit
