// The TMA kernel's shared-memory layout (kernels/sm90/smem_layout.h), which the host and the
// kernel both use: the totals the host reserves are those of the formula it replaced, for every
// tile, stage count, layout, store path, realigned operand and scale mode; and the regions lie
// in order, each where the one before ends.
#include <gtest/gtest.h>

#include <string>

#include "dispatch/cost_model.h"
#include "kernels/sm90/smem_layout.h"

namespace gemmkit {
namespace {

// The host's formulas before the layout moved into smem_layout.h (config.cpp at ebfa3d1).
int old_stage_bytes(const KernelConfig& c) {
  const int b_rows = c.b_k_major ? c.tile_n : (c.tile_n + 63) / 64 * 64;
  auto inner = [](ScaleMode m) { return m == ScaleMode::block || m == ScaleMode::mx; };
  const int words_a = !inner(c.scale_a) ? 0 : c.scale_a == ScaleMode::mx || c.scale_a_mn == 1 ? c.tile_m : 4;
  // B's 128x128 blocks take four words each since TMA stages them (boxes of four K blocks).
  const int words_b = !inner(c.scale_b) ? 0
                      : c.scale_b == ScaleMode::mx || c.scale_b_mn == 1 ? c.tile_n
                                                                         : 4 * ((c.tile_n + 127) / 128 + 1);
  // Each operand's words from a 128-byte boundary since TMA stages block scales.
  auto part = [](int words) { return words == 0 ? 0 : (words * 4 + 127) / 128 * 128; };
  return (c.tile_m + b_rows) * 128 + part(words_a) + part(words_b);
}

int old_smem_bytes(const KernelConfig& c) {
  const int b_rows = c.b_k_major ? c.tile_n : (c.tile_n + 63) / 64 * 64;
  const int epilogue = (c.tile_m / 64) * 64 * 128 * (c.tma_store ? c.store_buffers : c.row_store() ? 1 : 0);
  const bool realign = c.realign_a || c.realign_b;
  const int landing = c.stages * ((c.realign_a ? c.tile_m : 0) + (c.realign_b ? b_rows : 0)) * 144;
  // Work slots grew from 32 to 40 bytes with the K ranges of groups along K.
  const int barriers_and_slots = c.stages * ((realign ? 3 : 2) * 8 + 40);
  const int column_scales = c.scale_b == ScaleMode::rowwise ? 2 * (c.tile_m / 64) * c.tile_n * 4 : 0;
  const int mx_floats = c.scale_b == ScaleMode::mx ? 2 * (c.tile_m / 64) * 4 * c.tile_n * 4 : 0;
  // The staged scales start 128-byte aligned (16 before TMA staged them; 16 still where there are
  // none), after A's and B's stages and the regions between.
  const int ab = c.stages * (c.tile_m + b_rows) * 128;
  const int scales = c.stages * old_stage_bytes(c) - ab;
  const int alignment = scales > 0 ? 128 : 16;
  const int before_scales = (ab + epilogue + landing + barriers_and_slots + alignment - 1) / alignment * alignment;
  return 1024 + before_scales + scales + column_scales + mx_floats;
}

TEST(SmemLayout, HostTotalsAreTheFormerFormulas) {
  int checked = 0;
  for (bool eight_bit : {false, true}) {
    for (TileShape tile : tile_shapes(eight_bit)) {
      for (int stages = 1; stages <= 8; ++stages) {
        for (int layout = 0; layout < 4; ++layout) {
          for (int store = 0; store < 4; ++store) {  // TMA with 1 or 2 buffers, rows or direct, split or not
            for (int realign = 0; realign < 4; ++realign) {
              for (int scales = 0; scales < 5 * 5 * 4; ++scales) {
                KernelConfig c;
                c.tile_m = tile.m;
                c.tile_n = tile.n;
                c.stages = stages;
                c.a_k_major = layout % 2 == 0;
                c.b_k_major = layout / 2 == 0;
                c.tma_store = store < 2;
                c.store_buffers = store == 0 ? 1 : 2;
                c.splits = store == 3 ? 2 : 1;
                c.realign_a = realign % 2 == 1;
                c.realign_b = realign / 2 == 1;
                c.in = c.in_b = eight_bit ? DType::e4m3 : DType::bf16;
                c.scale_a = ScaleMode(scales % 5);
                c.scale_b = ScaleMode(scales / 5 % 5);
                c.scale_a_mn = scales / 25 % 2 ? 128 : 1;
                c.scale_b_mn = scales / 50 % 2 ? 128 : 1;
                ASSERT_EQ(c.smem_bytes(), old_smem_bytes(c)) << c.name() << " scales " << scales;
                ASSERT_EQ(tma_smem_bytes(c), old_smem_bytes(c)) << c.name() << " scales " << scales;
                ASSERT_EQ(c.stage_bytes(), old_stage_bytes(c)) << c.name() << " scales " << scales;
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100000);
}

TEST(SmemLayout, RegionsFollowEachOther) {
  sm90::SmemShape s{128, 176, 5, false, 2, false, false, GEMMKIT_SCALE_BLOCK, GEMMKIT_SCALE_ROWWISE, 1, 128};
  const sm90::SmemLayout l = sm90::smem_layout(s);
  EXPECT_EQ(l.a, 0u);
  EXPECT_EQ(l.b, 5 * 128 * 128u);
  EXPECT_EQ(l.epilogue, l.b + 5 * 192 * 128u);  // N-major B: whole 64-wide blocks
  EXPECT_EQ(l.landing_rows, l.epilogue + 2 * 2 * 8192u);
  EXPECT_EQ(l.full, l.landing_rows);  // nothing realigned
  EXPECT_EQ(l.empty, l.full + 5 * 8u);
  EXPECT_EQ(l.slots, l.empty + 5 * 8u);  // no landed barriers
  EXPECT_EQ(l.scales, l.slots + 5 * 40u + 104);  // padded to 128 bytes: five 40-byte slots end 104 bytes short
  EXPECT_EQ(l.scales % 128, 0u);
  EXPECT_EQ(l.stage_scales, 128 * 4u);  // A's 1x128 blocks: a word per row
  EXPECT_EQ(l.column_scales, l.scales + 5 * l.stage_scales);
  EXPECT_EQ(l.mx_floats, l.column_scales + 2 * 2 * 176 * 4u);
  EXPECT_EQ(l.end, l.mx_floats);
  EXPECT_EQ(l.total, l.end + 1024);
  EXPECT_EQ(l.stage, l.stage_a + l.stage_b + l.stage_scales);
}

}  // namespace
}  // namespace gemmkit
