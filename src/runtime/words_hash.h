// Hash of a fixed array of 64-bit words: the key of the per-thread caches on the hot path.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace gemmkit::runtime {

struct WordsHash {
  template <size_t N>
  size_t operator()(const std::array<int64_t, N>& words) const {
    uint64_t h = 0xcbf29ce484222325;  // FNV-1a over whole words
    for (int64_t w : words) h = (h ^ uint64_t(w)) * 0x100000001b3;
    return size_t(h ^ (h >> 32));
  }
};

}  // namespace gemmkit::runtime
