// On-disk cache of JIT-compiled kernels (cubin bytes), so a second process does not recompile.
//
// Each entry is one file, <32 hex digits>.cubin, named by a 128-bit hash of the key. The file
// holds a fixed header (format tag, payload size, payload checksum, an independent hash of the
// full key) followed by the payload. Anything that fails those checks is a miss.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace gemmkit::runtime {

class DiskCache {
 public:
  explicit DiskCache(std::filesystem::path directory);

  // $GEMMKIT_CACHE_DIR if set and non-empty; else $XDG_CACHE_HOME/gemmkit; else
  // $HOME/.cache/gemmkit; else <temp dir>/gemmkit-cache.
  static std::filesystem::path default_directory();

  const std::filesystem::path& directory() const;

  // The payload stored under `key`, or nullopt on a miss. An entry that is truncated, damaged
  // (bad magic, size mismatch, checksum mismatch) or stored for a different key (hash
  // collision) counts as a miss and is removed, so the caller recompiles and stores again.
  // Only regular files are read, never blocking: an entry that is a FIFO, a device or a
  // directory is a miss, with a warning on stderr once per process and entry. A directory that
  // cannot be read (other than a missing one) is a miss too, with a warning once per process
  // and directory (see store).
  std::optional<std::string> load(std::string_view key) const;

  // Stores atomically: writes a uniquely named temporary file in the same directory, then
  // renames it over the entry, so readers never see a partial entry and several processes or
  // threads storing the same key at once all succeed. Creates the directory if needed.
  // Returns false (never throws) when the cache cannot be written, e.g. a read-only
  // directory: a cache that cannot be written must not fail the caller's GEMM. The first
  // failure for a directory in a process prints one line on stderr naming it and the reason:
  //   gemmkit: warning: kernel cache DIR is not writable (REASON); kernels are compiled anew in
  //   every process (set GEMMKIT_CACHE_DIR)
  bool store(std::string_view key, std::string_view payload) const;

  // Total bytes and number of entries currently in the directory (entries only, not temp
  // files).
  struct Usage {
    uint64_t bytes = 0;
    uint64_t entries = 0;
  };
  Usage usage() const;

 private:
  // The once-per-process warning that the directory is not `what` ("readable", "writable").
  void warn_unusable(const char* what, const std::string& reason) const;

  std::filesystem::path directory_;
};

}  // namespace gemmkit::runtime
