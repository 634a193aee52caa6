// quantize's argument checks, which need no GPU (pointers are fake device addresses that are
// never dereferenced), and its launch plan.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "api/quantize.h"
#include "config_tests.h"
#include "gemmkit/error.h"
#include "gemmkit/quantize.h"
#include "rejection.h"

namespace gemmkit {
namespace {

constexpr int64_t R = 256, C = 512;

using config_tests::address;  // fake device addresses 4 GiB apart

struct Args {
  TensorView x = TensorView::row_major(address(0), DType::bf16, R, C);
  TensorView q = TensorView::row_major(address(1), DType::e4m3, R, C);
  TensorView scales = TensorView::row_major(address(2), DType::f32, R, C / 128);
  int64_t block_rows = 1, block_cols = 128;
  QuantizeOptions options;
};

QuantizeProblem validate(const Args& a) {
  return validate_quantize(a.x, a.q, a.scales, a.block_rows, a.block_cols, a.options);
}

// Expects invalid_argument from both validate_quantize and quantize itself (which must throw
// before touching any device), with a message that starts with `argument` and contains `given`.
void expect_rejected(const Args& a, const std::string& argument, std::initializer_list<std::string> given) {
  testing::expect_invalid_argument([&] { validate(a); }, argument, given);
  testing::expect_invalid_argument([&] { quantize(a.x, a.q, a.scales, a.block_rows, a.block_cols, a.options); },
                                   argument, given);
}

TEST(QuantizeValidate, WellFormedArgumentsAreAccepted) {
  const Args a;
  const QuantizeProblem p = validate(a);
  EXPECT_FALSE(p.empty);
  EXPECT_FALSE(p.power_of_two);
  EXPECT_EQ(p.block_rows, 1);
  EXPECT_EQ(p.block_cols, 128);
}

TEST(QuantizeValidate, EveryModeShapeIsAccepted) {
  // (block_rows, block_cols) -> scales shape, for A (M x K = R x C) and B (K x N = R x C).
  const struct {
    int64_t br, bc, rows, cols;
    DType scales;
  } modes[] = {{R, C, 1, 1, DType::f32},         {1, C, R, 1, DType::f32},          {R, 1, 1, C, DType::f32},
               {1, 128, R, 4, DType::f32},       {128, 128, 2, 4, DType::f32},      {128, 1, 2, C, DType::f32},
               {1, 32, R, 16, DType::ue8m0},     {32, 1, 8, C, DType::ue8m0},       {7, 100, 37, 6, DType::f32}};
  for (const auto& m : modes) {
    Args a;
    a.scales = TensorView::col_major(address(2), m.scales, m.rows, m.cols);
    a.block_rows = m.br;
    a.block_cols = m.bc;
    EXPECT_NO_THROW(validate(a)) << m.br << " x " << m.bc;
    EXPECT_EQ(validate(a).power_of_two, m.scales == DType::ue8m0);
  }
}

TEST(QuantizeValidate, RejectsUnsupportedTypes) {
  Args a;
  a.x.dtype = DType::e4m3;
  expect_rejected(a, "x:", {"dtype e4m3", "bf16, f16 or f32"});
  a = Args{};
  a.q.dtype = DType::bf16;
  expect_rejected(a, "q:", {"dtype bf16", "e4m3 or e5m2"});
  a = Args{};
  a.q.dtype = DType::ue8m0;
  expect_rejected(a, "q:", {"dtype ue8m0"});
  a = Args{};
  a.scales.dtype = DType::bf16;
  expect_rejected(a, "scales:", {"dtype bf16", "f32", "ue8m0"});
  a = Args{};
  a.scales.dtype = DType::e4m3;
  expect_rejected(a, "scales:", {"dtype e4m3"});
}

TEST(QuantizeValidate, RejectsNonPositiveBlocks) {
  Args a;
  a.block_rows = 0;
  expect_rejected(a, "block_rows:", {"0", "at least 1"});
  a = Args{};
  a.block_cols = -128;
  expect_rejected(a, "block_cols:", {"-128", "at least 1"});
}

TEST(QuantizeValidate, RejectsBadFormsOfEveryTensor) {
  Args a;
  a.x.rank = 4;
  expect_rejected(a, "x:", {"rank 4"});
  a = Args{};
  a.q.sizes[0] = -1;
  expect_rejected(a, "q:", {"negative size"});
  a = Args{};
  a.scales.strides[1] = -1;
  expect_rejected(a, "scales:", {"negative stride"});
}

TEST(QuantizeValidate, RejectsShapeMismatches) {
  Args a;
  a.q = TensorView::row_major(address(1), DType::e4m3, R, C + 1);
  expect_rejected(a, "q:", {"[256, 513]", "256 x 512"});
  a = Args{};
  a.scales = TensorView::row_major(address(2), DType::f32, R, 5);
  expect_rejected(a, "scales:", {"[256, 5]", "1 x 128", "256 x 4"});
  a = Args{};
  a.block_cols = 32;  // the scales of 1 x 128 blocks no longer fit
  expect_rejected(a, "scales:", {"1 x 32", "256 x 16"});
  a = Args{};
  a.scales = TensorView::row_major(address(2), DType::f32, C / 128, R);  // transposed shape
  expect_rejected(a, "scales:", {"[4, 256]"});
}

TEST(QuantizeValidate, RejectsBatchMismatches) {
  Args a;
  a.x = TensorView::batched(address(0), DType::bf16, 3, R, C, R * C, C, 1);
  expect_rejected(a, "q:", {"batch 1", "x's batch 3"});
  a.q = TensorView::batched(address(1), DType::e4m3, 3, R, C, R * C, C, 1);
  expect_rejected(a, "scales:", {"batch 1", "x's batch 3"});
  a.scales = TensorView::batched(address(2), DType::f32, 2, R, 4, R * 4, 4, 1);
  expect_rejected(a, "scales:", {"batch 2", "x's batch 3"});
  a.scales = TensorView::batched(address(2), DType::f32, 3, R, 4, R * 4, 4, 1);
  EXPECT_NO_THROW(validate(a));
  // A rank-3 x of batch 1 goes with rank-2 q and scales.
  Args b;
  b.x = TensorView::batched(address(0), DType::bf16, 1, R, C, 0, C, 1);
  EXPECT_NO_THROW(validate(b));
}

TEST(QuantizeValidate, RejectsNullData) {
  for (const char* name : {"x", "q", "scales"}) {
    Args a;
    TensorView& t = std::string(name) == "x" ? a.x : std::string(name) == "q" ? a.q : a.scales;
    t.data = nullptr;
    expect_rejected(a, std::string(name) + ":", {"null"});
  }
}

TEST(QuantizeValidate, EmptyTensorsNeedNoPointers) {
  Args a;
  a.x = TensorView::row_major(nullptr, DType::bf16, 0, C);
  a.q = TensorView::row_major(nullptr, DType::e4m3, 0, C);
  a.scales = TensorView::row_major(nullptr, DType::f32, 0, 4);
  EXPECT_TRUE(validate(a).empty);
  EXPECT_NO_THROW(quantize(a.x, a.q, a.scales, a.block_rows, a.block_cols));  // returns before any device call
}

TEST(QuantizeValidate, RejectsOverlaps) {
  Args a;
  a.q.data = address(0) + 1000;  // inside x
  expect_rejected(a, "q:", {"overlaps x"});
  a = Args{};
  a.scales.data = address(0) + 64;
  expect_rejected(a, "scales:", {"overlaps x"});
  a = Args{};
  a.scales.data = address(1) + R * C - 8;  // the end of q
  expect_rejected(a, "scales:", {"overlaps q"});
  a = Args{};
  a.q.strides[0] = C / 2;  // rows of q overlap each other
  expect_rejected(a, "q:", {"overlap", "own address"});
  a = Args{};
  a.scales.strides[1] = 0;
  expect_rejected(a, "scales:", {"overlap"});
  a = Args{};
  a.x.strides[0] = 0;  // x may repeat itself: it is only read
  EXPECT_NO_THROW(validate(a));
}

TEST(QuantizeValidate, RejectsUnaddressableStrides) {
  Args a;
  a.q.strides[0] = int64_t(1) << 62;
  expect_rejected(a, "q:", {"2^63"});
}

TEST(QuantizeValidate, DeviceChecksComeAfterValidation) {
  // Well-formed arguments with fake pointers reach the device checks: without a driver that is
  // no_device, with one the fake pointer is not device memory.
  const Args a;
  try {
    quantize(a.x, a.q, a.scales, a.block_rows, a.block_cols);
    ADD_FAILURE() << "quantize accepted fake pointers";
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::no_device || e.code() == ErrorCode::invalid_argument) << e.what();
    if (e.code() == ErrorCode::invalid_argument) {
      EXPECT_EQ(std::string(e.what()).rfind("x:", 0), 0u) << e.what();
    }
  }
}

// ---- launch plans ---------------------------------------------------------------------------

QuantizeLaunch plan(const TensorView& x, const TensorView& q, const TensorView& s, int64_t br, int64_t bc,
                    bool pow2 = false) {
  return plan_quantize(validate_quantize(x, q, s, br, bc, {.power_of_two_scales = pow2}), 132);
}

TEST(QuantizePlan, SmallBlocksTakeOneLaunchWithVectors) {
  const int64_t M = 4096, K = 7168;
  const TensorView x = TensorView::row_major(address(0), DType::bf16, M, K);
  const TensorView q = TensorView::row_major(address(1), DType::e4m3, M, K);
  for (auto [br, bc] : {std::pair<int64_t, int64_t>{1, 128}, {128, 128}, {1, 32}, {32, 1}, {128, 1}, {1, K}}) {
    const QuantizeLaunch l = plan(x, q, TensorView::row_major(address(2), DType::f32, (M + br - 1) / br, (K + bc - 1) / bc),
                                  br, bc);
    EXPECT_FALSE(l.two_pass) << br << " x " << bc;
    EXPECT_EQ(l.params.vec, 8) << br << " x " << bc;
    EXPECT_LE(l.smem_bytes, 48u * 1024) << br << " x " << bc;
    EXPECT_GT(l.grid, 0u);
  }
}

TEST(QuantizePlan, LargeBlocksTakeTwoLaunchesWithScratch) {
  const TensorView x = TensorView::row_major(address(0), DType::bf16, 4096, 2048);
  const TensorView q = TensorView::row_major(address(1), DType::e4m3, 4096, 2048);
  const QuantizeLaunch tensor = plan(x, q, TensorView::row_major(address(2), DType::f32, 1, 1), 4096, 2048);
  EXPECT_TRUE(tensor.two_pass);
  EXPECT_EQ(tensor.amax_count, 1u);
  const QuantizeLaunch columns = plan(x, q, TensorView::row_major(address(2), DType::f32, 1, 2048), 4096, 1);
  EXPECT_TRUE(columns.two_pass);
  EXPECT_EQ(columns.amax_count, 2048u);
}

TEST(QuantizePlan, ColumnMajorInputsRunAlongTheirColumns) {
  // x column-major: lanes run down the columns, so blocks 128 x 1 lie along the fast dimension.
  const TensorView x = TensorView::col_major(address(0), DType::bf16, 4096, 1024);
  const TensorView q = TensorView::col_major(address(1), DType::e4m3, 4096, 1024);
  const QuantizeLaunch l = plan(x, q, TensorView::row_major(address(2), DType::f32, 32, 1024), 128, 1);
  EXPECT_EQ(l.params.fast, 4096);
  EXPECT_EQ(l.params.block_fast, 128);
  EXPECT_EQ(l.params.block_slow, 1);
  EXPECT_EQ(l.params.vec, 8);
  // q laid out the other way: no vector stores, so no vectors.
  const QuantizeLaunch t = plan(x, TensorView::row_major(address(1), DType::e4m3, 4096, 1024),
                                TensorView::row_major(address(2), DType::f32, 32, 1024), 128, 1);
  EXPECT_EQ(t.params.vec, 1);
}

TEST(QuantizePlan, VariantsNameTheirSource) {
  const TensorView x = TensorView::row_major(address(0), DType::f32, 64, 256);
  const TensorView q = TensorView::row_major(address(1), DType::e5m2, 64, 256);
  const TensorView s = TensorView::row_major(address(2), DType::ue8m0, 2, 256);
  const QuantizeProblem p = validate_quantize(x, q, s, 32, 1, {});
  const QuantizeLaunch l = plan_quantize(p, 132);
  const QuantizeVariant v = quantize_variant(p, l);
  EXPECT_EQ(v.vec, 4);
  EXPECT_TRUE(v.sub_lane);
  EXPECT_TRUE(v.power_of_two);
  const std::string source = quantize_source(v);
  for (const char* line : {"constexpr int kQuantXType = GEMMKIT_F32;", "constexpr int kQuantQType = GEMMKIT_E5M2;",
                           "constexpr int kQuantScaleType = GEMMKIT_UE8M0;", "constexpr bool kQuantPow2 = true;",
                           "constexpr int kQuantVec = 4;", "constexpr bool kQuantSubLane = true;",
                           "gemmkit_quantize"}) {
    EXPECT_NE(source.find(line), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace gemmkit
