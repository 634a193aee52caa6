// The 4-bit formats' host reference (src/reference/lowbit.h): e2m1 rounding against a brute-force
// nearest search, MXFP4 and int4 quantisers on hand-worked vectors and error bounds (int4 with f16
// and bf16 scales, and the cases the formulas leave open: non-finite groups, scales that round to
// 0), and the GPTQ and AWQ packings on hand-packed words and round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "reference/host_numeric.h"
#include "reference/lowbit.h"

namespace gemmkit::reference {
namespace {

TEST(E2m1, EveryCodeRoundTrips) {
  for (uint8_t code = 0; code < 16; ++code) EXPECT_EQ(float_to_e2m1(e2m1_to_float(code)), code) << int(code);
  EXPECT_EQ(e2m1_to_float(0x7), 6.0f);
  EXPECT_EQ(e2m1_to_float(0xB), -1.5f);
}

// The nearest of the eight magnitudes by search, a tie going to the even code (mantissa bit 0),
// and anything past 6 to 6.
TEST(E2m1, RoundsToNearestEvenAndSaturates) {
  for (int i = -1000; i <= 1000; ++i) {
    const float x = float(i) / 128.0f;  // steps of 1/128 through +-7.8: every midpoint is on the grid
    uint8_t best = 0;
    for (uint8_t code = 1; code < 8; ++code) {
      const float d = std::fabs(std::fabs(x) - e2m1_to_float(code)), d_best = std::fabs(std::fabs(x) - e2m1_to_float(best));
      if (d < d_best || (d == d_best && code % 2 == 0)) best = code;
    }
    if (x < 0) best |= 8;
    if (x == 0.0f) best = 0;
    EXPECT_EQ(float_to_e2m1(x), best) << x;
  }
  EXPECT_EQ(float_to_e2m1(5.0f), 0x6);  // tie between 4 and 6: 4, the even code
  EXPECT_EQ(float_to_e2m1(1e30f), 0x7);
  EXPECT_EQ(float_to_e2m1(-7.0f), 0xF);
}

TEST(Mxfp4, HandWorkedBlocks) {
  // Row 0: amax 0.75, so the shared exponent is floor(log2 0.75) - 2 = -3 and each value is x * 8.
  // Row 1: amax 7, exponent 0, 7 saturates to 6. Row 2: zeros. Row 3: a NaN.
  std::vector<float> w(4 * 32, 0.0f);
  w[0] = 0.75f;      // 6 -> code 7
  w[1] = 0.1f;       // 0.8 -> 1.0, code 2
  w[2] = -0.3125f;   // -2.5 -> -2 (tie to even), code 0xC
  w[3] = 0.03125f;   // 0.25 -> 0 (tie to even)
  w[32] = 7.0f;
  w[33] = -3.5f;     // tie between 3 and 4: 4, code 0xE
  w[3 * 32 + 5] = std::nanf("");
  const Mxfp4Weights q = quantize_mxfp4(w.data(), 4, 32);
  ASSERT_EQ(q.values.size(), 4u * 16);
  ASSERT_EQ(q.scales.size(), 4u);
  EXPECT_EQ(q.scales[0], 127 - 3);
  EXPECT_EQ(q.values[0], 0x27);  // element 0 in the low nibble
  EXPECT_EQ(q.values[1], 0x0C);
  EXPECT_EQ(q.scales[1], 127);
  EXPECT_EQ(q.values[16], 0xE7);
  EXPECT_EQ(q.scales[2], 127);
  EXPECT_EQ(q.values[32], 0);
  EXPECT_EQ(q.scales[3], 0xFF);
  EXPECT_TRUE(std::isnan(mxfp4_value(q, 3, 0)));
  EXPECT_EQ(mxfp4_value(q, 0, 0), 0.75);
  EXPECT_EQ(mxfp4_value(q, 1, 0), 6.0);
}

// Odd K with a short last block; every value within the format's error of its block: half the
// largest spacing (1, between 4 and 6) times the scale, or the saturation (at most 2 times it).
TEST(Mxfp4, RandomRowsStayWithinTheFormatsError) {
  const int64_t n = 5, k = 77;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> w(size_t(n * k));
  for (float& x : w) x = normal(rng);
  const Mxfp4Weights q = quantize_mxfp4(w.data(), n, k);
  ASSERT_EQ(q.values.size(), size_t(n * 39));
  ASSERT_EQ(q.scales.size(), size_t(n * 3));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const double scale = ue8m0_to_float(q.scales[size_t(r * 3 + c / 32)]);
      EXPECT_LE(std::fabs(mxfp4_value(q, r, c) - w[size_t(r * k + c)]), 2.0 * scale) << r << " " << c;
    }
  }
}

TEST(Int4, SymmetricHandWorkedGroup) {
  // amax 7.5: scale 2 * 7.5 / 15 = 1, exact in f16; q = rne(x) + 8, clamped.
  const std::vector<float> w = {-7.5f, -3.0f, 0.0f, 2.5f, 7.5f, 3.5f, 1.0f, -1.0f};
  const Int4Weights q = quantize_int4(w.data(), 1, 8, 8, false);
  EXPECT_EQ(q.scales[0], 1.0f);
  EXPECT_EQ(q.zeros[0], 8);
  // q: 0, 5, 8, 10 (2.5 ties to 2), 15 (16 clamped), 12, 9, 7.
  EXPECT_EQ(q.values[0], 0x50);
  EXPECT_EQ(q.values[1], 0xA8);
  EXPECT_EQ(q.values[2], 0xCF);
  EXPECT_EQ(q.values[3], 0x79);
  EXPECT_EQ(int4_value(q, 0, 4), 7.0);
}

TEST(Int4, ZeroPointHandWorkedGroup) {
  // lo -1.5, hi 6: scale 7.5 / 15 = 0.5, zero rne(3) = 3; q = rne(2x) + 3.
  const std::vector<float> w = {-1.5f, 6.0f, 0.25f, 0.75f};
  const Int4Weights q = quantize_int4(w.data(), 1, 4, 4, true);
  EXPECT_EQ(q.scales[0], 0.5f);
  EXPECT_EQ(q.zeros[0], 3);
  EXPECT_EQ(q.values[0], 0xF0);  // 0 and 15
  EXPECT_EQ(q.values[1], 0x53);  // rne(0.5) = 0 -> 3; rne(1.5) = 2 -> 5
  EXPECT_EQ(int4_value(q, 0, 1), 6.0);
}

// Scales are f16 values; every value within half a scale of its input (a step at a clipped end),
// in both modes, with a short last group and per-channel groups.
TEST(Int4, RandomRowsStayWithinTheirScalesError) {
  const int64_t n = 6, k = 300;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-2.0f, 3.0f);
  std::vector<float> w(size_t(n * k));
  for (float& x : w) x = uniform(rng);
  for (int64_t group : {int64_t(32), int64_t(64), int64_t(128), k}) {
    for (bool zero_points : {false, true}) {
      const Int4Weights q = quantize_int4(w.data(), n, k, group, zero_points);
      const int64_t groups = (k + group - 1) / group;
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          const float scale = q.scales[size_t(r * groups + c / group)];
          EXPECT_EQ(f16_to_float(float_to_f16(scale)), scale);
          // Symmetric groups reach one step less far up (q - 8 <= 7): their top value may lose a
          // step; a rounded zero point may clip an end by a hair over half a step.
          const double bound = zero_points ? 0.51 * scale : 1.0 * scale + 1e-6;
          EXPECT_LE(std::fabs(int4_value(q, r, c) - w[size_t(r * k + c)]), bound)
              << "group " << group << " zero points " << zero_points << " at " << r << ", " << c;
        }
      }
    }
  }
}

// bf16 scales: 2 amax / 15 rounded to bf16 rather than f16, and q computed from that scale.
TEST(Int4, Bf16ScalesRoundToBf16) {
  // amax 1: 2 / 15 = 0.1333..., f16 0.13330078 (0x3044), bf16 0.13378906 (0x3E09).
  const std::vector<float> w = {1.0f, -0.5f, 0.2f, 0.0f};
  const Int4Weights h = quantize_int4(w.data(), 1, 4, 4, false);
  const Int4Weights b = quantize_int4(w.data(), 1, 4, 4, false, DType::bf16);
  EXPECT_EQ(h.scale_type, DType::f16);
  EXPECT_EQ(b.scale_type, DType::bf16);
  EXPECT_EQ(float_to_f16(h.scales[0]), 0x3044);
  EXPECT_EQ(float_to_bf16(b.scales[0]), 0x3E09);
  EXPECT_EQ(bf16_to_float(float_to_bf16(b.scales[0])), b.scales[0]);
  // 1 / 0.13378906 = 7.47 -> 7 (+ 8 = 15); -0.5 / s = -3.74 -> -4 (4); 0.2 / s = 1.49 -> 1 (9).
  EXPECT_EQ(b.values[0], 0x4F);
  EXPECT_EQ(b.values[1], 0x89);
  // The zero-point formula rounds its scale the same way: (1 - -0.5) / 15 = 0.1 -> bf16 0.10009766.
  const Int4Weights z = quantize_int4(w.data(), 1, 4, 4, true, DType::bf16);
  EXPECT_EQ(float_to_bf16(z.scales[0]), 0x3DCD);
  EXPECT_EQ(z.zeros[0], 5);  // rne(0.5 / 0.10009766 = 4.995)
}

// A group holding a NaN or an infinity: a NaN scale, zero point 8 and every code 8; the other
// groups as usual.
TEST(Int4, NonFiniteGroupsGetNanScales) {
  for (bool zero_points : {false, true}) {
    for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
      std::vector<float> w = {1.0f, 2.0f, -3.0f, 0.5f, 7.5f, -7.5f, 0.0f, 1.0f};
      w[2] = bad;
      const Int4Weights q = quantize_int4(w.data(), 1, 8, 4, zero_points);
      EXPECT_TRUE(std::isnan(q.scales[0])) << bad;
      EXPECT_EQ(float_to_f16(q.scales[0]), 0x7E00);
      EXPECT_EQ(float_to_bf16(q.scales[0]), 0x7FC0);
      EXPECT_EQ(q.zeros[0], 8);
      EXPECT_EQ(q.values[0], 0x88);
      EXPECT_EQ(q.values[1], 0x88);
      EXPECT_TRUE(std::isnan(int4_value(q, 0, 0)));
      EXPECT_FALSE(std::isnan(q.scales[1]));
      EXPECT_EQ(int4_value(q, 0, 4), 7.0);  // scale 1, zero 8 either way: 7.5 -> rne 8 + 8, clamped to 15
    }
  }
}

// A symmetric group so small that its scale rounds to 0 in f16: x / 0 is +-inf for x != 0 (codes
// 15 and 0) and NaN for x = 0, which takes the zero point (8). Worth 0 either way.
TEST(Int4, ScaleThatRoundsToZero) {
  const std::vector<float> w = {1e-9f, -1e-9f, 0.0f, -0.0f};
  const Int4Weights q = quantize_int4(w.data(), 1, 4, 4, false);
  EXPECT_EQ(q.scales[0], 0.0f);
  EXPECT_EQ(q.values[0], 0x0F);
  EXPECT_EQ(q.values[1], 0x88);
  EXPECT_EQ(int4_value(q, 0, 0), 0.0);
  // In bf16 the same scale is representable: 2e-9 / 15 = 1.33e-10.
  const Int4Weights b = quantize_int4(w.data(), 1, 4, 4, false, DType::bf16);
  EXPECT_GT(b.scales[0], 0.0f);
  EXPECT_EQ(b.values[1], 0x88);
}

// Eight columns of one 8-deep group, q[col][k] = (col + k) % 16, zero point col.
Int4Weights pattern() {
  Int4Weights w;
  w.n = 8;
  w.k = 8;
  w.group = 8;
  w.zero_points = true;
  w.values.assign(8 * 4, 0);
  for (int col = 0; col < 8; ++col) {
    for (int k = 0; k < 8; k += 2) {
      w.values[size_t(col * 4 + k / 2)] = uint8_t(((col + k) % 16) | (((col + k + 1) % 16) << 4));
    }
  }
  w.scales.assign(8, 0.25f);
  for (int col = 0; col < 8; ++col) w.zeros.push_back(uint8_t(col));
  return w;
}

TEST(Int4Packing, GptqWordsHoldEightAlongKLowFirst) {
  const Int4Weights w = pattern();
  const std::vector<int32_t> qweight = pack_gptq_qweight(w);
  ASSERT_EQ(qweight.size(), 8u);  // [K/8 = 1][N = 8]
  EXPECT_EQ(uint32_t(qweight[0]), 0x76543210u);
  EXPECT_EQ(uint32_t(qweight[1]), 0x87654321u);
  const std::vector<int32_t> qzeros = pack_gptq_qzeros(w);
  ASSERT_EQ(qzeros.size(), 1u);
  EXPECT_EQ(uint32_t(qzeros[0]), 0x6543210Fu);  // zero - 1, as AutoGPTQ stores it
}

TEST(Int4Packing, AwqWordsHoldEightAlongNInItsOrder) {
  const Int4Weights w = pattern();
  const std::vector<int32_t> qweight = pack_awq_qweight(w);
  ASSERT_EQ(qweight.size(), 8u);  // [K = 8][N/8 = 1]
  EXPECT_EQ(uint32_t(qweight[0]), 0x75316420u);  // k = 0: q = col, in the order 0 2 4 6 1 3 5 7
  EXPECT_EQ(uint32_t(qweight[1]), 0x86427531u);
  EXPECT_EQ(uint32_t(pack_awq_qzeros(w)[0]), 0x75316420u);
}

TEST(Int4Packing, UnpackingInvertsPacking) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const int64_t n = 20, k = 256, group = 64;  // N not a multiple of 8: the last words are partial
  std::vector<float> w(size_t(n * k));
  for (float& x : w) x = uniform(rng);
  const Int4Weights q = quantize_int4(w.data(), n, k, group, true);
  std::vector<float> scales_kn(size_t((k / group) * n));
  for (int64_t g = 0; g < k / group; ++g) {
    for (int64_t col = 0; col < n; ++col) scales_kn[size_t(g * n + col)] = q.scales[size_t(col * (k / group) + g)];
  }
  for (bool awq : {false, true}) {
    const Int4Weights back = awq ? unpack_awq(pack_awq_qweight(q), pack_awq_qzeros(q), scales_kn, n, k, group)
                                 : unpack_gptq(pack_gptq_qweight(q), pack_gptq_qzeros(q), scales_kn, n, k, group);
    EXPECT_EQ(back.values, q.values) << (awq ? "awq" : "gptq");
    EXPECT_EQ(back.zeros, q.zeros) << (awq ? "awq" : "gptq");
    EXPECT_EQ(back.scales, q.scales) << (awq ? "awq" : "gptq");
  }
}

}  // namespace
}  // namespace gemmkit::reference
