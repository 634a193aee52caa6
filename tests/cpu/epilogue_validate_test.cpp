// The fused epilogue's argument checks (api/epilogue_checks.h) through validate_gemm and
// prepare_grouped, and how a problem carries the epilogue (kernel config, cache keys, transposed
// plans), without a GPU. Pointers are fake device addresses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "api/prepare.h"
#include "api/validate.h"
#include "config_tests.h"
#include "dispatch/cost_model.h"
#include "dispatch/operand_access.h"
#include "dispatch/plan.h"
#include "rejection.h"

// A namespace of its own: the sanitizer build compiles the CPU tests as one unit.
namespace gemmkit::epilogue_validate_test {
namespace {

constexpr int64_t M = 64, N = 32, K = 48, B = 3;

using config_tests::address;  // fake device addresses 4 GiB apart

// D = A B over a batch of B, with the epilogue `text` and its tensors.
struct Args {
  TensorView a = TensorView::batched(address(0), DType::bf16, B, M, K, M * K, K, 1);
  TensorView b = TensorView::row_major(address(1), DType::bf16, K, N);
  TensorView d = TensorView::batched(address(2), DType::bf16, B, M, N, M * N, N, 1);
  GemmOptions options;
};

TensorView row_vector(int slot, DType type = DType::bf16) { return TensorView::row_major(address(slot), type, 1, N); }
TensorView column_vector(int slot) { return TensorView::matrix(address(slot), DType::f32, M, 1, 1, 1); }
TensorView outputs(int slot) { return TensorView::batched(address(slot), DType::bf16, B, M, N, M * N, N, 1); }

// h = acc + bias[n]; pre[m, n] = h; silu(h) * gate[m, n] * scale[m]
Args swish() {
  Args x;
  x.options.epilogue = {"h = acc + bias[n]; pre[m, n] = h; silu(h) * gate[m, n] * scale[m]",
                        {{"gate", outputs(4)}, {"bias", row_vector(3)}, {"scale", column_vector(5)}, {"pre", outputs(6)}}};
  return x;
}

// Args, or DualArgs below.
template <class Call>
Problem validate(const Call& x) {
  const Problem p = validate_gemm(x.a, x.b, x.d, x.options);
  check_apart(x.a, x.b, x.d, x.options, p);
  return p;
}

template <class Call>
void expect_rejected(const Call& x, const std::string& argument, std::initializer_list<std::string> given) {
  testing::expect_invalid_argument([&] { validate(x); }, argument, given);
}

TEST(EpilogueValidate, TensorsComeInTheProgramsOrderInputsFirst) {
  const Args x = swish();
  const Problem p = validate(x);
  ASSERT_TRUE(p.epilogue.fused());
  ASSERT_EQ(p.epilogue.tensor_count, 4);
  // bias, gate, scale (first use), then pre.
  EXPECT_EQ(p.epilogue.tensors[0].data, address(3));
  EXPECT_EQ(p.epilogue.tensors[0].batch_stride, 0);  // rank 2: one for every batch
  EXPECT_EQ(p.epilogue.tensors[1].data, address(4));
  EXPECT_EQ(p.epilogue.tensors[1].batch_stride, M * N);
  EXPECT_EQ(p.epilogue.tensors[2].data, address(5));
  EXPECT_EQ(p.epilogue.tensors[3].data, address(6));
  EXPECT_FALSE(p.epilogue.transposed);
  EXPECT_NE(p.epilogue.code->find("epilogue_value"), std::string::npos);
}

TEST(EpilogueValidate, TensorUsesListInputsByFirstUseThenOutputs) {
  const std::vector<EpilogueTensorUse> uses =
      epilogue_tensor_uses("h = acc * scale[m] + bias[n]; pre[m, n] = h; out2[m, n] = gelu(h); h * gate[m, n] + bias[n]");
  ASSERT_EQ(uses.size(), 5u);
  const std::pair<const char*, EpilogueIndex> expected[] = {{"scale", EpilogueIndex::m}, {"bias", EpilogueIndex::n},
                                                            {"gate", EpilogueIndex::mn}, {"pre", EpilogueIndex::mn},
                                                            {"out2", EpilogueIndex::mn}};
  for (size_t i = 0; i < uses.size(); ++i) {
    EXPECT_EQ(uses[i].name, expected[i].first) << i;
    EXPECT_EQ(uses[i].index, expected[i].second) << i;
    EXPECT_EQ(uses[i].output, i >= 3) << i;
  }
  EXPECT_TRUE(epilogue_tensor_uses("relu(acc)").empty());
  testing::expect_invalid_argument([] { epilogue_tensor_uses("silu(acc) + x[k]"); }, "epilogue", {"x[k]"});
}

TEST(EpilogueValidate, EqualProgramsAndTypesShareCodeAndOthersDoNot) {
  Args x = swish();
  const Problem p = validate(x);
  // The same program spelled otherwise, with other tensors of the same types.
  x.options.epilogue.text = "pre[m,n] = acc+bias[n]; silu(acc + bias[n]) * gate[m, n] * scale[m]";
  EXPECT_EQ(validate(x).epilogue.code, p.epilogue.code);
  x.options.epilogue.tensors[1].tensor = row_vector(3, DType::f32);
  EXPECT_NE(validate(x).epilogue.code, p.epilogue.code);
  // The kernel config, plan and launch keys follow the code and the tensors.
  EXPECT_EQ(problem_config(p).epilogue, p.epilogue.code);
  Problem moved = p;
  moved.epilogue.tensors[0].data = address(7);
  EXPECT_NE(problem_words(moved), problem_words(p));
  EXPECT_EQ(problem_config(Problem{}).epilogue, nullptr);
}

TEST(EpilogueValidate, TransposedProblemsKeepTheTensorsInDsOrientation) {
  const Problem p = validate(swish());
  const Problem t = transposed_problem(p);
  EXPECT_TRUE(t.epilogue.transposed);
  EXPECT_EQ(t.epilogue.tensors[1].row_stride, p.epilogue.tensors[1].row_stride);
  EXPECT_TRUE(problem_config(t).epilogue_transposed);
  EXPECT_FALSE(transposed_problem(t).epilogue.transposed);
}

TEST(EpilogueValidate, TextAndNamesAreChecked) {
  Args x = swish();
  x.options.epilogue.text = "silu(acc + bias[n]) * gate[m, n] * scale[m] +";
  expect_rejected(x, "epilogue: column", {"silu(acc"});
  x = swish();
  x.options.epilogue.tensors.push_back({"extra", row_vector(8)});
  expect_rejected(x, "options.epilogue.tensors", {"'extra'", "bias, gate, scale, pre"});
  x = swish();
  x.options.epilogue.tensors.erase(x.options.epilogue.tensors.begin() + 1);
  expect_rejected(x, "options.epilogue.tensors", {"'bias'", "bias[n]"});
  x = swish();
  x.options.epilogue.tensors.push_back({"bias", row_vector(8)});
  expect_rejected(x, "options.epilogue.tensors", {"'bias' given twice"});
  x = swish();
  x.options.epilogue.text.clear();
  expect_rejected(x, "options.epilogue.tensors", {"4 given"});
  x = Args{};
  x.options.epilogue.text = "acc + a[n] + b[n] + c[n] + d[n] + e[n] + f[n] + g[n] + h[n] + i[n]";
  expect_rejected(x, "options.epilogue.text", {"9 tensors"});
}

TEST(EpilogueValidate, ShapesTypesAndAlignmentAreChecked) {
  Args x = swish();
  x.options.epilogue.tensors[1].tensor = TensorView::row_major(address(3), DType::bf16, 1, N + 1);
  expect_rejected(x, "options.epilogue.tensors[\"bias\"]", {"[1, 33]", "bias[n]", "[1, 32] or [3, 1, 32]"});
  x = swish();
  x.options.epilogue.tensors[1].tensor = TensorView::batched(address(3), DType::bf16, 2, 1, N, N, N, 1);
  expect_rejected(x, "options.epilogue.tensors[\"bias\"]", {"[2, 1, 32]"});
  x = swish();
  x.options.epilogue.tensors[2].tensor = TensorView::matrix(address(5), DType::e4m3, M, 1, 1, 1);
  expect_rejected(x, "options.epilogue.tensors[\"scale\"]", {"dtype e4m3", "bf16, f16 or f32"});
  x = swish();
  x.options.epilogue.tensors[2].tensor = TensorView::matrix(address(5) + 2, DType::f32, M, 1, 1, 1);
  expect_rejected(x, "options.epilogue.tensors[\"scale\"]", {"not 4-byte aligned"});
  x = swish();
  x.options.epilogue.tensors[3].tensor = TensorView::row_major(address(6), DType::bf16, M, N);
  expect_rejected(x, "options.epilogue.tensors[\"pre\"]", {"pre[m, n] =", "[3, 64, 32] (D's shape)"});
  x = swish();  // an output whose batches overlap one another
  x.options.epilogue.tensors[3].tensor = TensorView::batched(address(6), DType::bf16, B, M, N, 0, N, 1);
  expect_rejected(x, "options.epilogue.tensors[\"pre\"]", {"overlap"});
}

// A reduction's output: f32, contiguous, shaped as an input of its index (rank 2: over every
// batch too), zeroed before the kernel; a scalar input one value a batch.
TEST(EpilogueValidate, ReductionOutputsAreContiguousF32) {
  Args x;
  const TensorView sums = TensorView::batched(address(3), DType::f32, B, 1, N, N, N, 1);
  const TensorView maxima = TensorView::matrix(address(4), DType::f32, M, 1, 1, 1);
  const TensorView whole = TensorView::matrix(address(5), DType::f32, 1, 1, 1, 1);
  const TensorView scale = TensorView::batched(address(6), DType::bf16, B, 1, 1, 2, 1, 1);
  x.options.epilogue = {"dh = acc * dgelu(pre[m, n]) * s[]; db[n] = sum(dh); ra[m] = amax(dh); t[] = amax(dh); dh",
                        {{"pre", outputs(7)}, {"s", scale}, {"db", sums}, {"ra", maxima}, {"t", whole}}};
  const Problem p = validate(x);
  ASSERT_TRUE(p.epilogue.fused());
  EXPECT_EQ(p.epilogue.tensors[1].batch_stride, 2);
  EXPECT_EQ(p.epilogue.zeroed_bytes[0] + p.epilogue.zeroed_bytes[1], 0);
  EXPECT_EQ(p.epilogue.zeroed_bytes[2], B * N * 4);
  EXPECT_EQ(p.epilogue.zeroed_bytes[3], M * 4);
  EXPECT_EQ(p.epilogue.zeroed_bytes[4], 4);
  Args bad = x;
  bad.options.epilogue.tensors[2].tensor = TensorView::batched(address(3), DType::bf16, B, 1, N, N, N, 1);
  expect_rejected(bad, "options.epilogue.tensors[\"db\"]", {"dtype bf16", "f32 for db[n] = sum(...)"});
  bad = x;
  bad.options.epilogue.tensors[2].tensor = TensorView::batched(address(3), DType::f32, B, 1, N, 2 * N, N, 1);
  expect_rejected(bad, "options.epilogue.tensors[\"db\"]", {"leave gaps", "contiguous"});
  bad = x;
  bad.options.epilogue.tensors[3].tensor = TensorView::matrix(address(4), DType::f32, M, 1, 2, 1);
  expect_rejected(bad, "options.epilogue.tensors[\"ra\"]", {"leave gaps"});
  bad = x;
  bad.options.epilogue.tensors[4].tensor = TensorView::matrix(address(5), DType::f32, 1, 2, 2, 1);
  expect_rejected(bad, "options.epilogue.tensors[\"t\"]", {"[1, 2]", "t[] =", "[1, 1] or [3, 1, 1]"});
  bad = x;
  bad.options.epilogue.tensors[1].tensor = TensorView::matrix(address(6), DType::bf16, 1, N, N, 1);
  expect_rejected(bad, "options.epilogue.tensors[\"s\"]", {"s[]", "[1, 1] or [3, 1, 1]"});
  bad = x;  // an output apart from the others
  bad.options.epilogue.tensors[4].tensor = TensorView::matrix(address(4), DType::f32, 1, 1, 1, 1);
  expect_rejected(bad, "options.epilogue.tensors[\"t\"]", {"overlaps options.epilogue.tensors[\"ra\"]"});
  const std::vector<EpilogueTensorUse> uses = epilogue_tensor_uses(x.options.epilogue.text);
  ASSERT_EQ(uses.size(), 5u);
  EXPECT_EQ(uses[1].index, EpilogueIndex::none);
  EXPECT_EQ(uses[2].index, EpilogueIndex::n);
  EXPECT_EQ(uses[2].reduce, EpilogueReduce::sum);
  EXPECT_EQ(uses[3].reduce, EpilogueReduce::amax);
  EXPECT_TRUE(uses[4].output);
}

TEST(EpilogueValidate, OutputsAndInputsApartFromDAndEachOther) {
  Args x = swish();
  x.options.epilogue.tensors[0].tensor = outputs(2);  // gate is D
  expect_rejected(x, "options.epilogue.tensors[\"gate\"]", {"overlaps D", "as C with beta 1"});
  x = swish();
  x.options.epilogue.tensors[3].tensor = outputs(2);  // pre is D
  expect_rejected(x, "options.epilogue.tensors[\"pre\"]", {"overlaps D"});
  x = swish();
  x.options.epilogue.tensors[3].tensor = outputs(0);  // pre is A
  expect_rejected(x, "options.epilogue.tensors[\"pre\"]", {"overlaps A"});
  x = swish();
  x.options.epilogue.tensors[3].tensor = outputs(4);  // pre is gate
  expect_rejected(x, "options.epilogue.tensors[\"pre\"]", {"overlaps options.epilogue.tensors[\"gate\"]"});
}

// Contiguous groups: vectors along N one per group ([G, 1, N]); along the rows one M_total tensor.
TEST(EpilogueValidate, GroupedRowsTakePerGroupVectors) {
  constexpr int64_t G = 8, T = 1000;
  const TensorView a = TensorView::row_major(address(0), DType::bf16, T, K);
  const TensorView b = TensorView::batched(address(1), DType::bf16, G, K, N, N * K, 1, K);
  const TensorView d = TensorView::row_major(address(2), DType::bf16, T, N);
  const GroupSizes sizes{GroupLayout::contiguous, address(3), false, G};
  GemmOptions options;
  options.epilogue = {"h = acc + bias[n]; pre[m, n] = h; h * weight[m]",
                      {{"bias", TensorView::batched(address(4), DType::bf16, G, 1, N, N, N, 1)},
                       {"weight", TensorView::matrix(address(5), DType::f32, T, 1, 1, 1)},
                       {"pre", TensorView::row_major(address(6), DType::bf16, T, N)}}};
  const Problem p = api::prepare_grouped(a, b, d, sizes, options, 0).problem;
  ASSERT_TRUE(p.epilogue.fused());
  EXPECT_EQ(p.epilogue.tensors[0].batch_stride, N);
  EXPECT_EQ(p.epilogue.tensors[1].batch_stride, 0);
  EXPECT_EQ(problem_config(p).epilogue, p.epilogue.code);
  // No tile wider than 208 runs a grouped kernel with an epilogue (tile_takes_epilogue).
  EXPECT_LE(choose_grouped_config(p, {}).tile_n, 208);
  options.epilogue.tensors[1].tensor = TensorView::batched(address(5), DType::f32, G, T, 1, T, 1, 1);
  testing::expect_invalid_argument([&] { api::prepare_grouped(a, b, d, sizes, options, 0); },
                                   "options.epilogue.tensors[\"weight\"]", {"[8, 1000, 1]", "[1000, 1]"});
}

TEST(EpilogueValidate, FusedEpiloguesAreTriedOnTilesUpTo224Wide) {
  KernelConfig facts;
  facts.epilogue = validate(swish()).epilogue.code;
  EXPECT_TRUE(tile_takes_epilogue({128, 224}, facts));
  EXPECT_FALSE(tile_takes_epilogue({128, 240}, facts));
  facts.group_capacity = 32;  // grouped
  EXPECT_TRUE(tile_takes_epilogue({128, 208}, facts));
  EXPECT_FALSE(tile_takes_epilogue({128, 224}, facts));
  EXPECT_TRUE(tile_takes_epilogue({128, 256}, KernelConfig{}));
  // The plan's narrower choice after a spill: the first candidate no wider.
  Args x = swish();
  x.a = TensorView::row_major(address(0), DType::bf16, 4096, K);
  x.d = TensorView::row_major(address(2), DType::bf16, 4096, 4096);
  x.b = TensorView::row_major(address(1), DType::bf16, K, 4096);
  x.options.epilogue = {"silu(acc + bias[n])", {{"bias", TensorView::row_major(address(3), DType::bf16, 1, 4096)}}};
  const Problem p = validate(x);
  EXPECT_LE(choose_config(p, {}).tile_n, 224);
  EXPECT_LE(choose_config(p, {}, 160).tile_n, 160);
}

// Matrix 0 of a [batch] view.
TensorView first_matrix_of(const TensorView& t) {
  return TensorView::matrix(t.data, t.dtype, t.rows(), t.cols(), t.row_stride(), t.col_stride());
}

// Dual GEMMs (GemmOptions::b2): the argument checks, the default epilogue, and how dispatch takes
// the problem (never transposed, the dual kernel's tiles, the fallback kernel where TMA cannot
// read B2).

constexpr int64_t DM = 300, DN = 1000, DK = 512;

// SwiGLU's up-projection: A (M x K) against a concatenated [2N, K] weight, B its first N rows and
// B2 the next N (K-major views), D M x N.
struct DualArgs {
  TensorView a = TensorView::row_major(address(0), DType::bf16, DM, DK);
  TensorView b = TensorView::matrix(address(1), DType::bf16, DK, DN, 1, DK);
  TensorView d = TensorView::row_major(address(2), DType::bf16, DM, DN);
  GemmOptions options;
  DualArgs() { options.b2 = TensorView::matrix(address(1) + DN * DK * 2, DType::bf16, DK, DN, 1, DK); }
};

TEST(DualValidate, AnEmptyTextIsSwiglu) {
  const DualArgs x;
  const Problem p = validate(x);
  ASSERT_TRUE(p.dual());
  ASSERT_TRUE(p.epilogue.fused());
  EXPECT_EQ(p.b2.data, x.options.b2->data);
  EXPECT_EQ(p.b2.col_stride, DK);
  EXPECT_NE(p.epilogue.code->find("ep_silu("), std::string::npos) << *p.epilogue.code;
  EXPECT_NE(p.epilogue.code->find("acc2"), std::string::npos) << *p.epilogue.code;
}

TEST(DualValidate, BadSecondOperandsAreRefusedByName) {
  DualArgs x;
  x.options.b2->dtype = DType::f16;
  expect_rejected(x, "options.b2", {"f16", "bf16"});
  x = DualArgs{};
  x.options.b2 = TensorView::matrix(address(3), DType::bf16, DK, DN - 1, 1, DK);
  expect_rejected(x, "options.b2", {"[512, 999]", "512 x 1000"});
  x = DualArgs{};
  x.options.b2 = TensorView::batched(address(3), DType::bf16, 2, DK, DN, DK * DN, 1, DK);
  expect_rejected(x, "options.b2", {"batch 2"});
  x = DualArgs{};
  x.options.beta = 0.5f;
  x.options.c = x.d;
  expect_rejected(x, "options.beta", {"0.5", "no C"});
  x = DualArgs{};
  x.options.b2->data = nullptr;
  expect_rejected(x, "options.b2", {"null"});
  x = DualArgs{};
  x.options.b2 = TensorView::matrix(address(2), DType::bf16, DK, DN, 1, DK);  // D's memory
  expect_rejected(x, "D", {"overlaps options.b2"});
}

// FP8 dual GEMMs: e4m3 A (K-major) and B and B2 (K-major views of a concatenated [2N, K] weight),
// A's scales in `mode` (block: 1x128) and B's and B2's in `mode` too (block: 128 x `b_block_cols`),
// each tensor at a fake address of its own.
constexpr int64_t DKB = (DK + 127) / 128, DNB = (DN + 127) / 128;  // 128-deep blocks of K, 128-wide of N

Scale a_scales(ScaleMode mode, int slot) {
  const int64_t cols = mode == ScaleMode::block ? DKB : mode == ScaleMode::mx ? DK / 32 : 1;
  const DType type = mode == ScaleMode::mx ? DType::ue8m0 : DType::f32;
  return {mode, TensorView::row_major(address(slot), type, mode == ScaleMode::tensor ? 1 : DM, cols)};
}
Scale b_scales(ScaleMode mode, int slot, int64_t b_block_cols = 128) {
  const DType type = mode == ScaleMode::mx ? DType::ue8m0 : DType::f32;
  switch (mode) {
    case ScaleMode::tensor: return {mode, TensorView::row_major(address(slot), type, 1, 1)};
    case ScaleMode::rowwise: return {mode, TensorView::row_major(address(slot), type, 1, DN)};
    case ScaleMode::block: return {mode, TensorView::row_major(address(slot), type, DKB, b_block_cols == 1 ? DN : DNB)};
    case ScaleMode::mx: return {mode, TensorView::row_major(address(slot), type, DK / 32, DN)};
    case ScaleMode::none: break;
  }
  return {};
}

DualArgs fp8_dual(ScaleMode mode, int64_t b_block_cols = 128) {
  DualArgs x;
  x.a.dtype = x.b.dtype = x.options.b2->dtype = DType::e4m3;
  x.options.scale_a = a_scales(mode, 4);
  x.options.scale_b = b_scales(mode, 5, b_block_cols);
  x.options.scale_b2 = b_scales(mode, 6, b_block_cols);
  return x;
}

// The message validate_gemm rejects x with ("" where it accepts it).
std::string rejection(const DualArgs& x) {
  try {
    validate(x);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct Fp8Mode {
  ScaleMode mode;
  int64_t b_block_cols = 128;
};
const Fp8Mode kFp8Modes[] = {{ScaleMode::tensor}, {ScaleMode::rowwise}, {ScaleMode::block, 128}, {ScaleMode::block, 1},
                             {ScaleMode::mx}};

TEST(DualValidate, Fp8SecondOperandsTakeScalesAsBDoes) {
  for (const Fp8Mode& m : kFp8Modes) {
    SCOPED_TRACE(std::string(scale_mode_name(m.mode)) + " 128x" + std::to_string(m.b_block_cols));
    const DualArgs x = fp8_dual(m.mode, m.b_block_cols);
    const Problem p = validate(x);
    ASSERT_TRUE(p.dual());
    EXPECT_EQ(p.b2.dtype, DType::e4m3);
    EXPECT_EQ(p.scale_b2.mode, m.mode);
    EXPECT_EQ(p.scale_b2.m.data, x.options.scale_b2.scales.data);
    EXPECT_EQ(p.scale_b2.m.dtype, x.options.scale_b2.scales.dtype);
    EXPECT_EQ(p.scale_b2.block_rows, p.scale_b.block_rows);
    EXPECT_EQ(p.scale_b2.block_cols, p.scale_b.block_cols);
    EXPECT_NE(p.epilogue.code->find("acc2"), std::string::npos);
  }
  // Any strides: B2's scales column-major beside B's row-major; e5m2 weights, B2 as B.
  DualArgs x = fp8_dual(ScaleMode::block);
  x.options.scale_b2.scales = TensorView::col_major(address(6), DType::f32, DKB, DNB);
  x.b.dtype = x.options.b2->dtype = DType::e5m2;
  const Problem p = validate(x);
  EXPECT_EQ(p.scale_b2.m.row_stride, 1);
  EXPECT_EQ(p.scale_b2.m.col_stride, DKB);
  EXPECT_EQ(p.b2.dtype, DType::e5m2);
  // 16-bit dual GEMMs take none.
  EXPECT_EQ(validate(DualArgs{}).scale_b2.mode, ScaleMode::none);
}

TEST(DualValidate, Fp8SecondOperandsScalesFollowBs) {
  // None where B's are given.
  for (const Fp8Mode& m : kFp8Modes) {
    DualArgs x = fp8_dual(m.mode, m.b_block_cols);
    x.options.scale_b2 = {};
    expect_rejected(x, "options.scale_b2: mode none",
                    {"expected B2's scales in mode " + std::string(scale_mode_name(m.mode))});
  }
  // Another mode.
  DualArgs x = fp8_dual(ScaleMode::block);
  x.options.scale_b2 = b_scales(ScaleMode::rowwise, 6);
  expect_rejected(x, "options.scale_b2: mode rowwise", {"expected scale_b's mode, block"});
  x = fp8_dual(ScaleMode::mx);
  x.options.scale_b2 = b_scales(ScaleMode::tensor, 6);
  expect_rejected(x, "options.scale_b2: mode tensor", {"expected scale_b's mode, mx"});
  x = fp8_dual(ScaleMode::tensor);
  x.options.scale_b = {};  // B unscaled: B2 likewise
  expect_rejected(x, "options.scale_b2: mode tensor", {"expected scale_b's mode, none"});
  // Block's other blocks: 128x1 beside 128x128, and the other way round.
  x = fp8_dual(ScaleMode::block);
  x.options.scale_b2 = b_scales(ScaleMode::block, 6, 1);
  expect_rejected(x, "options.scale_b2: ", {"expected scale_b's blocks", "[4, 1000]"});
  x = fp8_dual(ScaleMode::block, 1);
  x.options.scale_b2 = b_scales(ScaleMode::block, 6, 128);
  expect_rejected(x, "options.scale_b2: ", {"expected scale_b's blocks", "[4, 8]"});
  // Given without B2, FP8 or 16-bit.
  x = fp8_dual(ScaleMode::block);
  x.options.b2.reset();
  expect_rejected(x, "options.scale_b2: ", {"given without options.b2"});
  x = DualArgs{};
  x.options.b2.reset();
  x.options.scale_b2 = b_scales(ScaleMode::tensor, 6);
  expect_rejected(x, "options.scale_b2: ", {"given without options.b2"});
}

// A scale tensor B's scales could not be, given as B2's: the message scale_b's would give, naming
// options.scale_b2 (the shape or dtype given, and what was expected).
TEST(DualValidate, Fp8SecondOperandsScalesOfTheWrongShapeOrTypeAreRefusedAsBsWouldBe) {
  struct Bad {
    ScaleMode mode;
    TensorView scales;
    std::string given;
  };
  const Bad cases[] = {
      {ScaleMode::tensor, TensorView::row_major(address(7), DType::f32, 1, 2), "[1, 2]"},
      {ScaleMode::rowwise, TensorView::row_major(address(7), DType::f32, 1, DN - 1), "[1, 999]"},
      {ScaleMode::rowwise, TensorView::row_major(address(7), DType::f32, DK, 1), "[512, 1]"},
      {ScaleMode::block, TensorView::row_major(address(7), DType::f32, DKB + 1, DNB), "[5, 8]"},
      {ScaleMode::block, TensorView::row_major(address(7), DType::f32, DKB, DN - 1), "[4, 999]"},
      {ScaleMode::mx, TensorView::row_major(address(7), DType::ue8m0, DK / 32 - 1, DN), "[15, 1000]"},
      {ScaleMode::mx, TensorView::row_major(address(7), DType::f32, DK / 32, DN), "f32"},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(std::string(scale_mode_name(c.mode)) + " " + c.given);
    DualArgs for_b = fp8_dual(c.mode);
    for_b.options.scale_b.scales = c.scales;
    const std::string message = rejection(for_b);
    ASSERT_EQ(message.rfind("scale_b: ", 0), 0u) << message;
    // What the message says of the tensor (up to the operand it names), and what it expected.
    const size_t operand = message.find(" of B"), expected = message.find("expected");
    ASSERT_NE(expected, std::string::npos) << message;
    const std::string said = message.substr(9, std::min(operand, message.find(';')) - 9);
    DualArgs for_b2 = fp8_dual(c.mode);
    for_b2.options.scale_b2.scales = c.scales;
    expect_rejected(for_b2, "options.scale_b2: " + said, {c.given, message.substr(expected)});
  }
}

TEST(DualValidate, TheEpilogueReadsAcc2ExactlyWhereTheProblemIsDual) {
  DualArgs x;
  x.options.epilogue.text = "silu(acc)";
  expect_rejected(x, "options.epilogue.text", {"silu(acc)", "acc2"});
  x = DualArgs{};
  x.options.b2.reset();
  x.options.epilogue.text = "silu(acc) * acc2";
  expect_rejected(x, "options.epilogue.text", {"acc2", "options.b2"});
  x = DualArgs{};
  x.options.epilogue.text = "silu(acc) * acc2 * scale[m]";
  x.options.epilogue.tensors = {{"scale", TensorView::matrix(address(4), DType::f32, DM, 1, 1, 1)}};
  EXPECT_TRUE(validate(x).epilogue.fused());
}

// The MoE up-projection: B and B2 [G, K, N], one gate and one up weight an expert.
TEST(DualValidate, GroupedGemmsTakeASecondBOfEachGroup) {
  constexpr int64_t G = 4;
  const DualArgs x;
  const TensorView b = TensorView::batched(address(1), DType::bf16, G, DK, DN, 2 * DK * DN, 1, DK);
  GemmOptions options;
  options.b2 = TensorView::batched(address(1) + DK * DN * 2, DType::bf16, G, DK, DN, 2 * DK * DN, 1, DK);
  GroupSizes sizes;
  sizes.data = address(5);
  sizes.count = G;
  const Problem p = api::prepare_grouped(x.a, b, x.d, sizes, options, 0).problem;
  EXPECT_TRUE(p.dual() && p.grouped());
  EXPECT_EQ(p.b2.batch_stride, 2 * DK * DN);
  EXPECT_NE(p.epilogue.code->find("acc2"), std::string::npos);
  const KernelConfig c = choose_grouped_config(p, DeviceLimits{});
  EXPECT_TRUE(c.dual && c.grouped()) << c.name();
  EXPECT_EQ(c.tile_n % 32, 0) << c.name();
  options.b2 = first_matrix_of(*options.b2);  // one weight for every group
  testing::expect_invalid_argument([&] { api::prepare_grouped(x.a, b, x.d, sizes, options, 0); }, "options.b2",
                                   {"[G, K, N]"});
  // The weight gradient's groups split K: no pairs of columns there.
  options.b2 = b;
  const TensorView y = TensorView::row_major(address(6), DType::bf16, DM, DN);
  const TensorView d = TensorView::batched(address(7), DType::bf16, G, DK, DN, DK * DN, DN, 1);
  testing::expect_invalid_argument([&] { api::prepare_grouped_wgrad(x.a, y, d, sizes, options, 0); }, "options.b2",
                                   {"grouped_gemm_wgrad"});
}

// FP8 MoE up-projections: B2's scales one set a group ([G, ...]) as B's, or one for every group;
// a batch other than G refused by name.
TEST(DualValidate, Fp8GroupedGemmsTakeB2sScalesOfEachGroup) {
  constexpr int64_t G = 4;
  const DualArgs x = fp8_dual(ScaleMode::block);
  const TensorView b = TensorView::batched(address(1), DType::e4m3, G, DK, DN, 2 * DK * DN, 1, DK);
  GemmOptions options = x.options;
  options.b2 = TensorView::batched(address(1) + DK * DN, DType::e4m3, G, DK, DN, 2 * DK * DN, 1, DK);
  options.scale_b.scales = TensorView::batched(address(5), DType::f32, G, DKB, DNB, DKB * DNB, DNB, 1);
  options.scale_b2.scales = TensorView::batched(address(6), DType::f32, G, DKB, DNB, 2 * DKB * DNB, DNB, 1);
  GroupSizes sizes;
  sizes.data = address(8);
  sizes.count = G;
  Problem p = api::prepare_grouped(x.a, b, x.d, sizes, options, 0).problem;
  EXPECT_TRUE(p.dual() && p.grouped());
  EXPECT_EQ(p.scale_b2.mode, ScaleMode::block);
  EXPECT_EQ(p.scale_b2.m.data, address(6));
  EXPECT_EQ(p.scale_b2.m.batch_stride, 2 * DKB * DNB);
  EXPECT_EQ(p.scale_b2.block_cols, 128);
  const KernelConfig c = choose_grouped_config(p, DeviceLimits{});
  EXPECT_TRUE(c.dual && c.grouped() && c.in == DType::e4m3) << c.name();
  // One set for every group.
  GemmOptions shared = options;
  shared.scale_b2.scales = TensorView::row_major(address(6), DType::f32, DKB, DNB);
  p = api::prepare_grouped(x.a, b, x.d, sizes, shared, 0).problem;
  EXPECT_EQ(p.scale_b2.m.batch_stride, 0);
  // G - 1 sets.
  GemmOptions short_of_one = options;
  short_of_one.scale_b2.scales = TensorView::batched(address(6), DType::f32, G - 1, DKB, DNB, DKB * DNB, DNB, 1);
  testing::expect_invalid_argument([&] { api::prepare_grouped(x.a, b, x.d, sizes, short_of_one, 0); },
                                   "options.scale_b2: shape", {"[3, 4, 8]", "expected a batch of G"});
  // Masked groups (A and D [G, max_m, ...]): B2's scales batched by group too.
  sizes.layout = GroupLayout::masked;
  const TensorView a = TensorView::batched(address(0), DType::e4m3, G, DM, DK, DM * DK, DK, 1);
  const TensorView d = TensorView::batched(address(2), DType::bf16, G, DM, DN, DM * DN, DN, 1);
  GemmOptions masked = options;
  masked.scale_a.scales = TensorView::batched(address(4), DType::f32, G, DM, DKB, DM * DKB, DKB, 1);
  p = api::prepare_grouped(a, b, d, sizes, masked, 0).problem;
  EXPECT_EQ(p.scale_b2.m.batch_stride, 2 * DKB * DNB);
  masked.scale_b2 = short_of_one.scale_b2;
  testing::expect_invalid_argument([&] { api::prepare_grouped(a, b, d, sizes, masked, 0); }, "options.scale_b2",
                                   {"batch 3"});
}

TEST(DualDispatch, NeverTransposedAndTiledByTheDualKernel) {
  const DualArgs x;
  const Problem p = validate(x);
  EXPECT_EQ(normalize(p).m, DM);  // decode or a column-major D would transpose another problem
  const std::vector<Candidate> candidates = rank_candidates(p, DeviceLimits{});
  ASSERT_FALSE(candidates.empty());
  for (const Candidate& c : candidates) {
    EXPECT_TRUE(c.config.dual) << c.config.name();
    EXPECT_EQ(c.config.splits, 1) << c.config.name();
    EXPECT_EQ(c.config.tile_n % 32, 0) << c.config.name();
    EXPECT_GE(c.config.tile_n, 128) << c.config.name();
    EXPECT_TRUE(fits(c.config, DeviceLimits{}) || c.config.tile_n > 224) << c.config.name();
  }
  // One token: still the dual kernel's tiles, not the GEMV.
  DualArgs one;
  one.a = TensorView::row_major(address(0), DType::bf16, 1, DK);
  one.d = TensorView::row_major(address(2), DType::bf16, 1, DN);
  const KernelConfig decode = choose_config(validate(one), DeviceLimits{});
  EXPECT_EQ(decode.kind, KernelKind::tma);
  EXPECT_TRUE(decode.dual);
  EXPECT_GE(decode.stages, 2);
}

// FP8 dual GEMMs on the dual TMA kernel's FP8 tiles, 64 or 128 rows by 128 or 160 accumulator
// columns (B's half, then B2's), each taking the scales' mode; never transposed, never split.
TEST(DualDispatch, Fp8TilesAre64Or128By128Or160) {
  for (const Fp8Mode& m : kFp8Modes) {
    SCOPED_TRACE(std::string(scale_mode_name(m.mode)) + " 128x" + std::to_string(m.b_block_cols));
    const Problem p = validate(fp8_dual(m.mode, m.b_block_cols));
    EXPECT_EQ(normalize(p).m, DM);
    const std::vector<Candidate> candidates = rank_candidates(p, DeviceLimits{});
    ASSERT_FALSE(candidates.empty());
    for (const Candidate& c : candidates) {
      EXPECT_TRUE(c.config.dual && c.config.kind == KernelKind::tma) << c.config.name();
      EXPECT_TRUE(c.config.tile_m == 64 || c.config.tile_m == 128) << c.config.name();
      EXPECT_TRUE(c.config.tile_n == 128 || c.config.tile_n == 160) << c.config.name();
      EXPECT_TRUE(tile_takes_scales({c.config.tile_m, c.config.tile_n}, m.mode, m.mode)) << c.config.name();
      EXPECT_EQ(c.config.splits, 1) << c.config.name();
    }
  }
}

TEST(DualDispatch, OperandsTmaCannotReadAreStaged) {
  DualArgs x;
  // Interleaved rows of a [2N, K] weight whose K is odd: rows 2 bytes off 16-byte alignment.
  constexpr int64_t odd_k = DK - 1;
  x.a = TensorView::row_major(address(0), DType::bf16, DM, odd_k);
  x.b = TensorView::matrix(address(1), DType::bf16, odd_k, DN, 1, 2 * odd_k);
  x.options.b2 = TensorView::matrix(address(1) + odd_k * 2, DType::bf16, odd_k, DN, 1, 2 * odd_k);
  KernelConfig c = choose_config(validate(x), DeviceLimits{});
  EXPECT_EQ(c.kind, KernelKind::tma);
  EXPECT_TRUE(c.dual && c.stage_a && c.stage_b && c.a_k_major && c.b_k_major) << c.name();
  // B aligned, B2 N-major: both staged alike (K-major, as B lies).
  x = DualArgs{};
  x.options.b2 = TensorView::row_major(address(3), DType::bf16, DK, DN);
  c = choose_config(validate(x), DeviceLimits{});
  EXPECT_TRUE(c.stage_b && !c.stage_a && c.b_k_major) << c.name();
  // K = 0: the fallback kernel, which keeps a second accumulator.
  x = DualArgs{};
  x.a = TensorView::row_major(address(0), DType::bf16, DM, 0);
  x.b = TensorView::matrix(address(1), DType::bf16, 0, DN, 1, 8);
  x.options.b2 = TensorView::matrix(address(3), DType::bf16, 0, DN, 1, 8);
  c = choose_config(validate(x), DeviceLimits{});
  EXPECT_EQ(c.kind, KernelKind::fallback);
  EXPECT_TRUE(c.dual);
}

}  // namespace
}  // namespace gemmkit::epilogue_validate_test
