// Operand access (dispatch/operand_access.h): TMA addressability, and what a problem's config
// says about reading and storing its operands: staging, realigning, row classes, GEMV, majorness,
// store path, types.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "config_tests.h"
#include "dispatch/operand_access.h"
#include "dispatch/plan.h"

namespace gemmkit {
namespace {

using namespace config_tests;

TEST(ConfigTmaAccess, AlignedRowAndColumnMajorAreOk) {
  const TmaAccess rows = tma_access(row_major(0, DType::bf16, 64), 1, 128, 64);
  EXPECT_TRUE(rows.ok);
  EXPECT_TRUE(rows.cols_contiguous);
  const TmaAccess cols = tma_access(col_major(0, DType::bf16, 128), 1, 128, 64);
  EXPECT_TRUE(cols.ok);
  EXPECT_FALSE(cols.cols_contiguous);
}

TEST(ConfigTmaAccess, RejectsWhatTmaCannotAddress) {
  MatrixRef misaligned = row_major(0, DType::bf16, 64);
  misaligned.data = address(0) + 2;
  EXPECT_FALSE(tma_access(misaligned, 1, 128, 64).ok);
  EXPECT_FALSE(tma_access(row_major(0, DType::bf16, 7), 1, 16, 7).ok);  // 14-byte rows
  EXPECT_FALSE(tma_access({address(0), DType::bf16, 0, 128, 2}, 1, 16, 64).ok);  // no unit stride
  EXPECT_FALSE(tma_access({address(0), DType::bf16, 0, 32, 1}, 1, 16, 64).ok);  // rows overlap
  EXPECT_FALSE(tma_access({address(0), DType::bf16, 0, 1, 32}, 1, 64, 16).ok);  // columns overlap
}

TEST(ConfigTmaAccess, ExtentOneDimensionsAcceptAnyStride) {
  const TmaAccess one_row = tma_access({address(0), DType::bf16, 0, 3, 1}, 1, 1, 64);
  EXPECT_TRUE(one_row.ok);
  EXPECT_TRUE(one_row.cols_contiguous);
  const TmaAccess one_col = tma_access({address(0), DType::bf16, 0, 1, 5}, 1, 64, 1);
  EXPECT_TRUE(one_col.ok);
  EXPECT_FALSE(one_col.cols_contiguous);
}

TEST(ConfigTmaAccess, BatchStrides) {
  MatrixRef m = row_major(0, DType::bf16, 64);
  m.batch_stride = 0;  // broadcast
  EXPECT_TRUE(tma_access(m, 4, 128, 64).ok);
  m.batch_stride = 128 * 64;
  EXPECT_TRUE(tma_access(m, 4, 128, 64).ok);
  m.batch_stride = 128 * 64 + 1;  // not a multiple of 16 bytes
  EXPECT_FALSE(tma_access(m, 4, 128, 64).ok);
}

// K = 0 (beta * C) and coordinates beyond TMA's run the fallback kernel.
TEST(ConfigChoose, FallbackForZeroKOrHugeCoordinates) {
  EXPECT_EQ(choose_config(problem(256, 256, 0), {}).kind, KernelKind::fallback);
  Problem huge = problem(256, 256, 256);
  huge.m = int64_t(1) << 31;
  EXPECT_EQ(choose_config(huge, {}).kind, KernelKind::fallback);
}

// 16-bit operands TMA cannot read as they are are read along the dimension they are contiguous
// in: staged, or where larger than L2, realigned by the kernel (on tiles that realign; staged on
// the others); strided both ways, staged.
TEST(ConfigChoose, UnalignedOperandsAreStagedOrRealignedAlongTheirContiguousDimension) {
  Problem p = problem(256, 256, 256);  // A M x K (K contiguous), B K x N (N contiguous)
  p.a.data = address(0) + 2;
  KernelConfig c = problem_config(p);
  EXPECT_EQ(c.kind, KernelKind::tma);
  EXPECT_EQ(loads(c), "stage,tma");
  EXPECT_TRUE(c.a_k_major && !c.b_k_major) << c.name();
  p = problem(256, 256, 255);
  p.a.row_stride = 255;  // rows 510 bytes apart
  p.b.row_stride = 257;
  c = problem_config(p);
  EXPECT_EQ(loads(c), "stage,stage");
  EXPECT_TRUE(c.a_k_major && !c.b_k_major) << c.name();
  p.b = col_major(1, DType::bf16, 255);  // B N x K with an odd leading dimension: K-major
  c = problem_config(p);
  EXPECT_EQ(loads(c), "stage,stage");
  EXPECT_TRUE(c.b_k_major) << c.name();
  // Decode against weights larger than L2 with odd K: the weights realigned, and so the tokens
  // too, although small; unless the weights are contiguous in neither dimension.
  Problem decode = problem(16, 7168, 8191);
  decode.b = col_major(1, DType::bf16, 8191);  // 117 MB of weights, N x K
  c = problem_config(decode);
  EXPECT_EQ(loads(c), "realign,realign");
  EXPECT_TRUE(c.a_k_major && c.b_k_major) << c.name();
  Problem strided = decode;
  strided.b.row_stride = 2;
  EXPECT_EQ(loads(problem_config(strided)), "stage,stage");
  // On a 128-row tile, realigned operands are staged.
  const KernelConfig tall = with_tile(problem_config(decode), {128, 128});
  EXPECT_EQ(loads(tall), "stage,stage");
  EXPECT_TRUE(fits(tall, {}));
  // choose_config reads each unaligned operand one way or the other, realigning only where it can.
  for (const Problem& q : {p, normalize(decode), problem(4097, 4097, 4097), problem(8192, 8192, 8191)}) {
    const KernelConfig base = problem_config(q);
    c = choose_config(q, {});
    EXPECT_EQ(c.realign_a || c.stage_a, base.realign_a || base.stage_a) << c.name();
    EXPECT_EQ(c.realign_b || c.stage_b, base.realign_b || base.stage_b) << c.name();
    if (c.realign_a || c.realign_b) EXPECT_TRUE(realigns_on({c.tile_m, c.tile_n}) && c.cluster_m == 1) << c.name();
    expect_full_stages(c);
  }
  // Transposed onto a narrow tile, the weights are read as row classes (the next test).
  c = choose_config(normalize(decode), {});
  EXPECT_EQ(loads(c), "classes,copies") << "decode, transposed onto a narrow tile: " << c.name();
  EXPECT_EQ(c.tile_n, 16) << c.name();
}

// Decode against weights TMA cannot address (as normalize turns it: the weights are A, M x K,
// the tokens B): the weights read as row classes where they are K-contiguous, unbatched and M is
// a multiple of 8, against at most kRowClassesMaxN K-contiguous columns; otherwise realigned or
// staged as before.
TEST(ConfigChoose, UnalignedDecodeWeightsAreReadAsRowClasses) {
  auto decode = [](int64_t tokens, int64_t rows, int64_t k) {
    Problem p = problem(tokens, rows, k);
    p.b = col_major(1, DType::bf16, k);
    return normalize(p);
  };
  for (const Problem& p : {decode(16, 7168, 8191), decode(8, 4096, 4097), decode(32, 1024, 4098), decode(2, 128, 65)}) {
    const KernelConfig c = choose_config(p, {});
    EXPECT_EQ(loads(c), "classes,copies") << p.m << "x" << p.n << "x" << p.k << ": " << c.name();
    EXPECT_TRUE(fits(c, {})) << c.name();
    EXPECT_TRUE(is_narrow({c.tile_m, c.tile_n}) && !c.tma_store) << c.name();
    expect_full_stages(c);
  }
  Problem base_off = decode(16, 4096, 4096);
  base_off.a.data = address(0) + 2;  // aligned strides, the weights' base 2 bytes off
  EXPECT_EQ(loads(choose_config(base_off, {})), "classes,copies");
  EXPECT_NE(loads(choose_config(decode(16, 4100, 4097), {})), "classes,copies") << "M not a multiple of 8";
  EXPECT_NE(loads(choose_config(decode(16, 4096, 4096), {})), "classes,copies") << "aligned";
  // 33 to 128 tokens: on 64 x 64 and 64 x 128 tiles, stored directly; not above.
  for (auto [tokens, width] : {std::pair{33, 64}, std::pair{64, 64}, std::pair{128, 128}}) {
    const KernelConfig c = choose_config(decode(tokens, 4096, 4097), {});
    EXPECT_EQ(loads(c), "classes,copies") << tokens << " tokens: " << c.name();
    EXPECT_TRUE(c.tile_m == 64 && c.tile_n == width && !c.tma_store && c.cluster_m == 1 && fits(c, {})) << c.name();
  }
  Problem wide = problem(129, 4096, 4097);
  wide.b = col_major(1, DType::bf16, 4097);
  EXPECT_EQ(normalize(wide).m, 129) << "more than kRowClassesMaxN tokens: left as it is";
  Problem aligned_wide = problem(64, 4096, 4096);
  aligned_wide.b = col_major(1, DType::bf16, 4096);
  EXPECT_EQ(normalize(aligned_wide).m, 64) << "33 or more tokens against aligned weights: left as they are";
  Problem batched = decode(16, 4096, 4097);
  batched.batch = 2;
  batched.a.batch_stride = 4096 * 4097;
  EXPECT_NE(loads(choose_config(batched, {})), "classes,copies") << "batched";
  // Eight rows of tile per 512 rows of A, rounded up: 4104 rows are 513 groups, 9 blocks of 64.
  KernelConfig c = choose_config(decode(16, 4104, 4097), {});
  EXPECT_EQ(tile_rows(c, 4104), 72);
  EXPECT_EQ(row_class_width(4097), 4160);
  EXPECT_EQ(row_class_width(4089), 4096);
  EXPECT_EQ(row_class_width(4090), 4160);
  // Without B's copies (a graph capture), the realigning kernel on the same tile.
  const KernelConfig realigned = realigned_instead(decode(16, 4104, 4097), c);
  EXPECT_EQ(loads(realigned), "realign,realign");
  EXPECT_EQ(realigned.tile_n, c.tile_n);
  EXPECT_TRUE(fits(realigned, {})) << realigned.name();
  // Row classes only on 64-row tiles up to kRowClassesMaxN wide, stored directly.
  KernelConfig tall_tile = with_tile(c, {128, 128});
  tall_tile.stages = 4;
  EXPECT_FALSE(fits(tall_tile, {})) << tall_tile.name();
  KernelConfig wide_tile = with_tile(c, {64, 256});
  EXPECT_FALSE(fits(wide_tile, {})) << wide_tile.name();
  EXPECT_FALSE(with_tile(c, {64, 128}).tma_store);
}

// One row of A against B stored N x K (K contiguous) is a matrix-vector product, whatever the
// alignment; B stored K x N, or two rows, go to the TMA kernel.
TEST(ConfigChoose, GemvForOneRowAgainstKContiguousB) {
  Problem nt = problem(1, 4096, 7168);
  nt.b = col_major(1, DType::bf16, 7168);
  EXPECT_EQ(choose_config(nt, {}).kind, KernelKind::gemv);
  EXPECT_EQ(choose_config(nt, {}).name(), "gemv simt");
  nt.a.data = address(0) + 2;  // unaligned: still GEMV
  nt.b.col_stride = 7169;
  EXPECT_EQ(choose_config(nt, {}).kind, KernelKind::gemv);
  EXPECT_EQ(choose_config(problem(1, 4096, 7168), {}).kind, KernelKind::tma) << "B stored K x N";
  Problem two_rows = problem(2, 4096, 7168);
  two_rows.b = col_major(1, DType::bf16, 7168);
  EXPECT_EQ(choose_config(two_rows, {}).kind, KernelKind::tma);
  Problem no_k = nt;
  no_k.k = 0;
  EXPECT_EQ(choose_config(no_k, {}).kind, KernelKind::fallback) << "K = 0 is beta * C";
}

// Rows of B shorter than a warp's 2 KB round of loads share a warp among 2 or 4 columns.
TEST(ConfigChoose, GemvColumnsPerWarpFollowRowBytes) {
  for (auto [k, columns] : {std::pair{7168, 1}, {1024, 1}, {1023, 2}, {512, 2}, {511, 4}, {1, 4}}) {
    Problem p = problem(1, 4096, k);
    p.b = col_major(1, DType::bf16, k);
    const KernelConfig c = choose_config(p, {});
    EXPECT_EQ(c.kind, KernelKind::gemv);
    EXPECT_EQ(c.tile_n, 8 * columns) << "K = " << k;
  }
}

TEST(ConfigChoose, MajornessFollowsLayout) {
  Problem nt = problem(1024, 1024, 1024);
  nt.b = col_major(1, DType::bf16, 1024);  // B stored N x K
  KernelConfig c = choose_config(nt, {});
  EXPECT_EQ(c.kind, KernelKind::tma);
  EXPECT_TRUE(c.a_k_major);
  EXPECT_TRUE(c.b_k_major);
  EXPECT_TRUE(c.tma_store);
  expect_full_stages(c);

  c = choose_config(problem(1024, 1024, 1024), {});  // NN
  EXPECT_EQ(c.kind, KernelKind::tma);
  EXPECT_TRUE(c.a_k_major);
  EXPECT_FALSE(c.b_k_major);

  Problem tn = nt;
  tn.a = col_major(0, DType::bf16, 1024);  // A stored K x M
  c = choose_config(tn, {});
  EXPECT_EQ(c.kind, KernelKind::tma);
  EXPECT_FALSE(c.a_k_major);
  EXPECT_TRUE(c.b_k_major);
}

TEST(ConfigChoose, OddOutputLeadingDimensionStoresRows) {
  Problem p = problem(1024, 1024, 1024);
  p.d.row_stride = 1025;
  const KernelConfig c = choose_config(p, {});
  EXPECT_EQ(c.kind, KernelKind::tma);
  EXPECT_FALSE(c.tma_store);
  EXPECT_EQ(c.row_store(), c.tile_m >= 128) << c.name();
  expect_full_stages(c);
}

// TMA would store the last 16-byte piece of each row whole, past D's last column: a D of 1001
// f16 columns inside a matrix 1024 wide (aligned rows) is not stored by TMA; one of 1000 (2000
// bytes) is. f32: 1004 columns by TMA, 1002 not.
TEST(ConfigChoose, RowsEndingInsideA16BytePieceAreNotStoredByTma) {
  Problem p = problem(1024, 1001, 1024);
  p.d.dtype = DType::f16;
  p.d.row_stride = 1024;
  EXPECT_FALSE(tma_can_store(p));
  EXPECT_FALSE(choose_config(p, {}).tma_store);
  p.n = 1000;
  EXPECT_TRUE(tma_can_store(p));
  p.d.dtype = DType::f32;
  p.n = 1002;
  EXPECT_FALSE(tma_can_store(p));
  p.n = 1004;
  EXPECT_TRUE(tma_can_store(p));
}

// A D whose rows are contiguous (a problem the plan transposed) is stored by TMA too, a tile's
// columns as lines of rows, where its columns are a whole number of 16-byte pieces; its boxes span
// the most columns (up to 128 bytes' worth) that divide the tile's width.
TEST(ConfigStore, ColumnMajorDStoresByColumns) {
  Problem p = problem(1024, 300, 64);
  p.d = col_major(2, DType::bf16, 1024);
  EXPECT_TRUE(tma_can_store(p));
  KernelConfig c = problem_config(p);
  EXPECT_TRUE(c.tma_store && c.d_by_columns);
  EXPECT_EQ(with_tile(c, {128, 128}).store_box_bytes(), 128);
  EXPECT_EQ(with_tile(c, {128, 144}).store_box_bytes(), 32) << "16 columns of bf16 divide 144";
  EXPECT_EQ(with_tile(c, {64, 176}).store_box_bytes(), 32);
  EXPECT_FALSE(with_tile(c, {64, 16}).d_by_columns) << "narrow tiles store directly";
  c.out = DType::f32;
  EXPECT_EQ(with_tile(c, {128, 144}).store_box_bytes(), 64);
  EXPECT_EQ(with_tile(c, {128, 160}).store_box_bytes(), 128);
  p.m = 1020;  // 2040 bytes a column: not whole 16-byte pieces
  EXPECT_FALSE(tma_can_store(p));
  EXPECT_FALSE(problem_config(p).tma_store);
  EXPECT_NE(compiled(with_tile(c, {128, 128})), compiled([&] {
              KernelConfig rows = with_tile(c, {128, 128});
              rows.d_by_columns = false;
              return rows;
            }()))
      << "the store's layout is part of the kernel";
}

TEST(ConfigChoose, TypesAndCPropagate) {
  Problem p = problem(512, 512, 512);
  p.a.dtype = p.b.dtype = DType::f16;
  p.d.dtype = DType::bf16;
  KernelConfig c = choose_config(p, {});
  EXPECT_EQ(c.in, DType::f16);
  EXPECT_EQ(c.out, DType::bf16);
  EXPECT_FALSE(c.has_c);

  p.c = row_major(3, DType::f32, 512);
  p.beta = 1.0f;
  c = choose_config(p, {});
  EXPECT_TRUE(c.has_c);
  EXPECT_EQ(c.c, DType::f32);
}

}  // namespace
}  // namespace gemmkit
