#include "tuning/tuning_db.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <utility>
#include <vector>

#include "gemmkit/error.h"
#include "runtime/disk_cache.h"
#include "runtime/file_descriptor.h"
#include "runtime/warn_once.h"

namespace gemmkit {
namespace {

using runtime::FileDescriptor;

namespace fs = std::filesystem;

std::string checksum(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325;  // 64-bit FNV-1a
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3;
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[i] = kDigits[h & 0xf];
  return out;
}

void check_text(std::string_view s, const char* what) {
  if (s.find_first_of("\t\n") != std::string_view::npos) {
    throw Error(ErrorCode::invalid_argument, std::string("tuning database: the ") + what +
                                " must not contain a tab or a newline: \"" + std::string(s) +
                                "\"");
  }
}

bool valid_time(double us) { return std::isfinite(us) && us >= 0; }

// Scope and key joined by a tab, which neither may contain: unambiguous.
std::string map_key(std::string_view scope, std::string_view key) {
  return std::string(scope) + '\t' + std::string(key);
}

std::vector<std::string_view> split(std::string_view s, char separator) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    const size_t end = s.find(separator, start);
    out.push_back(s.substr(start, end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

std::string format_line(std::string_view scope, std::string_view key, const TuningEntry& e) {
  char number[32];  // shortest form that reads back as the same double
  char* end = std::to_chars(number, number + sizeof number, e.microseconds).ptr;
  std::string line = map_key(scope, key) + '\t' + e.config + '\t' + std::string(number, end);
  return line + '\t' + checksum(line) + '\n';
}

// The map key and entry of one line (without its newline), or nullopt if it is damaged.
std::optional<std::pair<std::string, TuningEntry>> parse_line(std::string_view line) {
  const size_t last_tab = line.rfind('\t');
  if (last_tab == std::string_view::npos ||
      line.substr(last_tab + 1) != checksum(line.substr(0, last_tab))) {
    return std::nullopt;
  }
  const std::vector<std::string_view> f = split(line.substr(0, last_tab), '\t');
  if (f.size() != 4) return std::nullopt;
  double us = 0;
  const auto [end, ec] = std::from_chars(f[3].data(), f[3].data() + f[3].size(), us);
  if (ec != std::errc() || end != f[3].data() + f[3].size() || !valid_time(us)) {
    return std::nullopt;
  }
  return std::pair{map_key(f[0], f[1]), TuningEntry{std::string(f[2]), us}};
}


bool lock(int fd, int operation) {
  while (::flock(fd, operation) != 0) {
    if (errno != EINTR) return false;
  }
  return true;
}

// The whole file, read under a shared lock so that an append in progress is seen whole or
// not at all; empty if the file is missing. nullopt if it cannot be read, with `reason` set.
// Only a regular file is read, and the open never blocks: a FIFO or a device is refused.
std::optional<std::string> read_file(const fs::path& path, std::string& reason) {
  runtime::OpenFailure failure;
  FileDescriptor file(runtime::open_regular(path.c_str(), O_RDONLY, 0, failure));
  if (file.fd < 0) {
    if (failure.missing) return std::string();
    reason = failure.reason;
    return std::nullopt;
  }
  std::string bytes;
  if (!lock(file.fd, LOCK_SH)) {
    reason = std::strerror(errno);
    return std::nullopt;
  }
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(file.fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      reason = std::strerror(errno);
      return std::nullopt;
    }
    if (n == 0) return bytes;
    bytes.append(buffer, static_cast<size_t>(n));
  }
}

// Appends `line` under an exclusive lock, normally with a single write(); O_APPEND keeps it in
// one piece even beside a writer that ignores the lock. If the file ends in a cut-off line (a
// writer died mid-line, or the disk filled up), a newline goes first so that `line` stays whole.
// Returns false with `reason` set where the file cannot be written, or is not a regular file.
bool append_line(const fs::path& path, std::string line, std::string& reason) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  if (ec) {
    reason = ec.message();
    return false;
  }
  runtime::OpenFailure failure;
  FileDescriptor file(runtime::open_regular(path.c_str(), O_RDWR | O_APPEND | O_CREAT, 0644, failure));
  if (file.fd < 0) {
    reason = failure.reason;
    return false;
  }
  auto failed = [&](int error) {
    reason = std::strerror(error);
    return false;
  };
  struct stat st;
  if (!lock(file.fd, LOCK_EX) || ::fstat(file.fd, &st) != 0) return failed(errno);
  char last = '\n';
  if (st.st_size > 0 && ::pread(file.fd, &last, 1, st.st_size - 1) != 1) return failed(errno);
  if (last != '\n') line.insert(0, 1, '\n');
  for (std::string_view rest = line; !rest.empty();) {
    const ssize_t n = ::write(file.fd, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return failed(EIO);  // no progress and no error
    if (n < 0) return failed(errno);
    rest.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

TuningDatabase::TuningDatabase(std::filesystem::path file) : file_(std::move(file)) {}

std::filesystem::path TuningDatabase::default_path() {
  const char* env = std::getenv("GEMMKIT_TUNING_DB");
  if (env != nullptr && env[0] != '\0') return env;
  return runtime::DiskCache::default_directory() / "tuning.db";
}

const std::filesystem::path& TuningDatabase::path() const { return file_; }

void TuningDatabase::reload() {
  std::lock_guard lock(mutex_);
  load_locked();
}

void TuningDatabase::warn(const char* what, const std::string& reason) const {
  runtime::warn_once("tuning database " + file_.string(),
                     "tuning database " + file_.string() + " is not " + what + " (" + reason + "); " +
                         (std::string_view(what) == "readable"
                              ? "the winners in it are not used"
                              : "winners found by tuning are kept in this process only") +
                         " (set GEMMKIT_TUNING_DB)");
}

void TuningDatabase::load_locked() const {
  std::string reason;
  const std::optional<std::string> bytes = read_file(file_, reason);
  if (!bytes) warn("readable", reason);
  std::unordered_map<std::string, TuningEntry> entries;
  size_t damaged = 0;
  for (std::string_view rest = bytes ? std::string_view(*bytes) : std::string_view(); !rest.empty();) {
    const size_t end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    if (auto parsed = parse_line(line)) {
      entries.insert_or_assign(std::move(parsed->first), std::move(parsed->second));
    } else {
      ++damaged;
    }
  }
  // Damaged lines stay in the file, so every reload would meet them again: report once.
  if (damaged > 0 && !reported_damage_) {
    reported_damage_ = true;
    std::fprintf(stderr, "gemmkit: ignored %zu damaged line(s) in tuning database %s\n", damaged,
                 file_.c_str());
  }
  // Winners this process could not write stay: tuning again would cost seconds each time.
  for (const auto& [key, entry] : unsaved_) entries.insert_or_assign(key, entry);
  entries_ = std::move(entries);
  loaded_ = true;
}

std::optional<TuningEntry> TuningDatabase::find(std::string_view scope,
                                                std::string_view problem_key) const {
  check_text(scope, "scope");
  check_text(problem_key, "problem key");
  std::lock_guard lock(mutex_);
  if (!loaded_) load_locked();
  const auto it = entries_.find(map_key(scope, problem_key));
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

bool TuningDatabase::put(std::string_view scope, std::string_view problem_key,
                         const TuningEntry& entry) {
  check_text(scope, "scope");
  check_text(problem_key, "problem key");
  check_text(entry.config, "config");
  if (!valid_time(entry.microseconds)) {
    throw Error(ErrorCode::invalid_argument, "tuning database: the time must be finite and non-negative, not " +
                                std::to_string(entry.microseconds));
  }
  std::lock_guard lock(mutex_);
  std::string reason;
  const bool written = append_line(file_, format_line(scope, problem_key, entry), reason);
  std::string key = map_key(scope, problem_key);
  if (written) {
    unsaved_.erase(key);
  } else {
    warn("writable", reason);
    unsaved_.insert_or_assign(key, entry);
  }
  // Before the first load this is a partial view; the load replaces it with the whole file,
  // this line included (or, where it could not be written, with unsaved_ laid over the file).
  entries_.insert_or_assign(std::move(key), entry);
  return written;
}

size_t TuningDatabase::size() const {
  std::lock_guard lock(mutex_);
  if (!loaded_) load_locked();
  return entries_.size();
}

}  // namespace gemmkit
