// Checks of the host-side numerics, the CPU reference GEMM, the result comparison and the GPU
// tests' problem specs (what can be checked of them without a GPU).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gemmkit/error.h"
#include "reference/compare.h"
#include "reference/cpu_reference.h"
#include "reference/device_problem.h"
#include "reference/host_numeric.h"

namespace gemmkit::reference {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// ---- conversions ----

TEST(HostNumeric, Bf16RoundTripsEveryFinitePattern) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    if ((h & 0x7F80) == 0x7F80) continue;  // inf and NaN
    ASSERT_EQ(float_to_bf16(bf16_to_float(uint16_t(h))), h) << std::hex << h;
  }
}

TEST(HostNumeric, F16RoundTripsEveryFinitePattern) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    if ((h & 0x7C00) == 0x7C00) continue;  // inf and NaN
    ASSERT_EQ(float_to_f16(f16_to_float(uint16_t(h))), h) << std::hex << h;
  }
}

// A round trip alone would accept a consistently wrong decoding; pin values and ordering too.
TEST(HostNumeric, DecodesKnownValuesInOrder) {
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xC040), -3.0f);
  EXPECT_EQ(bf16_to_float(0x0001), 0x1p-133f);
  EXPECT_EQ(bf16_to_float(0x7F7F), 0x1.FEp127f);
  EXPECT_EQ(f16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_float(0xC200), -3.0f);
  EXPECT_EQ(f16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_float(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(f16_to_float(0x0400), 0x1p-14f);
  EXPECT_EQ(f16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_float(0x7C00), kInf);
  EXPECT_EQ(f16_to_float(0xFC00), -kInf);
  EXPECT_TRUE(std::isnan(f16_to_float(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7C01)));
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7F81)));
  for (uint16_t h = 0; h < 0x7BFF; ++h) {
    ASSERT_LT(f16_to_float(h), f16_to_float(h + 1)) << std::hex << h;
    ASSERT_EQ(f16_to_float(h | 0x8000), -f16_to_float(h)) << std::hex << h;
  }
  for (uint16_t h = 0; h < 0x7F7F; ++h) {
    ASSERT_LT(bf16_to_float(h), bf16_to_float(h + 1)) << std::hex << h;
  }
}

TEST(HostNumeric, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3F80);          // tie, down to even
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);      // tie, up to even
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);  // just above the tie
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f - 0x1p-20f), 0x3F80);  // just below the tie
  EXPECT_EQ(float_to_bf16(-(1.0f + 3 * 0x1p-8f)), 0xBF82);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to inf
  EXPECT_EQ(float_to_bf16(-kInf), 0xFF80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(kNaN))));
  // A NaN whose payload lies only in the low bits must not truncate to inf.
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::bit_cast<float>(0x7F800001u)))));
}

TEST(HostNumeric, F16RoundsToNearestEven) {
  EXPECT_EQ(float_to_f16(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(float_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
  EXPECT_EQ(float_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
  EXPECT_EQ(float_to_f16(2049.0f), 0x6800);  // 2048
  EXPECT_EQ(float_to_f16(2051.0f), 0x6802);  // 2052
  EXPECT_EQ(float_to_f16(-2051.0f), 0xE802);
  EXPECT_EQ(float_to_f16(0x1.FFEp-15f), 0x0400);  // 2^-14 - 2^-26: nearer the smallest normal
}

TEST(HostNumeric, F16SubnormalsAndOverflow) {
  EXPECT_EQ(float_to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(float_to_f16(-0x1p-24f), 0x8001);
  EXPECT_EQ(float_to_f16(0x1p-25f), 0x0000);         // tie between 0 and 2^-24: to even (0)
  EXPECT_EQ(float_to_f16(0x1.01p-25f), 0x0001);      // just above that tie
  EXPECT_EQ(float_to_f16(1.5f * 0x1p-24f), 0x0002);  // tie, up to even
  EXPECT_EQ(float_to_f16(2.5f * 0x1p-24f), 0x0002);  // tie, down to even
  EXPECT_EQ(float_to_f16(1023 * 0x1p-24f), 0x03FF);
  EXPECT_EQ(float_to_f16(1023.5f * 0x1p-24f), 0x0400);  // tie into the normal range
  EXPECT_EQ(float_to_f16(0x1p-30f), 0x0000);
  EXPECT_EQ(float_to_f16(-0x1p-30f), 0x8000);
  EXPECT_EQ(float_to_f16(1e-40f), 0x0000);  // an f32 subnormal

  EXPECT_EQ(float_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7C00);  // tie between 65504 and 2^16: to inf
  EXPECT_EQ(float_to_f16(1e6f), 0x7C00);
  EXPECT_EQ(float_to_f16(-1e6f), 0xFC00);
  EXPECT_EQ(float_to_f16(kInf), 0x7C00);
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(kNaN))));
}

TEST(HostNumeric, LoadStoreElements) {
  uint16_t narrow[3] = {};
  float wide[3] = {};
  store_element(narrow, DType::bf16, 1, -2.5);
  EXPECT_EQ(narrow[1], 0xC020);
  EXPECT_EQ(load_element(narrow, DType::bf16, 1), -2.5);
  store_element(narrow, DType::f16, 2, 0.25);
  EXPECT_EQ(narrow[2], 0x3400);
  EXPECT_EQ(load_element(narrow, DType::f16, 2), 0.25);
  store_element(wide, DType::f32, 2, 1.0 / 3);
  EXPECT_EQ(wide[2], 1.0f / 3);
  EXPECT_EQ(load_element(wide, DType::f32, 2), double(1.0f / 3));
  // The double lies just above a bf16 tie but rounds to the tie in f32: one correct rounding
  // goes up, a naive double -> float -> bf16 would go down.
  store_element(narrow, DType::bf16, 0, 1.0 + 0x1p-8 + 0x1p-40);
  EXPECT_EQ(narrow[0], 0x3F81);
  store_element(narrow, DType::f16, 0, 1.0 + 0x1p-11 + 0x1p-40);
  EXPECT_EQ(narrow[0], 0x3C01);
}

TEST(HostNumeric, UnitRoundoff) {
  EXPECT_EQ(unit_roundoff(DType::bf16), std::ldexp(1.0, -8));
  EXPECT_EQ(unit_roundoff(DType::f16), std::ldexp(1.0, -11));
  EXPECT_EQ(unit_roundoff(DType::f32), std::ldexp(1.0, -24));
}

// ---- span_elements ----

TEST(SpanElements, HandWorkedCases) {
  const auto span = [](int64_t bs, int64_t rs, int64_t cs, int64_t batch, int64_t rows, int64_t cols) {
    MatrixRef m;
    m.batch_stride = bs;
    m.row_stride = rs;
    m.col_stride = cs;
    return span_elements(m, batch, rows, cols);
  };
  EXPECT_EQ(span(0, 5, 1, 1, 4, 5), 20);     // row-major 4x5
  EXPECT_EQ(span(0, 1, 4, 1, 4, 5), 20);     // column-major 4x5
  EXPECT_EQ(span(0, 8, 1, 1, 4, 5), 29);     // padded rows: 3*8 + 4 + 1
  EXPECT_EQ(span(25, 5, 1, 3, 4, 5), 70);    // batch of 3, 5 spare elements between: 2*25 + 20
  EXPECT_EQ(span(0, 5, 1, 3, 4, 5), 20);     // broadcast batch
  EXPECT_EQ(span(100, 11, 2, 2, 3, 4), 129);  // general strides: 100 + 2*11 + 3*2 + 1
  EXPECT_EQ(span(0, 5, -1, 1, 4, 5), 16);    // reversed columns: the largest offset is row 3, col 0
  EXPECT_EQ(span(7, 3, 1, 1, 1, 1), 1);
  EXPECT_EQ(span(0, 5, 1, 1, 0, 5), 0);
  EXPECT_EQ(span(0, 5, 1, 1, 4, 0), 0);
  EXPECT_EQ(span(20, 5, 1, 0, 4, 5), 0);
}

// ---- cpu_gemm against a naive loop ----

struct Strides {
  int64_t batch = 0, row = 0, col = 0;
};
Strides row_major(int64_t rows, int64_t cols, int64_t batch_gap = 0) {
  return {rows * cols + batch_gap, cols, 1};
}
Strides col_major(int64_t rows, int64_t cols, int64_t batch_gap = 0) {
  return {rows * cols + batch_gap, 1, rows};
}

// One operand: dense values [batch][rows][cols] and a host image with the given strides in which
// every element the strides do not reach is NaN, so that a misplaced read shows.
struct Operand {
  std::vector<double> dense;
  std::vector<uint16_t> narrow;  // bf16/f16 image
  std::vector<float> wide;       // f32 image
  MatrixRef ref;
  const void* image() const {
    return ref.dtype == DType::f32 ? static_cast<const void*>(wide.data()) : narrow.data();
  }
  void* image() { return const_cast<void*>(std::as_const(*this).image()); }
};

int64_t offset(const MatrixRef& m, int64_t b, int64_t i, int64_t j) {
  return b * m.batch_stride + i * m.row_stride + j * m.col_stride;
}

// Values k/64 with |k| <= 128 are exact in bf16 and f16, and so are their products and sums in
// double: the reference must then match the naive loop exactly.
Operand make_operand(std::mt19937_64& rng, DType dtype, Strides s, int64_t batch, int64_t rows,
                     int64_t cols) {
  Operand op;
  op.ref.dtype = dtype;
  op.ref.batch_stride = s.batch;
  op.ref.row_stride = s.row;
  op.ref.col_stride = s.col;
  const int64_t span = span_elements(op.ref, batch, rows, cols);
  if (dtype == DType::f32) {
    op.wide.assign(span, kNaN);
  } else {
    op.narrow.assign(span, dtype == DType::bf16 ? float_to_bf16(kNaN) : float_to_f16(kNaN));
  }
  op.ref.data = op.image();
  std::uniform_int_distribution<int> value(-128, 128);
  op.dense.resize(batch * rows * cols);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        double& x = op.dense[(b * rows + i) * cols + j];
        // A broadcast batch (stride 0) holds one matrix for every batch.
        x = (b > 0 && s.batch == 0) ? op.dense[i * cols + j] : value(rng) / 64.0;
        store_element(op.image(), dtype, offset(op.ref, b, i, j), x);
      }
  return op;
}

struct Case {
  int64_t m = 5, n = 7, k = 9, batch = 1;
  DType in = DType::bf16, c_type = DType::f32, d_type = DType::f32;
  Strides a, b, c, d;
  float alpha = 1, beta = 0;
};

Problem make_problem(const Case& tc, const Operand& a, const Operand& b, const Operand* c) {
  Problem p;
  p.m = tc.m;
  p.n = tc.n;
  p.k = tc.k;
  p.batch = tc.batch;
  p.a = a.ref;
  p.b = b.ref;
  if (c) p.c = c->ref;
  p.d.dtype = tc.d_type;
  p.d.batch_stride = tc.d.batch;
  p.d.row_stride = tc.d.row;
  p.d.col_stride = tc.d.col;
  p.alpha = tc.alpha;
  p.beta = tc.beta;
  return p;
}

void expect_matches_naive(const Case& tc) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Operand a = make_operand(rng, tc.in, tc.a, tc.batch, tc.m, tc.k);
  const Operand b = make_operand(rng, tc.in, tc.b, tc.batch, tc.k, tc.n);
  const bool with_c = tc.beta != 0;
  const Operand c = with_c ? make_operand(rng, tc.c_type, tc.c, tc.batch, tc.m, tc.n) : Operand{};
  const Problem p = make_problem(tc, a, b, with_c ? &c : nullptr);

  const int64_t outputs = tc.batch * tc.m * tc.n;
  std::vector<double> ref(outputs, kNaN), ref_abs(outputs, kNaN);
  cpu_gemm(p, a.image(), b.image(), with_c ? c.image() : nullptr, ref.data(), ref_abs.data());

  for (int64_t bi = 0; bi < tc.batch; ++bi)
    for (int64_t i = 0; i < tc.m; ++i)
      for (int64_t j = 0; j < tc.n; ++j) {
        double sum = 0, abs_sum = 0;
        for (int64_t kk = 0; kk < tc.k; ++kk) {
          const double x = a.dense[(bi * tc.m + i) * tc.k + kk];
          const double y = b.dense[(bi * tc.k + kk) * tc.n + j];
          sum += x * y;
          abs_sum += std::fabs(x) * std::fabs(y);
        }
        const int64_t index = (bi * tc.m + i) * tc.n + j;
        const double cv = with_c ? c.dense[index] : 0.0;
        ASSERT_EQ(ref[index], tc.alpha * sum + tc.beta * cv) << "(b,i,j)=" << bi << "," << i << "," << j;
        ASSERT_EQ(ref_abs[index], std::fabs(tc.alpha) * abs_sum + std::fabs(tc.beta) * std::fabs(cv))
            << "(b,i,j)=" << bi << "," << i << "," << j;
      }
}

TEST(CpuGemm, AllFourStorageLayouts) {
  for (bool a_col : {false, true}) {
    for (bool b_col : {false, true}) {
      SCOPED_TRACE(std::string("A ") + (a_col ? "col" : "row") + "-major, B " +
                   (b_col ? "col" : "row") + "-major");
      Case tc;
      tc.a = a_col ? col_major(tc.m, tc.k) : row_major(tc.m, tc.k);
      tc.b = b_col ? col_major(tc.k, tc.n) : row_major(tc.k, tc.n);
      tc.d = row_major(tc.m, tc.n);
      expect_matches_naive(tc);
    }
  }
}

TEST(CpuGemm, F16Inputs) {
  Case tc;
  tc.in = DType::f16;
  tc.a = row_major(tc.m, tc.k);
  tc.b = col_major(tc.k, tc.n);
  tc.d = row_major(tc.m, tc.n);
  expect_matches_naive(tc);
}

TEST(CpuGemm, BatchOfThreeWithDistinctBatchStrides) {
  Case tc;
  tc.batch = 3;
  tc.a = row_major(tc.m, tc.k, 3);
  tc.b = col_major(tc.k, tc.n, 17);
  tc.d = row_major(tc.m, tc.n, 1);
  expect_matches_naive(tc);
  tc.b.batch = 0;  // B broadcast over the batch
  expect_matches_naive(tc);
}

TEST(CpuGemm, AlphaAndBetaWithC) {
  Case tc;
  tc.batch = 2;
  tc.alpha = 1.5f;
  tc.beta = -0.5f;
  tc.a = row_major(tc.m, tc.k);
  tc.b = row_major(tc.k, tc.n);
  tc.d = row_major(tc.m, tc.n);
  tc.c = col_major(tc.m, tc.n, 4);
  expect_matches_naive(tc);
  tc.c_type = DType::bf16;
  tc.alpha = -2.0f;
  expect_matches_naive(tc);
}

TEST(CpuGemm, GeneralStrides) {
  Case tc;
  tc.batch = 2;
  tc.a = {150, 2 * tc.k + 3, 2};  // neither dimension has unit stride; batch 0 ends at 100
  tc.b = {0, 1, tc.k + 2};        // column-major with padding, broadcast batch
  tc.d = row_major(tc.m, tc.n);
  expect_matches_naive(tc);
}

// ---- compare ----

// A D image holding the reference rounded to `dtype`, for a small batched problem.
struct Judged {
  Problem p;
  std::vector<double> ref, ref_abs;
  Operand d;
};

Judged make_judged(DType d_type) {
  std::mt19937_64 rng(std::random_device{}());
  Case tc;
  tc.batch = 2;
  tc.a = row_major(tc.m, tc.k);
  tc.b = col_major(tc.k, tc.n);
  tc.d = col_major(tc.m, tc.n, 6);
  tc.d_type = d_type;
  const Operand a = make_operand(rng, tc.in, tc.a, tc.batch, tc.m, tc.k);
  const Operand b = make_operand(rng, tc.in, tc.b, tc.batch, tc.k, tc.n);
  Judged j;
  j.p = make_problem(tc, a, b, nullptr);  // its A/B pointers dangle after this; compare() reads only D
  j.ref.resize(tc.batch * tc.m * tc.n);
  j.ref_abs.resize(j.ref.size());
  cpu_gemm(j.p, a.image(), b.image(), nullptr, j.ref.data(), j.ref_abs.data());
  j.d = make_operand(rng, d_type, tc.d, tc.batch, tc.m, tc.n);  // for its image and strides
  for (int64_t bi = 0; bi < tc.batch; ++bi)
    for (int64_t i = 0; i < tc.m; ++i)
      for (int64_t jj = 0; jj < tc.n; ++jj)
        store_element(j.d.image(), d_type, offset(j.d.ref, bi, i, jj), j.ref[(bi * tc.m + i) * tc.n + jj]);
  j.p.d = j.d.ref;
  return j;
}

// Element (1, 2, 3) of the judged problem: its dense index and its offset in D's image.
int64_t probe_index(const Judged& j) { return (1 * j.p.m + 2) * j.p.n + 3; }
int64_t probe_offset(const Judged& j) { return offset(j.p.d, 1, 2, 3); }

TEST(Compare, PassesTheReferenceRoundedToD) {
  for (DType d_type : {DType::bf16, DType::f16, DType::f32}) {
    const Judged j = make_judged(d_type);
    const Comparison r = compare(j.p, j.d.image(), j.ref.data(), j.ref_abs.data());
    EXPECT_TRUE(r.passed()) << r.summary();
    EXPECT_EQ(r.checked, 2 * 5 * 7);
    EXPECT_EQ(r.first_bad, -1);
    EXPECT_EQ(r.summary().rfind("ok", 0), 0u) << r.summary();
  }
}

// The e4m3 code nearest x (saturating; ties either way), by trying each.
uint8_t nearest_e4m3(double x) {
  uint8_t best = 0;
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;  // NaN
    if (std::fabs(fp8_to_float(uint8_t(code), DType::e4m3) - x) < std::fabs(fp8_to_float(best, DType::e4m3) - x)) {
      best = uint8_t(code);
    }
  }
  return best;
}

// An e4m3 D is judged as q times its block's scale: the reference quantised passes; a scale
// off by 2x fails its row.
TEST(Compare, QuantizedDIsJudgedThroughItsScales) {
  Judged j = make_judged(DType::f32);
  const int64_t batch = j.p.batch, m = j.p.m, n = j.p.n;  // n < 128: one block a row
  std::vector<uint8_t> q(size_t(batch * m * n));
  std::vector<float> scales(size_t(batch * m));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < m; ++i) {
      double amax = 0;
      for (int64_t c = 0; c < n; ++c) amax = std::max(amax, std::fabs(j.ref[size_t((b * m + i) * n + c)]));
      const float scale = amax == 0 ? 1.0f : float(amax / 448);
      scales[size_t(b * m + i)] = scale;
      for (int64_t c = 0; c < n; ++c) q[size_t((b * m + i) * n + c)] = nearest_e4m3(j.ref[size_t((b * m + i) * n + c)] / scale);
    }
  }
  Problem p = j.p;
  p.d = {q.data(), DType::e4m3, m * n, n, 1};
  p.scale_d = {scales.data(), DType::f32, m, 1, 1};
  const Comparison ok = compare(p, q.data(), j.ref.data(), j.ref_abs.data(), scales.data());
  EXPECT_TRUE(ok.passed()) << ok.summary();
  scales[3] *= 2;
  const Comparison off = compare(p, q.data(), j.ref.data(), j.ref_abs.data(), scales.data());
  EXPECT_FALSE(off.passed());
  EXPECT_EQ(off.first_i, 3);
}

TEST(Compare, FailsOnePerturbedElementAndLocatesIt) {
  Judged j = make_judged(DType::bf16);
  const double wrong = j.ref[probe_index(j)] + 1.0 + 0.1 * j.ref_abs[probe_index(j)];
  store_element(j.d.image(), DType::bf16, probe_offset(j), wrong);
  const Comparison r = compare(j.p, j.d.image(), j.ref.data(), j.ref_abs.data());
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.bad, 1);
  EXPECT_EQ(r.nan, 0);
  EXPECT_EQ(r.first_bad, probe_index(j));
  EXPECT_EQ(r.first_b, 1);
  EXPECT_EQ(r.first_i, 2);
  EXPECT_EQ(r.first_j, 3);
  EXPECT_EQ(r.first_ref, j.ref[probe_index(j)]);
  EXPECT_GE(r.max_abs_error, 1.0);
  EXPECT_GT(r.rel_error_norm, 0.0);
  EXPECT_NE(r.summary().find("FAIL"), std::string::npos) << r.summary();
  EXPECT_NE(r.summary().find("(1,2,3)"), std::string::npos) << r.summary();
}

TEST(Compare, CountsNaNOutput) {
  Judged j = make_judged(DType::f16);
  store_element(j.d.image(), DType::f16, probe_offset(j), kNaN);
  const Comparison r = compare(j.p, j.d.image(), j.ref.data(), j.ref_abs.data());
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.nan, 1);
  EXPECT_EQ(r.bad, 1);
  EXPECT_EQ(r.first_bad, probe_index(j));
  EXPECT_NE(r.summary().find("1 NaN"), std::string::npos) << r.summary();
}

// In f32 the 1e-5 * ref_abs term dominates the tolerance: half of it passes, twice it fails.
TEST(Compare, ToleranceBoundary) {
  Judged j = make_judged(DType::f32);
  const double ref = j.ref[probe_index(j)], scale = j.ref_abs[probe_index(j)];
  ASSERT_GT(scale, 0.0);
  store_element(j.d.image(), DType::f32, probe_offset(j), ref + 0.5e-5 * scale);
  Comparison r = compare(j.p, j.d.image(), j.ref.data(), j.ref_abs.data());
  EXPECT_TRUE(r.passed()) << r.summary();
  EXPECT_GT(r.max_abs_error, 0.0);
  store_element(j.d.image(), DType::f32, probe_offset(j), ref - 2e-5 * scale);
  r = compare(j.p, j.d.image(), j.ref.data(), j.ref_abs.data());
  EXPECT_FALSE(r.passed()) << r.summary();
  EXPECT_EQ(r.first_bad, probe_index(j));
}

// The accumulation allowance by operand types (compare.h): FP8 on either side takes FP8's, W4A8
// in either order included; 4-bit weights against a 16-bit operand take that type's rounding.
TEST(Compare, AllowanceFollowsTheOperandTypes) {
  const auto allowance = [](DType a, DType b) {
    Problem p;
    p.a.dtype = a;
    p.b.dtype = b;
    return accumulation_tolerance(p);
  };
  EXPECT_EQ(allowance(DType::bf16, DType::bf16), 1e-5);
  EXPECT_EQ(allowance(DType::e4m3, DType::e5m2), 0x1p-10);
  EXPECT_EQ(allowance(DType::e4m3, DType::u4), 0x1p-10);
  EXPECT_EQ(allowance(DType::u4, DType::e4m3), 0x1p-10);  // run transposed: the weights are A
  EXPECT_EQ(allowance(DType::bf16, DType::u4), 0x1p-8 + 1e-5);
  EXPECT_EQ(allowance(DType::e2m1, DType::f16), 0x1p-11 + 1e-5);
  // MXFP4 activations against 4-bit weights: both widened exactly to e4m3, FP8's.
  EXPECT_EQ(allowance(DType::e2m1, DType::e2m1), 0x1p-10);
  EXPECT_EQ(allowance(DType::e2m1, DType::u4), 0x1p-10);
}

// ---- the test problems' spec (device_problem.h) for W4A8 ----

// Group scales default to A's type for 16-bit A (today's only choice) and to bf16 for e4m3, and
// take either where set; describe() names them where they are not A's type.
TEST(W4a8Spec, GroupScalesTypeDefaultsAndIsDescribed) {
  ProblemSpec spec{.m = 8, .n = 257, .k = 1000, .in = DType::f16, .in_b = DType::u4};
  spec.scale_b = ScaleMode::group;
  EXPECT_EQ(spec.group_scale_dtype(), DType::f16);
  EXPECT_EQ(spec.describe().find(" scales"), std::string::npos) << spec.describe();
  spec.in = DType::e4m3;
  EXPECT_EQ(spec.group_scale_dtype(), DType::bf16);
  spec.group_scale_type = DType::f16;
  spec.scale_a = ScaleMode::block;
  EXPECT_EQ(spec.group_scale_dtype(), DType::f16);
  const std::string text = spec.describe();
  EXPECT_NE(text.find("e4m3*u4"), std::string::npos) << text;
  EXPECT_NE(text.find("scale_a block 1x128"), std::string::npos) << text;
  EXPECT_NE(text.find("scale_b group 128 f16 scales"), std::string::npos) << text;
}

// Group scales of a type other than bf16 or f16 are refused before anything is allocated (no GPU
// needed), naming the type.
TEST(W4a8Spec, DeviceProblemRefusesOtherGroupScaleTypes) {
  ProblemSpec spec{.m = 8, .n = 64, .k = 256, .in = DType::e4m3, .in_b = DType::u4};
  spec.scale_b = ScaleMode::group;
  for (DType type : {DType::f32, DType::e4m3}) {
    spec.group_scale_type = type;
    try {
      DeviceProblem problem(spec, 1);
      ADD_FAILURE() << dtype_name(type) << " group scales were taken";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("group scales of type " + std::string(dtype_name(type))), std::string::npos)
          << e.what();
    }
  }
}

// ---- the test problems' spec for MXFP4 activations (e2m1 A with scale_a mx) ----

// DeviceProblem's refusal of `spec`, before anything is allocated (no GPU needed), as a message
// (empty where it was built: a GPU is present and the spec is one it builds).
std::string refusal(const ProblemSpec& spec) {
  try {
    DeviceProblem problem(spec, 1);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    return e.what();
  }
  return "";
}

// Group scales default to bf16 beside e2m1 activations (which, like e4m3 ones, leave their type
// free), and describe() names both 4-bit types and A's mode.
TEST(Mxfp4ActivationsSpec, DefaultsAndDescription) {
  ProblemSpec spec{.m = 16, .n = 257, .k = 1000, .in = DType::e2m1, .in_b = DType::u4};
  spec.scale_a = ScaleMode::mx;
  spec.scale_b = ScaleMode::group;
  spec.group = 32;
  EXPECT_EQ(spec.group_scale_dtype(), DType::bf16);
  spec.group_scale_type = DType::f16;
  EXPECT_EQ(spec.group_scale_dtype(), DType::f16);
  const std::string text = spec.describe();
  EXPECT_NE(text.find("e2m1*u4"), std::string::npos) << text;
  EXPECT_NE(text.find("scale_a mx"), std::string::npos) << text;
  EXPECT_EQ(scale_shape(spec, /*is_a=*/true), (std::pair<int64_t, int64_t>{16, 32}));  // M x ceil(K/32)
  EXPECT_EQ(scale_dtype(spec, spec.scale_a), DType::ue8m0);
}

// What DeviceProblem refuses of 4-bit A, each naming why: u4 A; e2m1 A in any mode but mx; e2m1 A
// stored M-contiguous; an odd pad_a or offset_a (rows not on bytes).
TEST(Mxfp4ActivationsSpec, DeviceProblemRefusesWhatItCannotBuild) {
  ProblemSpec good{.m = 16, .n = 64, .k = 256, .in = DType::e2m1, .in_b = DType::e2m1};
  good.scale_a = ScaleMode::mx;
  good.scale_b = ScaleMode::mx;

  ProblemSpec u4_a = good;
  u4_a.in = DType::u4;
  EXPECT_NE(refusal(u4_a).find("u4 A"), std::string::npos) << refusal(u4_a);
  for (ScaleMode mode : {ScaleMode::none, ScaleMode::tensor, ScaleMode::rowwise, ScaleMode::block, ScaleMode::group}) {
    ProblemSpec other = good;
    other.scale_a = mode;
    const std::string why = refusal(other);
    EXPECT_NE(why.find("e2m1 A with scale_a " + std::string(scale_mode_name(mode))), std::string::npos)
        << scale_mode_name(mode) << ": " << why;
  }
  ProblemSpec m_major = good;
  m_major.layout = "TT";
  EXPECT_NE(refusal(m_major).find("4-bit A is K-contiguous"), std::string::npos) << refusal(m_major);
  for (auto [pad, offset] : {std::pair{1, 0}, std::pair{0, 3}}) {
    ProblemSpec odd = good;
    odd.pad_a = pad;
    odd.offset_a = offset;
    EXPECT_NE(refusal(odd).find("must be even for 4-bit A"), std::string::npos) << refusal(odd);
  }
}

}  // namespace
}  // namespace gemmkit::reference
