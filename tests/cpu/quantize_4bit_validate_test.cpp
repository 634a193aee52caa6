// quantize_int4's and quantize_mxfp4's argument checks, which need no GPU (pointers are fake
// device addresses that are never dereferenced), their launch plan and their kernel source.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "api/quantize_4bit.h"
#include "config_tests.h"
#include "gemmkit/error.h"
#include "gemmkit/quantize.h"
#include "rejection.h"

namespace gemmkit {
namespace {

constexpr int64_t K = 512, N = 256;

using config_tests::address;  // fake device addresses 4 GiB apart

// A checkpoint's [N, K] bf16 weight as gemm()'s B (K x N, strides {1, K}), its [N, K/2] bytes,
// and [K/128, N] scales and zero points.
struct Int4Args {
  TensorView w = TensorView::matrix(address(0), DType::bf16, K, N, 1, K);
  TensorView q = TensorView::matrix(address(1), DType::u4, K, N, 1, K);
  TensorView scales = TensorView::row_major(address(2), DType::bf16, K / 128, N);
  std::optional<TensorView> zeros = TensorView::row_major(address(3), DType::bf16, K / 128, N);
  int64_t group = 128;
  QuantizeOptions options;
};

// gpt-oss's layout: e2m1 values [N, K/2] bytes, ue8m0 scales [N, K/32] (B's scales transposed).
struct MxArgs {
  TensorView w = TensorView::matrix(address(0), DType::bf16, K, N, 1, K);
  TensorView q = TensorView::matrix(address(1), DType::e2m1, K, N, 1, K);
  TensorView scales = TensorView::matrix(address(2), DType::ue8m0, K / 32, N, 1, K / 32);
  QuantizeOptions options;
};

Quantize4bitProblem validate(const Int4Args& a) {
  return validate_quantize_int4(a.w, a.q, a.scales, a.zeros, a.group, a.options);
}
Quantize4bitProblem validate(const MxArgs& a) { return validate_quantize_mxfp4(a.w, a.q, a.scales, a.options); }

// Expects invalid_argument from both the validation and the entry point itself (which must throw
// before touching any device), with a message that starts with `argument` and contains `given`.
void expect_rejected(const Int4Args& a, const std::string& argument, std::initializer_list<std::string> given) {
  testing::expect_invalid_argument([&] { validate(a); }, argument, given);
  testing::expect_invalid_argument([&] { quantize_int4(a.w, a.q, a.scales, a.zeros, a.group, a.options); }, argument,
                                   given);
}
void expect_rejected(const MxArgs& a, const std::string& argument, std::initializer_list<std::string> given) {
  testing::expect_invalid_argument([&] { validate(a); }, argument, given);
  testing::expect_invalid_argument([&] { quantize_mxfp4(a.w, a.q, a.scales, a.options); }, argument, given);
}

TEST(Quantize4bitValidate, WellFormedArgumentsAreAccepted) {
  const Int4Args a;
  const Quantize4bitProblem p = validate(a);
  EXPECT_FALSE(p.empty);
  EXPECT_EQ(p.group, 128);
  EXPECT_TRUE(p.zeros.has_value());
  Int4Args symmetric;
  symmetric.zeros.reset();
  EXPECT_FALSE(validate(symmetric).zeros.has_value());
  // f32 weights, N-contiguous (a K x N row-major B), f16 scales transposed, groups of 32.
  Int4Args other;
  other.w = TensorView::row_major(address(0), DType::f32, K, N);
  other.scales = TensorView::matrix(address(2), DType::f16, K / 32, N, 1, K / 32);
  other.zeros = TensorView::matrix(address(3), DType::f16, K / 32, N, 1, K / 32);
  other.group = 32;
  EXPECT_NO_THROW(validate(other));
  // Per channel: a group of at least K, odd K and group, the bytes padded to an even column stride.
  Int4Args channel;
  channel.w = TensorView::matrix(address(0), DType::f16, 129, N, 1, 129);
  channel.q = TensorView::matrix(address(1), DType::u4, 129, N, 1, 130);
  channel.scales = TensorView::row_major(address(2), DType::f16, 1, N);
  channel.zeros.reset();
  channel.group = 129;
  EXPECT_NO_THROW(validate(channel));
  channel.group = 4096;
  EXPECT_NO_THROW(validate(channel));
  // A group gemm() does not take (48) still quantises: any even group does.
  Int4Args even;
  even.group = 48;
  even.scales = TensorView::row_major(address(2), DType::bf16, 11, N);
  even.zeros = TensorView::row_major(address(3), DType::bf16, 11, N);
  EXPECT_NO_THROW(validate(even));

  const MxArgs m;
  EXPECT_EQ(validate(m).group, 32);
  MxArgs pow2;  // MX scales are powers of two anyway
  pow2.options.power_of_two_scales = true;
  EXPECT_NO_THROW(validate(pow2));
  // Batched: [E, N, K] experts, their bytes and scales.
  MxArgs batched;
  batched.w = TensorView::batched(address(0), DType::bf16, 4, K, N, N * K, 1, K);
  batched.q = TensorView::batched(address(1), DType::e2m1, 4, K, N, N * K, 1, K);
  batched.scales = TensorView::batched(address(2), DType::ue8m0, 4, K / 32, N, N * K / 32, 1, K / 32);
  EXPECT_NO_THROW(validate(batched));
}

TEST(Quantize4bitValidate, RejectsUnsupportedTypes) {
  Int4Args a;
  a.w.dtype = DType::e4m3;
  expect_rejected(a, "w:", {"dtype e4m3", "bf16, f16 or f32"});
  a = Int4Args{};
  a.w.dtype = DType::u4;
  expect_rejected(a, "w:", {"dtype u4"});
  a = Int4Args{};
  a.q.dtype = DType::e2m1;
  expect_rejected(a, "q:", {"dtype e2m1", "u4"});
  a = Int4Args{};
  a.q.dtype = DType::e4m3;
  expect_rejected(a, "q:", {"dtype e4m3", "u4"});
  a = Int4Args{};
  a.scales.dtype = DType::f32;
  a.zeros->dtype = DType::f32;
  expect_rejected(a, "scales:", {"dtype f32", "bf16 or f16"});
  a = Int4Args{};
  a.scales.dtype = DType::ue8m0;
  expect_rejected(a, "scales:", {"dtype ue8m0"});
  a = Int4Args{};
  a.zeros->dtype = DType::f16;
  expect_rejected(a, "zeros:", {"dtype f16", "bf16"});

  MxArgs m;
  m.q.dtype = DType::u4;
  expect_rejected(m, "q:", {"dtype u4", "e2m1"});
  m = MxArgs{};
  m.scales.dtype = DType::bf16;
  expect_rejected(m, "scales:", {"dtype bf16", "ue8m0"});
  m = MxArgs{};
  m.w.dtype = DType::e5m2;
  expect_rejected(m, "w:", {"dtype e5m2"});
}

TEST(Quantize4bitValidate, RejectsBadGroups) {
  Int4Args a;
  a.group = 0;
  expect_rejected(a, "group:", {"0", "at least 1"});
  a.group = -128;
  expect_rejected(a, "group:", {"-128"});
  a.group = 33;  // odd, and below K: a byte would hold two groups' codes
  expect_rejected(a, "group:", {"33", "K = 512", "even"});
}

TEST(Quantize4bitValidate, RejectsPowerOfTwoScalesForInt4) {
  Int4Args a;
  a.options.power_of_two_scales = true;
  expect_rejected(a, "options.power_of_two_scales:", {"true", "false"});
}

TEST(Quantize4bitValidate, RejectsBadFormsOfEveryTensor) {
  Int4Args a;
  a.w.rank = 4;
  expect_rejected(a, "w:", {"rank 4"});
  a = Int4Args{};
  a.q.sizes[0] = -1;
  expect_rejected(a, "q:", {"negative size"});
  a = Int4Args{};
  a.scales.strides[1] = -1;
  expect_rejected(a, "scales:", {"negative stride"});
  a = Int4Args{};
  a.zeros->rank = 1;
  expect_rejected(a, "zeros:", {"rank 1"});
}

TEST(Quantize4bitValidate, RejectsShapeMismatches) {
  Int4Args a;
  a.q = TensorView::matrix(address(1), DType::u4, K, N + 1, 1, K);
  expect_rejected(a, "q:", {"[512, 257]", "512 x 256"});
  a = Int4Args{};
  a.scales = TensorView::row_major(address(2), DType::bf16, K / 64, N);
  expect_rejected(a, "scales:", {"[8, 256]", "ceil(K/128) x N", "4 x 256"});
  a = Int4Args{};
  a.scales = TensorView::row_major(address(2), DType::bf16, N, K / 128);  // the weights' orientation
  expect_rejected(a, "scales:", {"[256, 4]", "4 x 256"});
  a = Int4Args{};
  a.zeros = TensorView::row_major(address(3), DType::bf16, 1, N);
  expect_rejected(a, "zeros:", {"[1, 256]", "4 x 256"});
  a = Int4Args{};
  a.group = 64;  // the scales of groups of 128 no longer fit
  expect_rejected(a, "scales:", {"ceil(K/64) x N", "8 x 256"});
}

TEST(Quantize4bitValidate, ShortLastGroupsCountInTheScalesShape) {
  Int4Args a;
  a.w = TensorView::matrix(address(0), DType::bf16, 500, N, 1, 500);
  a.q = TensorView::matrix(address(1), DType::u4, 500, N, 1, 500);
  EXPECT_NO_THROW(validate(a));  // ceil(500 / 128) = 4 rows of scales
  a.group = 100;
  a.scales = TensorView::row_major(address(2), DType::bf16, 4, N);
  expect_rejected(a, "scales:", {"ceil(K/100) x N", "5 x 256"});
  MxArgs m;
  m.w = TensorView::matrix(address(0), DType::bf16, 500, N, 1, 500);
  m.q = TensorView::matrix(address(1), DType::e2m1, 500, N, 1, 500);
  EXPECT_NO_THROW(validate(m));  // ceil(500 / 32) = 16 blocks, the last one 20 long
  m.scales = TensorView::matrix(address(2), DType::ue8m0, 15, N, 1, 15);
  expect_rejected(m, "scales:", {"[15, 256]", "ceil(K/32) x N", "16 x 256"});
}

TEST(Quantize4bitValidate, RejectsBatchMismatches) {
  MxArgs m;
  m.w = TensorView::batched(address(0), DType::bf16, 3, K, N, N * K, 1, K);
  expect_rejected(m, "q:", {"batch 1", "w's batch 3"});
  m.q = TensorView::batched(address(1), DType::e2m1, 3, K, N, N * K, 1, K);
  expect_rejected(m, "scales:", {"batch 1", "w's batch 3"});
  m.scales = TensorView::batched(address(2), DType::ue8m0, 2, K / 32, N, N * K / 32, 1, K / 32);
  expect_rejected(m, "scales:", {"batch 2", "w's batch 3"});
  m.scales = TensorView::batched(address(2), DType::ue8m0, 3, K / 32, N, N * K / 32, 1, K / 32);
  EXPECT_NO_THROW(validate(m));
  Int4Args a;
  a.w = TensorView::batched(address(0), DType::bf16, 2, K, N, N * K, 1, K);
  a.q = TensorView::batched(address(1), DType::u4, 2, K, N, N * K, 1, K);
  a.scales = TensorView::batched(address(2), DType::bf16, 2, K / 128, N, N * K / 128, N, 1);
  expect_rejected(a, "zeros:", {"batch 1", "w's batch 2"});
  // A rank-3 w of batch 1 goes with rank-2 outputs.
  Int4Args b;
  b.w = TensorView::batched(address(0), DType::bf16, 1, K, N, 0, 1, K);
  EXPECT_NO_THROW(validate(b));
}

TEST(Quantize4bitValidate, RejectsCodesNotPackedAlongK) {
  Int4Args a;
  a.q = TensorView::row_major(address(1), DType::u4, K, N);  // packed along N
  expect_rejected(a, "q:", {"strides {256, 1}", "K contiguous"});
  a = Int4Args{};
  a.q = TensorView::matrix(address(1), DType::u4, K, N, 1, K + 1);  // columns starting mid-byte
  expect_rejected(a, "q:", {"strides {1, 513}", "even"});
  MxArgs m;
  m.q = TensorView::batched(address(1), DType::e2m1, 1, K, N, 3, 1, K);  // batch 1: its stride is never used
  EXPECT_NO_THROW(validate(m));
  m.w = TensorView::batched(address(0), DType::bf16, 2, K, N, N * K, 1, K);
  m.q = TensorView::batched(address(1), DType::e2m1, 2, K, N, N * K + 1, 1, K);
  m.scales = TensorView::batched(address(2), DType::ue8m0, 2, K / 32, N, N * K / 32, 1, K / 32);
  expect_rejected(m, "q:", {"even column and batch strides"});
  // One element of K: any row stride.
  Int4Args one;
  one.w = TensorView::matrix(address(0), DType::bf16, 1, N, 1, 1);
  one.q = TensorView::matrix(address(1), DType::u4, 1, N, 7, 2);
  one.scales = TensorView::row_major(address(2), DType::bf16, 1, N);
  one.zeros = TensorView::row_major(address(3), DType::bf16, 1, N);
  EXPECT_NO_THROW(validate(one));
}

TEST(Quantize4bitValidate, RejectsNullData) {
  for (const char* name : {"w", "q", "scales", "zeros"}) {
    Int4Args a;
    const std::string s = name;
    TensorView& t = s == "w" ? a.w : s == "q" ? a.q : s == "scales" ? a.scales : *a.zeros;
    t.data = nullptr;
    expect_rejected(a, s + ":", {"null"});
  }
}

TEST(Quantize4bitValidate, RejectsMisalignedData) {
  Int4Args a;
  a.w.data = address(0) + 1;
  expect_rejected(a, "w:", {"2-byte aligned"});
  a = Int4Args{};
  a.w.dtype = DType::f32;
  a.w.data = address(0) + 2;
  expect_rejected(a, "w:", {"4-byte aligned"});
  a = Int4Args{};
  a.scales.data = address(2) + 1;
  expect_rejected(a, "scales:", {"2-byte aligned"});
  a = Int4Args{};
  a.zeros->data = address(3) + 3;
  expect_rejected(a, "zeros:", {"2-byte aligned"});
  MxArgs m;  // bytes go anywhere
  m.q.data = address(1) + 1;
  m.scales.data = address(2) + 3;
  EXPECT_NO_THROW(validate(m));
}

TEST(Quantize4bitValidate, RejectsOverlaps) {
  Int4Args a;
  a.q.data = address(0) + 1000;  // inside w
  expect_rejected(a, "q:", {"overlaps w"});
  a = Int4Args{};
  a.scales.data = address(1) + N * K / 2 - 8;  // the end of q
  expect_rejected(a, "scales:", {"overlaps q"});
  a = Int4Args{};
  a.zeros->data = address(2) + 64;  // inside the scales
  expect_rejected(a, "zeros:", {"overlaps scales"});
  a = Int4Args{};
  a.zeros->data = address(0);
  expect_rejected(a, "zeros:", {"overlaps w"});
  a = Int4Args{};
  a.q.strides[1] = K / 2;  // columns of q overlap each other
  expect_rejected(a, "q:", {"overlap", "own address"});
  a = Int4Args{};
  a.scales.strides[1] = 0;
  expect_rejected(a, "scales:", {"overlap"});
  a = Int4Args{};
  a.w.strides[1] = 0;  // w may repeat itself: it is only read
  EXPECT_NO_THROW(validate(a));
}

TEST(Quantize4bitValidate, EmptyTensorsNeedNoPointers) {
  Int4Args a;
  a.w = TensorView::matrix(nullptr, DType::bf16, K, 0, 1, K);
  a.q = TensorView::matrix(nullptr, DType::u4, K, 0, 1, K);
  a.scales = TensorView::row_major(nullptr, DType::bf16, K / 128, 0);
  a.zeros = TensorView::row_major(nullptr, DType::bf16, K / 128, 0);
  EXPECT_TRUE(validate(a).empty);
  EXPECT_NO_THROW(quantize_int4(a.w, a.q, a.scales, a.zeros, a.group));  // returns before any device call
  MxArgs m;
  m.w = TensorView::matrix(nullptr, DType::f32, 0, N, 1, 1);
  m.q = TensorView::matrix(nullptr, DType::e2m1, 0, N, 1, 2);
  m.scales = TensorView::row_major(nullptr, DType::ue8m0, 0, N);
  EXPECT_TRUE(validate(m).empty);
  EXPECT_NO_THROW(quantize_mxfp4(m.w, m.q, m.scales));
}

TEST(Quantize4bitValidate, DeviceChecksComeAfterValidation) {
  // Well-formed arguments with fake pointers reach the device checks: without a driver that is
  // no_device, with one the fake pointer is not device memory.
  const Int4Args a;
  const MxArgs m;
  for (int i = 0; i < 2; ++i) {
    try {
      if (i == 0) {
        quantize_int4(a.w, a.q, a.scales, a.zeros, a.group);
      } else {
        quantize_mxfp4(m.w, m.q, m.scales);
      }
      ADD_FAILURE() << "the quantiser accepted fake pointers";
    } catch (const Error& e) {
      EXPECT_TRUE(e.code() == ErrorCode::no_device || e.code() == ErrorCode::invalid_argument) << e.what();
      if (e.code() == ErrorCode::invalid_argument) {
        EXPECT_EQ(std::string(e.what()).rfind("w:", 0), 0u) << e.what();
      }
    }
  }
}

// ---- launch plan and source ------------------------------------------------------------------

TEST(Quantize4bitPlan, OneWarpABlockInBOrientation) {
  Int4Args a;
  a.w = TensorView::batched(address(0), DType::bf16, 2, K, N, N * K, 1, K);
  a.q = TensorView::batched(address(1), DType::u4, 2, K, N, N * K, 1, K);
  a.scales = TensorView::batched(address(2), DType::bf16, 2, K / 128, N, N * K / 128, N, 1);
  a.zeros = TensorView::batched(address(3), DType::bf16, 2, K / 128, N, N * K / 128, 1, K / 128);
  const Quantize4bitLaunch l = plan_quantize_4bit(validate(a), 132);
  const Quantize4bitParams& p = l.params;
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.k, K);
  EXPECT_EQ(p.n, N);
  EXPECT_EQ(p.group, 128);
  EXPECT_EQ(p.groups, 4);
  EXPECT_EQ(p.blocks, 2 * N * 4);
  EXPECT_EQ(l.grid, unsigned(2 * N * 4 / 4));  // four warps a CTA, fewer blocks than 16 CTAs an SM
  EXPECT_EQ(p.w.k_stride, 1);
  EXPECT_EQ(p.w.n_stride, K);
  EXPECT_EQ(p.w.batch_stride, N * K);
  EXPECT_EQ(p.q.n_stride, K);
  EXPECT_EQ(p.scales.k_stride, N);
  EXPECT_EQ(p.scales.n_stride, 1);
  EXPECT_EQ(p.zeros.k_stride, 1);
  EXPECT_EQ(p.zeros.n_stride, K / 128);
  // Many blocks: the grid stops at 16 CTAs an SM, the warps loop.
  MxArgs big;
  big.w = TensorView::matrix(address(0), DType::bf16, 8192, 8192, 1, 8192);
  big.q = TensorView::matrix(address(1), DType::e2m1, 8192, 8192, 1, 8192);
  big.scales = TensorView::matrix(address(2), DType::ue8m0, 256, 8192, 1, 256);
  EXPECT_EQ(plan_quantize_4bit(validate(big), 132).grid, 132u * 16);
  // A group past K is one group of K.
  Int4Args channel;
  channel.group = 4096;
  channel.scales = TensorView::row_major(address(2), DType::bf16, 1, N);
  channel.zeros.reset();
  const Quantize4bitParams c = plan_quantize_4bit(validate(channel), 132).params;
  EXPECT_EQ(c.group, K);
  EXPECT_EQ(c.groups, 1);
}

TEST(Quantize4bitPlan, VariantsNameTheirSource) {
  Int4Args a;
  a.w.dtype = DType::f32;
  a.scales.dtype = DType::f16;
  a.zeros->dtype = DType::f16;
  const Quantize4bitVariant v = quantize_4bit_variant(validate(a));
  EXPECT_EQ(v.w, DType::f32);
  EXPECT_EQ(v.q, DType::u4);
  EXPECT_EQ(v.scales, DType::f16);
  EXPECT_TRUE(v.zeros);
  const std::string source = quantize_4bit_source(v);
  for (const char* line : {"constexpr int kQ4WType = GEMMKIT_F32;", "constexpr int kQ4Format = GEMMKIT_U4;",
                           "constexpr int kQ4ScaleType = GEMMKIT_F16;", "constexpr bool kQ4Zeros = true;",
                           "gemmkit_quantize_4bit"}) {
    EXPECT_NE(source.find(line), std::string::npos) << line;
  }
  const Quantize4bitVariant mx = quantize_4bit_variant(validate(MxArgs{}));
  EXPECT_EQ(mx.q, DType::e2m1);
  EXPECT_EQ(mx.scales, DType::ue8m0);
  EXPECT_FALSE(mx.zeros);
  EXPECT_NE(quantize_4bit_source(mx).find("constexpr int kQ4Format = GEMMKIT_E2M1;"), std::string::npos);
}

}  // namespace
}  // namespace gemmkit
