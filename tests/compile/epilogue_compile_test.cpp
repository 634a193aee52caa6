// Generated epilogues (codegen/epilogue_source.h) compile with NVRTC for sm_90a without spills,
// for programs that use every operation, every tensor shape and element type, and auxiliary
// outputs, inside the test kernel (epilogue_test_kernel.h); and fused into the GEMM kernels, on
// every store path and kind of kernel, grouped 4-bit weights' (transposed) among them.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../epilogue_random.h"
#include "../epilogue_test_kernel.h"
#include "clean_compile.h"
#include "compile_cases.h"
#include "codegen/kernel_source.h"
#include "dispatch/cost_model.h"
#include "epilogue/program.h"
#include "gemmkit/error.h"

namespace gemmkit {
namespace {

void expect_compiles(const std::string& text, const codegen::EpilogueTypes& types) {
  const epilogue::Program program = epilogue::parse(text);
  testing::expect_clean_compile(testing::epilogue_test_source(program, types), testing::kEpilogueTestEntry, text);
}

TEST(EpilogueSource, EveryOperationCompiles) {
  using DType::bf16, DType::f16, DType::f32;
  expect_compiles("acc", {});
  expect_compiles("silu(acc + bias[n]) * gate[m, n]", {{bf16, f16}, {}});
  expect_compiles("h = acc * scale[m] + bias[n]; pre[m, n] = h; out2[m, n] = bf16(h); gelu(h)",
                  {{f32, bf16}, {bf16, f32}});
  expect_compiles("relu(acc) + relu2(acc) + gelu_tanh(acc) + sigmoid(acc) + tanh(acc) + erf(acc) + exp(-acc) + "
                  "log(abs(acc) + 1) + neg(acc) + square(acc) + sqrt(abs(acc)) + rsqrt(abs(acc) + 1e-6) + "
                  "identity(acc) - acc / 3",
                  {});
  expect_compiles("f16(clamp(max(acc, x[m, n]) - min(acc, 0.5), -7, 7)) * f32(acc)", {{f32}, {}});
  expect_compiles("clamp(acc, -7, 7) * 1.702", {});
  expect_compiles("silu(acc) * acc2", {});  // a dual GEMM's: SwiGLU
  expect_compiles("h = min(acc, 7); up[m, n] = acc2; h * sigmoid(1.702 * h) * (clamp(acc2, -7, 7) + 1) + b[n]",
                  {{DType::bf16}, {bf16}});
}

// Random trees of depth 4 (epilogue_random.h), their tensors of each type in turn; every other
// one a dual GEMM's, acc2 among its leaves.
TEST(EpilogueSource, RandomProgramsCompile) {
  testing::RandomPrograms programs(54, [](const std::string&, double) { return 0.0; });  // values unused here
  const DType types[] = {DType::bf16, DType::f16, DType::f32};
  for (int i = 0; i < 24; ++i) {
    const std::string text = programs.next(4, 0, 0, 0, 0, i % 2 ? std::optional<double>(0.0) : std::nullopt).text;
    const epilogue::Program program = epilogue::parse(text);
    codegen::EpilogueTypes t;
    for (size_t k = 0; k < program.inputs.size(); ++k) t.inputs.push_back(types[(size_t(i) + k) % 3]);
    for (size_t k = 0; k < program.stores.size(); ++k) t.stores.push_back(types[(size_t(i) + k + 1) % 3]);
    expect_compiles(text, t);
  }
}

TEST(EpilogueSource, NeedsOneTypeATensorAndAtMostEightTensors) {
  const epilogue::Program two = epilogue::parse("acc + a[n] + b[m]");
  EXPECT_THROW(codegen::epilogue_source(two, {{DType::bf16}, {}}), Error);
  const epilogue::Program nine =
      epilogue::parse("acc + a[n] + b[n] + c[n] + d[n] + f[n] + g[n] + h[n] + i[n] + j[n]");
  EXPECT_THROW(codegen::epilogue_source(nine, {std::vector<DType>(9, DType::f32), {}}), Error);
}

// A bias, an activation, a gate, a per-row scale and the pre-activation saved (two loads and a
// store an element) on the TMA kernel's store paths (through shared memory with 16-bit and f32 D,
// deferred groups, by columns, by rows, direct), with split-K, narrow and row-class tiles, FP8
// block scales, grouped rows (contiguous, masked) and along K, each on the widest tile that tries
// an epilogue (tile_takes_epilogue), and the GEMV and fallback kernels.
TEST(FusedEpilogue, EveryStorePathAndKernelCompilesWithoutSpills) {
  using DType::bf16, DType::f32;
  const std::string text = "h = acc + bias[n]; pre[m, n] = h; silu(h) * gate[m, n] * scale[m]";
  const epilogue::Program program = epilogue::parse(text);
  const std::string* code =
      codegen::interned_epilogue(program, epilogue::canonical(program), {{bf16, bf16, f32}, {bf16}});
  std::vector<KernelConfig> configs;
  auto add = [&](TileShape tile, int cluster, const std::function<void(KernelConfig&)>& vary) {
    KernelConfig c = with_tile(KernelConfig{}, tile);
    c.cluster_m = cluster;
    vary(c);
    configs.push_back(c);
  };
  add({128, 224}, 2, [](KernelConfig&) {});  // deferred groups (16-bit D through TMA)
  add({128, 224}, 2, [](KernelConfig& c) { c.out = f32; });
  add({128, 128}, 1, [](KernelConfig& c) { c.d_by_columns = c.epilogue_transposed = true; });
  add({128, 192}, 1, [](KernelConfig& c) { c.tma_store = false; });  // by rows
  add({64, 128}, 1, [](KernelConfig& c) { c.tma_store = false; });   // direct
  add({128, 128}, 1, [](KernelConfig& c) { c.splits = 2; });
  add({64, 16}, 1, [](KernelConfig& c) { c.epilogue_transposed = true; });
  add({64, 64}, 1, [](KernelConfig& c) { c.row_classes = true, c.tma_store = false; });
  add({128, 176}, 2, [](KernelConfig& c) {
    c.in = c.in_b = DType::e4m3;
    c.scale_a = c.scale_b = ScaleMode::block;
    c.scale_b_mn = 128;
  });
  for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked}) {
    for (TileShape tile : {TileShape{128, 208}, TileShape{64, 208}}) {
      add(tile, 1, [&](KernelConfig& c) {
        c.group_layout = layout;
        c.group_capacity = 128;
        c.b_batched = true;
        c.a_batched = layout == GroupLayout::masked;
      });
    }
  }
  add({128, 128}, 2, [](KernelConfig& c) {
    c.group_along_k = true;
    c.group_capacity = 128;
    c.a_k_major = c.b_k_major = false;
    c.out = f32;
  });
  for (KernelKind kind : {KernelKind::gemv, KernelKind::fallback}) {
    for (int columns : {1, 2, 4}) {
      if (kind == KernelKind::fallback && columns > 1) continue;
      KernelConfig c;
      c.kind = kind;
      c.tile_n = 8 * columns;
      configs.push_back(c);
    }
  }
  for (KernelConfig& k : configs) {
    if (k.kind == KernelKind::tma) k.stages = max_stages(k, DeviceLimits{}.smem_per_block);
    k.epilogue = code;
    ASSERT_TRUE(tile_takes_epilogue({k.tile_m, k.tile_n}, k)) << k.name();
    testing::expect_clean_compile(codegen::gemm_source(k), codegen::gemm_kernel_name(k), k.name() + " " + text);
  }
}

// Reductions (evaluate_tile) of each index: a backward epilogue's bias gradient, and the largest
// |x| a row and over the whole. evaluate_tile holds a tile's values at once, which leaves fewer
// registers than the store paths' group by group: ptxas spills 4-24 bytes on tiles stored by
// columns from 128 wide, 140-248 on rows stored by rows from 192 wide, and 4-108 on 64-row
// tiles stored directly (any width). The plan narrows those (dispatch/plan.cpp); these do not spill.
TEST(FusedEpilogue, ReductionsCompileWithoutSpills) {
  using DType::bf16, DType::f32;
  const std::string text = "dh = acc * dgelu(pre[m, n]); db[n] = sum(dh); ra[m] = amax(dh); ta[] = amax(dh); dh";
  const epilogue::Program program = epilogue::parse(text);
  const std::string* code = codegen::interned_epilogue(program, epilogue::canonical(program), {{bf16}, {f32, f32, f32}});
  std::vector<KernelConfig> configs;
  for (int n = 96; n <= 224; n += 32) configs.push_back(with_tile(KernelConfig{}, {128, n}));  // TMA stores
  configs.push_back(with_tile(KernelConfig{}, {128, 160}));
  configs.back().tma_store = false;  // by rows
  configs.push_back(with_tile(KernelConfig{}, {128, 96}));
  configs.back().d_by_columns = configs.back().epilogue_transposed = true;
  configs.push_back(with_tile(KernelConfig{}, {128, 128}));
  configs.back().splits = 2;
  configs.push_back(with_tile(KernelConfig{}, {128, 208}));
  configs.back().group_layout = GroupLayout::contiguous;
  configs.back().group_capacity = 128;
  configs.back().b_batched = true;
  for (KernelKind kind : {KernelKind::gemv, KernelKind::fallback}) {
    configs.emplace_back();
    configs.back().kind = kind;
    configs.back().tile_n = 8;
  }
  for (KernelConfig& k : configs) {
    if (k.kind == KernelKind::tma) k.stages = max_stages(k, DeviceLimits{}.smem_per_block);
    k.epilogue = code;
    testing::expect_clean_compile(codegen::gemm_source(k), codegen::gemm_kernel_name(k), k.name() + " " + text);
  }
}

// Grouped 4-bit weights with fused epilogues: groups along N (the problem transposed, each
// group's tokens the kernel's columns, D stored directly up to the group's column end), where the
// epilogue takes the kernel's rows and columns swapped (kEpilogueTransposed). Each grouped config
// of the widening cases (compile_cases.h: decode's narrow tiles and prefill's, W4A16 and W4A8,
// contiguous and masked), with each of a per-expert bias and activation, a router weight with the
// activation's input kept, and a backward's reductions (along N, along the tokens, a group's),
// compiles, tiles at most 16 wide (three CTAs an SM with an epilogue) without spills. Wider ones
// with the backward's reductions spill (64x32 e2m1 x bf16 16 bytes; 128x128 and 128x160, 32 to
// 344 bytes; NVRTC 13.0), which the plan meets by narrowing the tile (dispatch/plan.cpp).
TEST(FusedEpilogue, GroupedFourBitKernelsCompile) {
  using DType::bf16, DType::f32;
  const std::vector<std::pair<std::string, codegen::EpilogueTypes>> epilogues = {
      {"silu(acc + bias[n])", {{bf16}, {}}},
      {"h = acc + bias[n]; pre[m, n] = h; h * route[m]", {{bf16, f32}, {bf16}}},
      {"dh = acc * dgelu(pre[m, n]); db[n] = sum(dh); ra[m] = amax(dh); ta[] = amax(dh); dh", {{bf16}, {f32, f32, f32}}},
  };
  size_t compiled_cases = 0;
  for (const testing::CompileCase& c : testing::widen_cases()) {
    if (!c.config.group_along_n) continue;
    for (const auto& [text, types] : epilogues) {
      const epilogue::Program program = epilogue::parse(text);
      KernelConfig k = c.config;
      k.epilogue = codegen::interned_epilogue(program, epilogue::canonical(program), types);
      k.epilogue_transposed = true;
      ASSERT_TRUE(tile_takes_epilogue({k.tile_m, k.tile_n}, k)) << c.what;
      k.stages = max_stages(k, DeviceLimits{}.smem_per_block);
      try {
        const runtime::CompiledKernel compiled =
            runtime::compile_kernel(codegen::gemm_source(k), codegen::gemm_kernel_name(k));
        EXPECT_FALSE(compiled.cubin.empty()) << c.what << " " << text;
        // Where the plan can narrow the tile no further, it must not spill.
        const runtime::PtxasReport& r = compiled.report;
        if (k.tile_n <= 16) {
          EXPECT_EQ(r.spill_store_bytes + r.spill_load_bytes + r.stack_bytes, 0) << c.what << " " << text;
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << c.what << " " << text << ": " << e.what();
      }
      ++compiled_cases;
    }
  }
  EXPECT_GT(compiled_cases, 0u) << "no grouped 4-bit cases";
}

// Dual GEMMs (SwiGLU: kDual) on every tile width the cost model gives them, clustered (each CTA
// loading one operand's half) and not, B N-major, D by rows and directly, grouped (contiguous and
// masked), and the fallback kernel, with the plain SwiGLU and with gpt-oss's clamped variant plus
// a bias and a residual.
TEST(FusedEpilogue, DualKernelsCompileWithoutSpills) {
  using DType::bf16, DType::f32;
  const std::string plain = "silu(acc) * acc2";
  const std::string heavy = "g = min(acc, 7); g * sigmoid(1.702 * g) * (clamp(acc2, -7, 7) + 1) + b[n] + r[m, n]";
  const epilogue::Program swiglu = epilogue::parse(plain), clamped = epilogue::parse(heavy);
  const std::string* plain_code = codegen::interned_epilogue(swiglu, epilogue::canonical(swiglu), {});
  const std::string* heavy_code =
      codegen::interned_epilogue(clamped, epilogue::canonical(clamped), {{f32, bf16}, {}});
  std::vector<KernelConfig> configs;
  auto add = [&](TileShape tile, int cluster, const std::string* code, const std::function<void(KernelConfig&)>& vary) {
    KernelConfig c = with_tile(KernelConfig{}, tile);
    c.dual = true;
    c.cluster_m = cluster;
    c.epilogue = code;
    vary(c);
    c.stages = max_stages(c, DeviceLimits{}.smem_per_block);
    configs.push_back(c);
  };
  for (int n = 128; n <= 256; n += 32) {
    add({128, n}, 2, plain_code, [](KernelConfig&) {});
    add({128, n}, 1, heavy_code, [](KernelConfig&) {});
  }
  add({128, 256}, 2, heavy_code, [](KernelConfig& c) { c.b_k_major = false; });
  add({64, 256}, 1, plain_code, [](KernelConfig& c) { c.b_k_major = false; });
  add({128, 192}, 1, heavy_code, [](KernelConfig& c) { c.tma_store = false; });  // by rows
  add({64, 128}, 1, heavy_code, [](KernelConfig& c) { c.tma_store = false; });   // direct
  add({128, 256}, 1, plain_code, [](KernelConfig& c) { c.out = f32; });
  for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked}) {  // the MoE up-projection
    add({128, layout == GroupLayout::masked ? 224 : 256}, 1, heavy_code, [&](KernelConfig& c) {
      c.group_layout = layout;
      c.group_capacity = 128;
      c.b_batched = true;
      c.a_batched = layout == GroupLayout::masked;
    });
  }
  KernelConfig fallback;
  fallback.kind = KernelKind::fallback;
  fallback.dual = true;
  fallback.epilogue = heavy_code;
  configs.push_back(fallback);
  // SwiGLU's output with its largest |x| a token and over the whole (FP8 scaling of the next GEMM).
  const epilogue::Program maxima = epilogue::parse("y = silu(acc) * acc2; ya[m] = amax(y); ga[] = amax(y); y");
  const std::string* maxima_code = codegen::interned_epilogue(maxima, epilogue::canonical(maxima), {{}, {f32, f32}});
  add({128, 256}, 2, maxima_code, [](KernelConfig&) {});
  add({128, 224}, 1, maxima_code, [](KernelConfig& c) {
    c.group_layout = GroupLayout::contiguous;
    c.group_capacity = 128;
    c.b_batched = true;
  });
  for (const KernelConfig& k : configs) {
    testing::expect_clean_compile(codegen::gemm_source(k), codegen::gemm_kernel_name(k), k.name());
  }
}

// FP8 dual GEMMs (SwiGLU of e4m3 products, B2 read and scaled as B is) on the tiles their TMA
// kernel takes, 128 x 128, 64 x 160 and 128 x 160 (mx: 128 wide at most, tile_takes_scales; 64 x
// 128 then), with every scale mode: block with A 1x128 and B 128x128 (DeepSeek-V3's) or 128x1,
// and with A 128x128; rowwise; tensor; mx. Also e5m2 weights, grouped rows (contiguous, masked;
// block and rowwise), and the fallback kernel in every mode.
TEST(FusedEpilogue, Fp8DualKernelsCompileWithoutSpills) {
  const epilogue::Program swiglu = epilogue::parse("silu(acc) * acc2");
  const std::string* code = codegen::interned_epilogue(swiglu, epilogue::canonical(swiglu), {});
  struct Scales {
    ScaleMode mode;
    int a_mn = 1, b_mn = 1;  // block's rows of A and columns of B a scale covers
  };
  const Scales deepseek{ScaleMode::block, 1, 128};
  const Scales modes[] = {deepseek, {ScaleMode::block, 1, 1}, {ScaleMode::block, 128, 128}, {ScaleMode::rowwise},
                          {ScaleMode::tensor}, {ScaleMode::mx}};
  auto fp8_dual = [&](KernelConfig c, const Scales& s) {
    c.in = c.in_b = DType::e4m3;
    c.scale_a = c.scale_b = s.mode;
    c.scale_a_mn = s.a_mn;
    c.scale_b_mn = s.b_mn;
    c.dual = true;
    c.epilogue = code;
    return c;
  };
  std::vector<KernelConfig> configs;
  auto add = [&](TileShape tile, int cluster, const Scales& s, const std::function<void(KernelConfig&)>& vary) {
    KernelConfig c = fp8_dual(with_tile(KernelConfig{}, tile), s);
    c.cluster_m = cluster;
    vary(c);
    c.stages = max_stages(c, DeviceLimits{}.smem_per_block);
    configs.push_back(c);
  };
  for (const Scales& s : modes) {
    for (TileShape tile : {TileShape{128, 128}, TileShape{64, 160}, TileShape{128, 160}}) {
      if (tile_takes_scales(tile, s.mode, s.mode)) add(tile, tile.m == 128 ? 2 : 1, s, [](KernelConfig&) {});
    }
  }
  add({64, 128}, 1, {ScaleMode::mx}, [](KernelConfig&) {});
  add({128, 160}, 1, deepseek, [](KernelConfig& c) { c.in_b = DType::e5m2; });
  // The MoE up-projection: each expert's weights and scales.
  for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked}) {
    for (const Scales& s : {deepseek, Scales{ScaleMode::rowwise}}) {
      add({layout == GroupLayout::masked ? 64 : 128, 160}, 1, s, [&](KernelConfig& c) {
        c.group_layout = layout;
        c.group_capacity = 128;
        c.b_batched = true;
        c.a_batched = layout == GroupLayout::masked;
      });
    }
  }
  for (const Scales& s : modes) {
    KernelConfig fallback;
    fallback.kind = KernelKind::fallback;
    configs.push_back(fp8_dual(fallback, s));
  }
  for (const KernelConfig& k : configs) {
    if (k.kind == KernelKind::tma) {
      ASSERT_GE(k.stages, 2) << k.name();
      ASSERT_TRUE(tile_takes_epilogue({k.tile_m, k.tile_n}, k)) << k.name();
      ASSERT_TRUE(!k.grouped() || tile_takes_groups({k.tile_m, k.tile_n}, k)) << k.name();
    }
    const std::string what = k.name() + " e4m3*" + std::string(dtype_name(k.in_b)) + " " +
                             std::string(scale_mode_name(k.scale_a)) + " scales (" + std::to_string(k.scale_a_mn) +
                             ", " + std::to_string(k.scale_b_mn) + ")" + (k.dual ? " dual" : "");
    testing::expect_clean_compile(codegen::gemm_source(k), codegen::gemm_kernel_name(k), what);
  }
}

// An e4m3 D quantised in 1x128 blocks (quantize_group) on the tiles the cost model gives it (128
// and 256 wide, dual 256), stored through TMA and directly, with split-K, 8-bit inputs, grouped rows
// (contiguous, masked; the MoE up-projection's dual, B K- and N-major) and along K; plain and
// behind SwiGLU with its amax.
TEST(FusedEpilogue, QuantizedOutputsCompileWithoutSpills) {
  using DType::bf16, DType::f32;
  const epilogue::Program biased = epilogue::parse("silu(acc + bias[n])");
  const std::string* bias_code = codegen::interned_epilogue(biased, epilogue::canonical(biased), {{bf16}, {}});
  const epilogue::Program swiglu = epilogue::parse("y = silu(acc) * acc2; ya[m] = amax(y); y");
  const std::string* swiglu_code = codegen::interned_epilogue(swiglu, epilogue::canonical(swiglu), {{}, {f32}});
  std::vector<KernelConfig> configs;
  auto add = [&](TileShape tile, int cluster, const std::string* code, const std::function<void(KernelConfig&)>& vary) {
    KernelConfig c = with_tile(KernelConfig{}, tile);
    c.out = DType::e4m3;
    c.cluster_m = cluster;
    c.epilogue = code;
    vary(c);
    c.stages = max_stages(c, DeviceLimits{}.smem_per_block);
    configs.push_back(c);
  };
  add({128, 256}, 2, nullptr, [](KernelConfig&) {});
  add({64, 256}, 1, nullptr, [](KernelConfig&) {});
  add({128, 128}, 2, bias_code, [](KernelConfig&) {});
  add({128, 256}, 1, nullptr, [](KernelConfig& c) { c.tma_store = false; });  // direct
  add({128, 128}, 1, bias_code, [](KernelConfig& c) { c.tma_store = false; });
  add({64, 128}, 1, nullptr, [](KernelConfig& c) { c.splits = 2; });
  add({128, 128}, 2, bias_code, [](KernelConfig& c) {
    c.in = c.in_b = DType::e4m3;
    c.scale_a = c.scale_b = ScaleMode::block;
    c.scale_b_mn = 128;
  });
  add({128, 256}, 2, swiglu_code, [](KernelConfig& c) { c.dual = true; });
  // Grouped rows on the tiles they take (tile_takes_groups): masked ones 64 rows high.
  for (GroupLayout layout : {GroupLayout::contiguous, GroupLayout::masked}) {
    const bool masked = layout == GroupLayout::masked;
    for (bool b_k_major : {true, false}) {
      add({masked ? 64 : 128, 256}, 1, swiglu_code, [&](KernelConfig& c) {
        c.dual = true;
        c.group_layout = layout;
        c.group_capacity = 128;
        c.b_batched = true;
        c.b_k_major = b_k_major;
        c.a_batched = masked;
      });
    }
    for (const std::string* code : {static_cast<const std::string*>(nullptr), bias_code}) {
      add({masked ? 64 : 128, code ? 128 : 256}, 1, code, [&](KernelConfig& c) {
        c.group_layout = layout;
        c.group_capacity = 128;
        c.b_batched = true;
        c.a_batched = masked;
      });
    }
  }
  add({128, 128}, 2, nullptr, [](KernelConfig& c) {
    c.group_along_k = true;
    c.group_capacity = 128;
    c.a_k_major = c.b_k_major = false;
  });
  for (const KernelConfig& k : configs) {
    ASSERT_TRUE(tile_takes_epilogue({k.tile_m, k.tile_n}, k)) << k.name();
    testing::expect_clean_compile(codegen::gemm_source(k), codegen::gemm_kernel_name(k), k.name());
  }
  KernelConfig narrow = with_tile(KernelConfig{}, {128, 192});
  narrow.out = DType::e4m3;
  EXPECT_FALSE(tile_takes_epilogue({128, 192}, narrow)) << "192 columns are a block and a half";
  EXPECT_TRUE(tile_takes_epilogue({128, 256}, narrow));
}

}  // namespace
}  // namespace gemmkit
