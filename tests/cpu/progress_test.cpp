#include "bench/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

using namespace gemmkit::tools;

namespace {

// What `run` writes through a Progress of `total` items onto a temporary file.
template <typename Run>
std::string written(size_t total, bool bar, Run run) {
  std::FILE* file = std::tmpfile();
  {
    Progress progress(total, file, bar);
    run(progress);
  }
  std::string text(size_t(std::ftell(file)), '\0');
  std::rewind(file);
  text.resize(std::fread(text.data(), 1, text.size(), file));
  std::fclose(file);
  return text;
}

TEST(Progress, PlainOutputIsOneLinePerItem) {
  const std::string text = written(2, false, [](Progress& p) {
    p.begin("64x64x64 NT bf16");
    p.done("first done");
    p.begin("128x128x128 NT bf16");
    p.note("a warning");
    p.done("second done");
  });
  EXPECT_EQ(text, "first done\na warning\nsecond done\n");
}

TEST(Progress, OnATerminalOneLineIsRedrawn) {
  const std::string text = written(4, true, [](Progress& p) {
    p.begin("64x64x64 NT bf16");
    p.done("first done");
    p.begin("128x128x128 NT bf16");
    p.note("a warning");
  });
  EXPECT_EQ(text.find("first done"), std::string::npos) << text;
  EXPECT_NE(text.find("\r\033[K[....................] 1/4 64x64x64 NT bf16  0s"), std::string::npos) << text;
  EXPECT_NE(text.find("\r\033[K[#####...............] 2/4 128x128x128 NT bf16  0s, ~0s left"), std::string::npos) << text;
  EXPECT_NE(text.find("\r\033[Ka warning\n"), std::string::npos) << text;
  // The bar is cleared at the end, so that what follows starts on a clean line.
  EXPECT_EQ(text.substr(text.size() - 4), "\r\033[K");
}

TEST(Progress, CounterAndLine) {
  Progress p(12, stderr, false);
  EXPECT_EQ(p.counter(3), "[#####...............] 3/12");
  EXPECT_EQ(p.counter(12), "[####################] 12/12");
  EXPECT_EQ(progress_line("[..] 1/4", "4096x4096x4096 NT bf16", 0, 4, 5, 200), "[..] 1/4 4096x4096x4096 NT bf16  5s");
  // Time left: the time so far per finished item, times the items left.
  EXPECT_EQ(progress_line("[#.] 3/4", "x", 2, 4, 100, 200), "[#.] 3/4 x  1m40s, ~1m40s left");
  EXPECT_EQ(progress_line("[#.] 3/4", "a long item", 2, 4, 100, 10), "[#.] 3/4 ");
  EXPECT_EQ(format_duration(3725), "1h02m");
}

}  // namespace
