// validate_gemm: the argument checks that need no GPU. Pointers are fake device addresses;
// validate_gemm never dereferences them.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "api/validate.h"
#include "config_tests.h"
#include "dispatch/plan.h"
#include "gemmkit/error.h"
#include "rejection.h"
#include "runtime/device.h"

namespace gemmkit {
namespace {

constexpr int64_t M = 64, N = 32, K = 48;

using config_tests::address;  // fake device addresses 4 GiB apart

struct Args {
  TensorView a = TensorView::row_major(address(0), DType::bf16, M, K);
  TensorView b = TensorView::row_major(address(1), DType::bf16, K, N);
  TensorView d = TensorView::row_major(address(2), DType::f32, M, N);
  GemmOptions options;
};

// A C of D's shape, apart from every other operand, used with beta = 0.5.
Args with_c() {
  Args x;
  x.options.beta = 0.5f;
  x.options.c = TensorView::row_major(address(3), DType::f32, M, N);
  return x;
}

// validate_gemm, then check_apart, as gemm() runs them (with the device checks between).
Problem validate(const Args& x) {
  const Problem p = validate_gemm(x.a, x.b, x.d, x.options);
  if (p.m > 0 && p.n > 0 && p.batch > 0) check_apart(x.a, x.b, x.d, x.options, p);
  return p;
}

// Expects invalid_argument with a message that starts with `argument` and contains each of `given`.
void expect_rejected(const Args& x, const std::string& argument, std::initializer_list<std::string> given) {
  testing::expect_invalid_argument([&] { validate(x); }, argument, given, /*says_expected=*/false);
}

TEST(Validate, WellFormedArgumentsAreAccepted) {
  const Args x;
  const Problem p = validate(x);
  EXPECT_EQ(p.m, M);
  EXPECT_EQ(p.n, N);
  EXPECT_EQ(p.k, K);
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(p.a.data, x.a.data);
  EXPECT_EQ(p.b.data, x.b.data);
  EXPECT_EQ(p.d.data, x.d.data);
  EXPECT_FALSE(p.has_c());
}

TEST(Validate, RejectsUnsupportedInputType) {
  Args x;
  x.a.dtype = DType::f32;
  x.b.dtype = DType::f32;
  expect_rejected(x, "A:", {"f32"});
}

TEST(Validate, RejectsBTypeDifferentFromA) {
  Args x;
  x.b.dtype = DType::f16;
  expect_rejected(x, "B:", {"dtype f16", "bf16"});
}

TEST(Validate, RejectsRankOtherThanTwoOrThree) {
  Args x;
  x.a.rank = 1;
  expect_rejected(x, "A:", {"rank 1"});
  Args y;
  y.b.rank = 4;
  expect_rejected(y, "B:", {"rank 4"});
}

TEST(Validate, RejectsNegativeSize) {
  Args x;
  x.d = TensorView::matrix(address(2), DType::f32, M, -3, N, 1);
  expect_rejected(x, "D:", {"[64, -3]"});
}

TEST(Validate, RejectsNegativeStride) {
  Args x;
  x.b = TensorView::matrix(address(1), DType::bf16, K, N, -N, 1);
  expect_rejected(x, "B:", {"{-32, 1}"});
}

TEST(Validate, RejectsKMismatch) {
  Args x;
  x.b = TensorView::row_major(address(1), DType::bf16, K - 8, N);
  expect_rejected(x, "B:", {"[40, 32]", "K = 48"});
}

TEST(Validate, RejectsDShapeMismatch) {
  Args x;
  x.d = TensorView::row_major(address(2), DType::f32, M, N + 1);
  expect_rejected(x, "D:", {"[64, 33]", "64 x 32"});
}

TEST(Validate, RejectsCShapeMismatch) {
  Args x = with_c();
  x.options.c = TensorView::row_major(address(3), DType::f32, M + 1, N);
  expect_rejected(x, "C:", {"[65, 32]"});
}

TEST(Validate, RejectsBetaWithoutC) {
  Args x;
  x.options.beta = 0.5f;
  expect_rejected(x, "options.c:", {"beta", "0.5"});
}

TEST(Validate, RejectsBatchMismatch) {
  Args x;
  x.a = TensorView::batched(address(0), DType::bf16, 3, M, K, M * K, K, 1);
  x.d = TensorView::batched(address(2), DType::f32, 2, M, N, M * N, N, 1);
  expect_rejected(x, "A:", {"batch 3", "2"});

  Args y;  // A batched, D a single matrix
  y.a = x.a;
  expect_rejected(y, "A:", {"batch 3"});
}

TEST(Validate, RejectsNullData) {
  Args a;
  a.a.data = nullptr;
  expect_rejected(a, "A:", {"null"});
  Args b;
  b.b.data = nullptr;
  expect_rejected(b, "B:", {"null"});
  Args d;
  d.d.data = nullptr;
  expect_rejected(d, "D:", {"null"});
  Args c = with_c();
  c.options.c->data = nullptr;
  expect_rejected(c, "C:", {"null"});
}

TEST(Validate, RejectsDOverlappingInputs) {
  Args a;
  a.d.data = static_cast<char*>(a.a.data) + 256;
  expect_rejected(a, "D:", {"overlaps A"});
  Args b;
  b.d.data = static_cast<char*>(b.b.data) + 256;
  expect_rejected(b, "D:", {"overlaps B"});
}

TEST(Validate, RejectsCPartlyOverlappingD) {
  Args shifted = with_c();
  shifted.options.c->data = static_cast<char*>(shifted.d.data) + 4;
  expect_rejected(shifted, "D:", {"overlaps C"});

  Args other_strides = with_c();  // same pointer, but C walks D's memory in another order
  other_strides.options.c = TensorView::col_major(other_strides.d.data, DType::f32, M, N);
  expect_rejected(other_strides, "D:", {"overlaps C"});

  Args other_type = with_c();
  other_type.options.c = TensorView::row_major(other_type.d.data, DType::bf16, M, N);
  expect_rejected(other_type, "D:", {"overlaps C"});
}

TEST(Validate, AcceptsCThatIsD) {
  Args x = with_c();
  x.options.c = x.d;
  const Problem p = validate(x);
  EXPECT_TRUE(p.has_c());
  EXPECT_EQ(p.c.data, x.d.data);
  EXPECT_EQ(p.beta, 0.5f);
}

TEST(Validate, RejectsDWithOverlappingElements) {
  Args rows;  // every row at the same address
  rows.d = TensorView::matrix(address(2), DType::f32, M, N, 0, 1);
  expect_rejected(rows, "D:", {"{0, 1}", "[64, 32]"});

  Args batches;  // every batch at the same address
  batches.d = TensorView::batched(address(2), DType::f32, 2, M, N, 0, N, 1);
  expect_rejected(batches, "D:", {"{0, 32, 1}"});

  Args columns;  // column-major with a leading dimension shorter than a column
  columns.d = TensorView::matrix(address(2), DType::f32, M, N, 1, M - 1);
  expect_rejected(columns, "D:", {"{1, 63}"});
}

TEST(Validate, EmptyProblemsAcceptNullPointers) {
  const auto null_args = [](int64_t batch, int64_t m, int64_t n) {
    Args x;
    x.a = TensorView::row_major(nullptr, DType::bf16, m, K);
    x.b = TensorView::row_major(nullptr, DType::bf16, K, n);
    x.d = TensorView::batched(nullptr, DType::f32, batch, m, n, m * n, n, 1);
    return x;
  };
  EXPECT_EQ(validate(null_args(1, 0, N)).m, 0);
  EXPECT_EQ(validate(null_args(1, M, 0)).n, 0);
  EXPECT_EQ(validate(null_args(0, M, N)).batch, 0);
}

TEST(Validate, ZeroKAcceptsNullInputs) {
  Args x;
  x.a = TensorView::row_major(nullptr, DType::bf16, M, 0);
  x.b = TensorView::row_major(nullptr, DType::bf16, 0, N);
  const Problem p = validate(x);
  EXPECT_EQ(p.k, 0);
  EXPECT_EQ(p.m, M);
  EXPECT_EQ(p.n, N);
  // D must still be usable.
  x.d.data = nullptr;
  expect_rejected(x, "D:", {"null"});
}

TEST(Validate, RankTwoBIsBroadcastAcrossTheBatch) {
  Args x;
  x.a = TensorView::batched(address(0), DType::bf16, 3, M, K, M * K, K, 1);
  x.d = TensorView::batched(address(2), DType::f32, 3, M, N, M * N, N, 1);
  const Problem p = validate(x);
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.a.batch_stride, M * K);
  EXPECT_EQ(p.b.batch_stride, 0);
  EXPECT_EQ(p.d.batch_stride, M * N);
}

TEST(Validate, StridesReachTheProblem) {
  Args x = with_c();
  x.a = TensorView::matrix(address(0), DType::f16, M, K, K + 8, 1);  // row-major, padded
  x.b = TensorView::matrix(address(1), DType::f16, K, N, 1, K + 16);  // column-major, padded
  x.d = TensorView::col_major(address(2), DType::bf16, M, N);
  x.options.c = TensorView::matrix(address(3), DType::f32, M, N, N + 4, 1);
  const Problem p = validate(x);
  EXPECT_EQ(p.a.row_stride, K + 8);
  EXPECT_EQ(p.a.col_stride, 1);
  EXPECT_EQ(p.a.dtype, DType::f16);
  EXPECT_EQ(p.b.row_stride, 1);
  EXPECT_EQ(p.b.col_stride, K + 16);
  EXPECT_EQ(p.d.row_stride, 1);
  EXPECT_EQ(p.d.col_stride, M);
  EXPECT_EQ(p.d.dtype, DType::bf16);
  EXPECT_EQ(p.c.row_stride, N + 4);
  EXPECT_EQ(p.c.col_stride, 1);
  EXPECT_EQ(p.c.data, x.options.c->data);
  EXPECT_EQ(p.c.dtype, DType::f32);
}

TEST(Validate, RejectsProblemsPastSixtyFourBitAddressing) {
  const int64_t two32 = int64_t(1) << 32, two31 = int64_t(1) << 31;
  Args x;  // M x N = 2^64 would wrap to 0: an empty problem, not an error
  x.a = TensorView::row_major(address(0), DType::bf16, two32, 8);
  x.b = TensorView::row_major(address(1), DType::bf16, 8, two32);
  x.d = TensorView::row_major(address(2), DType::bf16, two32, two32);
  expect_rejected(x, "problem 4294967296 x 4294967296 x 8: M x N = 2^64 elements overflows 64-bit addressing", {});
  x.a = TensorView::row_major(address(0), DType::bf16, two32, two31);  // shared by the batch
  x.b = TensorView::row_major(address(1), DType::bf16, two31, 1);
  x.d = TensorView::batched(address(2), DType::bf16, 2, two32, 1, two32, 1, 1);
  expect_rejected(x, "problem 4294967296 x 1 x 2147483648 (batch 2): M x K = 2^63 elements overflows 64-bit addressing",
                  {});
  x.a = TensorView::row_major(address(0), DType::bf16, 0, two31);  // empty, but K x N is not
  x.b = TensorView::row_major(address(1), DType::bf16, two31, two31);
  x.d = TensorView::row_major(address(2), DType::bf16, 0, two31);
  expect_rejected(x, "problem 0 x 2147483648 x 2147483648: K x N x 2 bytes = 2^63 bytes", {});
}

TEST(Validate, CIsDroppedWhenBetaIsZero) {
  Args x = with_c();
  x.options.beta = 0.0f;
  x.options.alpha = 2.0f;
  const Problem p = validate(x);
  EXPECT_FALSE(p.has_c());
  EXPECT_EQ(p.c.data, nullptr);
  EXPECT_EQ(p.alpha, 2.0f);
}

TEST(ValidateGemm, ThrowsNoDeviceWithoutAGpu) {
  if (runtime::device_count() > 0) GTEST_SKIP() << "a CUDA device is present; the GPU tests cover gemm() there";
  const Args x;
  try {
    gemm(x.a, x.b, x.d, x.options);
    FAIL() << "gemm returned without a CUDA device";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::no_device) << e.what();
    // require_device's message: no driver, a driver too old, or no device visible.
    const std::string message = e.what();
    EXPECT_TRUE(message.rfind("no NVIDIA driver found", 0) == 0 || message.rfind("no CUDA device", 0) == 0 ||
                message.rfind("the NVIDIA driver supports", 0) == 0)
        << message;
  }
}

// ---- FP8 inputs and their scales ----

constexpr int64_t FK = 300;  // K of the FP8 problems: 3 blocks of 128 (the last partial), 10 of 32

// e4m3 A (M x FK) and B (FK x N, stored N x FK) with the given modes and scale tensors at
// fake addresses of their own.
Args fp8_args(ScaleMode mode_a, TensorView scales_a, ScaleMode mode_b, TensorView scales_b) {
  Args x;
  x.a = TensorView::row_major(address(0), DType::e4m3, M, FK);
  x.b = TensorView::col_major(address(1), DType::e5m2, FK, N);
  x.d = TensorView::row_major(address(2), DType::bf16, M, N);
  x.options.scale_a = {mode_a, scales_a};
  x.options.scale_b = {mode_b, scales_b};
  return x;
}

TensorView scales(int slot, DType type, int64_t rows, int64_t cols) {
  return TensorView::row_major(address(slot), type, rows, cols);
}

TEST(ValidateFp8, EveryModeTakesItsShapesAndGivesItsBlocks) {
  struct Case {
    ScaleMode mode;
    TensorView a, b;
    int64_t a_block_rows, a_block_cols, b_block_rows, b_block_cols;
  };
  const Case cases[] = {
      {ScaleMode::tensor, scales(4, DType::f32, 1, 1), scales(5, DType::f32, 1, 1), M, FK, FK, N},
      {ScaleMode::rowwise, scales(4, DType::f32, M, 1), scales(5, DType::f32, 1, N), 1, FK, FK, 1},
      {ScaleMode::block, scales(4, DType::f32, M, 3), scales(5, DType::f32, 3, 1), 1, 128, 128, 128},
      {ScaleMode::block, scales(4, DType::f32, 1, 3), scales(5, DType::f32, 3, N), 128, 128, 128, 1},
      {ScaleMode::mx, scales(4, DType::ue8m0, M, 10), scales(5, DType::ue8m0, 10, N), 1, 32, 32, 1},
  };
  for (const Case& c : cases) {
    const Problem p = validate(fp8_args(c.mode, c.a, c.mode, c.b));
    EXPECT_EQ(p.scale_a.mode, c.mode);
    EXPECT_EQ(p.scale_a.m.data, c.a.data);
    EXPECT_EQ(p.scale_a.block_rows, c.a_block_rows);
    EXPECT_EQ(p.scale_a.block_cols, c.a_block_cols);
    EXPECT_EQ(p.scale_b.block_rows, c.b_block_rows);
    EXPECT_EQ(p.scale_b.block_cols, c.b_block_cols);
    EXPECT_EQ(p.scale_b.m.row_stride, c.b.row_stride());
  }
  // No scales: every scale is 1.
  const Problem p = validate(fp8_args(ScaleMode::none, {}, ScaleMode::none, {}));
  EXPECT_EQ(p.scale_a.mode, ScaleMode::none);
  EXPECT_EQ(p.b.dtype, DType::e5m2);
}

TEST(ValidateFp8, MisusedTypesAndScalesAreNamed) {
  const TensorView good_a = scales(4, DType::f32, M, 3), good_b = scales(5, DType::f32, 3, 1);
  // A scale wrong in shape, dtype or rank, each side.
  expect_rejected(fp8_args(ScaleMode::block, scales(4, DType::f32, M, 2), ScaleMode::block, good_b), "scale_a",
                  {"[64, 2]", "block", "64 x 3 (1x128 blocks) or 1 x 3 (128x128 blocks)"});
  expect_rejected(fp8_args(ScaleMode::block, good_a, ScaleMode::block, scales(5, DType::f32, 1, 3)), "scale_b",
                  {"[1, 3]", "3 x 1 (128x128 blocks) or 3 x 32 (128x1 blocks)"});
  expect_rejected(fp8_args(ScaleMode::mx, scales(4, DType::f32, M, 10), ScaleMode::mx, scales(5, DType::ue8m0, 10, N)),
                  "scale_a", {"f32", "mx", "ue8m0"});
  expect_rejected(fp8_args(ScaleMode::tensor, scales(4, DType::ue8m0, 1, 1), ScaleMode::tensor, scales(5, DType::f32, 1, 1)),
                  "scale_a", {"ue8m0", "expected f32"});
  expect_rejected(fp8_args(ScaleMode::rowwise, scales(4, DType::f32, 1, 1), ScaleMode::rowwise, scales(5, DType::f32, 1, N)),
                  "scale_a", {"rowwise", "64 x 1"});
  Args batched = fp8_args(ScaleMode::tensor, TensorView::batched(address(4), DType::f32, 2, 1, 1, 1, 1, 1),
                          ScaleMode::tensor, scales(5, DType::f32, 1, 1));
  expect_rejected(batched, "scale_a", {"batch 2", "D's batch 1"});
  expect_rejected(fp8_args(ScaleMode::tensor, TensorView::matrix(nullptr, DType::f32, 1, 1, 1, 1), ScaleMode::none, {}),
                  "scale_a", {"null"});
  // f32 scales off a 4-byte boundary.
  expect_rejected(fp8_args(ScaleMode::tensor, TensorView::row_major(address(4) + 2, DType::f32, 1, 1), ScaleMode::none, {}),
                  "scale_a", {"4-byte aligned"});
  // Scales overlapping D.
  expect_rejected(fp8_args(ScaleMode::tensor, scales(2, DType::f32, 1, 1), ScaleMode::none, {}), "D",
                  {"overlaps scale_a"});
  // Scales for 16-bit inputs, 8-bit with 16-bit, 8-bit D or C.
  Args bf16 = Args();
  bf16.options.scale_a = {ScaleMode::tensor, scales(4, DType::f32, 1, 1)};
  expect_rejected(bf16, "scale_a", {"tensor", "bf16", "e4m3 or e5m2"});
  Args mixed = fp8_args(ScaleMode::none, {}, ScaleMode::none, {});
  mixed.b = TensorView::col_major(address(1), DType::bf16, FK, N);
  expect_rejected(mixed, "B", {"bf16", "e4m3"});
  Args e5m2_d = fp8_args(ScaleMode::none, {}, ScaleMode::none, {});
  e5m2_d.d = TensorView::row_major(address(2), DType::e5m2, M, N);
  expect_rejected(e5m2_d, "D", {"e5m2", "bf16, f16, f32 or e4m3"});
  Args fp8_c = fp8_args(ScaleMode::none, {}, ScaleMode::none, {});
  fp8_c.options.beta = 1.0f;
  fp8_c.options.c = TensorView::row_major(address(3), DType::e5m2, M, N);
  expect_rejected(fp8_c, "C", {"e5m2"});
  Args scale_as_input = fp8_args(ScaleMode::none, {}, ScaleMode::none, {});
  scale_as_input.a.dtype = DType::ue8m0;
  expect_rejected(scale_as_input, "A", {"ue8m0"});
}

// An e4m3 D takes its 1x128 block scales (GemmOptions::scale_d), M x ceil(N/128) f32, written
// by the call; nothing else does.
TEST(ValidateFp8, QuantizedDTakesItsBlockScales) {
  Args ok;
  ok.d = TensorView::row_major(address(2), DType::e4m3, M, N);
  ok.options.scale_d = {ScaleMode::block, scales(4, DType::f32, M, 1)};
  const Problem p = validate_gemm(ok.a, ok.b, ok.d, ok.options);
  EXPECT_TRUE(p.quantizes_d());
  EXPECT_EQ(p.scale_d.data, address(4));
  EXPECT_THROW(transposed_problem(p), Error) << "an e4m3 D is never transposed";
  Args none = ok;
  none.options.scale_d = {};
  expect_rejected(none, "scale_d", {"mode none", "e4m3 D", "block"});
  Args tensor = ok;
  tensor.options.scale_d.mode = ScaleMode::tensor;
  expect_rejected(tensor, "scale_d", {"mode tensor", "block"});
  Args shape = ok;
  shape.options.scale_d.scales = scales(4, DType::f32, M, 2);
  expect_rejected(shape, "scale_d", {"[64, 2]", "M x ceil(N/128) = 64 x 1"});
  Args type = ok;
  type.options.scale_d.scales = scales(4, DType::bf16, M, 1);
  expect_rejected(type, "scale_d", {"bf16", "f32"});
  Args for_bf16 = ok;
  for_bf16.d.dtype = DType::bf16;
  expect_rejected(for_bf16, "scale_d", {"block", "bf16", "only for an e4m3 D"});
  Args null = ok;
  null.options.scale_d.scales.data = nullptr;
  expect_rejected(null, "scale_d", {"null"});
  Args shared = ok;  // one scale tensor for a batch of D matrices: each would write it
  shared.a = TensorView::batched(address(1), DType::bf16, 2, M, K, M * K, K, 1);
  shared.d = TensorView::batched(address(2), DType::e4m3, 2, M, N, M * N, N, 1);
  expect_rejected(shared, "scale_d", {"batch of 2", "[batch, M, ceil(N/128)]"});
}

TEST(ValidateFp8, QuantizedDsScalesApartFromEverything) {
  Args x;
  x.d = TensorView::row_major(address(2), DType::e4m3, M, N);
  x.options.scale_d = {ScaleMode::block, TensorView::row_major(x.d.data, DType::f32, M, 1)};
  expect_rejected(x, "scale_d", {"overlaps D"});
  x.options.scale_d.scales.data = x.a.data;
  expect_rejected(x, "scale_d", {"overlaps A"});
}

// ---- W4A8: e4m3 activations against u4 weights ----

constexpr int64_t WK = 1000;  // K of the W4A8 problems: 8 groups of 128 (the last partial), 4 of 256, 32 MX blocks

// e4m3 A (M x WK) against u4 weights B (WK x N: a checkpoint's [N, WK/2] bytes) with group scales
// of `type`, ceil(WK/group) x N, N-contiguous, and zero points of the same shape and type where
// `zeros`; the activations unscaled.
Args w4a8_args(int64_t group, DType type = DType::bf16, bool zeros = false) {
  Args x;
  x.a = TensorView::row_major(address(0), DType::e4m3, M, WK);
  x.b = TensorView::matrix(address(1), DType::u4, WK, N, 1, WK);
  x.d = TensorView::row_major(address(2), DType::bf16, M, N);
  const int64_t groups = (WK + group - 1) / group;
  x.options.scale_b.mode = ScaleMode::group;
  x.options.scale_b.group = group;
  x.options.scale_b.scales = TensorView::row_major(address(3), type, groups, N);
  if (zeros) x.options.scale_b.zeros = TensorView::row_major(address(4), type, groups, N);
  return x;
}

// `x` with u4 weights per batch: B [batch, WK, N] with columns `ld` apart, and its scales and zero
// points [batch, groups, N] of `type`.
Args with_weights_per_batch(Args x, int64_t batch, int64_t ld, int64_t groups, DType type) {
  x.b = TensorView::batched(address(1), DType::u4, batch, WK, N, N * ld, 1, ld);
  x.options.scale_b.scales = TensorView::batched(address(3), type, batch, groups, N, groups * N, N, 1);
  x.options.scale_b.zeros = TensorView::batched(address(4), type, batch, groups, N, groups * N, N, 1);
  return x;
}

// The activations' scales, f32 (mx: ue8m0), of `rows` x `cols`.
Scale activation_scales(ScaleMode mode, int64_t rows, int64_t cols) {
  return {mode, TensorView::row_major(address(5), mode == ScaleMode::mx ? DType::ue8m0 : DType::f32, rows, cols)};
}

// Every activation scaling W4A8 takes, with every weight grouping and group scales' type, with
// and without zero points: the Problem keeps each as given.
TEST(ValidateW4a8, TakesEveryActivationScalingAndWeightGrouping) {
  struct ActivationScaling {
    Scale scale;
    int64_t block_rows, block_cols;
  };
  const ActivationScaling scalings[] = {
      {{}, 1, 1},
      {activation_scales(ScaleMode::tensor, 1, 1), M, WK},
      {activation_scales(ScaleMode::rowwise, M, 1), 1, WK},
      {activation_scales(ScaleMode::block, M, 8), 1, 128},  // 1x128: M x ceil(WK/128)
  };
  // 128 and 256: groups; 1000 (WK itself), 1500 and 2048: one group a column (per-channel).
  for (int64_t group : {128, 256, 1000, 1500, 2048}) {
    for (DType type : {DType::bf16, DType::f16}) {
      for (bool zeros : {false, true}) {
        for (const ActivationScaling& scaling : scalings) {
          SCOPED_TRACE("group " + std::to_string(group) + " " + std::string(dtype_name(type)) +
                       (zeros ? " zeros" : "") + " scale_a " + std::string(scale_mode_name(scaling.scale.mode)));
          Args x = w4a8_args(group, type, zeros);
          x.options.scale_a = scaling.scale;
          const Problem p = validate(x);
          EXPECT_EQ(p.a.dtype, DType::e4m3);
          EXPECT_EQ(p.b.dtype, DType::u4);
          EXPECT_EQ(p.scale_a.mode, scaling.scale.mode);
          if (scaling.scale.mode != ScaleMode::none) {
            EXPECT_EQ(p.scale_a.m.data, scaling.scale.scales.data);
            EXPECT_EQ(p.scale_a.block_rows, scaling.block_rows);
            EXPECT_EQ(p.scale_a.block_cols, scaling.block_cols);
          }
          EXPECT_EQ(p.scale_b.mode, ScaleMode::group);
          EXPECT_EQ(p.scale_b.m.data, address(3));
          EXPECT_EQ(p.scale_b.m.dtype, type);
          EXPECT_EQ(p.scale_b.block_cols, 1);
          if (group < WK) {
            EXPECT_EQ(p.scale_b.block_rows, group);
          } else {  // per-channel: a power of two that covers WK, so that a shift finds the group
            EXPECT_GE(p.scale_b.block_rows, WK);
            EXPECT_TRUE(std::has_single_bit(uint64_t(p.scale_b.block_rows))) << p.scale_b.block_rows;
          }
          EXPECT_EQ(p.scale_b.zeros.data, zeros ? address(4) : nullptr);
          if (zeros) EXPECT_EQ(p.scale_b.zeros.dtype, type);
        }
      }
    }
  }
}

TEST(ValidateW4a8, TakesEveryOutputTypeAndC) {
  for (DType out : {DType::bf16, DType::f16, DType::f32}) {
    Args x = w4a8_args(128, DType::f16, true);
    x.d.dtype = out;
    x.options.beta = -1.5f;
    x.options.c = TensorView::row_major(address(6), out, M, N);
    const Problem p = validate(x);
    EXPECT_EQ(p.d.dtype, out);
    EXPECT_TRUE(p.has_c());
    EXPECT_EQ(p.c.dtype, out);
    EXPECT_EQ(p.beta, -1.5f);
  }
}

// Batched activations against weights per batch, or one set of weights (and scales) for all.
TEST(ValidateW4a8, TakesBatchedAndSharedWeights) {
  constexpr int64_t batch = 3, ld = WK + 24;  // weights padded, columns still on bytes
  Args shared = w4a8_args(256, DType::bf16, true);
  shared.a = TensorView::batched(address(0), DType::e4m3, batch, M, WK, M * WK, WK, 1);
  shared.d = TensorView::batched(address(2), DType::bf16, batch, M, N, M * N, N, 1);
  shared.options.scale_a = {ScaleMode::rowwise, TensorView::batched(address(5), DType::f32, batch, M, 1, M, 1, 1)};
  const Problem p = validate(shared);
  EXPECT_EQ(p.batch, batch);
  EXPECT_EQ(p.b.batch_stride, 0);
  EXPECT_EQ(p.scale_b.m.batch_stride, 0);
  EXPECT_EQ(p.scale_a.m.batch_stride, M);

  const Problem q = validate(with_weights_per_batch(shared, batch, ld, 4, DType::bf16));
  EXPECT_EQ(q.b.batch_stride, N * ld);
  EXPECT_EQ(q.b.col_stride, ld);
  EXPECT_EQ(q.scale_b.m.batch_stride, 4 * N);
  EXPECT_EQ(q.scale_b.zeros.batch_stride, 4 * N);
}

// Scales (and zero points) stored [N, WK/group], as some checkpoints keep them, viewed transposed.
TEST(ValidateW4a8, TakesTransposedScales) {
  Args x = w4a8_args(128, DType::f16, true);
  x.options.scale_b.scales = TensorView::matrix(address(3), DType::f16, 8, N, 1, 8);
  x.options.scale_b.zeros = TensorView::matrix(address(4), DType::f16, 8, N, 1, 8);
  x.options.scale_a = activation_scales(ScaleMode::block, M, 8);
  const Problem p = validate(x);
  EXPECT_EQ(p.scale_b.m.row_stride, 1);
  EXPECT_EQ(p.scale_b.m.col_stride, 8);
  EXPECT_EQ(p.scale_b.zeros.col_stride, 8);
}

// Groups of 32 and 64 too (each promoted apart), as against 16-bit activations; not 48.
TEST(ValidateW4a8, TakesGroupsOf32And64) {
  for (int64_t group : {32, 64}) {
    EXPECT_EQ(validate(w4a8_args(group)).scale_b.block_rows, group);
    EXPECT_EQ(validate(w4a8_args(group, DType::f16, true)).scale_b.block_rows, group);
  }
  expect_rejected(w4a8_args(48), "scale_b", {"group 48"});
}

// MXFP4 weights under FP8 activations: their ue8m0 scales in mode mx, a group of 32 each.
TEST(ValidateW4a8, TakesMxfp4Weights) {
  Args x = w4a8_args(128);
  x.b.dtype = DType::e2m1;
  x.options.scale_b = {ScaleMode::mx, TensorView::row_major(address(3), DType::ue8m0, 32, N)};  // ceil(WK/32) x N
  const Problem p = validate(x);
  EXPECT_EQ(p.scale_b.mode, ScaleMode::mx);
  EXPECT_EQ(p.scale_b.block_rows, 32);
  x.options.scale_b.scales.dtype = DType::bf16;
  expect_rejected(x, "scale_b", {"ue8m0"});
}

TEST(ValidateW4a8, RefusesE5m2Activations) {
  Args x = w4a8_args(128);
  x.a.dtype = DType::e5m2;
  expect_rejected(x, "B", {"u4", "e5m2"});
}

// The activations' scales the kernels cannot apply beside the weights': MX (1x32 ue8m0) against
// weights in groups other than 32, and 128x128 blocks (ceil(M/128) x ceil(WK/128)). MX against
// u4 in groups of 32 or e2m1 (A8W4 in MX) is taken.
TEST(ValidateW4a8, RefusesMxUnlessGroupsOf32AndSquareBlockActivationScales) {
  for (int64_t group : {64, 128}) {
    Args mx = w4a8_args(group);
    mx.options.scale_a = activation_scales(ScaleMode::mx, M, (WK + 31) / 32);
    expect_rejected(mx, "scale_a", {"mx", std::to_string(group)});
  }
  Args mx = w4a8_args(32);
  mx.options.scale_a = activation_scales(ScaleMode::mx, M, (WK + 31) / 32);
  EXPECT_EQ(validate_gemm(mx.a, mx.b, mx.d, mx.options).scale_a.mode, ScaleMode::mx);
  mx.b.dtype = DType::e2m1;
  mx.options.scale_b = {ScaleMode::mx, TensorView::row_major(address(3), DType::ue8m0, (WK + 31) / 32, N)};
  EXPECT_EQ(validate_gemm(mx.a, mx.b, mx.d, mx.options).scale_a.mode, ScaleMode::mx);
  Args square = w4a8_args(128);
  square.options.scale_a = activation_scales(ScaleMode::block, 1, 8);
  expect_rejected(square, "scale_a", {"128"});
  // Group 32 with K <= 32 is one scale a column (a group as long as K): the message says so.
  Args short_k = w4a8_args(32);
  short_k.a = TensorView::row_major(address(0), DType::e4m3, M, 32);
  short_k.b = TensorView::matrix(address(1), DType::u4, 32, N, 1, 32);
  short_k.options.scale_b.scales = TensorView::row_major(address(3), DType::bf16, 1, N);
  short_k.options.scale_a = activation_scales(ScaleMode::mx, M, 1);
  expect_rejected(short_k, "scale_a", {"mx", "all K = 32"});
}

// One token against 4095 weight rows: the decode tile is 8 wide, but 16 with MXFP8 activations,
// whose exponents TMA loads in boxes a byte per tile column, at least 16 bytes wide (an 8-wide
// one's map the driver refused, H200).
TEST(ValidateW4a8, OneTokenWithMxActivationsTakesTilesSixteenWide) {
  for (ScaleMode mode : {ScaleMode::rowwise, ScaleMode::mx}) {
    Args x = w4a8_args(32);
    x.a = TensorView::row_major(address(0), DType::e4m3, 1, WK);
    x.b = TensorView::matrix(address(1), DType::u4, WK, 4095, 1, WK);
    x.d = TensorView::row_major(address(2), DType::bf16, 1, 4095);
    x.options.scale_b.scales = TensorView::row_major(address(3), DType::bf16, (WK + 31) / 32, 4095);
    x.options.scale_a = activation_scales(mode, 1, mode == ScaleMode::mx ? (WK + 31) / 32 : 1);
    const KernelConfig c = choose_config(normalize(validate(x)), DeviceLimits{});
    EXPECT_EQ(c.tile_n, mode == ScaleMode::mx ? 16 : 8) << c.name();
  }
}

// Group scales are bf16 or f16, whichever (A, being e4m3, does not decide), and zero points take
// the scales' type.
TEST(ValidateW4a8, RefusesScalesOfOtherTypes) {
  for (DType type : {DType::f32, DType::ue8m0}) {
    expect_rejected(w4a8_args(128, type), "scale_b", {std::string(dtype_name(type))});
  }
  Args mixed = w4a8_args(128, DType::f16, true);
  mixed.options.scale_b.zeros->dtype = DType::bf16;
  expect_rejected(mixed, "scale_b.zeros", {"bf16"});
}

// ---- MXFP4 activations: e2m1 A with ue8m0 exponents per 32 of K, against 4-bit weights in ----
// ---- groups of 32 (e2m1 in mode mx, u4 with group 32) -------------------------------------------

// e2m1 A (M x WK: [M, WK/2] bytes, strides {WK, 1}) with mx exponents M x ceil(WK/32), against
// `weights`: e2m1 with mx scales ceil(WK/32) x N, or u4 in groups of `group` (w4a8_args' scales).
Args mxfp4_args(DType weights, int64_t group = 32, DType type = DType::bf16, bool zeros = false) {
  Args x = w4a8_args(group, type, zeros);
  x.a.dtype = DType::e2m1;
  x.options.scale_a = activation_scales(ScaleMode::mx, M, (WK + 31) / 32);
  if (weights == DType::e2m1) {
    x.b.dtype = DType::e2m1;
    x.options.scale_b = {ScaleMode::mx, TensorView::row_major(address(3), DType::ue8m0, (WK + 31) / 32, N)};
  }
  return x;
}

// The Problem keeps A as given, e2m1 with its strides, and its exponents in mode mx (1x32 blocks);
// the weights' scales as W4A8 in MX keeps them. Every D type, group scales of either 16-bit type,
// with and without zero points.
TEST(ValidateMxfp4Activations, TakesMxfp4AndU4Group32Weights) {
  struct Weights {
    DType type;
    DType scales;
    bool zeros;
  };
  for (const Weights& w : {Weights{DType::e2m1, DType::ue8m0, false}, Weights{DType::u4, DType::bf16, false},
                           Weights{DType::u4, DType::f16, true}, Weights{DType::u4, DType::bf16, true}}) {
    for (DType out : {DType::bf16, DType::f16, DType::f32}) {
      SCOPED_TRACE(std::string(dtype_name(w.type)) + " " + std::string(dtype_name(w.scales)) +
                   (w.zeros ? " zeros" : "") + " -> " + std::string(dtype_name(out)));
      Args x = mxfp4_args(w.type, 32, w.type == DType::u4 ? w.scales : DType::bf16, w.zeros);
      x.d.dtype = out;
      const Problem p = validate(x);
      EXPECT_EQ(p.m, M);
      EXPECT_EQ(p.k, WK);
      EXPECT_EQ(p.n, N);
      EXPECT_EQ(p.a.dtype, DType::e2m1);
      EXPECT_EQ(p.a.data, address(0));
      EXPECT_EQ(p.a.row_stride, WK);
      EXPECT_EQ(p.a.col_stride, 1);
      EXPECT_EQ(p.b.dtype, w.type);
      EXPECT_EQ(p.d.dtype, out);
      EXPECT_EQ(p.scale_a.mode, ScaleMode::mx);
      EXPECT_EQ(p.scale_a.m.data, address(5));
      EXPECT_EQ(p.scale_a.m.dtype, DType::ue8m0);
      EXPECT_EQ(p.scale_a.block_rows, 1);
      EXPECT_EQ(p.scale_a.block_cols, 32);
      EXPECT_EQ(p.scale_b.mode, w.type == DType::u4 ? ScaleMode::group : ScaleMode::mx);
      EXPECT_EQ(p.scale_b.m.dtype, w.scales);
      EXPECT_EQ(p.scale_b.block_rows, 32);
      EXPECT_EQ(p.scale_b.block_cols, 1);
      EXPECT_EQ(p.scale_b.zeros.data, w.zeros ? address(4) : nullptr);
    }
  }
}

// Padded rows (an even row stride), an odd K (the last byte of each row half used), exponents
// transposed ([ceil(K/32), M] viewed as M x ceil(K/32)), and batches: A and its exponents per
// batch against weights per batch or one set shared.
TEST(ValidateMxfp4Activations, TakesPaddedRowsOddKTransposedExponentsAndBatches) {
  constexpr int64_t k = WK + 1, ld = WK + 24, blocks = (k + 31) / 32, batch = 3;
  Args x = mxfp4_args(DType::e2m1);
  x.a = TensorView::matrix(address(0), DType::e2m1, M, k, ld, 1);
  x.b = TensorView::matrix(address(1), DType::e2m1, k, N, 1, ld);
  x.options.scale_a.scales = TensorView::matrix(address(5), DType::ue8m0, M, blocks, 1, M);
  x.options.scale_b.scales = TensorView::row_major(address(3), DType::ue8m0, blocks, N);
  const Problem p = validate(x);
  EXPECT_EQ(p.k, k);
  EXPECT_EQ(p.a.row_stride, ld);
  EXPECT_EQ(p.scale_a.m.row_stride, 1);
  EXPECT_EQ(p.scale_a.m.col_stride, M);

  Args shared = mxfp4_args(DType::u4, 32, DType::f16, true);
  shared.a = TensorView::batched(address(0), DType::e2m1, batch, M, WK, M * ld, ld, 1);
  shared.d = TensorView::batched(address(2), DType::bf16, batch, M, N, M * N, N, 1);
  shared.options.scale_a.scales =
      TensorView::batched(address(5), DType::ue8m0, batch, M, WK / 32 + 1, M * (WK / 32 + 1), WK / 32 + 1, 1);
  const Problem q = validate(shared);
  EXPECT_EQ(q.batch, batch);
  EXPECT_EQ(q.a.dtype, DType::e2m1);
  EXPECT_EQ(q.a.batch_stride, M * ld);
  EXPECT_EQ(q.scale_a.m.batch_stride, M * (WK / 32 + 1));
  EXPECT_EQ(q.b.batch_stride, 0);

  const Problem r = validate(with_weights_per_batch(shared, batch, ld, 32, DType::f16));
  EXPECT_EQ(r.b.batch_stride, N * ld);
  EXPECT_EQ(r.scale_b.m.batch_stride, 32 * N);
}

// C, a fused epilogue, an e4m3 D and a second B go as with dense W4A8 (e4m3 activations in MX
// against the same weights): taken where it takes them, refused by the same name where it refuses
// them (today: C, the epilogue and the e4m3 D taken, options.b2 refused).
TEST(ValidateMxfp4Activations, CEpilogueQuantizedDAndB2AsDenseW4a8) {
  struct Extra {
    const char* what;
    void (*apply)(Args&);
  };
  const Extra extras[] = {
      {"C", [](Args& x) {
         x.options.beta = -1.5f;
         x.options.c = TensorView::row_major(address(6), DType::bf16, M, N);
       }},
      {"epilogue", [](Args& x) { x.options.epilogue.text = "relu(acc)"; }},
      {"e4m3 D", [](Args& x) {
         x.d.dtype = DType::e4m3;
         x.options.scale_d = {ScaleMode::block, TensorView::row_major(address(7), DType::f32, M, (N + 127) / 128)};
       }},
      {"b2", [](Args& x) {
         x.options.b2 = TensorView::matrix(address(8), x.b.dtype, WK, N, 1, WK);
         x.options.scale_b2 = x.options.scale_b;
         x.options.scale_b2.scales.data = address(9);
       }},
  };
  // The message of validate's refusal, "" where it takes the arguments.
  const auto outcome = [](const Args& x) -> std::string {
    try {
      validate(x);
      return "";
    } catch (const Error& e) {
      return e.what();
    }
  };
  for (DType weights : {DType::e2m1, DType::u4}) {
    for (const Extra& extra : extras) {
      SCOPED_TRACE(std::string(dtype_name(weights)) + " weights, " + extra.what);
      Args fp8 = mxfp4_args(weights);
      fp8.a.dtype = DType::e4m3;
      extra.apply(fp8);
      Args fp4 = mxfp4_args(weights);
      extra.apply(fp4);
      const std::string w4a8 = outcome(fp8), mxfp4 = outcome(fp4);
      if (w4a8.empty()) {
        EXPECT_EQ(mxfp4, "");
      } else {
        const std::string name = w4a8.substr(0, w4a8.find(':'));
        EXPECT_EQ(mxfp4.rfind(name + ":", 0), 0u) << "W4A8: " << w4a8 << "\nMXFP4 activations: " << mxfp4;
      }
    }
  }
}

// Without its exponents (mode none), or with scales of another mode, e2m1 A is refused naming
// scale_a; so are exponents of the wrong shape or type.
TEST(ValidateMxfp4Activations, RefusesAWithoutMxExponents) {
  for (Scale scale : {Scale{}, activation_scales(ScaleMode::tensor, 1, 1), activation_scales(ScaleMode::rowwise, M, 1),
                      activation_scales(ScaleMode::block, M, 8)}) {
    SCOPED_TRACE(scale_mode_name(scale.mode));
    for (DType weights : {DType::e2m1, DType::u4}) {
      Args x = mxfp4_args(weights);
      x.options.scale_a = scale;
      expect_rejected(x, "scale_a", {});
    }
  }
  Args shape = mxfp4_args(DType::e2m1);
  shape.options.scale_a = activation_scales(ScaleMode::mx, M, 31);
  expect_rejected(shape, "scale_a", {"shape"});
  Args type = mxfp4_args(DType::e2m1);
  type.options.scale_a.scales.dtype = DType::f32;
  expect_rejected(type, "scale_a", {"f32"});
}

// e2m1 A against 16-bit or FP8 B (anything but 4-bit weights) is refused naming B; u4 A stays
// refused, naming A.
TEST(ValidateMxfp4Activations, RefusesSixteenBitAndFp8B) {
  for (DType b : {DType::bf16, DType::f16, DType::e4m3, DType::e5m2}) {
    SCOPED_TRACE(dtype_name(b));
    Args x = mxfp4_args(DType::e2m1);
    x.b = TensorView::row_major(address(1), b, WK, N);
    x.options.scale_b = {};
    expect_rejected(x, "B", {});
  }
  Args u4_a = mxfp4_args(DType::e2m1);
  u4_a.a.dtype = DType::u4;
  expect_rejected(u4_a, "A", {"u4"});
}

// u4 weights in groups other than 32 (64, 128, 256, per-channel) are refused naming scale_b or
// scale_a, the message saying groups of 32.
TEST(ValidateMxfp4Activations, RefusesU4InGroupsOtherThan32) {
  for (int64_t group : {64, 128, 256, 1000, 2048}) {
    SCOPED_TRACE("group " + std::to_string(group));
    const Args x = mxfp4_args(DType::u4, group, DType::bf16, group == 128);
    try {
      validate(x);
      ADD_FAILURE() << "taken";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << message;
      EXPECT_TRUE(message.rfind("scale_b", 0) == 0 || message.rfind("scale_a", 0) == 0)
          << "names neither scale_b nor scale_a: " << message;
      EXPECT_NE(message.find("32"), std::string::npos) << message;
    }
  }
}

// A packed as 4-bit weights are (check_weight_layout): K contiguous, the row and batch strides
// even; anything else is refused naming A.
TEST(ValidateMxfp4Activations, RefusesAWhoseKIsNotContiguousOrStridesOdd) {
  const TensorView views[] = {
      TensorView::matrix(address(0), DType::e2m1, M, WK, 1, M),           // M-contiguous
      TensorView::matrix(address(0), DType::e2m1, M, WK, 2 * WK, 2),      // every other element of K
      TensorView::matrix(address(0), DType::e2m1, M, WK, WK + 1, 1),      // rows from half a byte
      TensorView::batched(address(0), DType::e2m1, 2, M, WK, M * WK + 1, WK, 1),  // an odd batch stride
  };
  for (const TensorView& a : views) {
    SCOPED_TRACE("strides " + std::to_string(a.row_stride()) + ", " + std::to_string(a.col_stride()));
    Args x = mxfp4_args(DType::e2m1);
    x.a = a;
    if (a.rank == 3) {
      x.d = TensorView::batched(address(2), DType::bf16, 2, M, N, M * N, N, 1);
      x.options.scale_a.scales = TensorView::batched(address(5), DType::ue8m0, 2, M, 32, M * 32, 32, 1);
    }
    expect_rejected(x, "A", {"stride"});
  }
}

}  // namespace
}  // namespace gemmkit
