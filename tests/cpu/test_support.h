// Shared pieces of the CPU tests that work on files: a fresh temporary directory per test,
// whole-file reads and writes, environment variables set for one test, and racing processes.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gemmkit::testing {

// The whole content of file `p` (empty if it cannot be read).
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Replaces the content of file `p` with `bytes`, creating the file if needed.
inline void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Base of tests that need a directory of their own: `dir_` is a fresh directory under the
// system temp directory, named after `prefix`, and is removed with all it holds afterwards
// (even where a test took away its permissions).
class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    std::string templ = (std::filesystem::temp_directory_path() / (prefix_ + "-XXXXXX")).string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(dir_, ec);
  }

  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

// Sets or unsets environment variables for one test and restores them afterwards.
class EnvGuard {
 public:
  explicit EnvGuard(std::vector<std::string> names) : names_(std::move(names)) {
    for (const auto& n : names_) {
      const char* v = std::getenv(n.c_str());
      saved_.emplace_back(v ? std::optional<std::string>(v) : std::nullopt);
    }
  }
  ~EnvGuard() {
    for (size_t i = 0; i < names_.size(); ++i) set(names_[i], saved_[i]);
  }
  static void set(const std::string& name, const std::optional<std::string>& value) {
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }

 private:
  std::vector<std::string> names_;
  std::vector<std::optional<std::string>> saved_;
};

// Expects `lookup()` to give `expected` both with environment variable `name` set to the empty
// string and with it unset: an empty value counts as unset. Leaves `name` unset (use it under
// an EnvGuard).
inline void expect_empty_counts_as_unset(const std::string& name,
                                         const std::function<std::filesystem::path()>& lookup,
                                         const std::filesystem::path& expected) {
  SCOPED_TRACE(name + " empty, then unset");
  EnvGuard::set(name, "");
  EXPECT_EQ(lookup(), expected);
  EnvGuard::set(name, std::nullopt);
  EXPECT_EQ(lookup(), expected);
}

// Forks `count` processes that run child(0) ... child(count - 1) at the same time, and expects
// each to exit with status 0. `child` returns its exit status and must not use gtest
// assertions: the process leaves with _exit, so nothing of the parent's state (gtest, stdio
// buffers) runs twice. Call it inside ASSERT_NO_FATAL_FAILURE.
inline void run_in_processes(int count, const std::function<int(int)>& child) {
  std::vector<pid_t> children;
  for (int i = 0; i < count; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ::_exit(child(i));
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
}

// Ends the whole test process, naming `what`, if it is still alive `seconds` after the
// watchdog was made: for tests of code that must not hang (a FIFO where a file should be),
// where a hang would otherwise stall the run until ctest's timeout.
class Watchdog {
 public:
  Watchdog(std::string what, int seconds) : what_(std::move(what)) {
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!done_cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) {
        std::fprintf(stderr, "watchdog: %s did not finish in %d s\n", what_.c_str(), seconds);
        std::_Exit(124);
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    done_cv_.notify_one();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::string what_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread thread_;
};

// How many times `needle` occurs in `text`.
inline size_t occurrences(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++count;
  return count;
}

}  // namespace gemmkit::testing
