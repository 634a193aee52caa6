#include "tools/bench_options.h"

#include <gtest/gtest.h>

#include "gemmkit/error.h"
#include "test_support.h"

using gemmkit::DType;
using gemmkit::Error;
using gemmkit::ErrorCode;
using gemmkit::TileShape;
using gemmkit::tile_shapes;
using namespace gemmkit::tools;

namespace {

TEST(BenchOptions, OverheadShapeKeepsMNKInOrder) {
  const SuiteProblem p = parse_overhead_shape("1,4096,7168");
  EXPECT_EQ(p.m, 1);
  EXPECT_EQ(p.n, 4096);
  EXPECT_EQ(p.k, 7168);
  EXPECT_EQ(p.layout, "NT");
  EXPECT_EQ(p.in_dtype, DType::bf16);
  EXPECT_EQ(p.out_dtype, DType::bf16);
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(parse_overhead_shape("64,64,64").k, 64);
}

TEST(BenchOptions, OverheadShapeRejectsAnythingButThreePositiveIntegers) {
  for (const char* text : {"", "64", "64,64", "64,64,64,64", "64,64,64,", ",64,64", "64,,64", "0,64,64",
                           "64,-1,64", "64,64,0", "+64,64,64", " 64,64,64", "64,64,64 ", "64x64x64", "a,64,64",
                           "64,64,6.5", "99999999999999999999,64,64"}) {
    try {
      parse_overhead_shape(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      const std::string message = e.what();
      EXPECT_NE(message.find("--overhead-shape"), std::string::npos) << message;
      EXPECT_NE(message.find("'" + std::string(text) + "'"), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

TEST(BenchOptions, TileNamesEveryBuiltShapeAndNothingElse) {
  ASSERT_FALSE(tile_shapes().empty());
  for (bool eight_bit : {false, true}) {
    for (const TileShape t : tile_shapes(eight_bit)) {
      const TileShape parsed = parse_tile(std::to_string(t.m) + "x" + std::to_string(t.n));
      EXPECT_EQ(parsed.m, t.m);
      EXPECT_EQ(parsed.n, t.n);
    }
  }
  try {
    parse_tile("3x5");
    FAIL() << "accepted 3x5";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--tile 3x5"), std::string::npos) << message;
    const TileShape first = tile_shapes().front();
    EXPECT_NE(message.find(std::to_string(first.m) + "x" + std::to_string(first.n)), std::string::npos) << message;
  }
}

// A config as the heuristic might pick it for a large problem.
gemmkit::KernelConfig chosen() {
  gemmkit::KernelConfig c;
  c.tile_m = 128;
  c.tile_n = 256;
  c.cluster_m = 2;
  c.stages = 4;
  return c;
}

const int kSmem = gemmkit::DeviceLimits{}.smem_per_block;

TEST(BenchOptions, OverridesReplaceOnlyWhatTheyName) {
  EXPECT_EQ(apply_overrides(chosen(), {}, kSmem), chosen());
  const gemmkit::KernelConfig tile = apply_overrides(chosen(), {.tile = "128x176"}, kSmem);
  EXPECT_EQ(tile.tile_n, 176);
  EXPECT_EQ(tile.cluster_m, 2);
  EXPECT_EQ(tile.stages, gemmkit::max_stages(tile, kSmem));
  EXPECT_EQ(apply_overrides(chosen(), {.cluster = 1}, kSmem).cluster_m, 1);
  EXPECT_EQ(apply_overrides(chosen(), {.store_buffers = 4}, kSmem).store_buffers, 4);
}

// A forced tile takes the store buffers the heuristic would give it, not the replaced tile's.
TEST(BenchOptions, AForcedTileGetsItsOwnStoreBuffers) {
  const gemmkit::KernelConfig three = apply_overrides(chosen(), {.tile = "192x176"}, kSmem);
  EXPECT_EQ(three.store_buffers, 1);
  EXPECT_EQ(three.stages, 4);
  const gemmkit::KernelConfig back = apply_overrides(three, {.tile = "128x176"}, kSmem);
  EXPECT_EQ(back.store_buffers, 2);
  EXPECT_EQ(back.stages, gemmkit::max_stages(back, kSmem));
  EXPECT_EQ(apply_overrides(three, {.tile = "128x176", .store_buffers = 1}, kSmem).store_buffers, 1);
}

// 192x128 is built for 8-bit inputs only: forced on 16-bit ones it is refused, naming the type.
TEST(BenchOptions, ATileBuiltForOtherInputsIsRefused) {
  gemmkit::KernelConfig fp8 = chosen();
  fp8.in = fp8.in_b = gemmkit::DType::e4m3;
  fp8.tile_n = 176;
  fp8.cluster_m = 1;
  const gemmkit::KernelConfig three = apply_overrides(fp8, {.tile = "192x128"}, kSmem);
  EXPECT_EQ(three.tile_m, 192);
  EXPECT_EQ(three.store_buffers, 1);
  try {
    apply_overrides(chosen(), {.tile = "192x128"}, kSmem);
    ADD_FAILURE() << "forced an 8-bit tile on bf16 inputs";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("192x128 is not a tile shape for bf16"), std::string::npos) << e.what();
  }
}

TEST(BenchOptions, ASplitCountStaysOnlyOnTilesBuiltForSplitK) {
  gemmkit::KernelConfig split = chosen();
  split.tile_m = 64;
  split.tile_n = 128;
  split.splits = 3;
  EXPECT_EQ(apply_overrides(split, {.cluster = 1}, kSmem).splits, 3);
  EXPECT_EQ(apply_overrides(split, {.tile = "64x256"}, kSmem).splits, 1);
  EXPECT_EQ(apply_overrides(split, {.splits = 5}, kSmem).splits, 5);
  EXPECT_EQ(apply_overrides(split, {.splits = 1}, kSmem).splits, 1);
  try {
    apply_overrides(split, {.tile = "64x256", .splits = 2}, kSmem);
    ADD_FAILURE() << "forced split-K on a tile too wide for it";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("--splits 2 needs a tile at most 128 wide"), std::string::npos) << e.what();
  }
}

// Realigned operands run unclustered on tiles that realign: a forced cluster or wider tile stages them.
TEST(BenchOptions, ForcedClustersAndTilesStageRealignedOperands) {
  gemmkit::KernelConfig realigned = gemmkit::with_tile(chosen(), {64, 128});
  realigned.cluster_m = 1;
  realigned.realign_a = realigned.realign_b = true;
  const gemmkit::KernelConfig same = apply_overrides(realigned, {.cluster = 1}, kSmem);
  EXPECT_TRUE(same.realign_a && same.realign_b && !same.stage_a && !same.stage_b) << same.name();
  for (const ConfigOverrides& o : {ConfigOverrides{.cluster = 2}, ConfigOverrides{.tile = "64x256"}}) {
    const gemmkit::KernelConfig staged = apply_overrides(realigned, o, kSmem);
    EXPECT_TRUE(staged.stage_a && staged.stage_b && !staged.realign_a && !staged.realign_b) << staged.name();
    EXPECT_TRUE(gemmkit::fits(staged, {})) << staged.name();
  }
}

TEST(BenchOptions, OverridesThatDoNotFitAreRejected) {
  try {
    apply_overrides(chosen(), {.store_buffers = 8}, 100 * 1024);
    ADD_FAILURE() << "accepted a config larger than the shared memory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("--store-buffers"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

TEST(BenchOptions, CompileSummaryCountsKernelsAndConfigurations) {
  EXPECT_EQ(compile_summary(2, 3, 5), "compiled 2 kernels for 5 configurations (1 was cached)");
  EXPECT_EQ(compile_summary(1, 1, 1), "compiled 1 kernel for 1 configuration (0 were cached)");
  EXPECT_EQ(compile_summary(0, 4, 4), "compiled 0 kernels for 4 configurations (4 were cached)");
}

}  // namespace

namespace {

class JsonPath : public gemmkit::testing::TempDirTest {
 protected:
  JsonPath() : TempDirTest("gemmkit-json-path") {}

  // The message check_writable throws for `path`; fails the test where it passes.
  std::string refused(const std::filesystem::path& path) {
    try {
      check_writable(path.string(), "bench");
      ADD_FAILURE() << "accepted " << path;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::io_error);
      return e.what();
    }
    return "";
  }
};

TEST_F(JsonPath, CheckingLeavesTheFileAsItWas) {
  const std::filesystem::path old = dir_ / "old.json", fresh = dir_ / "new.json";
  gemmkit::testing::write_file(old, "{\"earlier\": 1}\n");
  check_writable(old.string(), "bench");
  check_writable(fresh.string(), "tune");
  EXPECT_EQ(gemmkit::testing::read_file(old), "{\"earlier\": 1}\n");
  EXPECT_FALSE(std::filesystem::exists(fresh));
  write_json(old.string(), {{"later", 2}}, "bench");
  EXPECT_EQ(gemmkit::testing::read_file(old), "{\n  \"later\": 2\n}\n");
}

TEST_F(JsonPath, PathsThatCannotBeWrittenAreNamedWithWhy) {
  EXPECT_EQ(refused(dir_ / "no-such-dir" / "x.json"),
            "bench: cannot write --json " + (dir_ / "no-such-dir" / "x.json").string() + " (No such file or directory)");
  EXPECT_EQ(refused(dir_), "bench: cannot write --json " + dir_.string() + " (Is a directory)");
  try {
    write_json((dir_ / "no-such-dir" / "x.json").string(), {}, "tune");
    ADD_FAILURE() << "wrote into a directory that does not exist";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io_error);
    EXPECT_EQ(std::string(e.what()).rfind("tune: cannot write --json ", 0), 0u) << e.what();
  }
}

}  // namespace
