// Warnings that would otherwise repeat on every call (a cache directory that cannot be written,
// a tuning database that cannot be read): said once per process for each thing they are about.
#pragma once

#include <cstdio>
#include <mutex>
#include <set>
#include <string>

namespace gemmkit::runtime {

// Prints "gemmkit: warning: <message>" and a newline on stderr the first time this process
// calls it with `subject` (e.g. the path the warning is about); later calls with the same
// subject print nothing. Returns whether it printed. Thread-safe.
inline bool warn_once(const std::string& subject, const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (!warned.insert(subject).second) return false;
  std::fprintf(stderr, "gemmkit: warning: %s\n", message.c_str());
  return true;
}

}  // namespace gemmkit::runtime
