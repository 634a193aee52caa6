#include "runtime/disk_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

namespace gemmkit::runtime {
namespace {

namespace fs = std::filesystem;
using gemmkit::testing::EnvGuard;
using gemmkit::testing::occurrences;
using gemmkit::testing::expect_empty_counts_as_unset;
using gemmkit::testing::read_file;
using gemmkit::testing::run_in_processes;
using gemmkit::testing::Watchdog;
using gemmkit::testing::write_file;

// A key shaped like the real ones: a whole kernel source plus options, tens of KB.
std::string long_key(const std::string& tag) {
  std::string key = "// kernel source\n";
  while (key.size() < 40000) key += "template <int M, int N> __global__ void gemm_kernel() {}\n";
  return key + "-arch=sm_90a -O3 nvrtc-12.4 " + tag;
}

// Bytes with NULs and every other byte value.
std::string binary_payload(size_t size, unsigned seed) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i)
    s[i] = static_cast<char>((i * 131 + seed * 7 + (i >> 9)) & 0xff);
  return s;
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path());
  return out;
}

std::vector<fs::path> entries_in(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& p : files_in(dir)) {
    if (p.extension() == ".cubin") out.push_back(p);
  }
  return out;
}

class DiskCacheTest : public gemmkit::testing::TempDirTest {
 protected:
  DiskCacheTest() : TempDirTest("gemmkit-disk-cache-test") {}

  // The single entry file in `dir` (by default the test directory).
  fs::path only_entry(const fs::path& dir = {}) const {
    const auto entries = entries_in(dir.empty() ? dir_ : dir);
    EXPECT_EQ(entries.size(), 1u);
    return entries.empty() ? fs::path() : entries.front();
  }
};

TEST_F(DiskCacheTest, MissOnEmptyCache) {
  DiskCache cache(dir_ / "not-yet-created");
  EXPECT_EQ(cache.directory(), dir_ / "not-yet-created");
  EXPECT_FALSE(cache.load("anything").has_value());
  EXPECT_FALSE(cache.load(long_key("a")).has_value());
  EXPECT_FALSE(fs::exists(dir_ / "not-yet-created"));  // a load creates nothing
}

TEST_F(DiskCacheTest, StoreThenLoadReturnsExactPayload) {
  DiskCache cache(dir_ / "sub" / "dir");  // store creates missing directories
  const std::string key = long_key("exact");
  const std::string payload = binary_payload(4096, 1);
  ASSERT_NE(payload.find('\0'), std::string::npos);
  ASSERT_TRUE(cache.store(key, payload));
  const auto loaded = cache.load(key);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(*loaded, payload);
  EXPECT_EQ(only_entry(dir_ / "sub" / "dir").stem().string().size(), 32u);  // 128-bit hex name
}

TEST_F(DiskCacheTest, LargeAndEmptyPayloads) {
  DiskCache cache(dir_);
  const std::string big = binary_payload(1 << 20, 2);
  ASSERT_TRUE(cache.store("big", big));
  ASSERT_TRUE(cache.store("empty", ""));
  ASSERT_TRUE(cache.store("", "empty key"));
  const auto loaded_big = cache.load("big");
  ASSERT_TRUE(loaded_big.has_value());
  EXPECT_TRUE(*loaded_big == big);  // not EXPECT_EQ: a failure would print 1 MB
  EXPECT_EQ(cache.load("empty"), std::optional<std::string>(""));
  EXPECT_EQ(cache.load(""), std::optional<std::string>("empty key"));
}

TEST_F(DiskCacheTest, DifferentKeysDoNotCollide) {
  DiskCache cache(dir_);
  // Keys that share a long prefix and differ only near the end, in length, or by a NUL.
  std::vector<std::string> keys;
  for (int i = 0; i < 100; ++i) keys.push_back(long_key(std::to_string(i)));
  keys.push_back("a");
  keys.push_back(std::string("a\0", 2));
  keys.push_back("b");
  keys.push_back("abcdefgh");
  keys.push_back("abcdefgh" + std::string(1, '\0'));
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(cache.store(keys[i], "payload " + std::to_string(i)));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(cache.load(keys[i]), std::optional<std::string>("payload " + std::to_string(i)))
        << "key " << i;
  }
  EXPECT_EQ(entries_in(dir_).size(), keys.size());
  EXPECT_EQ(cache.usage().entries, keys.size());
}

TEST_F(DiskCacheTest, RestoreReplacesPayload) {
  DiskCache cache(dir_);
  const std::string key = long_key("replace");
  ASSERT_TRUE(cache.store(key, "first, a longer payload"));
  ASSERT_TRUE(cache.store(key, "second"));
  EXPECT_EQ(cache.load(key), std::optional<std::string>("second"));
  ASSERT_TRUE(cache.store(key, "third, longer than the second one"));
  EXPECT_EQ(cache.load(key), std::optional<std::string>("third, longer than the second one"));
  EXPECT_EQ(files_in(dir_).size(), 1u);  // one entry, no leftover temp files
}

// Stores `payload` under `key`, applies `damage` to the entry file, and checks that the load
// misses, removes the file, and that the key can then be stored and loaded again.
template <typename Damage>
void expect_damage_is_miss(const fs::path& dir, const std::string& key, const std::string& payload,
                           Damage damage, const std::string& what) {
  SCOPED_TRACE(what);
  DiskCache cache(dir);
  ASSERT_TRUE(cache.store(key, payload));
  const auto entries = entries_in(dir);
  ASSERT_EQ(entries.size(), 1u);
  const fs::path entry = entries.front();
  damage(entry);
  EXPECT_FALSE(cache.load(key).has_value());
  EXPECT_FALSE(fs::exists(entry));
  ASSERT_TRUE(cache.store(key, payload));
  EXPECT_EQ(cache.load(key), std::optional<std::string>(payload));
  fs::remove(entry);
}

TEST_F(DiskCacheTest, TruncatedEntryIsMissAndRemoved) {
  const std::string key = long_key("truncate");
  const std::string payload = binary_payload(1000, 3);
  ASSERT_TRUE(DiskCache(dir_).store(key, payload));
  const uint64_t header = fs::file_size(only_entry()) - payload.size();
  ASSERT_GT(header, 0u);
  fs::remove(only_entry());
  const uint64_t full = header + payload.size();
  for (uint64_t len :
       {uint64_t{0}, uint64_t{1}, header - 1, header, header + 1, header + 500, full - 1}) {
    expect_damage_is_miss(
        dir_, key, payload, [len](const fs::path& p) { fs::resize_file(p, len); },
        "truncated to " + std::to_string(len));
  }
}

TEST_F(DiskCacheTest, FlippedPayloadByteIsMissAndRemoved) {
  const std::string key = long_key("flip-payload");
  const std::string payload = binary_payload(1000, 4);
  for (size_t from_end : {size_t{1}, size_t{500}, size_t{1000}}) {
    expect_damage_is_miss(
        dir_, key, payload,
        [from_end](const fs::path& p) {
          std::string bytes = read_file(p);
          bytes[bytes.size() - from_end] ^= 0x01;
          write_file(p, bytes);
        },
        "payload byte " + std::to_string(from_end) + " from the end");
  }
}

TEST_F(DiskCacheTest, FlippedHeaderByteIsMissAndRemoved) {
  // Every header byte belongs to a checked field (tag, size, checksum, key hash).
  const std::string key = long_key("flip-header");
  const std::string payload = binary_payload(300, 5);
  ASSERT_TRUE(DiskCache(dir_).store(key, payload));
  const uint64_t header = fs::file_size(only_entry()) - payload.size();
  fs::remove(only_entry());
  for (uint64_t i = 0; i < header; ++i) {
    expect_damage_is_miss(
        dir_, key, payload,
        [i](const fs::path& p) {
          std::string bytes = read_file(p);
          bytes[i] ^= 0x10;
          write_file(p, bytes);
        },
        "header byte " + std::to_string(i));
  }
}

TEST_F(DiskCacheTest, AppendedGarbageIsMissAndRemoved) {
  const std::string key = long_key("append");
  const std::string payload = binary_payload(200, 6);
  for (const std::string& garbage :
       {std::string(1, '\0'), std::string("garbage"), binary_payload(1 << 16, 7)}) {
    expect_damage_is_miss(
        dir_, key, payload,
        [&garbage](const fs::path& p) { write_file(p, read_file(p) + garbage); },
        "appended " + std::to_string(garbage.size()) + " bytes");
  }
}

TEST_F(DiskCacheTest, ArbitraryFileContentIsMiss) {
  // Headers claiming huge sizes or all-ones fields must not make load allocate or crash.
  const std::string key = long_key("arbitrary");
  for (const std::string& content : {std::string(32, '\xff'), std::string(64, '\xff'),
                                     std::string(4096, '\0'), std::string("x")}) {
    expect_damage_is_miss(
        dir_, key, "payload", [&content](const fs::path& p) { write_file(p, content); },
        "content of " + std::to_string(content.size()) + " bytes");
  }
}

TEST_F(DiskCacheTest, EntryOfAnotherKeyIsMissAndRemoved) {
  // Simulates a name-hash collision: key B's file holds a valid entry for key A.
  DiskCache cache(dir_);
  const std::string key_a = long_key("A"), key_b = long_key("B");
  ASSERT_TRUE(cache.store(key_b, "payload B"));
  const fs::path entry_b = only_entry();
  fs::remove(entry_b);
  ASSERT_TRUE(cache.store(key_a, "payload A"));
  const fs::path entry_a = only_entry();
  ASSERT_NE(entry_a, entry_b);
  fs::copy_file(entry_a, entry_b);
  EXPECT_FALSE(cache.load(key_b).has_value());
  EXPECT_FALSE(fs::exists(entry_b));
  EXPECT_EQ(cache.load(key_a), std::optional<std::string>("payload A"));
}

TEST(DiskCacheDefaultDirectory, HonoursEnvironmentInOrder) {
  EnvGuard guard({"GEMMKIT_CACHE_DIR", "XDG_CACHE_HOME", "HOME"});
  EnvGuard::set("GEMMKIT_CACHE_DIR", "/opt/gk-cache");
  EnvGuard::set("XDG_CACHE_HOME", "/xdg");
  EnvGuard::set("HOME", "/home/someone");
  EXPECT_EQ(DiskCache::default_directory(), fs::path("/opt/gk-cache"));

  expect_empty_counts_as_unset("GEMMKIT_CACHE_DIR", DiskCache::default_directory, "/xdg/gemmkit");

  expect_empty_counts_as_unset("XDG_CACHE_HOME", DiskCache::default_directory,
                               "/home/someone/.cache/gemmkit");

  EnvGuard::set("HOME", std::nullopt);
  EXPECT_EQ(DiskCache::default_directory(), fs::temp_directory_path() / "gemmkit-cache");
}

TEST_F(DiskCacheTest, ConcurrentThreadsStoringSameKey) {
  const fs::path dir = dir_ / "shared";  // created by the racing stores
  const std::string key = long_key("threads");
  const std::string payload = binary_payload(64 << 10, 8);
  std::atomic<bool> writers_done{false};
  std::atomic<int> failed_stores{0}, hits{0}, bad_loads{0}, bad_usage{0};

  std::vector<std::thread> readers, writers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&] {
      DiskCache cache(dir);
      while (!writers_done.load()) {
        if (const auto loaded = cache.load(key)) {
          ++hits;
          if (*loaded != payload) ++bad_loads;
        }
        // In-flight temp files must never count as entries.
        if (cache.usage().entries > 1) ++bad_usage;
      }
    });
  }
  for (int w = 0; w < 8; ++w) {
    writers.emplace_back([&] {
      DiskCache cache(dir);
      for (int i = 0; i < 50; ++i) {
        if (!cache.store(key, payload)) ++failed_stores;
      }
    });
  }
  for (auto& t : writers) t.join();
  writers_done = true;
  for (auto& t : readers) t.join();

  EXPECT_EQ(failed_stores.load(), 0);
  EXPECT_EQ(bad_loads.load(), 0) << "of " << hits.load() << " hits";
  EXPECT_EQ(bad_usage.load(), 0);
  EXPECT_EQ(DiskCache(dir).load(key), std::optional<std::string>(payload));
  EXPECT_EQ(entries_in(dir).size(), 1u);
  EXPECT_EQ(files_in(dir).size(), 1u);  // no temp files left behind
}

TEST_F(DiskCacheTest, ConcurrentProcesses) {
  const fs::path dir = dir_ / "shared";  // created by the racing stores
  const std::string shared_key = long_key("processes-shared");
  const std::string shared_payload = binary_payload(32 << 10, 9);
  auto own_key = [](int i) { return long_key("process-" + std::to_string(i)); };
  auto own_payload = [](int i) { return binary_payload(16 << 10, 10 + static_cast<unsigned>(i)); };
  constexpr int kProcesses = 4;

  // Each child reports through its exit status (no gtest assertions there).
  ASSERT_NO_FATAL_FAILURE(run_in_processes(kProcesses, [&](int i) {
    int status = 0;
    DiskCache cache(dir);
    for (int round = 0; round < 30 && status == 0; ++round) {
      if (!cache.store(shared_key, shared_payload)) status = 1;
      if (!cache.store(own_key(i), own_payload(i))) status = 2;
      const auto loaded = cache.load(shared_key);
      if (loaded && *loaded != shared_payload) status = 3;  // a miss is fine, a wrong hit is not
    }
    return status;
  }));

  DiskCache cache(dir);
  EXPECT_EQ(cache.load(shared_key), std::optional<std::string>(shared_payload));
  for (int i = 0; i < kProcesses; ++i) {
    EXPECT_EQ(cache.load(own_key(i)), std::optional<std::string>(own_payload(i)))
        << "process " << i;
  }
  EXPECT_EQ(cache.usage().entries, uint64_t{kProcesses + 1});
  EXPECT_EQ(files_in(dir).size(), size_t{kProcesses + 1});  // no temp files left behind
}

void expect_unwritable(const fs::path& dir) {
  SCOPED_TRACE(dir.string());
  DiskCache cache(dir);
  bool stored = true;
  EXPECT_NO_THROW(stored = cache.store("key", "payload"));
  EXPECT_FALSE(stored);
  EXPECT_FALSE(cache.load("key").has_value());
  EXPECT_EQ(cache.usage().entries, 0u);
}

TEST_F(DiskCacheTest, ImpossibleDirectoryStoreReturnsFalse) {
  write_file(dir_ / "file", "a regular file");
  expect_unwritable(dir_ / "file");            // the directory is a regular file
  expect_unwritable(dir_ / "file" / "cache");  // the directory would be under a regular file
  if (fs::exists("/proc/self")) expect_unwritable("/proc/gemmkit-cache");  // fails even for root
  expect_unwritable(dir_ / std::string(NAME_MAX + 1, 'n'));                // a name too long
}

// The warning of an unusable directory: once per process and directory, whatever the number
// of stores and loads, naming the directory, what it is not, the reason and the way out.
void expect_warned_once(const fs::path& dir, const std::string& what, const std::string& reason) {
  SCOPED_TRACE(dir.string());
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    DiskCache cache(dir);  // a new object each time: the warning is per process, not per object
    EXPECT_FALSE(cache.load("key").has_value());
    EXPECT_FALSE(cache.store("key", "payload"));
  }
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(occurrences(said, "\n"), 1u) << said;
  EXPECT_EQ(said, "gemmkit: warning: kernel cache " + dir.string() + " is not " + what + " (" + reason +
                      "); kernels are compiled anew in every process (set GEMMKIT_CACHE_DIR)\n");
}

TEST_F(DiskCacheTest, UnwritableDirectoryIsReportedOncePerProcess) {
  write_file(dir_ / "file", "a regular file");
  expect_warned_once(dir_ / "file" / "cache", "writable", "Not a directory");  // a load just misses
  expect_warned_once(dir_ / std::string(NAME_MAX + 1, 'n'), "readable", "File name too long");
  if (fs::exists("/proc/self")) {
    // The directory is made and so does not hold the reason: only that the message has one.
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(DiskCache("/proc/gemmkit-cache-test").store("key", "payload"));
    const std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("kernel cache /proc/gemmkit-cache-test is not writable ("), std::string::npos) << said;
  }
}

TEST_F(DiskCacheTest, UnreadableDirectoryIsReportedOncePerProcess) {
  const fs::path locked = dir_ / "locked";
  fs::create_directory(locked);
  fs::permissions(locked, fs::perms::none);
  if (::access(locked.c_str(), X_OK) == 0) GTEST_SKIP() << "permissions are not enforced (running as root?)";
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(DiskCache(locked / "cache").load("key").has_value());
    EXPECT_FALSE(DiskCache(locked / "cache").store("key", "payload"));
  }
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(said, "gemmkit: warning: kernel cache " + (locked / "cache").string() +
                      " is not readable (Permission denied); kernels are compiled anew in every process (set "
                      "GEMMKIT_CACHE_DIR)\n");
}

TEST_F(DiskCacheTest, FifoEntryIsAMissNotAHang) {
  DiskCache cache(dir_);
  ASSERT_TRUE(cache.store("key", "payload"));
  const fs::path entry = only_entry();
  fs::remove(entry);
  ASSERT_EQ(::mkfifo(entry.c_str(), 0644), 0);
  {
    Watchdog watchdog("loading a cache entry that is a FIFO", 20);
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(cache.load("key").has_value());
    EXPECT_FALSE(cache.load("key").has_value());
    const std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(said, "gemmkit: warning: kernel cache entry " + entry.string() +
                        " is a FIFO, not a regular file; it is ignored and the kernel compiled anew\n");
    // The next store puts a good entry in its place.
    EXPECT_TRUE(cache.store("key", "payload"));
  }
  EXPECT_EQ(cache.load("key"), std::optional<std::string>("payload"));
  EXPECT_TRUE(fs::is_regular_file(entry));
}

TEST_F(DiskCacheTest, EntryThatIsADeviceOrADirectoryIsAMiss) {
  DiskCache cache(dir_);
  ASSERT_TRUE(cache.store("key", "payload"));
  const fs::path entry = only_entry();
  fs::remove(entry);
  fs::create_symlink("/dev/zero", entry);  // would read forever
  {
    Watchdog watchdog("loading a cache entry that is /dev/zero", 20);
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(cache.load("key").has_value());
    const std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find(" is a character device, not a regular file;"), std::string::npos) << said;
  }
  EXPECT_TRUE(cache.store("key", "payload"));  // the link is replaced, /dev/zero untouched
  EXPECT_EQ(cache.load("key"), std::optional<std::string>("payload"));

  ASSERT_TRUE(cache.store("other key", "payload"));  // an entry not warned about yet
  const fs::path other = entries_in(dir_).front() == entry ? entries_in(dir_).back() : entries_in(dir_).front();
  fs::remove(other);
  fs::create_directory(other);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.load("other key").has_value());
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find(" is a directory, not a regular file;"), std::string::npos) << said;
}

TEST_F(DiskCacheTest, ReadOnlyDirectoryStoreReturnsFalse) {
  const fs::path ro = dir_ / "ro";
  fs::create_directory(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  if (::access(ro.c_str(), W_OK) == 0)
    GTEST_SKIP() << "permissions are not enforced (running as root?)";
  expect_unwritable(ro);
  expect_unwritable(ro / "sub");  // cannot be created either
}

TEST_F(DiskCacheTest, FailedRenameLeavesNoTempFile) {
  // A non-empty directory where the entry should go makes the final rename fail.
  DiskCache cache(dir_);
  ASSERT_TRUE(cache.store("key", "payload"));
  const fs::path entry = only_entry();
  fs::remove(entry);
  fs::create_directory(entry);
  write_file(entry / "inside", "x");
  bool stored = true;
  EXPECT_NO_THROW(stored = cache.store("key", "payload"));
  EXPECT_FALSE(stored);
  EXPECT_FALSE(cache.load("key").has_value());
  EXPECT_EQ(files_in(dir_), std::vector<fs::path>{entry});  // no temp file left behind
  EXPECT_EQ(cache.usage().entries, 0u);
}

TEST_F(DiskCacheTest, UsageCountsEntriesAndIgnoresOtherFiles) {
  DiskCache cache(dir_ / "cache");
  EXPECT_EQ(cache.usage().entries, 0u);  // directory does not exist yet
  EXPECT_EQ(cache.usage().bytes, 0u);

  ASSERT_TRUE(cache.store("a", std::string(100, 'a')));
  const uint64_t header = fs::file_size(entries_in(cache.directory()).front()) - 100;
  ASSERT_TRUE(cache.store("b", std::string(2000, 'b')));
  ASSERT_TRUE(cache.store("c", ""));
  ASSERT_TRUE(cache.store("a", std::string(300, 'a')));  // replaced, still one entry
  DiskCache::Usage u = cache.usage();
  EXPECT_EQ(u.entries, 3u);
  EXPECT_EQ(u.bytes, 300 + 2000 + 0 + 3 * header);

  // A temp file named as store() names them, an unrelated file and a directory: none count,
  // and the entries still load.
  const std::string stem = entries_in(cache.directory()).front().stem().string();
  write_file(cache.directory() / (stem + ".tmp.12345.7"), std::string(5000, 't'));
  write_file(cache.directory() / "notes.txt", "hello");
  fs::create_directory(cache.directory() / "subdir.cubin");
  u = cache.usage();
  EXPECT_EQ(u.entries, 3u);
  EXPECT_EQ(u.bytes, 300 + 2000 + 0 + 3 * header);
  EXPECT_EQ(cache.load("a"), std::optional<std::string>(std::string(300, 'a')));
  EXPECT_EQ(cache.load("b"), std::optional<std::string>(std::string(2000, 'b')));
  EXPECT_EQ(cache.load("c"), std::optional<std::string>(""));
}

}  // namespace
}  // namespace gemmkit::runtime
