// grouped_gemm with 4-bit weights (gemmkit/grouped.h; gemm.h's 4-bit section) on the GPU: the
// experts' weights B [G, K, N] K-contiguous (a checkpoint's [G, N, K/2] bytes), u4 in groups along
// K with per-group scales [G, ceil(K/group), N] (and zero points), or e2m1 with ue8m0 scales
// [G, ceil(K/32), N]; against bf16 or f16 activations (W4A16) or e4m3 ones (W4A8: A's scales none,
// tensor, rowwise, 1x128 blocks, or mx exponents against weights in groups of 32), or e2m1 ones with
// mx exponents (FP4 x FP4). A table of cases, contiguous and masked: empty groups, groups of one token,
// M_total off every multiple, N odd, K with a partial last group (1000, 4097, 2880), decode
// (max_m 1 and 16, G = 8 and 128), prefill-sized groups (M_total 1001 and 4095, G = 8), one group,
// unowned rows zeroed. Fresh random inputs, D NaN-poisoned; each group against the double-precision
// reference of its GEMM (each weight dequantised exactly) with the dense lowbit tests' tolerance
// (reference/compare.h); rows no group owns still NaN, or zero with sizes.zero_unowned. Then fused
// epilogues (GemmOptions::epilogue), which the kernel runs transposed with the problem: a
// per-expert bias [G, 1, N], a token's router weight ([M_total, 1], masked [G, max_m, 1]), an
// auxiliary output, and reductions along N, along the tokens and over a group; D and every output
// against the epilogue evaluated in double on each group's reference (fused_tensors.h). Then what
// grouped_gemm refuses with 4-bit weights, by name, without writing D; and a captured masked call
// replayed with other counts in the device sizes. Skips without an sm_90 device.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "../cpu/rejection.h"
#include "gemmkit/error.h"
#include "gemmkit/grouped.h"
#include "gpu_test.h"
#include "grouped_problem.h"

namespace gemmkit {
namespace {

using testing::GroupedCase;
using testing::GroupedProblem;
using testing::kEdgeRows;

constexpr GroupLayout masked = GroupLayout::masked;
constexpr DType bf16 = DType::bf16, f16 = DType::f16, f32 = DType::f32, u4 = DType::u4, e2m1 = DType::e2m1,
                e4m3 = DType::e4m3;
constexpr ScaleMode tensor = ScaleMode::tensor, rowwise = ScaleMode::rowwise, block = ScaleMode::block,
                    mx = ScaleMode::mx;

// G groups of 0 to `most` rows, uneven and the same on every run: group g has (7 g + 3) mod
// (most + 1) rows, so that empty groups and full ones lie among the first most + 1.
std::vector<int64_t> uneven_rows(int64_t groups, int64_t most) {
  std::vector<int64_t> rows(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) rows[size_t(g)] = (7 * g + 3) % (most + 1);
  return rows;
}

// The test's name for a case: layout, weights, activations, groups and rows, N, K, D.
std::string case_name(const GroupedCase& c) {
  std::string s = c.layout == masked ? "masked" : "contiguous";
  s += *c.weights == u4 ? "_u4_g" + std::to_string(c.group) + (c.zeros ? "_zeros" : "") : "_e2m1";
  s += "_" + std::string(dtype_name(c.in));
  if (c.scales_a()) s += "_" + std::string(scale_mode_name(c.scales));
  if (c.group_scales) s += "_" + std::string(dtype_name(*c.group_scales)) + "_scales";
  s += "_G" + std::to_string(c.groups()) +
       (c.layout == masked ? "_maxm" + std::to_string(c.largest() + c.extra_rows) : "_M" + std::to_string(c.total()));
  s += "_N" + std::to_string(c.n) + "_K" + std::to_string(c.k) + "_to_" + std::string(dtype_name(c.out));
  if (c.int64) s += "_int64";
  if (c.zero_unowned) s += "_zero_unowned";
  return s;
}

const std::vector<GroupedCase> kCases = {
    // W4A16: int4 symmetric and with zero points, in groups of 32, 64, 128 and per-channel (a group
    // of K, and one past K); MXFP4 (gpt-oss's 2880 x 2880 among them); bf16 and f16; D bf16, f16, f32.
    {.rows = kEdgeRows, .n = 1001, .k = 2880, .weights = u4, .group = 128},
    {.rows = kEdgeRows, .n = 512, .k = 1000, .in = f16, .out = f16, .weights = u4, .group = 128, .zeros = true},
    {.layout = masked, .rows = {200, 0, 1, 77}, .n = 257, .k = 4097, .out = f32, .int64 = true, .weights = u4,
     .group = 32, .zeros = true},
    {.rows = kEdgeRows, .n = 257, .k = 4097, .in = f16, .weights = u4, .group = 64},
    {.rows = kEdgeRows, .n = 384, .k = 1000, .weights = u4, .group = 1000, .zeros = true},
    {.layout = masked, .rows = {3, 130, 0, 64}, .n = 1001, .k = 2880, .in = f16, .out = f16, .weights = u4,
     .group = 4096},
    {.rows = kEdgeRows, .n = 2880, .k = 2880, .weights = e2m1},
    {.layout = masked, .rows = {3, 130, 0, 64}, .n = 257, .k = 1000, .in = f16, .weights = e2m1},
    {.rows = kEdgeRows, .n = 511, .k = 4097, .out = f32, .weights = e2m1},
    // W4A8: e4m3 activations with no scales, one scale a tensor (a group's, masked) or a row; u4
    // scales bf16 and f16, with and without zero points, groups of 32, 64, 128 and per-channel;
    // MXFP4 under e4m3.
    {.rows = kEdgeRows, .n = 1001, .k = 2880, .in = e4m3, .scales = rowwise, .weights = u4, .group = 128},
    {.rows = kEdgeRows, .n = 512, .k = 1000, .in = e4m3, .scales = tensor, .weights = u4, .group = 128, .zeros = true,
     .group_scales = f16},
    {.layout = masked, .rows = {200, 0, 1, 77}, .n = 257, .k = 4097, .in = e4m3, .out = f32, .scales = rowwise,
     .weights = u4, .group = 128, .zeros = true, .group_scales = f16},
    {.layout = masked, .rows = {3, 130, 0, 64}, .n = 1001, .k = 1000, .in = e4m3, .out = f16, .scales = tensor,
     .weights = u4, .group = 128},
    {.rows = kEdgeRows, .n = 257, .k = 2880, .in = e4m3, .weights = u4, .group = 32, .zeros = true},
    {.rows = kEdgeRows, .n = 1001, .k = 1000, .in = e4m3, .scales = rowwise, .weights = u4, .group = 1000,
     .group_scales = f16},
    {.layout = masked, .rows = {3, 130, 0, 64}, .n = 2880, .k = 2880, .in = e4m3, .scales = rowwise, .weights = e2m1},
    // W4A8 with A's inner scales, which the promotion reads as B's (128x1 blocks, mx exponents) from
    // boxes that start up to 16 bytes before a group's first token: 1x128 blocks against u4 in groups
    // of 128 (zero points, f16 scales) and 64, mx exponents (A8W4 in MX) against e2m1 and u4 in
    // groups of 32; contiguous groups starting off every multiple of 4 and 16 tokens, masked ones.
    {.rows = kEdgeRows, .n = 1001, .k = 2880, .in = e4m3, .scales = block, .weights = u4, .group = 128, .zeros = true,
     .group_scales = f16},
    {.layout = masked, .rows = {3, 130, 0, 64}, .n = 257, .k = 4097, .in = e4m3, .out = f32, .scales = block,
     .weights = u4, .group = 64},
    {.rows = kEdgeRows, .n = 2880, .k = 2880, .in = e4m3, .scales = mx, .weights = e2m1},
    {.layout = masked, .rows = {200, 0, 1, 77}, .n = 511, .k = 1000, .in = e4m3, .out = f16, .scales = mx,
     .weights = u4, .group = 32, .zeros = true},
    // FP4 x FP4: e2m1 activations with mx exponents, widened to e4m3 first, against e2m1 and u4 in
    // groups of 32.
    {.rows = kEdgeRows, .n = 1001, .k = 2880, .in = e2m1, .scales = mx, .weights = e2m1},
    {.layout = masked, .rows = {3, 130, 0, 64}, .n = 257, .k = 1000, .in = e2m1, .out = f16, .scales = mx,
     .weights = u4, .group = 32, .zeros = true},
    // Decode: masked, max_m 1 and 16 (rows past the counts untouched), G = 8 and 128; contiguous,
    // 0 to 2 tokens in each of 128 groups.
    {.layout = masked, .rows = uneven_rows(8, 1), .n = 4095, .k = 2880, .extra_rows = 0, .weights = u4, .group = 128,
     .zeros = true},
    {.layout = masked, .rows = uneven_rows(128, 1), .n = 1001, .k = 2880, .in = e4m3, .scales = rowwise,
     .extra_rows = 0, .weights = u4, .group = 128, .group_scales = f16},
    {.layout = masked, .rows = uneven_rows(8, 16), .n = 257, .k = 4097, .extra_rows = 2, .weights = e2m1},
    {.layout = masked, .rows = uneven_rows(128, 16), .n = 511, .k = 1000, .in = f16, .out = f16, .extra_rows = 0,
     .weights = u4, .group = 128},
    {.layout = masked, .rows = uneven_rows(128, 16), .n = 257, .k = 2880, .in = e4m3, .scales = tensor,
     .extra_rows = 0, .weights = u4, .group = 64, .zeros = true},
    {.layout = masked, .rows = uneven_rows(8, 16), .n = 4095, .k = 2880, .in = e4m3, .scales = block, .extra_rows = 0,
     .weights = u4, .group = 128},
    {.rows = uneven_rows(128, 2), .n = 1001, .k = 2880, .in = e4m3, .scales = block, .weights = u4, .group = 128},
    {.rows = uneven_rows(32, 3), .n = 511, .k = 1000, .in = e4m3, .scales = mx, .weights = e2m1},
    {.layout = masked, .rows = uneven_rows(8, 16), .n = 511, .k = 4097, .in = e2m1, .scales = mx, .extra_rows = 2,
     .weights = e2m1},
    {.rows = uneven_rows(128, 2), .n = 1001, .k = 2880, .weights = u4, .group = 128, .zeros = true},
    // Prefill-sized groups, G = 8: M_total 4095 and 1001; masked up to 512 rows a group.
    {.rows = {0, 517, 1, 1200, 33, 0, 900, 1444}, .n = 2880, .k = 2880, .weights = u4, .group = 128, .zeros = true},
    {.rows = {130, 0, 257, 64, 1, 301, 99, 149}, .n = 4095, .k = 1000, .in = e4m3, .scales = rowwise, .weights = u4,
     .group = 128, .group_scales = f16},
    {.rows = {130, 0, 257, 64, 1, 301, 99, 149}, .n = 2880, .k = 2880, .in = e4m3, .scales = block, .weights = u4,
     .group = 128, .zeros = true},
    {.layout = masked, .rows = {512, 0, 1, 300, 129, 64, 257, 500}, .n = 2880, .k = 2880, .weights = e2m1},
    // One group.
    {.rows = {999}, .n = 257, .k = 4097, .weights = u4, .group = 64, .zeros = true},
    {.layout = masked, .rows = {16}, .n = 1001, .k = 1000, .in = e4m3, .scales = rowwise, .extra_rows = 0,
     .weights = u4, .group = 128},
    // Rows no group owns zeroed (sizes.zero_unowned): past the last end, past each group's count.
    {.rows = kEdgeRows, .n = 257, .k = 1000, .extra_rows = 40, .weights = u4, .group = 128, .zero_unowned = true},
    {.layout = masked, .rows = {3, 0, 70}, .n = 1001, .k = 2880, .in = e4m3, .out = f32, .scales = rowwise,
     .weights = u4, .group = 128, .zeros = true, .zero_unowned = true},
    {.layout = masked, .rows = uneven_rows(8, 16), .n = 257, .k = 4097, .extra_rows = 2, .weights = e2m1,
     .zero_unowned = true},
};

class GroupedLowbit : public testing::GpuTest, public ::testing::WithParamInterface<GroupedCase> {};

TEST_P(GroupedLowbit, MatchesReferenceAndLeavesUnownedRows) {
  testing::expect_grouped_correct(GetParam(), "grouped 4-bit");
}

INSTANTIATE_TEST_SUITE_P(GroupedLowbit, GroupedLowbit, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<GroupedCase>& info) { return case_name(info.param); });

// Fused epilogues, by name (for the tests' names) with their tensors' types: an MoE layer's
// per-expert bias then an activation; a token's router weight (the down-projection's combine); the
// activation's input kept beside D; both with the bias (the 16-bit grouped tests' down-projection);
// a gelu layer's backward with its reductions: each expert's bias gradient db[n] (along N: the
// kernel's rows), each token's largest |x| ra[m] (along the tokens: the kernel's columns, which
// contiguous groups split) and each expert's over all its elements ta[].
struct NamedEpilogue {
  const char* name;
  const char* text;
  std::vector<DType> inputs, stores;
};
const NamedEpilogue kBiasSilu{"bias_silu", "silu(acc + bias[n])", {bf16}, {}};
const NamedEpilogue kRoute{"route", "acc * route[m]", {f32}, {}};
const NamedEpilogue kAux{"aux_gelu", "pre[m, n] = acc; gelu(acc)", {}, {bf16}};
const NamedEpilogue kDown{"bias_aux_route", "h = acc + bias[n]; pre[m, n] = h; h * route[m]", {bf16, f32}, {bf16}};
const NamedEpilogue kBackward{"backward_reductions",
                              "dh = acc * dgelu(pre[m, n]); db[n] = sum(dh); ra[m] = amax(dh); ta[] = amax(dh); dh",
                              {bf16},
                              {f32, f32, f32}};
const NamedEpilogue* const kEpilogues[] = {&kBiasSilu, &kRoute, &kAux, &kDown, &kBackward};

GroupedCase with_epilogue(GroupedCase c, const NamedEpilogue& e) {
  c.epilogue = e.text;
  c.epilogue_inputs = e.inputs;
  c.epilogue_stores = e.stores;
  return c;
}

std::string epilogue_case_name(const GroupedCase& c) {
  for (const NamedEpilogue* e : kEpilogues) {
    if (c.epilogue == e->text) return case_name(c) + "_" + e->name;
  }
  return case_name(c) + "_epilogue";
}

// Each epilogue contiguous and masked, W4A16 (int4 in groups of 128, with zero points and in
// groups of 32; MXFP4) and W4A8 (e4m3 scaled per token or per tensor, int4 and MXFP4): empty and
// one-token groups, groups ending inside a tile column, N odd; decode (masked max_m 1 and 16 over
// 128 groups; contiguous, 0 to 2 tokens in each of 128 groups, so that a tile column holds many
// groups' tokens); D f16 and f32 beside bf16; rows no group owns zeroed in D (the outputs' left NaN).
const std::vector<GroupedCase> kEpilogueCases = {
    with_epilogue({.rows = kEdgeRows, .n = 1001, .k = 2880, .weights = u4, .group = 128}, kBiasSilu),
    with_epilogue({.layout = masked, .rows = {200, 0, 1, 77}, .n = 257, .k = 1000, .weights = e2m1}, kBiasSilu),
    with_epilogue({.rows = kEdgeRows, .n = 257, .k = 1000, .in = f16, .out = f16, .weights = e2m1}, kRoute),
    with_epilogue({.layout = masked, .rows = {3, 130, 0, 64}, .n = 1001, .k = 2880, .weights = u4, .group = 128,
                   .zeros = true},
                  kRoute),
    with_epilogue({.rows = kEdgeRows, .n = 511, .k = 4097, .out = f32, .weights = u4, .group = 32, .zeros = true},
                  kAux),
    with_epilogue({.layout = masked, .rows = {200, 0, 1, 77}, .n = 257, .k = 2880, .weights = e2m1}, kAux),
    with_epilogue({.rows = kEdgeRows, .n = 1001, .k = 1000, .weights = u4, .group = 128}, kBackward),
    with_epilogue({.layout = masked, .rows = {3, 130, 0, 64}, .n = 257, .k = 2880, .weights = e2m1}, kBackward),
    // W4A8.
    with_epilogue({.rows = kEdgeRows, .n = 1001, .k = 2880, .in = e4m3, .scales = rowwise, .weights = u4,
                   .group = 128},
                  kDown),
    with_epilogue({.layout = masked, .rows = {200, 0, 1, 77}, .n = 257, .k = 1000, .in = e4m3, .out = f32,
                   .scales = rowwise, .weights = u4, .group = 128, .zeros = true, .group_scales = f16},
                  kBiasSilu),
    with_epilogue({.rows = kEdgeRows, .n = 257, .k = 2880, .in = e4m3, .scales = rowwise, .weights = e2m1}, kAux),
    with_epilogue({.layout = masked, .rows = {3, 130, 0, 64}, .n = 1001, .k = 1000, .in = e4m3, .scales = tensor,
                   .weights = u4, .group = 128},
                  kRoute),
    with_epilogue({.rows = kEdgeRows, .n = 257, .k = 1000, .in = e4m3, .scales = rowwise, .weights = u4, .group = 128,
                   .zeros = true},
                  kBackward),
    with_epilogue({.layout = masked, .rows = {3, 130, 0, 64}, .n = 1001, .k = 2880, .in = e4m3, .scales = rowwise,
                   .weights = e2m1},
                  kBackward),
    // Decode.
    with_epilogue({.layout = masked, .rows = uneven_rows(128, 1), .n = 1001, .k = 2880, .in = e4m3, .scales = rowwise,
                   .extra_rows = 0, .weights = u4, .group = 128, .group_scales = f16},
                  kRoute),
    with_epilogue({.layout = masked, .rows = uneven_rows(128, 16), .n = 257, .k = 1000, .extra_rows = 0,
                   .weights = e2m1},
                  kDown),
    with_epilogue({.rows = uneven_rows(128, 2), .n = 1001, .k = 2880, .weights = u4, .group = 128, .zeros = true},
                  kBackward),
    with_epilogue({.rows = uneven_rows(128, 2), .n = 511, .k = 1000, .in = e4m3, .scales = rowwise, .weights = u4,
                   .group = 128},
                  kDown),
    // Rows no group owns zeroed in D; the auxiliary output's stay NaN.
    with_epilogue({.rows = kEdgeRows, .n = 257, .k = 1000, .extra_rows = 40, .weights = u4, .group = 128,
                   .zero_unowned = true},
                  kDown),
    with_epilogue({.layout = masked, .rows = {3, 0, 70}, .n = 1001, .k = 2880, .in = e4m3, .out = f32,
                   .scales = rowwise, .weights = e2m1, .zero_unowned = true},
                  kAux),
};

class GroupedLowbitEpilogue : public testing::GpuTest, public ::testing::WithParamInterface<GroupedCase> {};

TEST_P(GroupedLowbitEpilogue, MatchesReferenceThroughTheEpilogue) {
  testing::expect_grouped_correct(GetParam(), "grouped 4-bit fused");
}

INSTANTIATE_TEST_SUITE_P(GroupedLowbitEpilogue, GroupedLowbitEpilogue, ::testing::ValuesIn(kEpilogueCases),
                         [](const ::testing::TestParamInfo<GroupedCase>& info) {
                           return epilogue_case_name(info.param);
                         });

// The first `count` groups of a [G, rows, cols] view: a batch short of G.
TensorView first_groups(const TensorView& t, int64_t count) {
  return TensorView::batched(t.data, t.dtype, count, t.rows(), t.cols(), t.batch_stride(), t.row_stride(),
                             t.col_stride());
}

using GroupedLowbitErrors = testing::GpuTest;

// What grouped_gemm does not take with 4-bit weights, refused with Error(invalid_argument) whose
// message starts with the argument's name, each for contiguous and masked groups, and D (with
// sizes.zero_unowned set, so that a call refused after its zeroing kernel would show) left as
// poisoned: W4A8 with A's mx exponents against weights in groups of 128, a dual GEMM's B2, scales
// and zero points for G - 1 groups, zero points for e2m1 weights; and a fused epilogue's tensor of
// the wrong shape (a per-expert bias one column short).
TEST_F(GroupedLowbitErrors, RefusedByNameWithDUntouched) {
  for (GroupLayout layout : {GroupLayout::contiguous, masked}) {
    const std::vector<int64_t> rows = {3, 0, 70, 1};  // G = 4
    GroupedProblem w4a8({.layout = layout, .rows = rows, .in = e4m3, .scales = rowwise, .weights = u4, .group = 128,
                         .zeros = true, .zero_unowned = true});
    GroupedProblem exponents({.layout = layout, .rows = rows, .in = e4m3, .scales = mx, .weights = u4, .group = 128,
                              .zero_unowned = true});
    GroupedProblem fp4({.layout = layout, .rows = rows, .weights = e2m1, .zero_unowned = true});
    for (GroupedProblem* p : {&w4a8, &exponents, &fp4}) p->poison();
    const auto refused = [&](const GroupedProblem& p, const GemmOptions& o, const std::string& argument,
                             std::initializer_list<std::string> given) {
      SCOPED_TRACE(std::string(layout == masked ? "masked: " : "contiguous: ") + argument);
      testing::expect_invalid_argument([&] { grouped_gemm(p.a(), p.b(), p.d(), p.sizes(), o); }, argument, given);
    };
    refused(exponents, exponents.options(), "scale_a", {"mode mx", "groups of 128"});
    GemmOptions o = w4a8.options();
    const TensorView short_bias = TensorView::batched(w4a8.d().data, bf16, 4, 1, 255, 255, 255, 1);  // N = 256
    o.epilogue = {"silu(acc + bias[n])", {{"bias", short_bias}}};
    refused(w4a8, o, "options.epilogue.tensors[\"bias\"]", {"[4, 1, 255]", "[G = 4, 1, 256]"});
    o = w4a8.options();
    o.b2 = w4a8.b();
    refused(w4a8, o, "options.b2", {});
    o = w4a8.options();
    o.scale_b.scales = first_groups(o.scale_b.scales, 3);
    refused(w4a8, o, "scale_b", {"3"});
    o = w4a8.options();
    o.scale_b.zeros = first_groups(*o.scale_b.zeros, 3);
    refused(w4a8, o, "scale_b.zeros", {"3"});
    o = fp4.options();
    o.scale_b.zeros = o.scale_b.scales;
    refused(fp4, o, "scale_b", {"zero points"});
    for (const GroupedProblem* p : {&w4a8, &exponents, &fp4}) testing::expect_d_untouched(p->dense());
  }
}

// The sizes are read when the kernel runs: one masked call captured in a CUDA graph and replayed
// with other counts written to the same device array (a group emptied, one filled to max_m), each
// replay's groups against the reference and the rest of D untouched (or zero): W4A8 int4 with
// zero points, and MXFP4 under bf16.
using GroupedLowbitGraph = testing::GpuTest;

TEST_F(GroupedLowbitGraph, MaskedReplaysReadNewCounts) {
  for (bool zero_unowned : {false, true}) {
    for (GroupedCase c : {GroupedCase{.layout = masked, .rows = {16, 0, 3, 9}, .n = 1001, .k = 2880, .in = e4m3,
                                      .scales = rowwise, .extra_rows = 0, .weights = u4, .group = 128, .zeros = true},
                          GroupedCase{.layout = masked, .rows = {16, 0, 3, 9}, .n = 257, .k = 1000, .extra_rows = 0,
                                      .weights = e2m1}}) {
      c.zero_unowned = zero_unowned;
      GroupedProblem problem(c);
      testing::expect_graph_replays_correct(problem, {{0, 16, 1, 16}, {5, 5, 0, 1}}, "graph replay");
    }
  }
}

}  // namespace
}  // namespace gemmkit
