// grouped_gemm's argument checks (api/prepare.h, prepare_grouped) and the config of a grouped
// problem, without a GPU, 4-bit weights among them. Pointers are fake device addresses.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "api/prepare.h"
#include "config_tests.h"
#include "core/checked_math.h"
#include "dispatch/cost_model.h"
#include "dispatch/plan.h"
#include "gemmkit/error.h"
#include "rejection.h"

// A namespace of its own: the sanitizer build compiles the CPU tests as one unit (validate_test.cpp
// has an Args of its own).
namespace gemmkit::grouped_validate_test {
namespace {

constexpr int64_t G = 8, M = 1000, N = 512, K = 256;

using config_tests::address;

// Contiguous forward: tokens [M, K], weights stored [G, N, K] seen as [G, K, N], D [M, N].
struct Args {
  TensorView a = TensorView::row_major(address(0), DType::bf16, M, K);
  TensorView b = TensorView::batched(address(1), DType::bf16, G, K, N, N * K, 1, K);
  TensorView d = TensorView::row_major(address(2), DType::bf16, M, N);
  GroupSizes sizes{GroupLayout::contiguous, address(3), false, G};
  GemmOptions options;
};

// Masked: A [G, 64, K], D [G, 64, N].
Args masked() {
  Args x;
  x.a = TensorView::batched(address(0), DType::bf16, G, 64, K, 64 * K, K, 1);
  x.d = TensorView::batched(address(2), DType::bf16, G, 64, N, 64 * N, N, 1);
  x.sizes.layout = GroupLayout::masked;
  return x;
}

Problem prepare(const Args& x) { return api::prepare_grouped(x.a, x.b, x.d, x.sizes, x.options, 0).problem; }

void expect_rejected(const Args& x, const std::string& argument, std::initializer_list<std::string> given) {
  testing::expect_invalid_argument([&] { prepare(x); }, argument, given);
}

TEST(GroupedValidate, ContiguousProblemHasGroupsAndOneMatrixOfRows) {
  const Args x;
  const Problem p = prepare(x);
  EXPECT_TRUE(p.grouped());
  EXPECT_EQ(p.m, M);
  EXPECT_EQ(p.n, N);
  EXPECT_EQ(p.k, K);
  EXPECT_EQ(p.batch, G);
  EXPECT_EQ(p.rows_batch(), 1);
  EXPECT_EQ(p.b.batch_stride, N * K);
  EXPECT_EQ(p.groups.sizes, x.sizes.data);
  EXPECT_FALSE(p.groups.along_n);
  EXPECT_EQ(normalize(p).b.row_stride, p.b.row_stride) << "16-bit grouped problems are never transposed";
}

// The sizes' flags reach the problem as given, and nothing else (along N is the transposed
// 4-bit problems' alone).
TEST(GroupedValidate, SizesFlagsReachTheProblem) {
  for (bool zero_unowned : {false, true}) {
    for (bool check : {false, true}) {
      Args x;
      x.sizes.zero_unowned = zero_unowned;
      x.sizes.check = check;
      const Problem p = prepare(x);
      EXPECT_EQ(p.groups.zero_unowned, zero_unowned);
      EXPECT_EQ(p.groups.check, check);
      EXPECT_FALSE(p.groups.along_n);
      EXPECT_FALSE(p.groups.along_k);
    }
  }
}

TEST(GroupedValidate, MaskedProblemIsBatchedByGroup) {
  const Problem p = prepare(masked());
  EXPECT_EQ(p.m, 64);
  EXPECT_EQ(p.batch, G);
  EXPECT_EQ(p.rows_batch(), G);
  EXPECT_EQ(p.a.batch_stride, 64 * K);
}

TEST(GroupedValidate, RejectsGroupCountOutOfRange) {
  Args x;
  x.sizes.count = 0;
  expect_rejected(x, "sizes", {"count 0", "1 to 1024"});
  x.sizes.count = kMaxGroups + 1;
  expect_rejected(x, "sizes", {"count 1025"});
}

TEST(GroupedValidate, RejectsBNotBatchedByGroup) {
  Args x;
  x.b = TensorView::row_major(address(1), DType::bf16, K, N);
  expect_rejected(x, "B", {"[G, K, N]", "G = sizes.count = 8"});
  x = Args{};
  x.sizes.count = 4;
  expect_rejected(x, "B", {"[8, 256, 512]"});
}

TEST(GroupedValidate, RejectsLayoutRankMismatch) {
  Args x = masked();
  x.a = TensorView::row_major(address(0), DType::bf16, M, K);
  expect_rejected(x, "A", {"[G, max_m, K]", "masked"});
  Args y;
  y.d = TensorView::batched(address(2), DType::bf16, G, 64, N, 64 * N, N, 1);
  expect_rejected(y, "D", {"[M_total, N]", "contiguous"});
}

TEST(GroupedValidate, RejectsBetaAndMisalignedOrNullSizes) {
  Args x;
  x.options.beta = 1.0f;
  x.options.c = x.d;
  expect_rejected(x, "options.beta", {"expected 0"});
  x = Args{};
  x.sizes.data = nullptr;
  expect_rejected(x, "sizes", {"null", "int32"});
  x = Args{};
  x.sizes.int64 = true;
  x.sizes.data = address(3) + 4;
  expect_rejected(x, "sizes", {"8-byte aligned", "int64"});
}

TEST(GroupedValidate, RejectsOperandsTmaCannotRead) {
  Args x;
  x.a = TensorView::matrix(address(0), DType::bf16, M, K - 1, K - 1, 1);  // rows 510 bytes apart
  x.b = TensorView::batched(address(1), DType::bf16, G, K - 1, N, N * K, 1, K);
  expect_rejected(x, "A, B", {"16-byte-aligned"});
  // FP8 A must be K-major; FP8 weights stored [G, K, N] (N contiguous: the input gradient's) are
  // staged K-major, one copy a group.
  Args y;
  y.a = TensorView::matrix(address(0), DType::e4m3, M, K, 1, M);
  y.b.dtype = DType::e4m3;
  expect_rejected(y, "A, B", {"FP8 A K-major"});
  y.a = TensorView::row_major(address(0), DType::e4m3, M, K);
  y.b = TensorView::batched(address(1), DType::e4m3, G, K, N, N * K, N, 1);
  const KernelConfig c = problem_config(prepare(y));
  EXPECT_TRUE(c.stage_b && c.b_k_major && c.a_k_major && !c.stage_a) << c.name();
}

TEST(GroupedValidate, SmBudgetIsGroupedOnly) {
  Args x;
  x.options.max_sms = 16;
  EXPECT_EQ(prepare(x).max_sms, 16);
  x.options.max_sms = -1;
  expect_rejected(x, "options.max_sms", {"-1"});
  x.options.max_sms = 16;
  testing::expect_invalid_argument(
      [&] { api::prepare_gemm(x.a, TensorView::matrix(x.b.data, DType::bf16, K, N, 1, K), x.d, x.options, 0); },
      "options.max_sms", {"16", "only grouped_gemm"});
}

TEST(GroupedValidate, RejectsPerGroupScalesOfAnotherBatch) {
  Args x;
  x.a.dtype = DType::e4m3;
  x.b.dtype = DType::e4m3;
  x.options.scale_a = {ScaleMode::rowwise, TensorView::row_major(address(4), DType::f32, M, 1)};
  x.options.scale_b = {ScaleMode::rowwise, TensorView::batched(address(5), DType::f32, G - 1, 1, N, N, N, 1)};
  expect_rejected(x, "scale_b", {"batch of G = 8"});
  x.options.scale_b.scales = TensorView::batched(address(5), DType::f32, G, 1, N, N, N, 1);
  EXPECT_EQ(prepare(x).scale_b.m.batch_stride, N);
}

TEST(GroupedValidate, EmptyRowsOrColumnsRunNothing) {
  Args x;
  x.a = TensorView::row_major(address(0), DType::bf16, 0, K);
  x.d = TensorView::row_major(address(2), DType::bf16, 0, N);
  EXPECT_TRUE(api::prepare_grouped(x.a, x.b, x.d, x.sizes, x.options, 0).empty);
}

// ---- 4-bit weights (W4A16, W4A8) ----------------------------------------------------------
// The experts' weights as checkpoints store them, [G, N, K/2] bytes: B [G, K, N] with strides
// {N K, 1, K} in elements (nibbles); u4 with group scales [G, ceil(K/group), N] (A's type against
// a 16-bit A; bf16 or f16 against e4m3) and zero points of their shape and type, or e2m1 with
// ue8m0 scales [G, ceil(K/32), N]. A's scales (e4m3 A): rowwise [M_total, 1] (masked [G, 64, 1]),
// tensor [1, 1] (masked [G, 1, 1]), or 1x128 blocks.
struct Lowbit {
  DType in = DType::bf16;
  DType weights = DType::u4;
  int64_t group = 128;  // u4
  bool zeros = false;   // u4
  DType scale_type = DType::bf16;  // u4's scales
  ScaleMode scale_a = ScaleMode::none;
  int64_t k = K;

  int64_t block() const { return weights == DType::u4 ? group : 32; }  // K elements a scale covers
  std::string describe() const {
    return std::string(dtype_name(in)) + " x " + std::string(dtype_name(weights)) + " group " + std::to_string(block()) +
           (zeros ? " zeros" : "") + " " + std::string(dtype_name(scale_type)) + " scales, scale_a " +
           std::string(scale_mode_name(scale_a)) + ", K " + std::to_string(k);
  }
};

Args lowbit(const Lowbit& w, bool masked_groups) {
  Args x = masked_groups ? masked() : Args{};
  const int64_t k = w.k, rows = masked_groups ? 64 : M, batch = masked_groups ? G : 1;
  auto view = [&](int slot, DType type, int64_t r, int64_t c) {  // [G, r, c] masked, [r, c] contiguous, row-major
    return masked_groups ? TensorView::batched(address(slot), type, batch, r, c, r * c, c, 1)
                         : TensorView::row_major(address(slot), type, r, c);
  };
  x.a = view(0, w.in, rows, k);
  x.b = TensorView::batched(address(1), w.weights, G, k, N, N * k, 1, k);
  const bool u4 = w.weights == DType::u4;
  const int64_t groups = ceil_div(k, w.block());
  const DType scale_type = u4 ? w.scale_type : DType::ue8m0;
  x.options.scale_b = {u4 ? ScaleMode::group : ScaleMode::mx,
                       TensorView::batched(address(5), scale_type, G, groups, N, groups * N, N, 1), u4 ? w.group : 0};
  if (w.zeros) x.options.scale_b.zeros = TensorView::batched(address(6), scale_type, G, groups, N, groups * N, N, 1);
  if (w.scale_a == ScaleMode::rowwise) x.options.scale_a = {ScaleMode::rowwise, view(4, DType::f32, rows, 1)};
  if (w.scale_a == ScaleMode::tensor) x.options.scale_a = {ScaleMode::tensor, view(4, DType::f32, 1, 1)};
  if (w.scale_a == ScaleMode::block) x.options.scale_a = {ScaleMode::block, view(4, DType::f32, rows, ceil_div(k, 128))};
  if (w.scale_a == ScaleMode::mx) x.options.scale_a = {ScaleMode::mx, view(4, DType::ue8m0, rows, ceil_div(k, 32))};
  return x;
}

// Each accepted, contiguous and masked, and run transposed (the weights as A, the groups along
// N): the weights and their scales (and zero points) batched by group, a scale's K elements as
// the dense kernels take them (per-channel: K rounded up to a power of two from 128).
TEST(GroupedLowbitValidate, TakesFourBitWeightsWithPerGroupScales) {
  const DType bf16 = DType::bf16, f16 = DType::f16, e4m3 = DType::e4m3, e2m1 = DType::e2m1;
  const std::vector<Lowbit> cases = {
      {.group = 128},
      {.in = f16, .zeros = true, .scale_type = f16},
      {.group = 32, .zeros = true},
      {.in = f16, .group = 64, .scale_type = f16},
      {.group = 256, .zeros = true},                 // per-channel: a group of K
      {.group = 1000, .k = 1000},                    // per-channel, K 1000 (1024 a block)
      {.zeros = true, .k = 1000},                    // the last group partial
      {.in = bf16, .weights = e2m1},
      {.in = f16, .weights = e2m1, .k = 2880},
      {.in = e4m3, .zeros = true, .scale_type = f16, .scale_a = ScaleMode::rowwise},
      {.in = e4m3, .scale_a = ScaleMode::tensor},
      {.in = e4m3, .group = 32, .scale_type = f16},  // scale_a none
      {.in = e4m3, .weights = e2m1, .scale_a = ScaleMode::rowwise, .k = 2880},
      {.in = e4m3, .zeros = true, .scale_a = ScaleMode::block, .k = 1000},  // 1x128 activation blocks
      {.in = e4m3, .weights = e2m1, .scale_a = ScaleMode::mx, .k = 2880},   // A8W4 in MX
      {.in = e4m3, .group = 32, .scale_a = ScaleMode::mx},
      {.in = e2m1, .weights = e2m1, .scale_a = ScaleMode::mx},  // FP4 x FP4: widened to e4m3 first
      {.in = e2m1, .group = 32, .zeros = true, .scale_a = ScaleMode::mx},
  };
  for (const Lowbit& w : cases) {
    for (bool masked_groups : {false, true}) {
      SCOPED_TRACE(w.describe() + (masked_groups ? ", masked" : ", contiguous"));
      const Args x = lowbit(w, masked_groups);
      const Problem p = prepare(x);
      const int64_t scale_batch_stride = x.options.scale_b.scales.batch_stride();
      const int64_t block = w.block() < w.k ? w.block() : std::max<int64_t>(128, int64_t(std::bit_ceil(uint64_t(w.k))));
      EXPECT_EQ(p.batch, G);
      EXPECT_TRUE(p.groups.along_n);
      EXPECT_EQ(p.m, N);
      EXPECT_EQ(p.a.dtype, w.weights);
      EXPECT_EQ(p.a.batch_stride, N * w.k);
      EXPECT_EQ(p.scale_a.mode, x.options.scale_b.mode);
      EXPECT_EQ(p.scale_a.m.batch_stride, scale_batch_stride);
      EXPECT_EQ(p.scale_a.block_cols, block);
      EXPECT_EQ(p.scale_a.zeros.data != nullptr, w.zeros);
      if (w.zeros) EXPECT_EQ(p.scale_a.zeros.batch_stride, scale_batch_stride);
      EXPECT_EQ(p.scale_b.mode, w.scale_a);
      if (w.scale_a == ScaleMode::block || w.scale_a == ScaleMode::mx) {
        // A's 1x128 blocks (mx exponents) are B's 128x1 ones, read by the promotion from boxes
        // that start up to 16 bytes before a group's first token; the grouped pick takes them.
        EXPECT_EQ(p.scale_b.block_rows, w.scale_a == ScaleMode::mx ? 32 : 128);
        EXPECT_EQ(p.scale_b.block_cols, 1);
        const KernelConfig c = choose_grouped_config(p, DeviceLimits{});
        EXPECT_TRUE(c.group_along_n) << c.name();
        EXPECT_EQ(c.scale_b, w.scale_a) << c.name();
        EXPECT_TRUE(tile_takes_scales({c.tile_m, c.tile_n}, c.scale_a, c.scale_b)) << c.name();
        EXPECT_TRUE(fits(c, DeviceLimits{})) << c.name();
      }
    }
  }
}

// Fused epilogues, contiguous and masked, W4A16 (int4, MXFP4) and W4A8: taken, the problem run
// transposed (the weights as A, the groups along N) with the epilogue marked transposed and its
// tensors as given, in D's orientation: a per-expert bias [G, 1, N] stepped by group, a token's
// router weight one [M_total, 1] for contiguous groups (batch stride 0: the kernel hands the
// epilogue D's row of M_total) or masked [G, 64, 1], an auxiliary output of D's shape, and a
// reduction's per-token output. The grouped config transposes the epilogue, on a tile that takes
// it. Tensors of other shapes are refused as for 16-bit weights: a router weight batched by group
// for contiguous groups (which share one), an output shaped as the transposed problem's D.
TEST(GroupedLowbitValidate, TakesFusedEpiloguesTransposed) {
  const std::vector<Lowbit> cases = {{.group = 128},
                                     {.weights = DType::e2m1},
                                     {.in = DType::e4m3, .zeros = true, .scale_a = ScaleMode::rowwise}};
  const std::string text = "h = acc + bias[n]; pre[m, n] = h; ra[m] = amax(h); silu(h) * route[m]";
  for (const Lowbit& w : cases) {
    for (bool masked_groups : {false, true}) {
      SCOPED_TRACE(w.describe() + (masked_groups ? ", masked" : ", contiguous"));
      Args x = lowbit(w, masked_groups);
      const int64_t rows = masked_groups ? 64 : M;
      // [G, r, c] masked, [r, c] contiguous, row-major
      auto along_rows = [&](int slot, DType type, int64_t c) {
        return masked_groups ? TensorView::batched(address(slot), type, G, rows, c, rows * c, c, 1)
                             : TensorView::row_major(address(slot), type, rows, c);
      };
      const TensorView bias = TensorView::batched(address(7), DType::bf16, G, 1, N, N, N, 1);
      const TensorView route = along_rows(8, DType::f32, 1), pre = along_rows(9, DType::bf16, N);
      const TensorView ra = along_rows(10, DType::f32, 1);
      x.options.epilogue = {text, {{"bias", bias}, {"route", route}, {"pre", pre}, {"ra", ra}}};
      const Problem p = prepare(x);
      EXPECT_TRUE(p.groups.along_n);
      EXPECT_EQ(p.m, N);
      EXPECT_EQ(p.n, rows);
      ASSERT_TRUE(p.epilogue.fused());
      EXPECT_TRUE(p.epilogue.transposed) << "the problem runs transposed: the epilogue takes the kernel's rows as n";
      ASSERT_EQ(p.epilogue.tensor_count, 4);
      const MatrixRef& b = p.epilogue.tensors[0];  // inputs in the program's order, then outputs
      const MatrixRef& r = p.epilogue.tensors[1];
      const MatrixRef& o = p.epilogue.tensors[2];
      const MatrixRef& a = p.epilogue.tensors[3];
      EXPECT_EQ(b.data, bias.data);
      EXPECT_EQ(b.batch_stride, N) << "one bias an expert";
      EXPECT_EQ(b.col_stride, 1);
      EXPECT_EQ(r.data, route.data);
      EXPECT_EQ(r.batch_stride, masked_groups ? rows : 0) << "contiguous: one weight a row of M_total";
      EXPECT_EQ(r.row_stride, 1);
      EXPECT_EQ(o.data, pre.data);
      EXPECT_EQ(o.batch_stride, masked_groups ? rows * N : 0);
      EXPECT_EQ(o.row_stride, N);
      EXPECT_EQ(o.col_stride, 1);
      EXPECT_EQ(a.batch_stride, masked_groups ? rows : 0);
      EXPECT_EQ(p.epilogue.zeroed_bytes[3], (masked_groups ? G * rows : rows) * 4) << "the reduction's, zeroed first";
      const KernelConfig c = choose_grouped_config(p, DeviceLimits{});
      EXPECT_EQ(c.epilogue, p.epilogue.code) << c.name();
      EXPECT_TRUE(c.epilogue_transposed && c.group_along_n) << c.name();
      EXPECT_TRUE(tile_takes_epilogue({c.tile_m, c.tile_n}, c)) << c.name();
      EXPECT_TRUE(fits(c, DeviceLimits{})) << c.name();
      // As 16-bit weights' grouped problems refuse them.
      Args y = x;
      if (!masked_groups) {
        y.options.epilogue.tensors[1].tensor = TensorView::batched(address(8), DType::f32, G, M, 1, M, 1, 1);
        expect_rejected(y, "options.epilogue.tensors[\"route\"]", {"[8, 1000, 1]", "[1000, 1]"});
      }
      y = x;
      y.options.epilogue.tensors[2].tensor = masked_groups
                                                 ? TensorView::batched(address(9), DType::bf16, G, N, rows, N * rows, rows, 1)
                                                 : TensorView::row_major(address(9), DType::bf16, N, rows);
      expect_rejected(y, "options.epilogue.tensors[\"pre\"]", {"D's shape"});
    }
  }
}

// Refused by name, contiguous and masked: what grouped_gemm does not take with 4-bit weights (a
// dual GEMM's B2; scales or zero points not batched by G; zero points for e2m1), and what gemm()
// refuses of 4-bit weights too (mx activation exponents against weights in groups of 128).
TEST(GroupedLowbitValidate, RefusesByName) {
  for (bool masked_groups : {false, true}) {
    SCOPED_TRACE(masked_groups ? "masked" : "contiguous");
    const Args w4a8 = lowbit({.in = DType::e4m3, .zeros = true, .scale_a = ScaleMode::rowwise}, masked_groups);
    const Args w4a16 = lowbit({.zeros = true}, masked_groups);
    Args x = lowbit({.in = DType::e4m3, .scale_a = ScaleMode::mx}, masked_groups);
    expect_rejected(x, "scale_a", {"mode mx", "groups of 128", "groups of 32"});
    x = w4a8;
    x.options.b2 = x.b;
    expect_rejected(x, "options.b2", {});
    for (const Args& y : {w4a16, w4a8}) {
      x = y;
      const TensorView s = x.options.scale_b.scales;
      x.options.scale_b.scales = TensorView::batched(s.data, s.dtype, G - 1, s.rows(), s.cols(), s.batch_stride(),
                                                     s.row_stride(), s.col_stride());
      expect_rejected(x, "scale_b", {"7"});
      x = y;
      x.options.scale_b.zeros->sizes[0] = G - 1;
      expect_rejected(x, "scale_b.zeros", {"7"});
    }
    x = lowbit({.weights = DType::e2m1}, masked_groups);
    x.options.scale_b.zeros = x.options.scale_b.scales;
    expect_rejected(x, "scale_b", {"zero points", "e2m1"});
    // As gemm() refuses them: scales not of A's type (W4A16), of the wrong shape, of u4's mode for
    // e2m1; weights N-contiguous.
    x = w4a16;
    x.options.scale_b.scales.dtype = DType::f16;
    expect_rejected(x, "scale_b", {"dtype f16"});
    x = w4a16;
    x.options.scale_b.group = 64;  // the scales hold ceil(K/128) rows
    expect_rejected(x, "scale_b", {"shape"});
    x = lowbit({.weights = DType::e2m1}, masked_groups);
    x.options.scale_b.mode = ScaleMode::group;
    expect_rejected(x, "scale_b", {"mode group"});
    x = w4a16;
    x.b = TensorView::batched(address(1), DType::u4, G, K, N, N * K, N, 1);
    expect_rejected(x, "B", {"strides"});
  }
}

// The weight gradient: x = dD [M, N], y = A [M, K] (row-major), d = dW [G, N, K].
struct WgradArgs {
  TensorView x = TensorView::row_major(address(0), DType::bf16, M, N);
  TensorView y = TensorView::row_major(address(1), DType::bf16, M, K);
  TensorView d = TensorView::batched(address(2), DType::f32, G, N, K, N * K, K, 1);
  GroupSizes sizes{GroupLayout::contiguous, address(3), false, G};
  GemmOptions options;
};

Problem prepare(const WgradArgs& w) { return api::prepare_grouped_wgrad(w.x, w.y, w.d, w.sizes, w.options, 0).problem; }

void expect_rejected(const WgradArgs& w, const std::string& argument, std::initializer_list<std::string> given) {
  testing::expect_invalid_argument([&] { prepare(w); }, argument, given);
}

TEST(GroupedWgradValidate, IsAProblemAlongKWithSharedOperands) {
  WgradArgs w;
  w.options.beta = 1.0f;
  w.options.c = w.d;  // accumulate in place
  const Problem p = prepare(w);
  EXPECT_TRUE(p.grouped() && p.groups.along_k);
  EXPECT_EQ(p.m, N);
  EXPECT_EQ(p.n, K);
  EXPECT_EQ(p.k, M);
  EXPECT_EQ(p.batch, G);
  EXPECT_EQ(p.rows_batch(), G);
  EXPECT_EQ(p.a.row_stride, 1) << "A = x^T: its M (x's columns) contiguous";
  EXPECT_EQ(p.a.batch_stride, 0);
  EXPECT_EQ(p.b.batch_stride, 0);
  EXPECT_TRUE(p.has_c());
  const KernelConfig c = choose_grouped_config(p, DeviceLimits{});
  EXPECT_TRUE(c.grouped() && c.group_along_k) << c.name();
  EXPECT_FALSE(c.a_k_major || c.b_k_major || c.a_batched || c.b_batched) << c.name();
  EXPECT_EQ(c.splits, 1);
}

TEST(GroupedWgradValidate, RejectsWhatTheKernelCannotTake) {
  WgradArgs w;
  w.sizes.layout = GroupLayout::masked;
  expect_rejected(w, "sizes", {"masked", "contiguous"});
  w = WgradArgs{};
  w.y = TensorView::row_major(address(1), DType::bf16, M - 1, K);
  expect_rejected(w, "y", {"[999, 256]", "[M_total, Q]"});
  w = WgradArgs{};
  w.d = TensorView::batched(address(2), DType::f32, G, K, N, N * K, N, 1);
  expect_rejected(w, "d", {"[8, 512, 256]"});
  w = WgradArgs{};
  w.x.dtype = DType::e4m3;
  expect_rejected(w, "x, y", {"e4m3", "bf16", "each e4m3 or e5m2"});
  w.y.dtype = DType::e5m2;
  w.options.scale_a = {ScaleMode::block, TensorView::row_major(address(4), DType::f32, N, 8)};
  expect_rejected(w, "scale_a", {"block", "tensor or rowwise"});
  w = WgradArgs{};
  w.x = TensorView::matrix(address(0), DType::bf16, M, N, 1, M);  // tokens contiguous: A = x^T K-major
  expect_rejected(w, "x, y", {"P and Q contiguous"});
  w = WgradArgs{};
  w.x = TensorView::row_major(address(0), DType::bf16, 0, N);
  w.y = TensorView::row_major(address(1), DType::bf16, 0, K);
  expect_rejected(w, "x", {"M_total = 0"});
}

// FP8: x and y staged K-major (both), with per-group tensor or rowwise scales, whatever their layout.
TEST(GroupedWgradValidate, Fp8StagesBothOperandsWithPerGroupScales) {
  WgradArgs w;
  w.x.dtype = DType::e5m2;
  w.y.dtype = DType::e4m3;
  w.options.scale_a = {ScaleMode::rowwise, TensorView::batched(address(4), DType::f32, G, N, 1, N, 1, 1)};
  w.options.scale_b = {ScaleMode::tensor, TensorView::batched(address(5), DType::f32, G, 1, 1, 1, 1, 1)};
  Problem p = prepare(w);
  EXPECT_EQ(p.scale_a.m.batch_stride, N);
  EXPECT_EQ(p.scale_b.m.batch_stride, 1);
  KernelConfig c = choose_grouped_config(p, DeviceLimits{});
  EXPECT_TRUE(c.group_along_k && c.stage_a && c.stage_b && c.a_k_major && c.b_k_major) << c.name();
  w.x = TensorView::matrix(address(0), DType::e5m2, M, N, 1, M);  // tokens contiguous
  c = choose_grouped_config(prepare(w), DeviceLimits{});
  EXPECT_TRUE(c.stage_a && c.stage_b && c.a_k_major && c.b_k_major) << c.name();
  w.options.scale_a.scales = TensorView::batched(address(4), DType::f32, G - 1, N, 1, N, 1, 1);
  expect_rejected(w, "scale_a", {"batch 7"});
}

// The grouped config: the kernel's facts (unsplit, TMA loads, the table sized for G), with the
// cost model's knobs for the groups' mean size.
TEST(GroupedConfig, IsUnsplitWithATableForEveryGroup) {
  for (const Args& x : {Args{}, masked()}) {
    const Problem p = prepare(x);
    const KernelConfig c = choose_grouped_config(p, DeviceLimits{});
    EXPECT_EQ(c.kind, KernelKind::tma) << c.name();
    EXPECT_TRUE(c.grouped()) << c.name();
    EXPECT_EQ(c.group_layout, x.sizes.layout);
    EXPECT_EQ(c.group_capacity, 32);
    EXPECT_EQ(c.splits, 1);
    EXPECT_TRUE(c.a_k_major && c.b_k_major && c.b_batched) << c.name();
    EXPECT_EQ(c.a_batched, x.sizes.layout == GroupLayout::masked);
    EXPECT_FALSE(c.stage_a || c.stage_b || c.realign_a || c.realign_b || c.row_classes || c.d_by_columns);
    EXPECT_GE(c.stages, 2);
    EXPECT_LE(c.smem_bytes(), DeviceLimits{}.smem_per_block);
  }
  Args many;
  many.sizes.count = 257;
  many.b = TensorView::batched(address(1), DType::bf16, 257, K, N, N * K, 1, K);
  EXPECT_EQ(choose_grouped_config(prepare(many), DeviceLimits{}).group_capacity, 512);
}

// Contiguous groups of a few hundred rows run unclustered (a router's uneven counts leave a
// cluster's second CTA idle at most groups' ends); groups of thousands of rows may cluster.
TEST(GroupedConfig, GroupsOfAFewHundredRowsRunUnclustered) {
  auto config = [](int64_t groups, int64_t rows, int64_t n, int64_t k) {
    Args x;
    x.a = TensorView::row_major(address(0), DType::bf16, groups * rows, k);
    x.b = TensorView::batched(address(1), DType::bf16, groups, k, n, n * k, 1, k);
    x.d = TensorView::row_major(address(2), DType::bf16, groups * rows, n);
    x.sizes.count = groups;
    return choose_grouped_config(prepare(x), DeviceLimits{});
  };
  for (auto [groups, rows, n, k] : {std::array<int64_t, 4>{128, 256, 1536, 2048}, {128, 256, 3072, 4096},
                                    {128, 128, 5760, 2880}, {32, 512, 4096, 7168}}) {
    const KernelConfig c = config(groups, rows, n, k);
    EXPECT_EQ(c.cluster_m, 1) << groups << " x " << rows << " rows, N " << n << ", K " << k << ": " << c.name();
  }
  EXPECT_EQ(config(8, 4096, 4096, 7168).cluster_m, 2) << "DeepSeek-V3 up, 8 x 4096 rows";
}

}  // namespace
}  // namespace gemmkit::grouped_validate_test
