// grouped_gemm's argument checks (api/prepare.h, prepare_grouped) and the config of a grouped
// problem, without a GPU. Pointers are fake device addresses.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "api/prepare.h"
#include "config_tests.h"
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
  EXPECT_EQ(normalize(p).b.row_stride, p.b.row_stride) << "grouped problems are never transposed";
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
