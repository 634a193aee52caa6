// The source tree's layers include one way: api -> dispatch -> codegen and runtime -> core and
// kernels. Every #include "..." line of the lower layers is read from the source tree and must
// not name a header of a layer above it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// The quoted #include targets of every file under `dir` (of the source tree), as "file: target".
std::vector<std::string> quoted_includes(const std::string& dir) {
  std::vector<std::string> found;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(fs::path(GEMMKIT_SOURCE_DIR) / dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      const size_t start = line.find_first_not_of(" \t");
      if (start == std::string::npos || line.compare(start, 10, "#include \"") != 0) continue;
      const size_t end = line.find('"', start + 10);
      found.push_back(entry.path().lexically_relative(GEMMKIT_SOURCE_DIR).string() + ": " +
                      line.substr(start + 10, end - start - 10));
    }
  }
  return found;
}

// Fails for every include under `dir` of a header under one of `above`.
void expect_none_above(const std::string& dir, const std::vector<std::string>& above) {
  const std::vector<std::string> includes = quoted_includes(dir);
  EXPECT_FALSE(includes.empty()) << dir;
  for (const std::string& include : includes) {
    const std::string target = include.substr(include.find(": ") + 2);
    for (const std::string& layer : above) {
      EXPECT_NE(target.rfind(layer, 0), 0u) << include << " reaches up into " << layer;
    }
  }
}

TEST(Layering, CodegenAndRuntimeIncludeNeitherDispatchNorApi) {
  for (const char* dir : {"src/codegen", "src/runtime"}) expect_none_above(dir, {"dispatch/", "api/", "tuning/"});
}

TEST(Layering, CoreIncludesOnlyCoreKernelsAndThePublicHeaders) {
  expect_none_above("src/core", {"dispatch/", "api/", "tuning/", "codegen/", "runtime/"});
}

TEST(Layering, KernelsIncludeNoLibraryHeader) {
  expect_none_above("kernels", {"dispatch/", "api/", "tuning/", "codegen/", "runtime/", "core/", "epilogue/"});
}

// The epilogue IR is read by codegen (and later the plans and the API); it reads nothing of theirs.
TEST(Layering, EpilogueIrIncludesOnlyThePublicHeaders) {
  expect_none_above("src/epilogue", {"dispatch/", "api/", "tuning/", "codegen/", "runtime/", "core/"});
}

}  // namespace
