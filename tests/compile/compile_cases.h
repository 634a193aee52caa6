// The kernel configurations the compile tests build, each with a label: compile_all_test.cpp
// compiles them, and kernel_cubins.cpp (scripts/sass_diff.sh) writes their cubins. Uses only
// the dispatch headers, those of revisions before their split too (dispatch/config.h), so that
// the SASS comparison can build it against older revisions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#if __has_include("dispatch/cost_model.h")
#include "dispatch/cost_model.h"
#include "dispatch/operand_access.h"
#else
#include "dispatch/config.h"
#endif

namespace gemmkit::testing {

struct CompileCase {
  KernelConfig config;
  std::string what;  // the config's name and what varies beside it
};

// `tile` with the given operand majorness, in clusters of `cluster`, with the store path
// with_tile gives it.
inline KernelConfig with_layout(TileShape tile, bool a_k_major, bool b_k_major, int cluster) {
  KernelConfig config = with_tile(KernelConfig{}, tile);
  config.a_k_major = a_k_major;
  config.b_k_major = b_k_major;
  config.cluster_m = cluster;
  return config;
}

// `config` at the most stages that fit, labelled with its name and `what`.
inline CompileCase at_most_stages(KernelConfig config, const std::string& what = "") {
  config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
  return {config, config.name() + what};
}

// The TMA kernel: every tile shape with every operand majorness, alone and in a cluster of
// two, at the most stages that fit; tiles up to kMaxSplitTileN wide also with split-K. Narrow
// tiles as they run: B K-major, unclustered, with direct stores.
inline std::vector<CompileCase> tile_cases() {
  std::vector<CompileCase> cases;
  for (TileShape tile : tile_shapes()) {
    for (bool a_k : {true, false}) {
      for (bool b_k : {true, false}) {
        for (int cluster : {1, 2}) {
          if (is_narrow(tile) && (!b_k || cluster > 1)) continue;
          for (int splits : {1, 2}) {
            if (splits > 1 && tile.n > kMaxSplitTileN) continue;
            KernelConfig config = with_layout(tile, a_k, b_k, cluster);
            config.splits = splits;
            cases.push_back(at_most_stages(config));
          }
        }
      }
    }
  }
  return cases;
}

// C on every tile that takes it, alone and in a cluster, with 16-bit and f32 outputs, through
// TMA and direct stores (narrow tiles: unclustered and direct), and through the split-K
// reduction on the tiles it is built for.
inline std::vector<CompileCase> c_cases() {
  std::vector<CompileCase> cases;
  for (TileShape tile : tile_shapes()) {
    if (!tile_takes_c(tile)) continue;
    for (DType out : {DType::bf16, DType::f32}) {
      for (bool direct : {false, true}) {
        for (int cluster : {1, 2}) {
          if (is_narrow(tile) && (!direct || cluster > 1)) continue;
          for (int splits : {1, 2}) {
            if (splits > 1 && tile.n > kMaxSplitTileN) continue;
            KernelConfig config;
            config.tile_m = tile.m;
            config.tile_n = tile.n;
            config.cluster_m = cluster;
            config.splits = splits;
            config.tma_store = !direct;
            config.out = config.c = out;
            config.has_c = true;
            config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
            cases.push_back({config, config.name() + " ->" + std::string(dtype_name(out)) + " with C"});
          }
        }
      }
    }
  }
  return cases;
}

// D stored by columns (problems the plan transposes) on every tile that stores through TMA: 16-bit
// D in a cluster of two, f32 D with C alone, and through the split-K reduction where it is built.
inline std::vector<CompileCase> column_store_cases() {
  std::vector<CompileCase> cases;
  for (TileShape tile : tile_shapes()) {
    if (is_narrow(tile)) continue;
    for (DType out : {DType::bf16, DType::f32}) {
      for (int splits : {1, 2}) {
        if (splits > 1 && tile.n > kMaxSplitTileN) continue;
        KernelConfig config = with_tile(KernelConfig{}, tile);
        config.d_by_columns = true;
        config.splits = splits;
        config.cluster_m = out == DType::f32 ? 1 : 2;
        config.out = config.c = out;
        config.has_c = out == DType::f32 && tile_takes_c(tile);
        config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
        cases.push_back({config, config.name() + " ->" + std::string(dtype_name(out))});
      }
    }
  }
  return cases;
}

// The split-K reduction with every epilogue: each output type, with and without C, through TMA
// and direct stores (narrow tiles: direct), batched or not, on the 16-bit tiles it is built for.
inline std::vector<CompileCase> split_k_cases() {
  std::vector<CompileCase> cases;
  for (TileShape tile : tile_shapes()) {
    if (tile.n > kMaxSplitTileN) continue;
    for (DType out : {DType::bf16, DType::f16, DType::f32}) {
      for (bool has_c : {false, true}) {
        for (bool direct : {false, true}) {
          if (is_narrow(tile) && !direct) continue;
          for (bool batched : {false, true}) {
            KernelConfig config;
            config.tile_m = tile.m;
            config.tile_n = tile.n;
            config.splits = 2;
            config.tma_store = !direct;
            config.out = config.c = out;
            config.has_c = has_c;
            config.a_batched = config.b_batched = batched;
            config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
            cases.push_back({config, config.name() + " ->" + std::string(dtype_name(out)) + (has_c ? " with C" : "") +
                                         (batched ? " batched" : "")});
          }
        }
      }
    }
  }
  return cases;
}

// Realigned operands (A, B or both) on every tile that realigns and operand majorness,
// unclustered, split or not, batched, as max_stages fits them beside their landing rows.
inline std::vector<CompileCase> realign_cases() {
  std::vector<CompileCase> cases;
  for (TileShape tile : tile_shapes()) {
    if (!realigns_on(tile)) continue;
    for (bool a_k : {true, false}) {
      for (bool b_k : {true, false}) {
        if (is_narrow(tile) && !b_k) continue;
        for (auto [realign_a, realign_b] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
          KernelConfig config = with_tile(KernelConfig{}, tile);
          config.a_k_major = a_k;
          config.b_k_major = b_k;
          config.realign_a = realign_a;
          config.realign_b = realign_b;
          config.splits = tile.n <= kMaxSplitTileN && a_k ? 2 : 1;
          config.a_batched = config.b_batched = !b_k;
          config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
          if (config.stages < 2) continue;
          cases.push_back({config, config.name()});
        }
      }
    }
  }
  return cases;
}

// 4-bit weights widened in the kernel (A, the problem transposed): u4 on every tile (bf16, split
// where split-K runs), u4 with zero points on every 64-row tile as decode runs them (f16, f32 D),
// and e2m1 on the widest and narrowest tiles. W4A8 (u4 and e2m1 against e4m3 B) on every tile that
// takes it, B's scales per column and in 128x1 blocks; u4's group scales bf16, f16 with zero points.
// Grouped along N (experts' weights, their tokens as columns), contiguous and masked, in each
// format against bf16 and e4m3 (B's scales per column, in 128x1 blocks, mx), on decode's narrow
// tiles and prefill's widest, stored directly.
inline std::vector<CompileCase> widen_cases() {
  std::vector<CompileCase> cases;
  auto add = [&](TileShape tile, DType format, DType wide, bool zeros, DType out, bool tma_store = true,
                 int splits = 2, bool has_c = false, bool group_partials = false,
                 ScaleMode scale_b = ScaleMode::none, int granule = 128, int groups = 0,
                 GroupLayout layout = GroupLayout::contiguous) {
    KernelConfig config = with_layout(tile, true, true, 1);
    config.group_capacity = groups;
    config.group_layout = layout;
    config.group_along_n = groups > 0;
    config.a_batched = groups > 0;
    config.b_batched = groups > 0 && layout == GroupLayout::masked;
    config.group_partials = group_partials;
    config.tma_store = config.tma_store && tma_store;
    config.in = format;
    config.in_b = wide;
    config.scale_b = scale_b;
    config.group_scale = !is_fp8(wide) ? wide : zeros ? DType::f16 : DType::bf16;
    if (is_fp8(wide)) config.widen_granule = format == DType::e2m1 ? 32 : granule;
    config.scale_a = format == DType::u4 ? ScaleMode::group : ScaleMode::mx;
    config.zeros = zeros;
    config.out = config.c = out;
    config.has_c = has_c;
    config.splits = tile.n <= kMaxSplitTileN ? splits : 1;
    if (!tile_takes_widening(tile, config)) return;
    if (config.grouped()) config.splits = 1;
    cases.push_back(at_most_stages(config, " " + std::string(dtype_name(format)) + " x " + std::string(dtype_name(wide)) +
                                               (config.widen_granule != 128 ? " g" + std::to_string(config.widen_granule) : "") +
                                               (zeros ? " zeros" : "") + (has_c ? " with C" : "") +
                                               (scale_b != ScaleMode::none ? " B " + std::string(scale_mode_name(scale_b)) : "")));
  };
  for (TileShape tile : tile_shapes()) {
    add(tile, DType::u4, DType::bf16, false, DType::bf16);
    if (tile.m == 64) add(tile, DType::u4, DType::f16, true, DType::f32);
  }
  for (TileShape tile : {TileShape{128, 256}, TileShape{64, 8}, TileShape{64, 256}}) {
    add(tile, DType::e2m1, DType::bf16, false, DType::bf16);
  }
  // Narrow tiles, which share their SM (ctas_per_sm), in each format and type, split or not.
  for (TileShape tile : tile_shapes()) {
    if (!is_narrow(tile)) continue;
    for (int splits : {1, 2}) {
      add(tile, DType::u4, DType::f16, false, DType::f32, false, splits);
      add(tile, DType::u4, DType::bf16, true, DType::bf16, false, splits);
      add(tile, DType::e2m1, DType::f16, false, DType::f32, false, splits);
      add(tile, DType::e2m1, DType::bf16, false, DType::f16, false, splits);
      add(tile, DType::u4, DType::bf16, false, DType::f32, false, splits, true);
      // u4 in groups of 64 K or more: group scales after the wgmma.
      add(tile, DType::u4, DType::f16, false, DType::f32, false, splits, false, true);
      add(tile, DType::u4, DType::bf16, true, DType::bf16, false, splits, false, true);
      add(tile, DType::u4, DType::bf16, false, DType::f32, false, splits, true, true);
    }
  }
  for (TileShape tile : tile_shapes()) {
    const bool narrow = is_narrow(tile);
    add(tile, DType::u4, DType::e4m3, false, DType::bf16, !narrow, 2, false, false, ScaleMode::rowwise);
    add(tile, DType::u4, DType::e4m3, true, DType::f32, !narrow, 1, false, false, ScaleMode::block);
    if (tile.m == 64) add(tile, DType::u4, DType::e4m3, true, DType::bf16, false, 2, true, false, ScaleMode::block);
    add(tile, DType::e2m1, DType::e4m3, false, DType::bf16, !narrow, 2, false, false, ScaleMode::rowwise);
    if (tile.m == 64) add(tile, DType::e2m1, DType::e4m3, false, DType::f32, false, 1, true, false, ScaleMode::block);
    if (tile.n >= 128 || narrow) {  // u4 in groups of 32 and 64: four or two granules a K block
      add(tile, DType::u4, DType::e4m3, true, DType::bf16, !narrow, 2, false, false, ScaleMode::block, 32);
      add(tile, DType::u4, DType::e4m3, false, DType::f32, !narrow, 1, true, false, ScaleMode::rowwise, 64);
    }
    if (tile_takes_scales(tile, ScaleMode::none, ScaleMode::mx)) {  // A8W4 in MX: B's exponents per 32 of K
      add(tile, DType::e2m1, DType::e4m3, false, DType::bf16, !narrow, 2, false, false, ScaleMode::mx);
      add(tile, DType::u4, DType::e4m3, true, DType::f32, !narrow, 1, true, false, ScaleMode::mx, 32);
    }
  }
  // Without TMA stores (D's rows unaligned): row stores on 128-row tiles, direct ones below.
  for (TileShape tile : tile_shapes()) {
    if (is_narrow(tile)) continue;  // they store directly above
    add(tile, DType::u4, DType::bf16, false, DType::bf16, false);
    add(tile, DType::e2m1, DType::bf16, false, DType::f32, false);
    add(tile, DType::u4, DType::f16, true, DType::f16, false);
  }
  for (TileShape tile : {TileShape{64, 8}, TileShape{64, 16}, TileShape{64, 32}, TileShape{128, 128}, TileShape{128, 160}}) {
    for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked}) {
      const bool narrow = is_narrow(tile);
      add(tile, DType::u4, DType::bf16, false, DType::bf16, false, 1, false, narrow, ScaleMode::none, 128, 128, layout);
      add(tile, DType::u4, DType::f16, true, DType::f16, false, 1, false, false, ScaleMode::none, 128, 1024, layout);
      add(tile, DType::e2m1, DType::bf16, false, DType::bf16, false, 1, false, false, ScaleMode::none, 128, 128, layout);
      add(tile, DType::u4, DType::e4m3, true, DType::bf16, false, 1, false, false, ScaleMode::rowwise, 128, 32, layout);
      add(tile, DType::e2m1, DType::e4m3, false, DType::bf16, false, 1, false, false, ScaleMode::rowwise, 32, 128, layout);
      // A's inner scales as B's, from boxes that start up to 16 bytes before a group's first token.
      add(tile, DType::u4, DType::e4m3, true, DType::bf16, false, 1, false, false, ScaleMode::block, 128, 128, layout);
      if (tile_takes_scales(tile, ScaleMode::none, ScaleMode::mx)) {
        add(tile, DType::e2m1, DType::e4m3, false, DType::bf16, false, 1, false, false, ScaleMode::mx, 32, 128, layout);
        add(tile, DType::u4, DType::e4m3, true, DType::f32, false, 1, false, false, ScaleMode::mx, 32, 128, layout);
      }
    }
  }
  return cases;
}

// Row classes on every 64-row tile up to kRowClassesMaxN wide, split or not, with C and an f32 D.
inline std::vector<CompileCase> row_class_cases() {
  std::vector<CompileCase> cases;
  for (TileShape tile : tile_shapes()) {
    if (tile.m != 64 || tile.n > kRowClassesMaxN) continue;
    for (int splits : {1, 2}) {
      for (bool c : {false, true}) {
        KernelConfig config = KernelConfig{};
        config.row_classes = true;
        config = with_tile(config, tile);
        config.splits = splits;
        config.has_c = c;
        config.out = config.c = c ? DType::f32 : DType::bf16;
        config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
        cases.push_back({config, config.name() + (c ? " with C" : "")});
      }
    }
  }
  return cases;
}

// Element types, C, batching and the direct-store epilogue on the largest tile, where
// registers are tightest; and 192 x 176's row store: three consumer warpgroups (152 registers
// each) storing rows, in every layout and alone or in a cluster, the tightest row store, which
// leaves last tile rows where they are (epilogue.cuh).
inline std::vector<CompileCase> type_cases() {
  std::vector<CompileCase> cases;
  for (DType in : {DType::bf16, DType::f16}) {
    for (DType out : {DType::bf16, DType::f16, DType::f32}) {
      for (bool direct : {false, true}) {
        KernelConfig config;
        config.tile_m = 128;
        config.tile_n = 256;
        config.tma_store = !direct;
        config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
        config.in = config.in_b = in;
        config.out = out;
        config.has_c = true;
        config.c = out;
        config.a_batched = config.b_batched = true;
        cases.push_back({config, config.name() + " " + std::string(dtype_name(in)) + "->" + std::string(dtype_name(out))});
      }
    }
  }
  for (int layout = 0; layout < 4; ++layout) {
    for (int cluster : {1, 2}) {
      KernelConfig config = with_layout({192, 176}, layout % 2 == 0, layout / 2 == 0, cluster);
      config.tma_store = false;
      cases.push_back(at_most_stages(config));
    }
  }
  return cases;
}

// 8-bit inputs: every tile the modes allow with each scaling mode (block as DeepSeek-V3's
// 1x128 and 128x128, and once the other way round, as a transposed problem has them), in a
// cluster of two, split where the tile allows it, and with C and an f32 output; e4m3 x e5m2 once.
inline std::vector<CompileCase> eight_bit_cases() {
  std::vector<CompileCase> cases;
  for (TileShape tile : tile_shapes(true)) {
    for (ScaleMode mode : {ScaleMode::tensor, ScaleMode::rowwise, ScaleMode::block, ScaleMode::mx}) {
      if (!tile_takes_scales(tile, mode, mode)) continue;
      // Block variants 4 and 5: both operands' blocks along K only (A 1x128, B 128x1), alone and in a
      // cluster.
      for (int variant = 0; variant < (mode == ScaleMode::block ? 6 : 3); ++variant) {
        KernelConfig config;
        config.in = config.in_b = DType::e4m3;
        config.scale_a = config.scale_b = mode;
        config.scale_b_mn = mode == ScaleMode::block && variant < 3 ? 128 : 1;
        if (variant == 3) config.scale_a_mn = 128;
        if (variant == 5) config.cluster_m = 2;
        config.tile_m = tile.m;
        config.tile_n = tile.n;
        if (variant < 5) config.cluster_m = variant == 0 ? 2 : 1;
        config.splits = variant == 1 && tile.n <= kMaxSplitTileN ? 2 : 1;
        if (variant == 2) {
          config.in_b = DType::e5m2;
          config.out = config.c = DType::f32;
          config.has_c = true;
        }
        config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
        cases.push_back({config, config.name() + " e4m3 scales " + std::to_string(int(mode)) + " variant " +
                                     std::to_string(variant)});
      }
    }
  }
  // Split, with D stored without TMA (a row at a time, or element by element where
  // KernelConfig::row_store says), in every mode the tile takes.
  for (TileShape tile : tile_shapes(true)) {
    if (tile.n > kMaxSplitTileN) continue;
    for (ScaleMode mode : {ScaleMode::tensor, ScaleMode::rowwise, ScaleMode::block, ScaleMode::mx}) {
      if (!tile_takes_scales(tile, mode, mode)) continue;
      KernelConfig config;
      config.in = config.in_b = DType::e4m3;
      config.scale_a = config.scale_b = mode;
      config.tile_m = tile.m;
      config.tile_n = tile.n;
      config.splits = 2;
      config.tma_store = false;
      config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
      cases.push_back({config, config.name() + " e4m3 scales " + std::to_string(int(mode)) + " split, stored without TMA"});
    }
  }
  return cases;
}

// The fallback and GEMV kernels for every type combination; 8-bit inputs with each scaling
// mode, the GEMV with 1, 2 and 4 columns a warp.
inline std::vector<CompileCase> simt_cases() {
  std::vector<CompileCase> cases;
  for (KernelKind kind : {KernelKind::fallback, KernelKind::gemv}) {
    for (DType in : {DType::bf16, DType::f16}) {
      for (DType out : {DType::bf16, DType::f16, DType::f32}) {
        KernelConfig config;
        config.kind = kind;
        config.tile_n = 8;
        config.in = config.in_b = in;
        config.out = out;
        config.has_c = true;
        config.c = out;
        cases.push_back({config, config.name() + " " + std::string(dtype_name(in)) + "->" + std::string(dtype_name(out))});
      }
    }
    for (DType format : {DType::u4, DType::e2m1}) {  // 4-bit weights B
      KernelConfig config;
      config.kind = kind;
      config.tile_n = 8;
      config.in = DType::bf16;
      config.in_b = format;
      config.scale_b = format == DType::u4 ? ScaleMode::group : ScaleMode::mx;
      config.zeros = format == DType::u4;
      if (kind == KernelKind::fallback) cases.push_back({config, config.name() + " bf16 x " + std::string(dtype_name(format))});
    }
    for (ScaleMode mode : {ScaleMode::none, ScaleMode::tensor, ScaleMode::rowwise, ScaleMode::block, ScaleMode::mx}) {
      for (int columns : {1, 2, 4}) {
        if (kind != KernelKind::gemv && columns > 1) continue;
        KernelConfig config;
        config.kind = kind;
        config.tile_n = 8 * columns;
        config.in = DType::e4m3;
        config.in_b = DType::e5m2;
        config.scale_a = config.scale_b = mode;
        config.out = DType::bf16;
        cases.push_back({config, config.name() + " e4m3 x e5m2 scales " + std::to_string(int(mode))});
      }
    }
  }
  return cases;
}

// Every case above, in one list.
inline std::vector<CompileCase> all_compile_cases() {
  std::vector<CompileCase> all;
  for (auto part : {tile_cases, c_cases, column_store_cases, split_k_cases, realign_cases, row_class_cases, type_cases,
                    eight_bit_cases, widen_cases, simt_cases}) {
    for (CompileCase& c : part()) all.push_back(std::move(c));
  }
  return all;
}

}  // namespace gemmkit::testing
