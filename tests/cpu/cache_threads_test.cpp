// The caches that need no GPU, hammered by many threads at once: one tuning database file
// shared by two objects, and the process-wide kernel disk cache filled by racing precompiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <latch>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../thread_failures.h"
#include "codegen/kernel_source.h"
#include "runtime/kernel_cache.h"
#include "test_support.h"
#include "tuning/tuning_db.h"

namespace gemmkit {
namespace {

namespace fs = std::filesystem;
using testing::EnvGuard;
using testing::read_file;

using testing::Failures;

class CacheThreadsTest : public testing::TempDirTest {
 protected:
  CacheThreadsTest() : TempDirTest("gemmkit-cache-threads-test") {}
};

const std::string kCacheScope = "NVIDIA H100 80GB HBM3|sm_90|0.1.0";

// Writer threads put rounds of their own keys through one of two objects on one file, and read
// each back through both; reader threads reload both objects all the while. Every value seen
// must be one that was put (never torn or mixed), no key's round may go back, and no object's
// size may shrink.
TEST_F(CacheThreadsTest, TuningDatabaseThroughTwoObjects) {
  constexpr int kWriters = 6, kReaders = 2, kKeys = 20, kRounds = 8;
  const fs::path file = dir_ / "tuning.db";
  auto key = [](int w, int k) { return "writer " + std::to_string(w) + " key " + std::to_string(k); };
  auto config = [](int w, int k, int round) {
    return "config " + std::to_string(w) + "/" + std::to_string(k) + "/" + std::to_string(round);
  };
  // The round travels in the time too (exactly representable), so a reader can tell which
  // put it sees and check the config against it.
  auto entry = [&](int w, int k, int round) { return TuningEntry{config(w, k, round), round + 0.5}; };

  TuningDatabase first(file), second(file);
  TuningDatabase* objects[] = {&first, &second};
  Failures failures;
  std::atomic<bool> writing{true};
  std::latch start(kWriters + kReaders);

  std::vector<std::thread> writers, readers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      TuningDatabase& mine = *objects[w % 2];
      TuningDatabase& other = *objects[1 - w % 2];
      start.arrive_and_wait();
      for (int round = 0; round < kRounds; ++round) {
        for (int k = 0; k < kKeys; ++k) {
          const std::string what = key(w, k) + " round " + std::to_string(round) + ": ";
          const TuningEntry e = entry(w, k, round);
          if (!mine.put(kCacheScope, key(w, k), e)) failures.add(what + "put failed");
          const auto own = mine.find(kCacheScope, key(w, k));
          if (!own || own->config != e.config) failures.add(what + "not found through its own object");
          other.reload();
          const auto seen = other.find(kCacheScope, key(w, k));
          if (!seen || seen->config != e.config) failures.add(what + "not found through the other object after reload");
        }
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&] {
      std::map<std::pair<int, std::string>, int> last_round;  // by (object, key)
      size_t last_size[2] = {0, 0};
      start.arrive_and_wait();
      while (writing.load()) {
        for (int o = 0; o < 2; ++o) {
          objects[o]->reload();
          for (int w = 0; w < kWriters; ++w) {
            for (int k = 0; k < kKeys; ++k) {
              const auto e = objects[o]->find(kCacheScope, key(w, k));
              if (!e) continue;
              const int round = static_cast<int>(e->microseconds);
              const std::string what = "object " + std::to_string(o) + ", " + key(w, k) + ": ";
              if (round < 0 || round >= kRounds || e->config != config(w, k, round)) {
                failures.add(what + "read " + e->config + " @ " + std::to_string(e->microseconds));
                continue;
              }
              int& last = last_round[{o, key(w, k)}];
              if (round < last) failures.add(what + "round " + std::to_string(round) + " after " + std::to_string(last));
              last = std::max(last, round);
            }
          }
          const size_t size = objects[o]->size();
          if (size < last_size[o]) failures.add("object " + std::to_string(o) + " shrank to " + std::to_string(size));
          last_size[o] = std::max(last_size[o], size);
        }
      }
    });
  }
  for (std::thread& t : writers) t.join();
  writing = false;
  for (std::thread& t : readers) t.join();
  ASSERT_EQ(failures.count(), 0u) << failures.all();

  const std::string text = read_file(file);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), kWriters * kKeys * kRounds);  // no append lost
  TuningDatabase fresh(file);
  for (TuningDatabase* db : {&first, &second, &fresh}) {
    db->reload();
    EXPECT_EQ(db->size(), size_t{kWriters * kKeys});
    for (int w = 0; w < kWriters; ++w) {
      for (int k = 0; k < kKeys; ++k) {
        const auto e = db->find(kCacheScope, key(w, k));
        ASSERT_TRUE(e.has_value()) << key(w, k);
        EXPECT_EQ(e->config, config(w, k, kRounds - 1));
        EXPECT_EQ(e->microseconds, kRounds - 1 + 0.5);
      }
    }
  }
}

// Threads precompile the same few kernels at once, again and again, into the process-wide
// kernel cache. Each kernel is compiled at least once, every call after a thread's own first
// one for a kernel is a hit (no entry is ever lost or damaged), and each entry holds a cubin.
TEST_F(CacheThreadsTest, RacingPrecompilesFillTheKernelCache) {
  const fs::path cache_dir = dir_ / "kernels";
  EnvGuard guard({"GEMMKIT_CACHE_DIR"});
  EnvGuard::set("GEMMKIT_CACHE_DIR", cache_dir.string());
  // The cache picks its directory once per process, on first use.
  ASSERT_EQ(runtime::kernel_disk_cache().directory(), cache_dir)
      << "the kernel cache was opened before this test set its directory; run the test in a "
         "process of its own (as ctest does)";

  struct Kernel {
    std::string source, entry_point;
  };
  KernelConfig fallback;
  fallback.kind = KernelKind::fallback;
  const std::vector<Kernel> kernels = {
      {codegen::gemm_source(fallback), codegen::gemm_kernel_name(fallback)},
      {codegen::reference_source({}), codegen::kReferenceKernel},
      {codegen::reference_source({.a = DType::f16, .b = DType::f16, .has_c = true, .c = DType::f16}), codegen::kReferenceKernel},
  };
  constexpr int kThreads = 8, kPasses = 20;

  Failures failures;
  std::vector<std::atomic<int>> compiles(kernels.size());
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int pass = 0; pass < kPasses; ++pass) {
        for (size_t i = 0; i < kernels.size(); ++i) {
          const size_t k = (i + t) % kernels.size();  // threads start on different kernels
          try {
            const bool compiled = runtime::precompile_kernel(kernels[k].source, kernels[k].entry_point);
            if (compiled) ++compiles[k];
            if (compiled && pass > 0) {
              failures.add("thread " + std::to_string(t) + " compiled " + kernels[k].entry_point + " again in pass " +
                           std::to_string(pass));
            }
          } catch (const std::exception& e) {
            failures.add("thread " + std::to_string(t) + ", " + kernels[k].entry_point + ": " + e.what());
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(failures.count(), 0u) << failures.all();

  for (size_t k = 0; k < kernels.size(); ++k) {
    SCOPED_TRACE(kernels[k].entry_point);
    EXPECT_GE(compiles[k].load(), 1);
    const auto cubin = runtime::kernel_disk_cache().load(runtime::kernel_cache_key(kernels[k].source, kernels[k].entry_point));
    ASSERT_TRUE(cubin.has_value());
    EXPECT_EQ(cubin->substr(0, 4), "\x7f" "ELF");
    EXPECT_FALSE(runtime::precompile_kernel(kernels[k].source, kernels[k].entry_point));
  }
  EXPECT_EQ(runtime::kernel_disk_cache().usage().entries, kernels.size());
  size_t files = 0;
  for (const auto& f : fs::directory_iterator(cache_dir)) files += f.is_regular_file();
  EXPECT_EQ(files, kernels.size());  // no temp file left behind
}

}  // namespace
}  // namespace gemmkit
