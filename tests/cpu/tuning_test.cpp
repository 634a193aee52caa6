// Tuning without a GPU: the ranked candidates, what the autotuner times, problem classes and
// M buckets, the tuned-fields text, winners stored and found through a database, and the mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>

#include "config_tests.h"
#include "gemmkit/error.h"
#include "gemmkit/tuning.h"
#include "test_support.h"
#include "tuning/autotuner.h"
#include "tuning/tuned_configs.h"

namespace gemmkit {
namespace {

using testing::TempDirTest;
using testing::write_file;

constexpr int kSms = 132;
const DeviceLimits kLimits{kSms, DeviceLimits{}.smem_per_block};

using config_tests::address;  // fake device addresses 4 GiB apart

// NT bf16 -> bf16, aligned: A M x K row-major, B stored N x K, D M x N row-major.
Problem nt_problem(int64_t m, int64_t n, int64_t k) {
  Problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = {address(0), DType::bf16, 0, k, 1};
  p.b = {address(1), DType::bf16, 0, 1, k};
  p.d = {address(2), DType::bf16, 0, n, 1};
  return p;
}

runtime::DeviceInfo device(const std::string& name) {
  runtime::DeviceInfo info;
  info.name = name;
  info.sm_count = kSms;
  info.cc_major = 9;
  info.smem_per_block_optin = kLimits.smem_per_block;
  return info;
}

// ---- candidates

TEST(TuningCandidates, RankedPickIsTheHeuristicsAndEveryCandidateFits) {
  for (Problem p : {nt_problem(16, 2112, 7168), nt_problem(128, 7168, 16384), nt_problem(8192, 8192, 8192)}) {
    const std::vector<Candidate> ranked = rank_candidates(p, kLimits);
    // M = 16 leaves only half-height tiles (taller ones would multiply rows below M), split or not.
    ASSERT_GT(ranked.size(), p.m <= 64 ? 3u : 10u);
    if (p.m <= 64) {
      for (const Candidate& c : ranked) EXPECT_EQ(c.config.tile_m, 64) << c.config.name();
    }
    EXPECT_EQ(ranked.front().config, choose_config(p, kLimits));
    for (size_t i = 0; i < ranked.size(); ++i) {
      EXPECT_TRUE(fits(ranked[i].config, kLimits)) << ranked[i].config.name();
      if (i >= 2) EXPECT_LE(ranked[i - 1].cost, ranked[i].cost) << "after the pick, cheapest first";
    }
  }
  EXPECT_TRUE(rank_candidates(nt_problem(64, 64, 0), kLimits).empty()) << "K = 0 runs the fallback kernel";
  EXPECT_TRUE(rank_candidates(nt_problem(1, 2112, 7168), kLimits).empty()) << "M = 1 runs the GEMV kernel";
}

TEST(TuningCandidates, FitsRejectsWhatTheKernelIsNotBuiltFor) {
  const KernelConfig good = choose_config(nt_problem(4096, 4096, 4096), kLimits);
  ASSERT_TRUE(fits(good, kLimits));
  auto changed = [&](auto change) {
    KernelConfig c = good;
    change(c);
    return fits(c, kLimits);
  };
  EXPECT_FALSE(changed([](KernelConfig& c) { c.tile_n = 120; })) << "no such tile";
  EXPECT_FALSE(changed([](KernelConfig& c) { c.cluster_m = 4; }));
  EXPECT_FALSE(changed([](KernelConfig& c) { c.group_m = 1; })) << "a raster group narrower than the cluster";
  EXPECT_FALSE(changed([](KernelConfig& c) { c.stages = 1; }));
  EXPECT_FALSE(changed([](KernelConfig& c) { c.stages = 8; })) << "8 stages of 128x256 exceed shared memory";
  EXPECT_FALSE(changed([](KernelConfig& c) { c.splits = 2; })) << "split-K is built for tiles up to 128 wide";
  EXPECT_FALSE(changed([](KernelConfig& c) { c.splits = kMaxSplits + 1; }));
  EXPECT_FALSE(changed([](KernelConfig& c) { c.store_buffers = 0; }));
  EXPECT_TRUE(changed([](KernelConfig& c) { c.tile_n = 128, c.splits = 3; }));
}

TEST(TuningCandidates, PickFirstEveryTileShapeAndRasterVariantsWhereTilesAreMany) {
  const Problem big = nt_problem(8192, 8192, 8192);
  const std::vector<KernelConfig> candidates = tuning::tuning_candidates(big, kLimits);
  EXPECT_EQ(candidates.front(), choose_config(big, kLimits));
  EXPECT_EQ(std::set<KernelConfig>(candidates.begin(), candidates.end()).size(), candidates.size()) << "distinct";
  for (TileShape tile : tile_shapes()) {
    // 64 wide: offered only where wider tiles leave most SMs idle; narrow: only to problems at
    // most kNarrowMaxN wide.
    if (tile.n == 64 || is_narrow(tile)) continue;
    EXPECT_TRUE(std::any_of(candidates.begin(), candidates.end(),
                            [&](const KernelConfig& c) { return c.tile_m == tile.m && c.tile_n == tile.n; }))
        << tile.m << "x" << tile.n;
  }
  std::set<int> groups;
  for (const KernelConfig& c : candidates) groups.insert(c.group_m);
  EXPECT_EQ(groups, (std::set<int>{4, 8, 16}));

  // One wave of tiles in one row or one column: every raster order is the same, so none is tried.
  for (const KernelConfig& c : tuning::tuning_candidates(nt_problem(16, 2112, 7168), kLimits)) {
    EXPECT_EQ(c.group_m, KernelConfig{}.group_m) << c.name();
  }
}

// In one wave the model takes short raster groups at deep K and L2-sized ones at shallow K
// (short_groups_pay); the tuner times the other.
TEST(TuningCandidates, OneWaveOfSeveralTileRowsAndColumnsTriesTheOtherRasterGroups) {
  for (int64_t k : {2048, 512}) {
    const Problem p = nt_problem(2048, 512, k);
    const KernelConfig pick = choose_config(p, kLimits);
    ASSERT_LE((p.m + pick.tile_m - 1) / pick.tile_m * ((p.n + pick.tile_n - 1) / pick.tile_n), kSms) << "one wave";
    const std::vector<KernelConfig> candidates = tuning::tuning_candidates(p, kLimits);
    KernelConfig other = pick;
    other.group_m = pick.group_m == kOneWaveGroupRows ? raster_group_rows(p, pick.tile_m, kLimits) : kOneWaveGroupRows;
    EXPECT_NE(other.group_m, pick.group_m) << pick.name();
    EXPECT_NE(std::find(candidates.begin(), candidates.end(), other), candidates.end()) << pick.name();
  }
}

// ---- problem classes

TEST(TuningKeys, MBucketsArePowersOfTwo) {
  const std::vector<std::pair<int64_t, int64_t>> cases = {{1, 1}, {2, 2}, {3, 4}, {16, 16}, {17, 32},
                                                          {64, 64}, {65, 128}, {4096, 4096}, {4097, 8192}};
  for (auto [m, bucket] : cases) EXPECT_EQ(tuning::m_bucket(m), bucket) << "M = " << m;
}

TEST(TuningKeys, ClassHoldsLayoutTypesNKBatchAndTheBucketOfM) {
  const std::string key = tuning::problem_key(nt_problem(50, 7168, 2048));
  EXPECT_EQ(key, "KK bf16>bf16 c- b00 tma n7168 k2048 batch1 m64");
  EXPECT_EQ(tuning::problem_key(nt_problem(33, 7168, 2048)), key) << "same bucket";
  EXPECT_NE(tuning::problem_key(nt_problem(65, 7168, 2048)), key);
  EXPECT_NE(tuning::problem_key(nt_problem(50, 7176, 2048)), key);
  EXPECT_NE(tuning::problem_key(nt_problem(50, 7168, 2056)), key);

  Problem other = nt_problem(50, 7168, 2048);
  other.d.dtype = DType::f32;
  EXPECT_NE(tuning::problem_key(other), key);
  other = nt_problem(50, 7168, 2048);
  other.b = {address(1), DType::bf16, 0, 7168, 1};  // NN: B is N-major
  EXPECT_EQ(tuning::problem_key(other), "KN bf16>bf16 c- b00 tma n7168 k2048 batch1 m64");
  other = nt_problem(50, 7168, 2048);
  other.c = other.d;
  other.beta = 1.0f;
  EXPECT_NE(tuning::problem_key(other), key) << "C changes the epilogue";
  other = nt_problem(50, 7168, 2048);
  other.d.row_stride = 7169;  // TMA cannot store it
  EXPECT_NE(tuning::problem_key(other), key);
}

// Narrow tiles too, which store directly where the problem would allow TMA stores (4096 x 8).
TEST(TuningKeys, TunedFieldsRoundTripOntoTheProblemsFields) {
  for (const Problem& p : {nt_problem(128, 7168, 16384), nt_problem(4096, 8, 4096), nt_problem(1280, 16, 8192)}) {
    const KernelConfig base = problem_config(p);
    for (const KernelConfig& c : tuning::tuning_candidates(p, kLimits)) {
      const std::string text = tuning::tuned_fields(c);
      const std::optional<KernelConfig> back = tuning::with_tuned_fields(base, text);
      ASSERT_TRUE(back.has_value()) << text;
      EXPECT_EQ(*back, c) << text;
    }
  }
  EXPECT_EQ(tuning::tuned_fields(choose_config(nt_problem(8192, 8192, 8192), kLimits)), "128x256 s4 g8 c2 k1 b2");
}

TEST(TuningKeys, MalformedTunedFieldsAreRejected) {
  const KernelConfig base = problem_config(nt_problem(64, 64, 64));
  for (const char* text : {"", "128x256", "128x256 s4 g8 c2 k1", "128x256 s4 g8 c2 k1 b2 extra", "128y256 s4 g8 c2 k1 b2",
                           "128x256 s4 g8 c2 q1 b2", "tma 128x256 s4 c2 KK", "128x256 s4 g8 c2 k1 bx"}) {
    EXPECT_FALSE(tuning::with_tuned_fields(base, text).has_value()) << '"' << text << '"';
  }
}

// ---- winners in a database

class TunedConfigTest : public TempDirTest {
 protected:
  TunedConfigTest() : TempDirTest("gemmkit-tuned") {}
};

TEST_F(TunedConfigTest, WinnerIsFoundForItsBucketDeviceOnly) {
  TuningDatabase db(dir_ / "tuning.db");
  const runtime::DeviceInfo h100 = device("NVIDIA H100 80GB HBM3");
  const Problem p = nt_problem(64, 7168, 2048);
  EXPECT_FALSE(tuning::tuned_config(p, h100, db).has_value());

  KernelConfig winner = choose_config(p, kLimits);
  winner.tile_n = 96 + 32;  // some config other than the pick
  winner.splits = 3;
  winner.group_m = 16;
  ASSERT_TRUE(fits(winner, kLimits));
  const uint64_t before = tuning::generation();
  ASSERT_TRUE(tuning::store_winner(p, h100, winner, 12.5, db));
  EXPECT_NE(tuning::generation(), before) << "plan caches must learn of the new winner";

  for (int64_t m : {33, 50, 64}) {
    const std::optional<KernelConfig> found = tuning::tuned_config(nt_problem(m, 7168, 2048), h100, db);
    ASSERT_TRUE(found.has_value()) << "M = " << m;
    EXPECT_EQ(*found, winner);
  }
  EXPECT_FALSE(tuning::tuned_config(nt_problem(65, 7168, 2048), h100, db).has_value()) << "another bucket";
  EXPECT_FALSE(tuning::tuned_config(p, device("NVIDIA H200"), db).has_value()) << "another device";
  EXPECT_TRUE(tuning::tuned_config(p, h100, TuningDatabase(dir_ / "tuning.db")).has_value()) << "persisted";
}

TEST_F(TunedConfigTest, EntriesThatDoNotParseOrFitAreIgnored) {
  TuningDatabase db(dir_ / "tuning.db");
  const runtime::DeviceInfo h100 = device("NVIDIA H100 80GB HBM3");
  const Problem p = nt_problem(64, 7168, 2048);
  const std::string scope = tuning::scope(h100), key = tuning::problem_key(p);
  ASSERT_TRUE(db.put(scope, key, {"not a config", 1.0}));
  EXPECT_FALSE(tuning::tuned_config(p, h100, db).has_value());
  ASSERT_TRUE(db.put(scope, key, {"128x256 s8 g8 c1 k1 b2", 1.0}));  // 8 stages do not fit
  EXPECT_FALSE(tuning::tuned_config(p, h100, db).has_value());
  ASSERT_TRUE(db.put(scope, key, {"128x256 s4 g8 c1 k1 b2", 1.0}));
  EXPECT_TRUE(tuning::tuned_config(p, h100, db).has_value());

  Problem staged = p;
  staged.a.data = address(0) + 2;  // unaligned: staged, then run by the same kernel as p
  EXPECT_EQ(tuning::problem_key(staged), key);
  EXPECT_TRUE(tuning::tuned_config(staged, h100, db).has_value());
  Problem no_k = p;
  no_k.k = 0;  // only the fallback kernel runs it
  ASSERT_TRUE(db.put(scope, tuning::problem_key(no_k), {"128x256 s4 g8 c1 k1 b2", 1.0}));
  EXPECT_FALSE(tuning::tuned_config(no_k, h100, db).has_value());
}

TEST_F(TunedConfigTest, OnlineWinnerIsKeptWhereTheDatabaseCannotBeWritten) {
  write_file(dir_ / "file", "a regular file");
  TuningDatabase db(dir_ / "file" / "tuning.db");  // its parent is a regular file
  const runtime::DeviceInfo h100 = device("NVIDIA H100 80GB HBM3");
  KernelConfig winner = choose_config(nt_problem(64, 7168, 2048), kLimits);
  winner.splits = 3;
  ASSERT_TRUE(fits(winner, kLimits));
  int tunings = 0;
  auto tuner = [&](const Problem&) {
    ++tunings;
    tuning::TuneResult result;
    result.timed = {{winner, 10.0}};
    result.first_pick = result.timed.front();
    return result;
  };
  ::testing::internal::CaptureStderr();
  for (int64_t m : {64, 50, 64, 33}) {  // one class: M's bucket is 64
    const uint64_t generation = tuning::generation();
    const std::optional<KernelConfig> config = tuning::tuned_online(nt_problem(m, 7168, 2048), h100, db, tuner);
    ASSERT_TRUE(config.has_value());
    EXPECT_EQ(*config, winner);
    if (tunings == 1 && m != 64) EXPECT_EQ(tuning::generation(), generation) << "nothing new to drop plans for";
  }
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(tunings, 1) << "a winner that could not be written must not be tuned again";
  EXPECT_EQ(testing::occurrences(said, "is not writable"), 1u) << said;
  ASSERT_TRUE(tuning::tuned_online(nt_problem(65, 7168, 2048), h100, db, tuner).has_value());
  EXPECT_EQ(tunings, 2) << "another bucket is another class";
}

TEST_F(TunedConfigTest, FailedOnlineTuningGivesNothingAndSaysWhy) {
  TuningDatabase db(dir_ / "tuning.db");
  auto tuner = [](const Problem&) -> tuning::TuneResult {
    throw Error(ErrorCode::cuda_error, "scratch buffers do not fit");
  };
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(tuning::tuned_online(nt_problem(64, 7168, 2048), device("H100"), db, tuner).has_value());
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("scratch buffers do not fit"), std::string::npos) << said;
  EXPECT_EQ(db.size(), 0u);
}

TEST(TuningModeSetting, IsSeenAndDropsPlans) {
  const TuningMode original = tuning_mode();
  for (TuningMode mode : {TuningMode::off, TuningMode::online, TuningMode::database}) {
    const uint64_t before = tuning::generation();
    set_tuning_mode(mode);
    EXPECT_EQ(tuning_mode(), mode);
    EXPECT_NE(tuning::generation(), before);
  }
  set_tuning_mode(original);
}

}  // namespace
}  // namespace gemmkit
