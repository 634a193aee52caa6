#include "runtime/disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <utility>

#include "runtime/file_descriptor.h"
#include "runtime/warn_once.h"

namespace gemmkit::runtime {
namespace {

namespace fs = std::filesystem;

constexpr const char* kEntryExtension = ".cubin";

// Native byte order: the cache holds cubins for the local GPU and is not meant to be shared
// between machines; a foreign or older file simply fails the magic check.
struct Header {
  uint64_t magic;         // format tag; change it whenever the layout changes
  uint64_t payload_size;  // must equal the file size minus the header
  uint64_t checksum;      // of the payload
  uint64_t key_hash;      // of the full key, independent of the file name hash
};
static_assert(sizeof(Header) == 32, "header must have no padding");

constexpr uint64_t kMagic = 0x31304e4942434b47;  // "GKCBIN01" as little-endian bytes

// Seeds that turn seeded_hash into independent functions for each use.
constexpr uint64_t kNameSeed = 0x6a09e667f3bcc908;
constexpr uint64_t kKeySeed = 0xbb67ae8584caa73b;
constexpr uint64_t kChecksumSeed = 0x3c6ef372fe94f82b;

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3;
  }
  return h;
}

// splitmix64 finalizer: a bijection that spreads every input bit over the whole word.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9;
  x ^= x >> 27;
  x *= 0x94d049bb133111eb;
  x ^= x >> 31;
  return x;
}

// Word-at-a-time hash, fast enough for megabyte payloads. Each step is a bijection of the
// state, so two inputs of equal length that differ in a single word never collide; the
// length goes into the initial state so zero-padding the tail is unambiguous.
uint64_t seeded_hash(std::string_view s, uint64_t seed) {
  uint64_t h = mix(seed ^ s.size());
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, s.data() + i, 8);
    h = mix(h ^ word);
  }
  uint64_t tail = 0;
  if (i < s.size()) std::memcpy(&tail, s.data() + i, s.size() - i);
  return mix(h ^ tail);
}

std::string hex(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[i] = kDigits[v & 0xf];
  return out;
}

// 128-bit file name stem from two unrelated hashes.
std::string entry_stem(std::string_view key) {
  return hex(fnv1a(key)) + hex(seeded_hash(key, kNameSeed));
}


bool read_all(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // error, or the file ended early
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EIO;  // no progress and no error: say something true
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The payload of the open entry, or nullopt if it is damaged or belongs to another key.
std::optional<std::string> read_entry(int fd, std::string_view key) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Header))) {
    return std::nullopt;
  }
  Header h;
  if (!read_all(fd, &h, sizeof h)) return std::nullopt;
  // The size check comes before any allocation, so a corrupt header cannot ask for an
  // absurd buffer: the payload can be no larger than the file really is.
  const uint64_t real_size = static_cast<uint64_t>(st.st_size) - sizeof h;
  if (h.magic != kMagic || h.payload_size != real_size ||
      h.key_hash != seeded_hash(key, kKeySeed)) {
    return std::nullopt;
  }
  std::string payload(h.payload_size, '\0');
  if (!read_all(fd, payload.data(), payload.size())) return std::nullopt;
  if (seeded_hash(payload, kChecksumSeed) != h.checksum) return std::nullopt;
  return payload;
}

// Unlinks `path` only if it is still the file we opened: another process may have renamed a
// good entry over the damaged one in the meantime, and that one must stay.
void remove_if_same(const fs::path& path, int fd) {
  struct stat opened, current;
  if (::fstat(fd, &opened) == 0 && ::stat(path.c_str(), &current) == 0 &&
      opened.st_dev == current.st_dev && opened.st_ino == current.st_ino) {
    ::unlink(path.c_str());
  }
}

// Writes the entry for `key` to the new file `tmp`, then renames it to `path`. On failure
// returns why (strerror's text, naming the entry where the rename failed) and leaves no
// temporary file behind; on success nullopt.
std::optional<std::string> write_entry(const fs::path& tmp, const fs::path& path, std::string_view key,
                                       std::string_view payload) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return std::strerror(errno);
  const Header h{kMagic, payload.size(), seeded_hash(payload, kChecksumSeed), seeded_hash(key, kKeySeed)};
  // No fsync: an entry torn by a power loss fails the size or checksum check and is
  // recompiled, which is cheaper than syncing every store.
  std::optional<std::string> failure;
  if (!write_all(fd, &h, sizeof h) || !write_all(fd, payload.data(), payload.size())) failure = std::strerror(errno);
  if (::close(fd) != 0 && !failure) failure = std::strerror(errno);
  if (!failure && ::rename(tmp.c_str(), path.c_str()) != 0) {
    failure = path.filename().string() + ": " + std::strerror(errno);
  }
  if (failure) ::unlink(tmp.c_str());
  return failure;
}

}  // namespace

DiskCache::DiskCache(std::filesystem::path directory) : directory_(std::move(directory)) {}

std::filesystem::path DiskCache::default_directory() {
  auto env = [](const char* name) -> const char* {
    const char* value = std::getenv(name);
    return value != nullptr && value[0] != '\0' ? value : nullptr;
  };
  if (const char* dir = env("GEMMKIT_CACHE_DIR")) return dir;
  if (const char* xdg = env("XDG_CACHE_HOME")) return fs::path(xdg) / "gemmkit";
  if (const char* home = env("HOME")) return fs::path(home) / ".cache" / "gemmkit";
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  return tmp / "gemmkit-cache";
}

const std::filesystem::path& DiskCache::directory() const { return directory_; }

void DiskCache::warn_unusable(const char* what, const std::string& reason) const {
  try {
    warn_once("kernel cache " + directory_.string(),
              "kernel cache " + directory_.string() + " is not " + what + " (" + reason +
                  "); kernels are compiled anew in every process (set GEMMKIT_CACHE_DIR)");
  } catch (...) {  // out of memory for the message: the cache still only costs time
  }
}

std::optional<std::string> DiskCache::load(std::string_view key) const {
  try {
    const fs::path path = directory_ / (entry_stem(key) + kEntryExtension);
    OpenFailure failure;
    FileDescriptor file(open_regular(path.c_str(), O_RDONLY, 0, failure));
    if (file.fd < 0) {
      if (failure.not_regular) {
        // store() renames a good entry over it.
        warn_once(path.string(), "kernel cache entry " + path.string() + " is " + failure.reason +
                                     "; it is ignored and the kernel compiled anew");
      } else if (!failure.missing) {
        warn_unusable("readable", failure.reason);
      }
      return std::nullopt;  // a plain miss where the entry is missing
    }
    std::optional<std::string> payload = read_entry(file.fd, key);
    if (!payload) remove_if_same(path, file.fd);
    return payload;
  } catch (...) {  // e.g. bad_alloc: a cache failure is only ever a miss
    return std::nullopt;
  }
}

bool DiskCache::store(std::string_view key, std::string_view payload) const {
  std::string reason;
  try {
    std::error_code ec;
    fs::create_directories(directory_, ec);
    if (ec) {
      reason = ec.message();
    } else {
      // pid separates processes, the counter separates threads and calls within one process.
      static std::atomic<uint64_t> counter{0};
      const std::string stem = entry_stem(key);
      const fs::path path = directory_ / (stem + kEntryExtension);
      const fs::path tmp = directory_ / (stem + ".tmp." + std::to_string(::getpid()) + "." +
                                         std::to_string(counter.fetch_add(1)));
      const std::optional<std::string> failure = write_entry(tmp, path, key, payload);
      if (!failure) return true;
      reason = *failure;
    }
  } catch (const std::exception& e) {  // e.g. bad_alloc
    reason = e.what();
  }
  warn_unusable("writable", reason);
  return false;
}

DiskCache::Usage DiskCache::usage() const {
  Usage u;
  std::error_code ec;
  fs::directory_iterator it(directory_, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code entry_ec;
    if (it->path().extension() != kEntryExtension || !it->is_regular_file(entry_ec)) continue;
    const uint64_t size = it->file_size(entry_ec);
    if (entry_ec) continue;  // removed meanwhile
    u.bytes += size;
    ++u.entries;
  }
  return u;
}

}  // namespace gemmkit::runtime
