// The cost model (dispatch/cost_model.h): the tiles, clusters, split counts, raster groups and
// orientation it picks for a problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "config_tests.h"
#include "dispatch/cost_model.h"
#include "dispatch/operand_access.h"
#include "dispatch/plan.h"

namespace gemmkit {
namespace {

using namespace config_tests;

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

// B's mx exponents travel in TMA boxes a byte per tile column, and a box is at least 16 bytes
// wide: one token's A8W4-MX tile, 8 wide, took a map the driver refused.
TEST(ConfigChoose, MxScalesOfBTakeTilesAtLeastSixteenWide) {
  EXPECT_FALSE(tile_takes_scales({64, 8}, ScaleMode::none, ScaleMode::mx));
  EXPECT_TRUE(tile_takes_scales({64, 16}, ScaleMode::none, ScaleMode::mx));
  EXPECT_TRUE(tile_takes_scales({64, 8}, ScaleMode::mx, ScaleMode::none));
  EXPECT_TRUE(tile_takes_scales({64, 8}, ScaleMode::none, ScaleMode::rowwise));
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

}  // namespace
}  // namespace gemmkit
