#include "bench/suite_lookup.h"

#include <gtest/gtest.h>

#include "gemmkit/error.h"
#include "test_support.h"

using namespace gemmkit::tools;
namespace fs = std::filesystem;

namespace {

class SuiteLookup : public gemmkit::testing::TempDirTest {
 protected:
  SuiteLookup() : TempDirTest("gemmkit-suite-lookup") {}

  void SetUp() override {
    TempDirTest::SetUp();
    first_ = dir_ / "first";
    second_ = dir_ / "second";
    fs::create_directories(first_);
    fs::create_directories(second_);
    gemmkit::testing::write_file(first_ / "dense.txt", "64 64 64\n");
    gemmkit::testing::write_file(second_ / "dense.txt", "128 128 128\n");
    gemmkit::testing::write_file(second_ / "fp8.txt", "64 64 64 NT e4m3\n");
    gemmkit::testing::write_file(second_ / "notes.md", "not a suite\n");
  }

  // The message find_named_file throws for `name`; fails the test where it finds a file.
  std::string not_found(const std::string& name) {
    try {
      const fs::path p = find_named_file(name, "suite", {first_, second_});
      ADD_FAILURE() << name << " resolved to " << p;
    } catch (const gemmkit::Error& e) {
      EXPECT_EQ(e.code(), gemmkit::ErrorCode::io_error);
      return e.what();
    }
    return "";
  }

  fs::path first_, second_;
};

TEST_F(SuiteLookup, ByNameWithOrWithoutTxtInTheFirstDirectoryHoldingIt) {
  EXPECT_EQ(find_named_file("dense", "suite", {first_, second_}), first_ / "dense.txt");
  EXPECT_EQ(find_named_file("dense.txt", "suite", {first_, second_}), first_ / "dense.txt");
  EXPECT_EQ(find_named_file("dense", "suite", {second_, first_}), second_ / "dense.txt");
  EXPECT_EQ(find_named_file("fp8", "suite", {first_, second_}), second_ / "fp8.txt");
}

TEST_F(SuiteLookup, AnExistingPathWinsAsGiven) {
  const fs::path own = dir_ / "dense.txt";
  gemmkit::testing::write_file(own, "1 2 3\n");
  EXPECT_EQ(find_named_file(own.string(), "suite", {first_, second_}), own);
  EXPECT_EQ(find_named_file((second_ / "fp8.txt").string(), "suite", {first_}), second_ / "fp8.txt");
}

TEST_F(SuiteLookup, NotFoundListsTheNamesAvailable) {
  const std::string message = not_found("nosuch");
  EXPECT_EQ(message, "no suite 'nosuch': not a file, nor a suite name (looked in " + first_.string() + ", " +
                         second_.string() + "); suites: dense, fp8");
  EXPECT_EQ(not_found((dir_ / "nosuch.txt").string()),
            "no suite '" + (dir_ / "nosuch.txt").string() + "': no such file; suites: dense, fp8");
  // A directory is not a suite.
  EXPECT_NE(not_found(first_.string()).find("no such file"), std::string::npos);
}

TEST_F(SuiteLookup, NamesAreTheTxtStemsSortedOnce) {
  EXPECT_EQ(available_names({first_, second_, dir_ / "missing"}), (std::vector<std::string>{"dense", "fp8"}));
}

TEST_F(SuiteLookup, AnEmptySuiteIsReportedByName) {
  const fs::path empty = dir_ / "empty.txt";
  gemmkit::testing::write_file(empty, "# only a comment\n\n   # another\n");
  try {
    load_named_suite(empty.string());
    FAIL() << "an empty suite loaded";
  } catch (const EmptySuite& e) {
    EXPECT_EQ(std::string(e.what()), empty.string() + " holds no problems (only comments and blank lines): nothing to run");
  }
  EXPECT_EQ(load_named_suite((first_ / "dense.txt").string()).size(), 1u);
}

TEST_F(SuiteLookup, GroupedLinesLoadForBenchOnly) {
  const fs::path moe = dir_ / "moe.txt";
  gemmkit::testing::write_file(moe, "grouped fwd 8 64 64 64 bf16 balanced\n");
  const Suite suite = load_named_bench_suite(moe.string());
  EXPECT_EQ(suite.name, moe.string());
  EXPECT_TRUE(suite.dense.empty());
  EXPECT_EQ(suite.grouped.size(), 1u);
  try {
    load_named_suite(moe.string());
    FAIL() << "a grouped line loaded as a dense one";
  } catch (const gemmkit::Error& e) {
    const std::string expected = moe.string() + ":1: a grouped line, which only gemmkit bench and python -m gemmkit.bench run";
    EXPECT_EQ(std::string(e.what()).rfind(expected, 0), 0u) << e.what();
  }
  // The shipped MoE suites are found by name, as every shipped suite is.
  EXPECT_EQ(find_named_file("moe", "suite", search_dirs("suites")).filename(), "moe.txt");
  EXPECT_EQ(find_named_file("moe-decode", "suite", search_dirs("suites")).filename(), "moe-decode.txt");
}

}  // namespace
