// Problems and helpers the config tests share: aligned fake operands, the stage count a config
// fills shared memory with, and the loads a config takes per operand.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/kernel_config.h"
#include "core/problem.h"
#include "dispatch/cost_model.h"

namespace gemmkit::config_tests {

// Fake device addresses, 16-byte aligned and 4 GiB apart.
inline char* address(int slot) { return reinterpret_cast<char*>((uintptr_t(1) << 40) + (uintptr_t(slot) << 32)); }

inline MatrixRef row_major(int slot, DType type, int64_t cols) { return {address(slot), type, 0, cols, 1}; }
inline MatrixRef col_major(int slot, DType type, int64_t rows) { return {address(slot), type, 0, 1, rows}; }

// NN: A (M x K), B (K x N) and D (M x N, f32) all row-major and aligned.
inline Problem problem(int64_t m, int64_t n, int64_t k) {
  Problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = row_major(0, DType::bf16, k);
  p.b = row_major(1, DType::bf16, n);
  p.d = row_major(2, DType::f32, n);
  return p;
}

inline const int kSmemLimit = DeviceLimits{}.smem_per_block;

// A default config with the tile, B majorness, store path and stage count given.
inline KernelConfig tile_config(TileShape tile, bool b_k_major, bool tma_store, int stages) {
  KernelConfig c;
  c.tile_m = tile.m;
  c.tile_n = tile.n;
  c.b_k_major = b_k_major;
  c.tma_store = tma_store;
  c.stages = stages;
  return c;
}

// Expects a config to take as many stages as fit in shared memory.
inline void expect_full_stages(const KernelConfig& c) { EXPECT_EQ(c.stages, max_stages(c, kSmemLimit)) << c.name(); }

// Which of its operands a config realigns or stages, as one word per operand.
inline std::string loads(const KernelConfig& c) {
  if (c.row_classes) return c.realign_a || c.realign_b || c.stage_a || c.stage_b ? "classes with others" : "classes,copies";
  auto word = [](bool realign, bool stage) { return realign ? (stage ? "both" : "realign") : stage ? "stage" : "tma"; };
  return std::string(word(c.realign_a, c.stage_a)) + "," + word(c.realign_b, c.stage_b);
}

}  // namespace gemmkit::config_tests
