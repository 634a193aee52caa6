// Kernel configurations: shared-memory sizing, TMA addressability, the cold-start heuristic,
// config identity and problem normalisation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "dispatch/cost_model.h"
#include "dispatch/operand_access.h"
#include "dispatch/plan.h"

namespace gemmkit {
namespace {

// Fake device addresses, 16-byte aligned and 4 GiB apart.
char* address(int slot) { return reinterpret_cast<char*>((uintptr_t(1) << 40) + (uintptr_t(slot) << 32)); }

MatrixRef row_major(int slot, DType type, int64_t cols) { return {address(slot), type, 0, cols, 1}; }
MatrixRef col_major(int slot, DType type, int64_t rows) { return {address(slot), type, 0, 1, rows}; }

// NN: A (M x K), B (K x N) and D (M x N, f32) all row-major and aligned.
Problem problem(int64_t m, int64_t n, int64_t k) {
  Problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = row_major(0, DType::bf16, k);
  p.b = row_major(1, DType::bf16, n);
  p.d = row_major(2, DType::f32, n);
  return p;
}

const int kSmemLimit = DeviceLimits{}.smem_per_block;

// ---- shared memory and stages

KernelConfig tile_config(TileShape tile, bool b_k_major, bool tma_store, int stages) {
  KernelConfig c;
  c.tile_m = tile.m;
  c.tile_n = tile.n;
  c.b_k_major = b_k_major;
  c.tma_store = tma_store;
  c.stages = stages;
  return c;
}

TEST(ConfigStages, MaxStagesFillsButDoesNotExceedSharedMemory) {
  for (TileShape tile : tile_shapes()) {
    for (bool b_k_major : {false, true}) {
      for (bool tma_store : {false, true}) {
        if (is_narrow(tile) && tma_store) continue;  // narrow tiles store directly
        KernelConfig c = tile_config(tile, b_k_major, tma_store, 0);
        SCOPED_TRACE(c.name());
        c.stages = max_stages(c, kSmemLimit);
        EXPECT_GE(c.stages, 3);
        EXPECT_LE(c.stages, 8);
        EXPECT_LE(tma_smem_bytes(c), kSmemLimit);
        EXPECT_EQ(c.smem_bytes(), tma_smem_bytes(c));
        if (c.stages < 8) {
          ++c.stages;
          EXPECT_GT(tma_smem_bytes(c), kSmemLimit);
        }
      }
    }
  }
}

TEST(ConfigStages, SmemGrowsWithStagesStoreBufferAndPartialBoxes) {
  for (TileShape tile : tile_shapes()) {
    EXPECT_LT(tma_smem_bytes(tile_config(tile, true, false, 2)), tma_smem_bytes(tile_config(tile, true, false, 3)));
    EXPECT_LT(tma_smem_bytes(tile_config(tile, true, false, 2)), tma_smem_bytes(tile_config(tile, true, true, 2)));
    // An N-major B is loaded in whole 64-column boxes.
    const int k_major = tile_config(tile, true, false, 1).stage_bytes();
    const int n_major = tile_config(tile, false, false, 1).stage_bytes();
    EXPECT_EQ(k_major, (tile.m + tile.n) * 128);
    EXPECT_EQ(n_major, (tile.m + (tile.n + 63) / 64 * 64) * 128);
    // A limit just below one stage leaves no stage at all.
    const KernelConfig one = tile_config(tile, true, false, 1);
    EXPECT_EQ(max_stages(one, tma_smem_bytes(one) - 1), 0);
  }
}

// 128-byte store boxes, the last group shifted back over the one before; with C (which D may
// alias), the widest box dividing the tile's row.
TEST(ConfigStages, StoreBoxIs128BytesOrWithCTheWidestDividingTheTileRow) {
  KernelConfig c;
  for (TileShape tile : tile_shapes()) {
    if (is_narrow(tile)) continue;  // stored directly
    for (DType out : {DType::bf16, DType::f32}) {
      c.tile_n = tile.n;
      c.out = out;
      c.has_c = false;
      EXPECT_EQ(c.store_box_bytes(), 128) << c.name();
      c.has_c = true;
      EXPECT_EQ(tile.n * dtype_size(out) % c.store_box_bytes(), 0) << c.name();
    }
  }
  c.has_c = true;
  c.out = DType::bf16;
  c.tile_n = 256;
  EXPECT_EQ(c.store_box_bytes(), 128);
  c.tile_n = 176;  // 352 bytes of bf16
  EXPECT_EQ(c.store_box_bytes(), 32);
  c.tile_n = 160;  // 320 bytes
  EXPECT_EQ(c.store_box_bytes(), 64);
  c.out = DType::f32;
  c.tile_n = 176;  // 704 bytes
  EXPECT_EQ(c.store_box_bytes(), 64);
  c.tile_n = 160;
  EXPECT_EQ(c.store_box_bytes(), 128);
}

// ---- tma_access

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

// ---- choose_config

void expect_full_stages(const KernelConfig& c) { EXPECT_EQ(c.stages, max_stages(c, kSmemLimit)) << c.name(); }

// K = 0 (beta * C) and coordinates beyond TMA's run the fallback kernel.
TEST(ConfigChoose, FallbackForZeroKOrHugeCoordinates) {
  EXPECT_EQ(choose_config(problem(256, 256, 0), {}).kind, KernelKind::fallback);
  Problem huge = problem(256, 256, 256);
  huge.m = int64_t(1) << 31;
  EXPECT_EQ(choose_config(huge, {}).kind, KernelKind::fallback);
}

// Which of its operands a config realigns or stages, as one word per operand.
std::string loads(const KernelConfig& c) {
  if (c.row_classes) return c.realign_a || c.realign_b || c.stage_a || c.stage_b ? "classes with others" : "classes,copies";
  auto word = [](bool realign, bool stage) { return realign ? (stage ? "both" : "realign") : stage ? "stage" : "tma"; };
  return std::string(word(c.realign_a, c.stage_a)) + "," + word(c.realign_b, c.stage_b);
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

// Realigning takes a 64-row tile at most 128 wide, unclustered, 16-bit, and shared memory for
// its landing rows.
TEST(ConfigFits, RealignedOperandsNeedUnclusteredSixtyFourRowTiles) {
  KernelConfig c = with_tile(KernelConfig{}, {64, 128});
  c.realign_a = c.realign_b = true;
  c.stages = 4;
  EXPECT_TRUE(fits(c, {}));
  KernelConfig plain = c;
  plain.realign_a = plain.realign_b = false;
  EXPECT_EQ(tma_smem_bytes(c) - tma_smem_bytes(plain), 4 * ((64 + 128) * 144 + 8));
  KernelConfig clustered = c;
  clustered.cluster_m = 2;
  EXPECT_FALSE(fits(clustered, {}));
  KernelConfig tall = c;
  tall.tile_m = 128;
  EXPECT_FALSE(fits(tall, {}));
  KernelConfig wide = c;
  wide.tile_n = 256;
  wide.stages = 2;
  EXPECT_FALSE(fits(wide, {}));
  EXPECT_EQ(loads(with_tile(c, {64, 256})), "stage,stage");
  EXPECT_EQ(loads(with_tile(c, {64, 64})), "realign,realign");
  KernelConfig both = c;
  both.stage_a = true;
  EXPECT_FALSE(fits(both, {}));
  EXPECT_NE(c.name().find("realign-A realign-B"), std::string::npos) << c.name();
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

// Without TMA stores, tiles of 128 rows or more stage D's rows through one 8 KB buffer per
// consumer warpgroup; 64-row tiles store elements directly and reserve none.
TEST(KernelConfigTest, RowStoresOnTallTilesTakeOneBufferPerConsumer) {
  for (TileShape tile : tile_shapes()) {
    KernelConfig c = with_tile(KernelConfig{}, tile);
    c.stages = 2;
    c.tma_store = false;
    EXPECT_EQ(c.row_store(), tile.m >= 128) << c.name();
    KernelConfig tma = c;
    tma.tma_store = !is_narrow(tile);
    tma.store_buffers = 1;
    EXPECT_FALSE(tma.row_store());
    if (c.row_store()) EXPECT_EQ(c.smem_bytes(), tma.smem_bytes()) << c.name();
    if (!c.row_store() && tma.tma_store) EXPECT_EQ(c.smem_bytes() + tile.m / 64 * 8192, tma.smem_bytes()) << c.name();
  }
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

// A later candidate that costs the model no more than the pick wins where it takes fewer CTAs (the
// waves' count cannot see the rows a tile wastes below M): at 1345 rows against 14336 columns,
// 192 x 176 tiles in clusters of two cost no more than 128 x 240 ones (within 2%), with fewer CTAs.
TEST(ConfigChoose, EqualCostsGoToFewerCtas) {
  const int64_t m = 1345, n = 14336;
  Problem p = problem(m, n, 4096);
  p.b.row_stride = 1;  // NT: B stored N x K
  p.b.col_stride = 4096;
  p.d.dtype = DType::bf16;
  const std::vector<Candidate> ranked = rank_candidates(p, {});
  ASSERT_FALSE(ranked.empty());
  const auto ctas = [&](const KernelConfig& c) {
    const int64_t rows = (m + c.cluster_m * c.tile_m - 1) / (c.cluster_m * c.tile_m) * c.cluster_m;
    return rows * ((n + c.tile_n - 1) / c.tile_n) * c.splits;
  };
  const KernelConfig& pick = ranked.front().config;
  // A candidate within the 2% a later one must win by, with more CTAs: the case the rule is for.
  const auto more_ctas = std::find_if(ranked.begin() + 1, ranked.end(), [&](const Candidate& c) {
    return c.cost * 0.98 <= ranked.front().cost && ctas(c.config) > ctas(pick);
  });
  ASSERT_NE(more_ctas, ranked.end()) << "no candidate within 2% of " << pick.name();
  for (const Candidate& c : ranked) {
    if (c.cost <= ranked.front().cost) EXPECT_GE(ctas(c.config), ctas(pick)) << c.config.name() << " against " << pick.name();
  }
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

// M just past a multiple of a tile's rows against wide weights runs transposed (N fits a tile's
// width closer than M its 64-row halves); problems that fit, decode (streamed as normalize gives
// it), 8-bit inputs and copied operands keep their orientation. Transposed, the pick stores D by
// columns.
TEST(ConfigOrientation, RowsJustPastATileRowRunTransposed) {
  auto nt = [](int64_t m, int64_t n, int64_t k) {
    Problem p = problem(m, n, k);
    p.b = col_major(1, DType::bf16, k);
    p.d.dtype = DType::bf16;
    return p;
  };
  for (const Problem& p : {nt(1025, 4096, 4096), nt(513, 4096, 4096), nt(513, 8192, 2048), nt(769, 8192, 2048)}) {
    SCOPED_TRACE(std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k));
    EXPECT_TRUE(transposing_pays(p, {}));
    const KernelConfig c = choose_config(transposed_problem(p), {});
    EXPECT_TRUE(c.tma_store && c.d_by_columns) << c.name();
    EXPECT_FALSE(transposing_pays(transposed_problem(p), {})) << "once transposed, it stays so";
  }
  for (const Problem& p : {nt(1024, 4096, 4096), nt(4096, 4096, 4096), nt(8192, 8192, 8192), nt(128, 4096, 4096)}) {
    EXPECT_FALSE(transposing_pays(p, {})) << p.m << "x" << p.n << "x" << p.k;
  }
  // Costed alike on 64-row tiles, weights go on A where the transposed tiles fit its N; not where
  // the last tile column would reach mostly past it (129: one row of 128).
  for (const Problem& p : {nt(320, 4096, 4096), nt(300, 4096, 14336), nt(256, 4096, 4096)}) {
    EXPECT_TRUE(transposing_pays(p, {})) << p.m << "x" << p.n << "x" << p.k;
    EXPECT_EQ(choose_config(transposed_problem(p), {}).tile_m, 64);
  }
  EXPECT_FALSE(transposing_pays(nt(129, 4096, 4096), {}));
  EXPECT_FALSE(transposing_pays(normalize(nt(8, 4096, 4096)), {})) << "decode";
  Problem fp8 = nt(1025, 4096, 4096);
  fp8.a.dtype = fp8.b.dtype = DType::e4m3;
  EXPECT_FALSE(transposing_pays(fp8, {}));
  Problem staged = nt(1025, 4096, 4096);
  staged.a.row_stride = 4097;
  EXPECT_FALSE(transposing_pays(staged, {})) << "A copied before the launch";
}

TEST(ConfigChoose, TileRowsFollowProblemSize) {
  for (int64_t m : {1, 16}) {
    const KernelConfig c = choose_config(problem(m, 4096, 4096), {});
    EXPECT_EQ(c.tile_m, 64) << "M = " << m;
    EXPECT_EQ(c.cluster_m, 1) << "M = " << m << ": one row of tiles leaves no pair to share B";
    expect_full_stages(c);
  }
  const KernelConfig big = choose_config(problem(8192, 8192, 8192), {});
  EXPECT_EQ(big.tile_m, 128);
  EXPECT_EQ(big.tile_n, 256);
  EXPECT_EQ(big.cluster_m, 2);
  expect_full_stages(big);
}

// Clusters of two share B's loads, but where the tiles fit in one wave their synchronisation costs
// more than that saves, unless B is the bulk of the traffic in decode (at most 128 rows against
// weights) or B's rows lie off 32-byte sectors (and K is deep).
TEST(ConfigChoose, OneWaveTakesNoCluster) {
  // (More than a wave keeps them: ConfigChoose.TileRowsFollowProblemSize.)
  for (const Problem& p : {problem(1024, 1024, 1024), problem(2048, 2048, 2048), problem(1536, 96, 1536)}) {
    const KernelConfig c = choose_config(p, {});
    EXPECT_LE((p.m + c.tile_m - 1) / c.tile_m * ((p.n + c.tile_n - 1) / c.tile_n), 132) << c.name();
    EXPECT_EQ(c.cluster_m, 1) << p.m << "x" << p.n << "x" << p.k << ": " << c.name();
  }
  const KernelConfig decode = choose_config(problem(128, 7168, 2048), {});
  EXPECT_EQ(decode.tile_m, 64);
  EXPECT_EQ(decode.cluster_m, 2) << "B, the weights, is 56 times A";
  for (const Problem& p : {problem(129, 4096, 4096), problem(512, 4096, 4096), problem(512, 8192, 2048)}) {
    EXPECT_EQ(choose_config(p, {}).cluster_m, 1) << p.m << " rows against weights: more than decode";
  }
  Problem off_sectors = problem(1000, 1000, 1000);  // rows 2000 bytes apart
  EXPECT_EQ(choose_config(off_sectors, {}).cluster_m, 2);
  Problem a_off_sectors = problem(1000, 1008, 1000);  // only A's rows off sectors
  EXPECT_EQ(choose_config(a_off_sectors, {}).cluster_m, 1);
  Problem off_lines = problem(1000, 1000, 1008);  // rows 2016 bytes apart, on sectors
  off_lines.b = col_major(1, DType::bf16, 1008);
  EXPECT_EQ(choose_config(off_lines, {}).cluster_m, 1);
}

// 16-bit 64 x 64 tiles where 64 x 128 ones, split as far as allowed, reach fewer than 40% of the
// SMs; never split (the decode chains ran slower so).
TEST(ConfigChoose, HalfWidthTilesWhereWideOnesLeaveMostSMsIdle) {
  for (const Problem& p : {problem(128, 128, 128), problem(512, 512, 512), problem(64, 2048, 2048)}) {
    const KernelConfig c = choose_config(p, {});
    EXPECT_EQ(c.tile_n, 64) << p.m << "x" << p.n << "x" << p.k << ": " << c.name();
    EXPECT_EQ(c.splits, 1) << c.name();
  }
  for (const Problem& p : {problem(1024, 1024, 1024), problem(8, 1280, 8192), problem(4, 7168, 2048)}) {
    const KernelConfig c = choose_config(p, {});
    EXPECT_NE(c.tile_n, 64) << p.m << "x" << p.n << "x" << p.k << ": " << c.name();
  }
}

// Problems at most 32 wide with B K-major take the narrowest 64-row tile that covers N, stored
// directly, unclustered; split only where the tiles reach less than half the SMs, then to fill
// them, each part at least 24 K blocks deep (48 where the tiles reach a third of the SMs).
TEST(ConfigChoose, NarrowProblemsTakeNarrowTilesSplitOnlyWhereTilesAreFew) {
  struct Case {
    int64_t m, n, k;
    int tile_n, splits;
  };
  for (const Case& c : {Case{4096, 8, 4096, 8, 1}, Case{4096, 8, 14336, 8, 2}, Case{8448, 8, 14336, 8, 1},
                        Case{1280, 8, 8192, 8, 5}, Case{2112, 8, 7168, 8, 4},
                        Case{1280, 3, 8192, 8, 5}, Case{4096, 16, 4096, 16, 1}, Case{1280, 9, 8192, 16, 5},
                        Case{1280, 32, 8192, 32, 5}, Case{28672, 17, 4096, 32, 1}, Case{100, 8, 100, 8, 1}}) {
    Problem p = problem(c.m, c.n, c.k);
    p.b = col_major(1, DType::bf16, c.k);  // K-major
    const KernelConfig config = choose_config(p, {132, kSmemLimit});
    SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + ": " + config.name());
    EXPECT_EQ(config.tile_m, 64);
    EXPECT_EQ(config.tile_n, c.tile_n);
    EXPECT_EQ(config.splits, c.splits);
    EXPECT_EQ(config.cluster_m, 1);
    EXPECT_FALSE(config.tma_store);
    expect_full_stages(config);
    EXPECT_TRUE(fits(config, {132, kSmemLimit}));
  }
  // Not with B N-major, whose 64-column boxes a narrow tile cannot take, nor in a cluster.
  const KernelConfig n_major = choose_config(problem(1280, 8, 8192), {});
  EXPECT_FALSE(is_narrow({n_major.tile_m, n_major.tile_n})) << n_major.name();
  KernelConfig narrow = with_tile(problem_config(problem(1280, 8, 8192)), {64, 8});
  narrow.stages = 4;
  EXPECT_FALSE(fits(narrow, {})) << "B N-major";
  narrow.b_k_major = true;
  EXPECT_TRUE(fits(narrow, {}));
  narrow.cluster_m = 2;
  EXPECT_FALSE(fits(narrow, {})) << "in a cluster";
  narrow.cluster_m = 1;
  narrow.tma_store = true;
  EXPECT_FALSE(fits(narrow, {})) << "a TMA store box is wider than the tile";
}

// 33 to 128 rows against weights (N >= 8 M, B K-major) whose 64x64 tiles fit in one wave take
// 64x64 tiles (64x128 at most 64 rows with B's rows off 32-byte sectors), unclustered, split as
// streaming tiles are; not where those take more than a wave, nor above 64 rows with B's rows off
// 128-byte lines or at K deeper than 128 blocks, nor with B N-major.
TEST(ConfigChoose, WeightStreamingTakes64RowTilesInOneWave) {
  auto nt = [](int64_t m, int64_t n, int64_t k) {
    Problem p = problem(m, n, k);
    p.b = col_major(1, DType::bf16, k);
    return p;
  };
  struct Case {
    int64_t m, n, k;
    int splits;
    int tile_n = 64;  // 128 at most 64 rows against weights whose rows lie off 32-byte sectors
  };
  for (const Case& c : {Case{128, 4096, 4096, 1}, Case{128, 1280, 8192, 3}, Case{64, 2112, 7168, 4},
                        Case{128, 2112, 7168, 2}, Case{64, 4096, 7168, 2}, Case{64, 8192, 28672, 1},
                        Case{64, 7168, 2080, 1}, Case{64, 7168, 2056, 1, 128}, Case{40, 5120, 3080, 2, 128},
                        Case{48, 2048, 6152, 4, 128}}) {
    const KernelConfig config = choose_config(nt(c.m, c.n, c.k), {132, kSmemLimit});
    SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + ": " + config.name());
    EXPECT_EQ(config.tile_m, 64);
    EXPECT_EQ(config.tile_n, c.tile_n);
    EXPECT_EQ(config.cluster_m, 1);
    EXPECT_EQ(config.splits, c.splits);
    expect_full_stages(config);
  }
  for (const Problem& p : {nt(77, 5760, 2880), nt(128, 7168, 2048), nt(128, 4096, 4104), nt(128, 4096, 4112),
                          nt(128, 4096, 14336), problem(128, 4096, 4096)}) {
    const KernelConfig config = choose_config(p, {132, kSmemLimit});
    EXPECT_NE(config.tile_n, 64) << p.m << "x" << p.n << "x" << p.k << ": " << config.name();
  }
}

// 4096 x 2112 on 132 SMs: 176-wide tiles divide N exactly; 192 rows make 22 x 12 = 264 tiles,
// two full waves (128 rows: 384 tiles, 2.9 waves, of tiles that load more per multiply).
// 128 x 192 would make 352 tiles, a last wave two-thirds full. C rules out 192 rows.
TEST(ConfigChoose, TileWidthFillsTheLastWave) {
  const KernelConfig c = choose_config(problem(4096, 2112, 7168), {132, kSmemLimit});
  EXPECT_EQ(c.tile_m, 192);
  EXPECT_EQ(c.tile_n, 176);
  expect_full_stages(c);
  Problem with_c = problem(4096, 2112, 7168);
  with_c.c = with_c.d;
  with_c.beta = 1.0f;
  ASSERT_TRUE(with_c.has_c());
  const KernelConfig c_tile = choose_config(with_c, {132, kSmemLimit});
  EXPECT_EQ(c_tile.tile_m, 128);
  EXPECT_EQ(c_tile.tile_n, 176);
}

// Three consumer warpgroups cannot read C; where two epilogue buffers would leave fewer than 4
// stages, one is used.
TEST(ConfigChoose, ThreeWarpgroupTilesTakeNoCAndKeepFourStages) {
  const DeviceLimits limits{132, kSmemLimit};
  for (TileShape tile : tile_shapes()) {
    KernelConfig c = with_tile(tile_config(tile, true, true, 0), tile);
    c.store_buffers = store_buffers_for(c, kSmemLimit);
    c.stages = max_stages(c, kSmemLimit);
    SCOPED_TRACE(c.name());
    EXPECT_GE(c.stages, 4);
    EXPECT_EQ(c.store_buffers, tile.m == 192 ? 1 : 2);
    EXPECT_TRUE(fits(c, limits));
    c.has_c = true;
    EXPECT_EQ(fits(c, limits), tile.m <= 128);
  }
}

// A raster group's rows of A stay in L2 while the group sweeps B, which is then read from memory
// once per group: short K gets tall groups (one for all of M = 4096 at K = 512), deep K the
// 8 rows it always had, and no group's rows of A take more than a third of L2.
TEST(ConfigChoose, RasterGroupsAreAsTallAsAThirdOfL2HoldsTheirRowsOfA) {
  const DeviceLimits limits{132, kSmemLimit};
  EXPECT_EQ(choose_config(problem(4096, 32768, 512), limits).group_m, 4096 / 128);
  EXPECT_EQ(choose_config(problem(8192, 32768, 512), limits).group_m, 64);
  EXPECT_EQ(choose_config(problem(4096, 4096, 7168), limits).group_m, 8);
  for (int64_t m : {64, 1000, 4096, 8192, 30000}) {
    int previous = 64;
    for (int64_t k : {64, 512, 1536, 2048, 4096, 7168, 16384}) {
      const KernelConfig c = choose_config(problem(m, 8192, k), limits);
      SCOPED_TRACE(std::to_string(m) + "x8192x" + std::to_string(k) + ": " + c.name());
      EXPECT_TRUE(c.group_m == 8 || c.group_m == 16 || c.group_m == 32 || c.group_m == 64);
      EXPECT_LE(c.group_m, previous);  // never taller for deeper K
      if (c.group_m > 8) {
        EXPECT_LE(int64_t(c.group_m) * c.tile_m * k * 2, limits.l2_bytes / 3);
        EXPECT_LT(c.group_m / 2 * c.tile_m, m);  // half as tall would not cover M already
      }
      previous = c.group_m;
    }
  }
}

// Where every tile runs at once and K is 16 blocks or deeper, 4-row raster groups (they decide
// which tiles neighbouring CTAs take, not what stays in L2); shallower K, more than one wave and
// 8-bit inputs keep the L2-sized groups.
TEST(ConfigChoose, OneWaveAtDeepKTakesShortRasterGroups) {
  const DeviceLimits limits{132, kSmemLimit};
  EXPECT_EQ(choose_config(problem(2048, 512, 2048), limits).group_m, kOneWaveGroupRows);
  EXPECT_EQ(choose_config(problem(1024, 1024, 4096), limits).group_m, kOneWaveGroupRows);
  EXPECT_NE(choose_config(problem(2048, 512, 512), limits).group_m, kOneWaveGroupRows);
  EXPECT_NE(choose_config(problem(4096, 4096, 4096), limits).group_m, kOneWaveGroupRows);
  Problem fp8 = problem(2048, 512, 4096);
  fp8.a.dtype = fp8.b.dtype = DType::e4m3;
  EXPECT_FALSE(short_groups_pay(fp8, TileShape{64, 128}, 32, limits));
  EXPECT_TRUE(short_groups_pay(problem(2048, 512, 4096), TileShape{64, 128}, 64, limits));
}

// Few tiles for 132 SMs (small M, modest N): K is split so that the parts fill many SMs, each
// part long enough (24 K blocks or more) to pay for its reduction. Problems with tiles to spare,
// or too little K for two such parts, are never split.
TEST(ConfigChoose, SplitKFillsTheSmsWhenTilesAreFew) {
  for (auto [m, n, k] : {std::tuple{1, 2112, 7168}, std::tuple{16, 4096, 7168}, std::tuple{128, 2112, 7168},
                         std::tuple{1, 7168, 16384}}) {
    const KernelConfig c = choose_config(problem(m, n, k), {132, kSmemLimit});
    const int64_t tiles = (m + c.tile_m - 1) / c.tile_m * ((n + c.tile_n - 1) / c.tile_n);
    EXPECT_GT(c.splits, 1) << m << "x" << n << "x" << k << ": " << c.name();
    EXPECT_LE(c.tile_n, kMaxSplitTileN) << c.name();
    EXPECT_GE(k / 64 / c.splits, 24) << c.name();
    EXPECT_GT(tiles * c.splits, 132 / 2) << c.name() << ": most SMs should have a part";
    EXPECT_LE(tiles * c.splits, 132) << c.name() << ": memory-bound parts gain nothing from a second wave";
    expect_full_stages(c);
  }
  for (auto [m, n, k] : {std::tuple{4096, 2112, 7168}, std::tuple{8192, 8192, 8192}, std::tuple{64, 28672, 8192},
                         std::tuple{1, 7168, 2048}, std::tuple{1, 2112, 192}}) {
    EXPECT_EQ(choose_config(problem(m, n, k), {132, kSmemLimit}).splits, 1) << m << "x" << n << "x" << k;
  }
}

// Every split count above 1 runs on one binary.
TEST(ConfigKernelConfig, SplitCountIsALaunchParameter) {
  KernelConfig four, eight, one;
  four.splits = 4;
  eight.splits = 8;
  EXPECT_FALSE(four == eight);
  EXPECT_TRUE(compiled(four) == compiled(eight));
  EXPECT_FALSE(compiled(four) == compiled(one));
  EXPECT_TRUE(compiled(one) == one);
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

// FP8 on full-height tiles: no cluster (each CTA stalls at every promotion, and a cluster would
// tie two together); block scales (1x128 for A, 128x128 for B) cost every full-height tile
// alike, so they take per-tensor's tile, also where N = 2112 is twelve 176-wide tiles and 16.5
// 128-wide ones. B's blocks the other way round (128x1, as a transposed problem has them) are
// read while promoting, which is charged, but every tile alike: the widest full-height tile stays.
TEST(ConfigChoose, Fp8FullHeightTilesTakeNoClusterAndBlockScalesPerTensorsTile) {
  auto fp8 = [](ScaleMode mode, int64_t b_block_rows, int64_t b_block_cols, int64_t m = 4096, int64_t n = 8192,
                int64_t k = 8192) {
    Problem p = problem(m, n, k);
    p.a.dtype = p.b.dtype = DType::e4m3;
    p.b = col_major(1, DType::e4m3, p.k);  // K-major, as 8-bit wgmma reads it
    p.d.dtype = DType::bf16;
    p.scale_a.mode = p.scale_b.mode = mode;
    p.scale_a.block_rows = 1;
    p.scale_a.block_cols = 128;
    p.scale_b.block_rows = b_block_rows;
    p.scale_b.block_cols = b_block_cols;
    return p;
  };
  const KernelConfig tensor = choose_config(fp8(ScaleMode::tensor, 8192, 8192), {132, kSmemLimit});
  EXPECT_EQ(tensor.tile_m, 128);
  EXPECT_EQ(tensor.tile_n, 176);
  EXPECT_EQ(tensor.cluster_m, 1);
  const KernelConfig block = choose_config(fp8(ScaleMode::block, 128, 128), {132, kSmemLimit});
  EXPECT_EQ(block.tile_m, 128);
  EXPECT_EQ(block.tile_n, 176);
  EXPECT_EQ(block.cluster_m, 1);
  EXPECT_EQ(choose_config(fp8(ScaleMode::block, 128, 128, 8192, 2112, 7168), {132, kSmemLimit}).tile_n, 176);
  const KernelConfig block_b_rows = choose_config(fp8(ScaleMode::block, 128, 1), {132, kSmemLimit});
  EXPECT_EQ(block_b_rows.tile_n, 176);
  // Decode's half-height tiles still share B within a cluster.
  Problem decode = fp8(ScaleMode::tensor, 8192, 8192);
  decode.m = 128;
  const KernelConfig half = choose_config(decode, {132, kSmemLimit});
  EXPECT_EQ(half.tile_m, 64);
  EXPECT_EQ(half.cluster_m, 2);
}

// 8-bit tiles store their whole epilogue between tiles: where K is short that dominates, and
// three consumers' 192x128 tiles (one store buffer each, for a fifth stage) split it three ways;
// from K = 1536 on, 128x176 stays. Block scales do not fit three consumers' registers. M up to 64 takes
// no tile whose second warpgroup would multiply only rows below M.
TEST(ConfigChoose, Fp8ShortKTakesThreeConsumersAndSmallMNoEmptySlices) {
  auto fp8 = [](int64_t m, int64_t k, ScaleMode mode) {
    Problem p = problem(m, 32768, k);
    p.a.dtype = p.b.dtype = DType::e4m3;
    p.b = col_major(1, DType::e4m3, p.k);
    p.d.dtype = DType::bf16;
    p.scale_a.mode = p.scale_b.mode = mode;
    p.scale_a.block_rows = 1;
    p.scale_a.block_cols = 128;
    p.scale_b.block_rows = p.scale_b.block_cols = 128;
    return p;
  };
  const KernelConfig short_k = choose_config(fp8(4096, 512, ScaleMode::tensor), {132, kSmemLimit});
  EXPECT_EQ(short_k.tile_m, 192);
  EXPECT_EQ(short_k.tile_n, 128);
  EXPECT_EQ(short_k.store_buffers, 1);
  for (int64_t k : {1536, 16384}) {
    const KernelConfig longer_k = choose_config(fp8(4096, k, ScaleMode::tensor), {132, kSmemLimit});
    EXPECT_EQ(longer_k.tile_m, 128) << k;
    EXPECT_EQ(longer_k.tile_n, 176) << k;
  }
  EXPECT_EQ(choose_config(fp8(4096, 512, ScaleMode::block), {132, kSmemLimit}).tile_m, 128);
  for (int64_t m : {16, 64}) EXPECT_EQ(choose_config(fp8(m, 512, ScaleMode::block), {132, kSmemLimit}).tile_m, 64) << m;
}

// 64 x 64 8-bit tiles for decode: at M above 16, and at M <= 16 only where 64 x 128 tiles
// with every split the model allows reach fewer than half the SMs.
TEST(ConfigChoose, Fp8HalfWidthTilesWhereWideOnesLeaveSmsIdle) {
  auto fp8 = [](int64_t m, int64_t n, int64_t k) {
    Problem p = problem(m, n, k);
    p.a.dtype = p.b.dtype = DType::e4m3;
    p.b = col_major(1, DType::e4m3, p.k);
    p.d.dtype = DType::bf16;
    p.scale_a.mode = p.scale_b.mode = ScaleMode::tensor;
    return p;
  };
  auto width = [&](int64_t m, int64_t n, int64_t k) { return choose_config(fp8(m, n, k), {132, kSmemLimit}).tile_n; };
  EXPECT_EQ(width(16, 2112, 7168), 64) << "17 wide tiles in at most 2 parts";
  EXPECT_EQ(width(16, 7168, 2048), 64) << "56 wide tiles, K too short to split";
  EXPECT_EQ(width(16, 7168, 16384), 128) << "56 wide tiles in up to 5 parts";
  EXPECT_EQ(width(16, 24576, 1536), 128) << "192 wide tiles";
  EXPECT_EQ(width(64, 8192, 8192), 64);
}

// ---- KernelConfig identity

TEST(ConfigKernelConfig, EveryFieldTakesPartInComparison) {
  const KernelConfig base;
  const KernelConfig copy = base;
  EXPECT_TRUE(base == copy);
  EXPECT_FALSE(base < copy);
  EXPECT_FALSE(copy < base);

  const std::vector<std::function<void(KernelConfig&)>> changes = {
      [](KernelConfig& c) { c.kind = KernelKind::fallback; }, [](KernelConfig& c) { c.tile_m = 64; },
      [](KernelConfig& c) { c.tile_n = 256; },              [](KernelConfig& c) { c.stages = 3; },
      [](KernelConfig& c) { c.group_m = 4; },               [](KernelConfig& c) { c.cluster_m = 2; },
      [](KernelConfig& c) { c.splits = 3; },                [](KernelConfig& c) { c.store_buffers = 4; },
      [](KernelConfig& c) { c.a_k_major = false; },
      [](KernelConfig& c) { c.b_k_major = false; },         [](KernelConfig& c) { c.a_batched = true; },
      [](KernelConfig& c) { c.b_batched = true; },          [](KernelConfig& c) { c.tma_store = false; },
      [](KernelConfig& c) { c.has_c = true; },              [](KernelConfig& c) { c.in = DType::f16; },
      [](KernelConfig& c) { c.out = DType::f32; },          [](KernelConfig& c) { c.c = DType::f32; },
  };
  std::set<KernelConfig> distinct = {base};
  for (size_t i = 0; i < changes.size(); ++i) {
    KernelConfig changed = base;
    changes[i](changed);
    EXPECT_FALSE(changed == base) << "change " << i;
    EXPECT_NE(changed < base, base < changed) << "change " << i;
    distinct.insert(changed);
  }
  EXPECT_EQ(distinct.size(), changes.size() + 1);
}

TEST(ConfigKernelConfig, NameShowsTileStagesClusterMajornessAndStore) {
  const KernelConfig base;
  std::vector<KernelConfig> configs(10, base);
  configs[1].tile_m = 64;
  configs[2].tile_n = 256;
  configs[3].stages = 3;
  configs[4].a_k_major = false;
  configs[5].b_k_major = false;
  configs[6].tma_store = false;
  configs[7].cluster_m = 2;
  configs[8].splits = 4;
  configs[9].group_m = 16;
  std::set<std::string> names;
  for (const KernelConfig& c : configs) names.insert(c.name());
  EXPECT_EQ(names.size(), configs.size());
}

// ---- normalize

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
