// What went wrong in worker threads, collected for the main thread to assert on (gtest
// assertions belong on the main thread).
#pragma once

#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace gemmkit::testing {

class Failures {
 public:
  void add(std::string what) {
    std::lock_guard lock(mutex_);
    list_.push_back(std::move(what));
  }
  std::string all() const {
    std::lock_guard lock(mutex_);
    std::string text;
    for (const std::string& f : list_) text += f + "\n";
    return text;
  }
  size_t count() const {
    std::lock_guard lock(mutex_);
    return list_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> list_;
};

}  // namespace gemmkit::testing
