#include "tuning/tuning_db.h"
#include "gemmkit/error.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "runtime/disk_cache.h"
#include "test_support.h"

namespace gemmkit {
namespace {

namespace fs = std::filesystem;
using testing::EnvGuard;
using testing::expect_empty_counts_as_unset;
using testing::read_file;
using testing::run_in_processes;
using testing::Watchdog;
using testing::write_file;

const std::string kScope = "NVIDIA H200|sm_90|0.1.0";
const std::string kKey = "NT bf16:bf16 m=4096 n=2112 k=7168 b=1";

// "config @ microseconds" (exact to the last bit), or "(none)": comparable and readable.
std::string show(const std::optional<TuningEntry>& e) {
  if (!e) return "(none)";
  char us[32];
  std::snprintf(us, sizeof us, "%.17g", e->microseconds);
  return e->config + " @ " + us;
}

// One line in the documented format, written independently of the implementation.
std::string line(const std::vector<std::string>& fields) {
  std::string body;
  for (const std::string& f : fields) body += (body.empty() ? "" : "\t") + f;
  uint64_t h = 0xcbf29ce484222325;
  for (unsigned char c : body) h = (h ^ c) * 0x100000001b3;
  char sum[17];
  std::snprintf(sum, sizeof sum, "%016" PRIx64, h);
  return body + '\t' + sum + '\n';
}

size_t count_lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

class TuningDatabaseTest : public testing::TempDirTest {
 protected:
  TuningDatabaseTest() : TempDirTest("gemmkit-tuning-db-test") {}
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(TempDirTest::SetUp());
    file_ = dir_ / "tuning.db";
  }

  fs::path file_;
};

TEST_F(TuningDatabaseTest, MissingFileIsEmpty) {
  const fs::path file = dir_ / "not-yet-created" / "tuning.db";
  TuningDatabase db(file);
  EXPECT_EQ(db.path(), file);
  EXPECT_EQ(show(db.find(kScope, kKey)), "(none)");
  EXPECT_EQ(db.size(), 0u);
  db.reload();
  EXPECT_EQ(db.size(), 0u);
  EXPECT_FALSE(fs::exists(dir_ / "not-yet-created"));  // reading creates nothing
}

TEST_F(TuningDatabaseTest, RoundTripThroughAnotherObject) {
  const fs::path file = dir_ / "sub" / "dir" / "tuning.db";  // put creates the directories
  const std::vector<std::pair<std::string, TuningEntry>> entries = {
      {kKey, {"tma 128x176 s5 c2 KK", 123.456789012345}},
      {"NN f16:f32 m=1 n=1 k=1 b=1", {"fallback 64x64", 0.1}},
      {"tiny", {"tma 64x8 s8 c1 ÄÖ \r", 1e-7}},
      {"", {"", 0}},  // empty strings are allowed
  };
  TuningDatabase writer(file);
  for (const auto& [key, entry] : entries) ASSERT_TRUE(writer.put(kScope, key, entry));
  EXPECT_EQ(writer.size(), entries.size());

  TuningDatabase reader(file);
  for (const auto& [key, entry] : entries) {
    EXPECT_EQ(show(reader.find(kScope, key)), show(entry)) << key;
    EXPECT_EQ(show(writer.find(kScope, key)), show(entry)) << key;
  }
  EXPECT_EQ(reader.size(), entries.size());
  EXPECT_EQ(show(reader.find(kScope, "absent")), "(none)");
}

TEST_F(TuningDatabaseTest, FileIsTheDocumentedTextFormat) {
  TuningDatabase db(file_);
  ASSERT_TRUE(db.put(kScope, kKey, {"tma 128x176 s5 c2 KK", 12.5}));
  EXPECT_EQ(read_file(file_), line({kScope, kKey, "tma 128x176 s5 c2 KK", "12.5"}));

  // A line that other code wrote in that format loads too.
  std::ofstream(file_, std::ios::app) << line({kScope, "other", "cfg", "0.25"});
  EXPECT_EQ(show(TuningDatabase(file_).find(kScope, "other")), "cfg @ 0.25");
}

TEST_F(TuningDatabaseTest, ScopesAreSeparate) {
  const std::string h100 = "NVIDIA H100 80GB HBM3|sm_90|0.1.0";
  TuningDatabase db(file_), other(file_);
  ASSERT_TRUE(db.put(kScope, kKey, {"config for H200", 10}));
  ASSERT_TRUE(db.put(h100, kKey, {"config for H100", 20}));
  for (const TuningDatabase* d : {&db, &other}) {
    EXPECT_EQ(show(d->find(kScope, kKey)), "config for H200 @ 10");
    EXPECT_EQ(show(d->find(h100, kKey)), "config for H100 @ 20");
    EXPECT_EQ(show(d->find("NVIDIA H200|sm_90|0.2.0", kKey)), "(none)");
    EXPECT_EQ(d->size(), 2u);
  }
}

TEST_F(TuningDatabaseTest, LaterPutWinsAlsoAfterReload) {
  TuningDatabase db(file_);
  ASSERT_TRUE(db.put(kScope, kKey, {"first", 30}));
  ASSERT_TRUE(db.put(kScope, kKey, {"second", 20}));
  EXPECT_EQ(show(db.find(kScope, kKey)), "second @ 20");
  EXPECT_EQ(db.size(), 1u);

  TuningDatabase other(file_);  // stands in for another process
  EXPECT_EQ(show(other.find(kScope, kKey)), "second @ 20");
  ASSERT_TRUE(db.put(kScope, kKey, {"third", 25}));  // a re-tune may be slower: last still wins
  EXPECT_EQ(show(other.find(kScope, kKey)), "second @ 20");  // not seen until reload
  other.reload();
  EXPECT_EQ(show(other.find(kScope, kKey)), "third @ 25");
  EXPECT_EQ(other.size(), 1u);
  EXPECT_EQ(count_lines(read_file(file_)), 3u);  // append-only
}

TEST(TuningDatabaseDefaultPath, HonoursEnvironment) {
  EnvGuard guard({"GEMMKIT_TUNING_DB", "GEMMKIT_CACHE_DIR"});
  EnvGuard::set("GEMMKIT_CACHE_DIR", "/opt/gk-cache");
  EnvGuard::set("GEMMKIT_TUNING_DB", "/srv/tuning/h200.db");
  EXPECT_EQ(TuningDatabase::default_path(), fs::path("/srv/tuning/h200.db"));
  expect_empty_counts_as_unset("GEMMKIT_TUNING_DB", TuningDatabase::default_path,
                               "/opt/gk-cache/tuning.db");
  EnvGuard::set("GEMMKIT_CACHE_DIR", std::nullopt);
  EXPECT_EQ(TuningDatabase::default_path(),
            runtime::DiskCache::default_directory() / "tuning.db");
}

TEST_F(TuningDatabaseTest, ConcurrentProcessesLoseNoEntry) {
  const fs::path file = dir_ / "shared" / "tuning.db";  // created by the racing writers
  constexpr int kProcesses = 8, kOwn = 50, kShared = 10;
  auto own_key = [](int p, int i) {
    return "process " + std::to_string(p) + " problem " + std::to_string(i);
  };
  auto own_entry = [](int p, int i) {
    return TuningEntry{"config " + std::to_string(p) + "/" + std::to_string(i), p + i / 64.0};
  };

  // Each child reports through its exit status (no gtest assertions there).
  ASSERT_NO_FATAL_FAILURE(run_in_processes(kProcesses, [&](int p) {
    int status = 0;
    TuningDatabase db(file);
    for (int i = 0; i < kOwn && status == 0; ++i) {
      if (!db.put(kScope, own_key(p, i), own_entry(p, i))) status = 1;
      const std::string shared = "shared problem " + std::to_string(i % kShared);
      if (!db.put(kScope, shared, {"from process " + std::to_string(p), 1.0 * p})) status = 2;
      if (i % 10 == 9) {  // reads while the others write
        db.reload();
        if (show(db.find(kScope, own_key(p, i))) != show(own_entry(p, i))) status = 3;
      }
    }
    return status;
  }));

  EXPECT_EQ(count_lines(read_file(file)), size_t{2 * kProcesses * kOwn});  // no append lost
  TuningDatabase db(file);
  EXPECT_EQ(db.size(), size_t{kProcesses * kOwn + kShared});
  for (int p = 0; p < kProcesses; ++p) {
    for (int i = 0; i < kOwn; ++i) {
      EXPECT_EQ(show(db.find(kScope, own_key(p, i))), show(own_entry(p, i)));
    }
  }
  for (int i = 0; i < kShared; ++i) {
    const auto e = db.find(kScope, "shared problem " + std::to_string(i));
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->config, "from process " + std::to_string(static_cast<int>(e->microseconds)));
    EXPECT_GE(e->microseconds, 0);
    EXPECT_LT(e->microseconds, kProcesses);
  }
}

TEST_F(TuningDatabaseTest, ConcurrentThreadsOnOneObject) {
  constexpr int kThreads = 8, kPuts = 100;
  auto key = [](int t, int i) {
    return "thread " + std::to_string(t) + " problem " + std::to_string(i);
  };
  auto entry = [](int t, int i) {
    return TuningEntry{"config " + std::to_string(i), t + i / 8.0};
  };
  TuningDatabase db(file_);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPuts; ++i) {
        if (!db.put(kScope, key(t, i), entry(t, i))) ++failures;
        if (show(db.find(kScope, key(t, i))) != show(entry(t, i))) ++failures;
        if (i % 10 == 0) db.reload();
        if (db.size() < static_cast<size_t>(i + 1)) ++failures;  // at least this thread's own
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);

  TuningDatabase fresh(file_);
  for (TuningDatabase* d : {&db, &fresh}) {
    EXPECT_EQ(d->size(), size_t{kThreads * kPuts});
    for (int t = 0; t < kThreads; ++t) {
      for (int i = 0; i < kPuts; ++i) {
        EXPECT_EQ(show(d->find(kScope, key(t, i))), show(entry(t, i)));
      }
    }
  }
}

TEST_F(TuningDatabaseTest, DamagedLinesAreSkippedAndReportedOnce) {
  // Each bad line, if wrongly accepted, would replace a good entry ("a" or "c") or add one.
  std::string flipped = line({kScope, "a", "config x", "9"});
  flipped[flipped.find("config x") + 7] = 'y';  // checksum no longer matches
  const std::string truncated = line({kScope, "d", "config d", "4"});
  write_file(file_, line({kScope, "a", "config a", "1.5"}) +                  // good
                        line({kScope, "c", "config c", "3"}) +                // good
                        flipped +                                             // bad checksum
                        std::string("\xff\xfe\0\x01\t\x80\t\t\t\x7f\n", 11) +  // binary garbage
                        line({kScope, "c", "config n", "12abc"}) +            // not a number
                        line({kScope, "c", "config n", "nan"}) +              // not a time
                        line({kScope, "a", "config f"}) +                     // too few fields
                        line({kScope, "c", "config s", "1", "extra"}) +       // too many fields
                        truncated.substr(0, truncated.size() / 2));           // cut-off last line
  constexpr int kDamaged = 7;

  TuningDatabase db(file_);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(show(db.find(kScope, "a")), "config a @ 1.5");
    EXPECT_EQ(show(db.find(kScope, "c")), "config c @ 3");
    EXPECT_EQ(show(db.find(kScope, "d")), "(none)");
    db.reload();
  }
  EXPECT_EQ(db.size(), 2u);
  std::string report = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_lines(report), 1u) << report;
  EXPECT_NE(report.find(file_.string()), std::string::npos) << report;
  EXPECT_NE(report.find(" " + std::to_string(kDamaged) + " "), std::string::npos) << report;

  // Appending after a cut-off line still gives a readable entry.
  ASSERT_TRUE(db.put(kScope, "d", {"config d", 4}));
  EXPECT_EQ(show(db.find(kScope, "d")), "config d @ 4");
  ::testing::internal::CaptureStderr();
  db.reload();  // this object has reported already
  TuningDatabase fresh(file_);
  EXPECT_EQ(show(fresh.find(kScope, "a")), "config a @ 1.5");
  EXPECT_EQ(show(fresh.find(kScope, "c")), "config c @ 3");
  EXPECT_EQ(show(fresh.find(kScope, "d")), "config d @ 4");
  EXPECT_EQ(show(db.find(kScope, "d")), "config d @ 4");
  report = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_lines(report), 1u) << report;  // the fresh object's, the same damage
  EXPECT_NE(report.find(" " + std::to_string(kDamaged) + " "), std::string::npos) << report;
}

// A database whose file cannot be written: put says so, and keeps the entry in memory, also
// through a reload (a winner lost would be tuned again, seconds each time), but not on disk.
void expect_unwritable(const fs::path& file) {
  SCOPED_TRACE(file.string());
  TuningDatabase db(file);
  EXPECT_NO_THROW(db.reload());  // loaded first, so a find below cannot mask what put did
  bool stored = true;
  EXPECT_NO_THROW(stored = db.put(kScope, kKey, {"config", 1}));
  EXPECT_FALSE(stored);
  std::optional<TuningEntry> found;
  EXPECT_NO_THROW(found = db.find(kScope, kKey));
  EXPECT_EQ(show(found), "config @ 1");
  EXPECT_NO_THROW(db.reload());
  EXPECT_EQ(show(db.find(kScope, kKey)), "config @ 1");
  EXPECT_EQ(db.size(), 1u);
  EXPECT_EQ(show(TuningDatabase(file).find(kScope, kKey)), "(none)");
}

TEST_F(TuningDatabaseTest, UnwritableLocation) {
  write_file(dir_ / "file", "a regular file");
  expect_unwritable(dir_ / "file" / "tuning.db");          // the parent is a regular file
  expect_unwritable(dir_ / "file" / "sub" / "tuning.db");  // so is an ancestor
  expect_unwritable(dir_);                                 // the database is a directory
  expect_unwritable(dir_ / std::string(NAME_MAX + 1, 'n'));  // a name too long
  if (fs::exists("/proc/self")) expect_unwritable("/proc/gemmkit-tuning.db");  // fails even for root
}

TEST_F(TuningDatabaseTest, UnwritableFileIsReportedOncePerProcess) {
  write_file(dir_ / "file", "a regular file");
  const fs::path file = dir_ / "file" / "tuning.db";
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    TuningDatabase db(file);  // a new object each time: the warning is per process and path
    EXPECT_FALSE(db.put(kScope, kKey + std::to_string(i), {"config", 1}));
    EXPECT_FALSE(db.put(kScope, kKey, {"config", 2}));
    EXPECT_EQ(show(db.find(kScope, kKey)), "config @ 2");
  }
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(said, "gemmkit: warning: tuning database " + file.string() +
                      " is not writable (Not a directory); winners found by tuning are kept in this process only "
                      "(set GEMMKIT_TUNING_DB)\n");
}

TEST_F(TuningDatabaseTest, LaterWrittenPutReplacesUnwrittenOne) {
  fs::create_directory(file_);  // a directory where the file should be
  TuningDatabase db(file_);
  EXPECT_FALSE(db.put(kScope, kKey, {"kept", 1}));
  fs::remove(file_);
  EXPECT_TRUE(db.put(kScope, kKey, {"written", 2}));
  db.reload();
  EXPECT_EQ(show(db.find(kScope, kKey)), "written @ 2");
  ASSERT_TRUE(TuningDatabase(file_).put(kScope, kKey, {"another process's", 3}));
  db.reload();  // no unwritten entry left to lay over the file
  EXPECT_EQ(show(db.find(kScope, kKey)), "another process's @ 3");
}

TEST_F(TuningDatabaseTest, FifoIsNeitherReadNorWrittenAndDoesNotHang) {
  ASSERT_EQ(::mkfifo(file_.c_str(), 0644), 0);
  Watchdog watchdog("a tuning database that is a FIFO", 20);
  ::testing::internal::CaptureStderr();
  TuningDatabase db(file_);
  EXPECT_EQ(db.size(), 0u);
  EXPECT_EQ(show(db.find(kScope, kKey)), "(none)");
  EXPECT_FALSE(db.put(kScope, kKey, {"config", 1}));
  EXPECT_EQ(show(db.find(kScope, kKey)), "config @ 1");  // kept in memory
  db.reload();
  EXPECT_EQ(show(db.find(kScope, kKey)), "config @ 1");
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(said, "gemmkit: warning: tuning database " + file_.string() +
                      " is not readable (a FIFO, not a regular file); the winners in it are not used (set "
                      "GEMMKIT_TUNING_DB)\n");
  EXPECT_TRUE(fs::is_fifo(file_));
}

TEST_F(TuningDatabaseTest, DeviceIsNeitherReadNorWritten) {
  Watchdog watchdog("a tuning database that is /dev/zero or /dev/null", 20);
  for (const char* device : {"/dev/zero", "/dev/null"}) {
    if (!fs::exists(device)) continue;
    SCOPED_TRACE(device);
    const fs::path link = dir_ / (std::string(device + 5) + ".db");
    fs::create_symlink(device, link);
    ::testing::internal::CaptureStderr();
    TuningDatabase db(link);
    EXPECT_EQ(db.size(), 0u);  // /dev/zero would read forever
    EXPECT_FALSE(db.put(kScope, kKey, {"config", 1}));
    const std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find(" is not readable (a character device, not a regular file)"), std::string::npos) << said;
  }
}

TEST_F(TuningDatabaseTest, ReadOnlyFileStillReads) {
  ASSERT_TRUE(TuningDatabase(file_).put(kScope, kKey, {"config", 1}));
  fs::permissions(file_, fs::perms::owner_read);
  if (::access(file_.c_str(), W_OK) == 0)
    GTEST_SKIP() << "permissions are not enforced (running as root?)";
  TuningDatabase db(file_);
  EXPECT_EQ(show(db.find(kScope, kKey)), "config @ 1");
  bool stored = true;
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(stored = db.put(kScope, "other", {"config", 2}));
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(stored);
  EXPECT_NE(said.find(" is not writable (Permission denied);"), std::string::npos) << said;
  EXPECT_EQ(show(db.find(kScope, "other")), "config @ 2");  // kept in memory
  EXPECT_EQ(db.size(), 2u);
}

TEST_F(TuningDatabaseTest, RejectsTabsNewlinesAndBadTimes) {
  TuningDatabase db(file_);
  const TuningEntry ok{"config", 1};
  for (const std::string bad : {"a\tb", "a\nb", "\t", "\n", "trailing\n"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(db.put(bad, kKey, ok), gemmkit::Error);
    EXPECT_THROW(db.put(kScope, bad, ok), gemmkit::Error);
    EXPECT_THROW(db.put(kScope, kKey, {bad, 1}), gemmkit::Error);
    EXPECT_THROW(db.find(bad, kKey), gemmkit::Error);
    EXPECT_THROW(db.find(kScope, bad), gemmkit::Error);
  }
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0}) {
    EXPECT_THROW(db.put(kScope, kKey, {"config", bad}), gemmkit::Error) << bad;
  }
  try {
    db.put(kScope, "m=1\tn=2", ok);
    ADD_FAILURE() << "no exception";
  } catch (const gemmkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("problem key"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(file_));  // nothing was written
}

}  // namespace
}  // namespace gemmkit
