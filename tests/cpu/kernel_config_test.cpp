// Kernel configurations (core/kernel_config.h): shared-memory sizing, store boxes, the store path
// without TMA, the config as compiled, and config identity.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "config_tests.h"
#include "core/kernel_config.h"

namespace gemmkit {
namespace {

using namespace config_tests;

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
      [](KernelConfig& c) { c.zeros = true; },              [](KernelConfig& c) { c.group_partials = true; },
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

// Narrow tiles that widen 4-bit weights run four CTAs an SM (three with a fused epilogue), each
// with a producer warp, and promote u4 group partials; other tiles keep one CTA, a producer warpgroup and widened scales.
TEST(ConfigKernelConfig, NarrowFourBitTilesShareTheirSmAndPromoteGroupPartials) {
  KernelConfig u4;
  u4.in = DType::u4;
  u4.scale_a = ScaleMode::group;
  u4.group_partials = true;
  const KernelConfig narrow = with_tile(u4, {64, 16});
  EXPECT_TRUE(narrow.group_partials);
  EXPECT_EQ(narrow.ctas_per_sm(), 4);
  EXPECT_EQ(narrow.threads(), 160);
  EXPECT_NE(narrow.name().find("group-partials"), std::string::npos) << narrow.name();
  static const std::string fused = "acc";  // three with a fused epilogue, whose registers a fourth leaves short
  KernelConfig narrow_fused = narrow;
  narrow_fused.epilogue = &fused;
  EXPECT_EQ(narrow_fused.ctas_per_sm(), 3);
  EXPECT_EQ(narrow_fused.threads(), 160);
  const KernelConfig wide = with_tile(u4, {128, 128});
  EXPECT_FALSE(wide.group_partials);
  EXPECT_EQ(wide.ctas_per_sm(), 1);
  EXPECT_EQ(wide.threads(), 384);
  KernelConfig bf16;
  const KernelConfig dense = with_tile(bf16, {64, 16});
  EXPECT_EQ(dense.ctas_per_sm(), 1);
  EXPECT_EQ(dense.threads(), 256);
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

}  // namespace
}  // namespace gemmkit
