// Persisted autotuning results: for each problem, the fastest kernel configuration found and
// its time, so later processes reuse it instead of tuning again.
//
// Entries are keyed by a scope (device name, compute capability, library version, e.g.
// "NVIDIA H200|sm_90|0.1.0") and a problem key; the value is a config text and its time.
// All three strings are opaque here and must not contain a tab or a newline.
//
// The file is plain text, append-only, one entry a line:
//   scope \t problem_key \t config \t microseconds \t checksum \n
// where checksum is the 64-bit FNV-1a hash, as 16 lowercase hex digits, of everything
// before its tab. Of several lines with the same scope and key, the last one wins, so a
// re-tune replaces the old winner.
#pragma once

#include <cstddef>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace gemmkit {

struct TuningEntry {
  std::string config;
  double microseconds = 0;
};

// Safe to share between threads; several processes may append to one file at once.
class TuningDatabase {
 public:
  explicit TuningDatabase(std::filesystem::path file);

  // $GEMMKIT_TUNING_DB if set and non-empty, else runtime::DiskCache::default_directory()
  // / "tuning.db".
  static std::filesystem::path default_path();

  const std::filesystem::path& path() const;

  // Replaces what is in memory by what the file holds now, to pick up other processes'
  // writes, and lays over it the entries put() could not write. A missing file is empty; so is
  // one that cannot be read or is not a regular file (a FIFO, a device: it is never read nor
  // waited on), with a warning on stderr once per process and path. Damaged lines are skipped,
  // and the first time this object meets any, one line on stderr names the file and how many
  // were skipped.
  void reload();

  // Reads the file on first use. Throws gemmkit::Error (invalid_argument) if scope or problem_key
  // contains a tab or a newline.
  std::optional<TuningEntry> find(std::string_view scope, std::string_view problem_key) const;

  // Appends one entry to the file (creating it and its directory if needed) and to memory.
  // Returns false if the file cannot be written (or is not a regular file), and keeps the
  // entry in memory all the same, through reload() too, so that the winner of a tuning is
  // not lost with the file; the first failure in a process prints one line on stderr:
  //   gemmkit: warning: tuning database PATH is not writable (REASON); winners found by tuning
  //   are kept in this process only (set GEMMKIT_TUNING_DB)
  // Throws gemmkit::Error (invalid_argument) if a string contains a tab or a newline, or the
  // time is negative or not finite.
  bool put(std::string_view scope, std::string_view problem_key, const TuningEntry& entry);

  // Distinct (scope, problem key) pairs in memory; reads the file on first use.
  size_t size() const;

 private:
  void load_locked() const;
  // The once-per-process warning that the file is not `what` ("readable", "writable").
  void warn(const char* what, const std::string& reason) const;

  std::filesystem::path file_;
  mutable std::mutex mutex_;
  mutable bool loaded_ = false;
  mutable bool reported_damage_ = false;
  mutable std::unordered_map<std::string, TuningEntry> entries_;  // by "scope\tkey"
  std::unordered_map<std::string, TuningEntry> unsaved_;          // put but not written
};

}  // namespace gemmkit
