// 4-bit weights (B u4 in groups along K, or e2m1 with MX scales) against a bf16 or f16 A, and
// against e4m3 activations (W4A8) and MXFP4 ones (e2m1 A with ue8m0 exponents per 32 of K, against
// weights in groups of 32), checked against the double-precision reference, which dequantises
// every weight (and MXFP4 activation) exactly: the kernels' one rounding of each weight to A's type (or, in
// decode with groups of 64 or more, of each group's f32 sums) is within the comparison's
// allowance, and so are W4A8's FP8 tensor-core sums (compare.h), which MXFP4 activations, widened
// exactly to e4m3, get too.
// A table of cases: M from 1 (decode) past a tile, one large problem of each format, N odd, K
// with a partial last group or odd; groups 32, 64, 128 and per-channel (W4A8: also 256, and
// MXFP4), with and without zero points; D bf16, f16 and f32; scales N-contiguous and
// transposed (gpt-oss's [N, K/32]); W4A8's group scales bf16 and f16 and its activations' scales
// none, tensor, rowwise and 1x128 blocks; batched B and one B shared by the batch; padded and
// offset weights with poison around them; alpha and beta * C. D starts NaN-poisoned. Then the
// arguments gemm must refuse, naming the one at fault, without writing D, and W4A8's NaN for
// zero points that e4m3 cannot subtract exactly. Skips without an sm_90 device.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gemmkit/error.h"
#include "gpu_test.h"
#include "reference/host_numeric.h"
#include "runtime/driver.h"

namespace gemmkit {
namespace {

using reference::DeviceProblem;
using reference::ProblemSpec;
using testing::expect_d_untouched;

struct LowbitCase {
  int64_t m, n, k;
  DType in;       // A's type: bf16 or f16; e4m3 (W4A8); e2m1 (MXFP4 activations, scale_a mx)
  DType weights;  // u4 (ScaleMode::group) or e2m1 (ScaleMode::mx)
  DType out;
  int64_t group = 128;  // u4 only
  bool zeros = false;   // u4 only
  bool fractional_zeros = false;  // one zero point in five not an integer (widen.cuh's f32 path)
  // W4A8: the activations' scales (block: 1x128), and the group scales' type (unset: bf16).
  ScaleMode scale_a = ScaleMode::none;
  std::optional<DType> group_scales;
  int64_t batch = 1;
  bool shared_b = false;          // one B (and its scales) for every batch
  bool scales_col_major = false;  // [N, K/group] viewed transposed
  int64_t pad_b = 0, offset_b = 0, pad_scales = 0;
  int64_t pad_a = 0, offset_a = 0;  // even where A is e2m1 (its rows from a byte)
  bool nan_outside = false;  // A's and B's buffers poisoned around their views
  bool with_c = false;       // alpha 0.75, beta -1.5, C of D's type
  bool d_col_major = false;

  ProblemSpec spec() const {
    ProblemSpec s{.m = m, .n = n, .k = k, .batch = batch, .layout = "NT", .in = in, .out = out, .in_b = weights};
    s.scale_b = weights == DType::u4 ? ScaleMode::group : ScaleMode::mx;
    s.group = group;
    s.zeros = zeros;
    s.fractional_zeros = fractional_zeros;
    s.scale_a = scale_a;
    s.group_scale_type = group_scales;
    s.scales_col_major = scales_col_major;
    s.pad_b = pad_b;
    s.offset_b = offset_b;
    s.pad_scales = pad_scales;
    s.pad_a = pad_a;
    s.offset_a = offset_a;
    s.nan_outside = nan_outside;
    s.d_col_major = d_col_major;
    if (with_c) {
      s.alpha = 0.75f;
      s.beta = -1.5f;
    }
    return s;
  }

  std::string name() const {
    std::string text = weights == DType::u4 ? "u4_g" + std::to_string(group) + (fractional_zeros ? "_fractional_zeros" : zeros ? "_zeros" : "") : "e2m1";
    text += "_" + std::string(dtype_name(in));
    if (scale_a != ScaleMode::none) text += "_" + std::string(scale_mode_name(scale_a));
    if (group_scales) text += "_" + std::string(dtype_name(*group_scales)) + "_scales";
    text += "_" + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
            "_to_" + std::string(dtype_name(out));
    if (batch > 1) text += "_batch" + std::to_string(batch) + (shared_b ? "_shared_b" : "");
    if (scales_col_major) text += "_scales_t";
    if (pad_b || offset_b || pad_scales) {
      text += "_pad" + std::to_string(pad_b) + "_off" + std::to_string(offset_b) + "_spad" + std::to_string(pad_scales);
    }
    if (pad_a || offset_a) text += "_apad" + std::to_string(pad_a) + "_aoff" + std::to_string(offset_a);
    if (nan_outside) text += "_poisoned";
    if (with_c) text += "_with_c";
    if (d_col_major) text += "_d_col_major";
    return text;
  }
};

constexpr DType bf16 = DType::bf16, f16 = DType::f16, f32 = DType::f32, u4 = DType::u4, e2m1 = DType::e2m1,
                e4m3 = DType::e4m3;
constexpr ScaleMode tensor = ScaleMode::tensor, rowwise = ScaleMode::rowwise, block = ScaleMode::block,
                    mx = ScaleMode::mx;

// K: 4160 = 32.5 groups of 128 (and 65 of 64), 1000 = 31.25 groups of 32 (7.8 of 128), 4097 odd
// (a column's last byte half padding). Per-channel groups are K rounded up to a power of two, and
// once K itself.
const std::vector<LowbitCase> kCases = {
    // u4, M from decode up, groups, zero points, A's types, D's types.
    {.m = 1, .n = 4095, .k = 4160, .in = bf16, .weights = u4, .out = bf16, .group = 128},
    {.m = 1, .n = 257, .k = 1000, .in = f16, .weights = u4, .out = f16, .group = 32, .zeros = true},
    {.m = 1, .n = 4096, .k = 4096, .in = bf16, .weights = u4, .out = bf16, .group = 128, .zeros = true},
    {.m = 8, .n = 4095, .k = 4160, .in = bf16, .weights = u4, .out = f32, .group = 64, .zeros = true},
    {.m = 8, .n = 257, .k = 4097, .in = f16, .weights = u4, .out = bf16, .group = 128},
    {.m = 16, .n = 4095, .k = 1000, .in = bf16, .weights = u4, .out = bf16, .group = 1024},
    {.m = 16, .n = 257, .k = 4160, .in = f16, .weights = u4, .out = f32, .group = 8192, .zeros = true},
    {.m = 17, .n = 4095, .k = 4097, .in = bf16, .weights = u4, .out = bf16, .group = 32, .zeros = true},
    {.m = 17, .n = 257, .k = 1000, .in = f16, .weights = u4, .out = f16, .group = 64},
    {.m = 64, .n = 4095, .k = 4160, .in = f16, .weights = u4, .out = bf16, .group = 128, .zeros = true,
     .scales_col_major = true},
    {.m = 64, .n = 257, .k = 4097, .in = bf16, .weights = u4, .out = f32, .group = 64, .scales_col_major = true},
    {.m = 128, .n = 4095, .k = 1000, .in = bf16, .weights = u4, .out = f16, .group = 32},
    {.m = 128, .n = 257, .k = 4160, .in = f16, .weights = u4, .out = f32, .group = 128, .zeros = true, .batch = 3},
    {.m = 129, .n = 1000, .k = 4097, .in = f16, .weights = u4, .out = bf16, .group = 8192, .scales_col_major = true},
    {.m = 300, .n = 4096, .k = 4096, .in = bf16, .weights = u4, .out = bf16, .group = 128},
    {.m = 200, .n = 700, .k = 1000, .in = bf16, .weights = u4, .out = bf16, .group = 1000, .zeros = true},
    {.m = 4096, .n = 4095, .k = 4160, .in = bf16, .weights = u4, .out = bf16, .group = 128, .zeros = true},
    // Zero points that are not integers: the warps whose rows hold one widen through f32.
    {.m = 1, .n = 4095, .k = 4160, .in = bf16, .weights = u4, .out = bf16, .group = 32, .zeros = true,
     .fractional_zeros = true},
    {.m = 512, .n = 1000, .k = 4097, .in = f16, .weights = u4, .out = f16, .group = 128, .zeros = true,
     .fractional_zeros = true},
    // Decode's narrow tiles with groups of 64 or more promote a partial a K block (widen.cuh): its
    // f32 path, and C.
    {.m = 8, .n = 4095, .k = 4097, .in = bf16, .weights = u4, .out = bf16, .group = 128, .zeros = true,
     .fractional_zeros = true},
    {.m = 16, .n = 257, .k = 4160, .in = bf16, .weights = u4, .out = f32, .group = 64, .with_c = true},
    // u4 batched (B per batch, and one B shared), padded and offset weights, C, D column-major.
    {.m = 1, .n = 257, .k = 4097, .in = bf16, .weights = u4, .out = f32, .group = 32, .zeros = true, .batch = 2},
    {.m = 64, .n = 4095, .k = 1000, .in = f16, .weights = u4, .out = bf16, .group = 64, .zeros = true, .batch = 3,
     .shared_b = true},
    {.m = 17, .n = 257, .k = 4160, .in = bf16, .weights = u4, .out = f16, .group = 128, .batch = 2, .shared_b = true,
     .scales_col_major = true},
    {.m = 200, .n = 512, .k = 1000, .in = bf16, .weights = u4, .out = f32, .group = 32, .zeros = true, .pad_b = 6,
     .offset_b = 4, .pad_scales = 3, .nan_outside = true},
    {.m = 1, .n = 300, .k = 1001, .in = f16, .weights = u4, .out = bf16, .group = 64, .zeros = true, .pad_b = 2,
     .nan_outside = true},
    {.m = 100, .n = 257, .k = 1000, .in = bf16, .weights = u4, .out = f32, .group = 128, .with_c = true},
    {.m = 64, .n = 257, .k = 4160, .in = bf16, .weights = u4, .out = bf16, .group = 64, .zeros = true,
     .d_col_major = true},
    // e2m1 with MX scales (2^-2 to 2^1): the same spread, gpt-oss's transposed scales.
    {.m = 1, .n = 4095, .k = 4160, .in = bf16, .weights = e2m1, .out = bf16},
    {.m = 1, .n = 257, .k = 4097, .in = f16, .weights = e2m1, .out = f16, .scales_col_major = true, .pad_scales = 5},
    {.m = 8, .n = 257, .k = 4097, .in = f16, .weights = e2m1, .out = f32},
    {.m = 16, .n = 4095, .k = 1000, .in = f16, .weights = e2m1, .out = bf16, .scales_col_major = true},
    {.m = 17, .n = 257, .k = 4160, .in = bf16, .weights = e2m1, .out = f16},
    {.m = 64, .n = 4095, .k = 4097, .in = bf16, .weights = e2m1, .out = f32, .scales_col_major = true},
    {.m = 128, .n = 257, .k = 1000, .in = f16, .weights = e2m1, .out = bf16, .batch = 3},
    {.m = 33, .n = 257, .k = 4160, .in = bf16, .weights = e2m1, .out = bf16, .batch = 2, .shared_b = true},
    {.m = 64, .n = 300, .k = 1001, .in = bf16, .weights = e2m1, .out = bf16, .pad_b = 4, .offset_b = 2,
     .nan_outside = true},
    {.m = 4096, .n = 257, .k = 4160, .in = bf16, .weights = e2m1, .out = bf16},
    // W4A8: e4m3 activations, u4 weights in groups of 128, 256 or per-channel. M from decode up,
    // the activations' four scale modes, group scales bf16 and f16, with and without zero points.
    {.m = 1, .n = 4095, .k = 4160, .in = e4m3, .weights = u4, .out = bf16, .group = 128},
    {.m = 1, .n = 257, .k = 1000, .in = e4m3, .weights = u4, .out = f16, .group = 128, .zeros = true,
     .scale_a = tensor, .group_scales = f16},
    {.m = 1, .n = 4096, .k = 4096, .in = e4m3, .weights = u4, .out = bf16, .group = 128, .zeros = true,
     .scale_a = block},
    {.m = 8, .n = 4095, .k = 4160, .in = e4m3, .weights = u4, .out = f32, .group = 256, .zeros = true,
     .scale_a = rowwise, .group_scales = f16},
    {.m = 8, .n = 257, .k = 4097, .in = e4m3, .weights = u4, .out = bf16, .group = 128, .scale_a = block},
    {.m = 16, .n = 4095, .k = 1000, .in = e4m3, .weights = u4, .out = bf16, .group = 1000, .scale_a = tensor,
     .group_scales = f16},
    {.m = 16, .n = 257, .k = 4160, .in = e4m3, .weights = u4, .out = f32, .group = 8192, .zeros = true,
     .scale_a = block},
    {.m = 17, .n = 4095, .k = 4097, .in = e4m3, .weights = u4, .out = bf16, .group = 256, .zeros = true,
     .scale_a = rowwise},
    {.m = 17, .n = 257, .k = 1000, .in = e4m3, .weights = u4, .out = f16, .group = 128, .group_scales = f16},
    {.m = 64, .n = 4095, .k = 4160, .in = e4m3, .weights = u4, .out = bf16, .group = 128, .zeros = true,
     .scale_a = block, .group_scales = f16, .scales_col_major = true},
    {.m = 64, .n = 257, .k = 4097, .in = e4m3, .weights = u4, .out = f32, .group = 256, .scale_a = rowwise,
     .scales_col_major = true},
    {.m = 128, .n = 4095, .k = 1000, .in = e4m3, .weights = u4, .out = f16, .group = 128, .zeros = true,
     .scale_a = tensor},
    {.m = 129, .n = 1000, .k = 4097, .in = e4m3, .weights = u4, .out = bf16, .group = 8192, .scale_a = rowwise,
     .group_scales = f16, .scales_col_major = true},
    {.m = 300, .n = 4096, .k = 4096, .in = e4m3, .weights = u4, .out = bf16, .group = 128, .scale_a = block},
    {.m = 4096, .n = 4095, .k = 4160, .in = e4m3, .weights = u4, .out = bf16, .group = 128, .zeros = true,
     .scale_a = block},
    // W4A8 batched (B per batch, and one B shared), padded and offset weights with poison around
    // them, C (in decode too), D column-major.
    {.m = 128, .n = 257, .k = 4160, .in = e4m3, .weights = u4, .out = f32, .group = 128, .zeros = true,
     .scale_a = block, .group_scales = f16, .batch = 3},
    {.m = 1, .n = 257, .k = 4097, .in = e4m3, .weights = u4, .out = f32, .group = 128, .zeros = true,
     .scale_a = rowwise, .batch = 2},
    {.m = 64, .n = 4095, .k = 1000, .in = e4m3, .weights = u4, .out = bf16, .group = 256, .zeros = true,
     .scale_a = block, .group_scales = f16, .batch = 3, .shared_b = true},
    {.m = 17, .n = 257, .k = 4160, .in = e4m3, .weights = u4, .out = f16, .group = 128, .scale_a = tensor, .batch = 2,
     .shared_b = true, .scales_col_major = true},
    {.m = 200, .n = 512, .k = 1000, .in = e4m3, .weights = u4, .out = f32, .group = 128, .zeros = true,
     .scale_a = block, .pad_b = 6, .offset_b = 4, .pad_scales = 3, .nan_outside = true},
    {.m = 1, .n = 300, .k = 1001, .in = e4m3, .weights = u4, .out = bf16, .group = 256, .zeros = true,
     .group_scales = f16, .pad_b = 2, .nan_outside = true},
    {.m = 100, .n = 257, .k = 1000, .in = e4m3, .weights = u4, .out = f32, .group = 128, .scale_a = rowwise,
     .with_c = true},
    {.m = 8, .n = 4095, .k = 4160, .in = e4m3, .weights = u4, .out = bf16, .group = 128, .zeros = true,
     .scale_a = block, .group_scales = f16, .with_c = true},
    {.m = 64, .n = 257, .k = 4160, .in = e4m3, .weights = u4, .out = bf16, .group = 256, .zeros = true,
     .scale_a = tensor, .d_col_major = true},
    // Many tokens: the weights widened into a copy first (dispatch/plan.cpp, widens_weights_first;
    // W4A8 with groups of a multiple of 128 from 2048 tokens, MXFP4 under bf16 from 256), the
    // activations' four scalings, batched and shared weights, poisoned, C, D column-major; K 1000
    // and 4097 end in part of a 16-code chunk (648b397's copy had lines too short for it).
    {.m = 2048, .n = 257, .k = 4097, .in = e4m3, .weights = u4, .out = bf16, .group = 128, .zeros = true,
     .scale_a = rowwise, .group_scales = f16},
    {.m = 2048, .n = 300, .k = 1000, .in = e4m3, .weights = u4, .out = f32, .group = 256, .scale_a = block, .batch = 2},
    {.m = 1024, .n = 257, .k = 4160, .in = e4m3, .weights = u4, .out = f16, .group = 8192, .scale_a = tensor,
     .batch = 2, .shared_b = true, .scales_col_major = true},
    {.m = 2048, .n = 512, .k = 1000, .in = e4m3, .weights = u4, .out = f32, .group = 128, .zeros = true, .pad_b = 6,
     .offset_b = 4, .pad_scales = 3, .nan_outside = true},
    {.m = 2048, .n = 257, .k = 1000, .in = e4m3, .weights = u4, .out = f32, .group = 128, .scale_a = rowwise,
     .with_c = true},
    {.m = 2048, .n = 257, .k = 4160, .in = e4m3, .weights = u4, .out = bf16, .group = 256, .zeros = true,
     .scale_a = tensor, .d_col_major = true},
    {.m = 300, .n = 4095, .k = 4097, .in = bf16, .weights = e2m1, .out = f32, .scales_col_major = true},
    {.m = 300, .n = 257, .k = 4160, .in = bf16, .weights = e2m1, .out = bf16, .batch = 2, .shared_b = true},
    {.m = 512, .n = 300, .k = 1001, .in = bf16, .weights = e2m1, .out = bf16, .pad_b = 4, .offset_b = 2,
     .nan_outside = true},
    {.m = 256, .n = 257, .k = 1000, .in = bf16, .weights = e2m1, .out = f16, .with_c = true},
    // MXFP4 weights under e4m3 activations (promoted every 32 of K by their ue8m0 scales): M from
    // decode up, every activation scaling, gpt-oss's transposed scales, batched, poisoned, C.
    {.m = 1, .n = 4095, .k = 4160, .in = e4m3, .weights = e2m1, .out = bf16, .scale_a = rowwise},
    {.m = 1, .n = 257, .k = 4097, .in = e4m3, .weights = e2m1, .out = f16, .scale_a = block, .scales_col_major = true,
     .pad_scales = 5},
    {.m = 16, .n = 4095, .k = 1000, .in = e4m3, .weights = e2m1, .out = f32, .scale_a = tensor},
    {.m = 17, .n = 257, .k = 4160, .in = e4m3, .weights = e2m1, .out = bf16},
    {.m = 64, .n = 4095, .k = 4097, .in = e4m3, .weights = e2m1, .out = bf16, .scale_a = block,
     .scales_col_major = true},
    {.m = 300, .n = 1000, .k = 1000, .in = e4m3, .weights = e2m1, .out = f32, .scale_a = rowwise, .batch = 3},
    {.m = 4096, .n = 257, .k = 4160, .in = e4m3, .weights = e2m1, .out = bf16, .scale_a = block},
    {.m = 64, .n = 300, .k = 1001, .in = e4m3, .weights = e2m1, .out = bf16, .scale_a = rowwise, .pad_b = 4,
     .offset_b = 2, .nan_outside = true},
    {.m = 8, .n = 257, .k = 4160, .in = e4m3, .weights = e2m1, .out = f16, .scale_a = block, .batch = 2,
     .shared_b = true, .with_c = true},
    // W4A8 with u4 groups of 32 and 64 (two or four promotions a K block), zero points among them.
    {.m = 1, .n = 4095, .k = 4160, .in = e4m3, .weights = u4, .out = bf16, .group = 32, .zeros = true,
     .scale_a = rowwise},
    {.m = 16, .n = 257, .k = 1000, .in = e4m3, .weights = u4, .out = f32, .group = 64, .scale_a = block,
     .group_scales = f16},
    {.m = 64, .n = 4095, .k = 4097, .in = e4m3, .weights = u4, .out = bf16, .group = 32, .scale_a = tensor},
    {.m = 300, .n = 1000, .k = 4160, .in = e4m3, .weights = u4, .out = f16, .group = 64, .zeros = true,
     .scale_a = block, .scales_col_major = true},
    {.m = 4096, .n = 257, .k = 1000, .in = e4m3, .weights = u4, .out = bf16, .group = 32, .zeros = true,
     .scale_a = rowwise, .group_scales = f16},
    // A8W4 in MX: e4m3 activations with ue8m0 exponents per 32 of K (MXFP8) against weights in
    // groups of 32 (MXFP4, u4 g32), each granule promoted by both.
    {.m = 1, .n = 4095, .k = 4160, .in = e4m3, .weights = e2m1, .out = bf16, .scale_a = mx},
    {.m = 16, .n = 257, .k = 4097, .in = e4m3, .weights = u4, .out = f32, .group = 32, .zeros = true, .scale_a = mx},
    {.m = 300, .n = 1000, .k = 1000, .in = e4m3, .weights = e2m1, .out = f16, .scale_a = mx, .batch = 2},
    {.m = 4096, .n = 257, .k = 4160, .in = e4m3, .weights = u4, .out = bf16, .group = 32, .scale_a = mx,
     .group_scales = f16},
    // MXFP4 activations (e2m1 A, ue8m0 exponents per 32 of K, widened exactly to e4m3) against
    // MXFP4 weights (FP4 x FP4): M from decode up, N odd, K with a partial MX block or odd, D's
    // three types, exponents of both transposed, batched (B per batch, and one B shared), padded
    // and offset A and B with poison around them (an odd K: half of each row's last byte), C.
    {.m = 1, .n = 4095, .k = 4160, .in = e2m1, .weights = e2m1, .out = bf16, .scale_a = mx},
    {.m = 1, .n = 257, .k = 1000, .in = e2m1, .weights = e2m1, .out = f32, .scale_a = mx, .scales_col_major = true,
     .pad_scales = 5},
    {.m = 16, .n = 257, .k = 4097, .in = e2m1, .weights = e2m1, .out = f16, .scale_a = mx},
    {.m = 16, .n = 4095, .k = 1000, .in = e2m1, .weights = e2m1, .out = bf16, .scale_a = mx, .batch = 2,
     .shared_b = true},
    {.m = 300, .n = 4095, .k = 1000, .in = e2m1, .weights = e2m1, .out = f16, .scale_a = mx, .batch = 2},
    {.m = 300, .n = 257, .k = 4097, .in = e2m1, .weights = e2m1, .out = bf16, .scale_a = mx, .pad_b = 4, .offset_b = 2,
     .pad_a = 6, .offset_a = 2, .nan_outside = true},
    {.m = 300, .n = 257, .k = 4160, .in = e2m1, .weights = e2m1, .out = f32, .scale_a = mx, .with_c = true},
    {.m = 4096, .n = 257, .k = 4160, .in = e2m1, .weights = e2m1, .out = bf16, .scale_a = mx},
    {.m = 4096, .n = 4095, .k = 4097, .in = e2m1, .weights = e2m1, .out = f32, .scale_a = mx,
     .scales_col_major = true},
    // MXFP4 activations against u4 weights in groups of 32, with and without zero points, group
    // scales bf16 and f16.
    {.m = 1, .n = 257, .k = 1000, .in = e2m1, .weights = u4, .out = f16, .group = 32, .zeros = true, .scale_a = mx},
    {.m = 1, .n = 4095, .k = 4097, .in = e2m1, .weights = u4, .out = bf16, .group = 32, .scale_a = mx,
     .group_scales = f16},
    {.m = 16, .n = 4095, .k = 4160, .in = e2m1, .weights = u4, .out = f32, .group = 32, .zeros = true, .scale_a = mx,
     .group_scales = f16},
    {.m = 16, .n = 257, .k = 4097, .in = e2m1, .weights = u4, .out = bf16, .group = 32, .scale_a = mx,
     .scales_col_major = true},
    {.m = 300, .n = 257, .k = 4160, .in = e2m1, .weights = u4, .out = f32, .group = 32, .zeros = true, .scale_a = mx,
     .batch = 3},
    {.m = 300, .n = 4095, .k = 1000, .in = e2m1, .weights = u4, .out = bf16, .group = 32, .scale_a = mx,
     .pad_b = 2, .offset_b = 4, .pad_a = 2, .offset_a = 4, .nan_outside = true},
    {.m = 4096, .n = 257, .k = 1000, .in = e2m1, .weights = u4, .out = f16, .group = 32, .zeros = true, .scale_a = mx},
    {.m = 4096, .n = 4095, .k = 4160, .in = e2m1, .weights = u4, .out = bf16, .group = 32, .zeros = true,
     .scale_a = mx, .group_scales = f16},
};

// Matrix 0 of a batched view, as a rank-2 view every batch shares.
TensorView first_matrix(const TensorView& t) {
  return TensorView::matrix(t.data, t.dtype, t.rows(), t.cols(), t.row_stride(), t.col_stride());
}

class LowbitGemm : public testing::GpuTest, public ::testing::WithParamInterface<LowbitCase> {};

TEST_P(LowbitGemm, MatchesReference) {
  const LowbitCase& c = GetParam();
  const ProblemSpec spec = c.spec();
  DeviceProblem problem(spec, testing::fresh_seed());
  TensorView b = problem.b();
  GemmOptions options = problem.options(nullptr);
  if (c.shared_b) {
    b = first_matrix(b);
    options.scale_b.scales = first_matrix(options.scale_b.scales);
    if (options.scale_b.zeros) options.scale_b.zeros = first_matrix(*options.scale_b.zeros);
  }
  problem.prepare_output(nullptr);
  gemm(problem.a(), b, problem.d(), options);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << spec.describe();
  reference::Comparison result;
  if (c.shared_b) {
    const Problem p = validate_gemm(problem.a(), b, problem.d(), options);
    ASSERT_EQ(p.b.batch_stride, 0);
    result = problem.check_against(p, nullptr);
  } else {
    result = problem.check(nullptr);
  }
  ASSERT_TRUE(result.passed()) << spec.describe() << ": " << result.summary();
}

INSTANTIATE_TEST_SUITE_P(Lowbit, LowbitGemm, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<LowbitCase>& info) { return info.param.name(); });

using LowbitErrors = testing::GpuTest;

// gemm throws Error(invalid_argument) whose message holds every one of `needles`.
void expect_rejected(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options,
                     std::initializer_list<const char*> needles) {
  try {
    gemm(a, b, d, options);
    ADD_FAILURE() << "gemm accepted the arguments; expected an error mentioning '" << *needles.begin() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    for (const char* needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "expected '" << needle << "' in: " << e.what();
    }
  }
}

// The message of the Error(invalid_argument) gemm throws ("" where it takes the arguments).
std::string rejection(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options) {
  try {
    gemm(a, b, d, options);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "gemm accepted the arguments";
  return "";
}

// A problem of `spec` that gemm refuses as it stands, with a message holding every one of
// `needles`, leaving D untouched.
void expect_spec_refused(const ProblemSpec& spec, std::initializer_list<const char*> needles) {
  SCOPED_TRACE(spec.describe());
  DeviceProblem problem(spec, testing::fresh_seed());
  problem.prepare_output(nullptr);
  expect_rejected(problem.a(), problem.b(), problem.d(), problem.options(nullptr), needles);
  expect_d_untouched(problem);
}

// A device buffer of `bytes`, zeroed.
struct DeviceBuffer {
  void* data = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    runtime::check(cudaMalloc(&data, bytes), "cudaMalloc");
    runtime::check(cudaMemset(data, 0, bytes), "cudaMemset");
  }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

TEST_F(LowbitErrors, BadArgumentsAreRejectedByNameAndLeaveDUntouched) {
  constexpr int64_t m = 16, n = 64, k = 256;  // u4 group 128: scales 2 x 64
  ProblemSpec spec{.m = m, .n = n, .k = k, .in = DType::bf16, .out = DType::bf16, .in_b = DType::u4};
  spec.scale_b = ScaleMode::group;
  spec.zeros = true;
  DeviceProblem problem(spec, testing::fresh_seed());
  problem.prepare_output(nullptr);
  const TensorView a = problem.a(), b = problem.b(), d = problem.d();
  const GemmOptions good = problem.options(nullptr);
  ASSERT_EQ(b.row_stride(), 1);
  ASSERT_EQ(b.col_stride(), k);

  // B read N-contiguous (row stride n), within its buffer.
  expect_rejected(a, TensorView::matrix(b.data, DType::u4, k, n, n, 1), d, good, {"B: strides"});
  // An odd column stride: K 255 (A's view too, the scales still ceil(255/128) = 2 rows) with
  // columns 255 apart, so that column 1 starts mid-byte.
  const TensorView a255 = TensorView::matrix(a.data, a.dtype, m, 255, a.row_stride(), a.col_stride());
  expect_rejected(a255, TensorView::matrix(b.data, DType::u4, 255, n, 1, 255), d, good, {"B: strides"});
  // Scales, and zero points, of the wrong shape: one row of groups for two.
  GemmOptions options = good;
  options.scale_b.scales = TensorView::matrix(good.scale_b.scales.data, DType::bf16, 1, n, n, 1);
  expect_rejected(a, b, d, options, {"scale_b: shape"});
  options = good;
  options.scale_b.zeros = TensorView::matrix(good.scale_b.zeros->data, DType::bf16, 1, n, n, 1);
  expect_rejected(a, b, d, options, {"scale_b.zeros: shape"});
  // Scales N x K/group, not transposed.
  options = good;
  options.scale_b.scales = TensorView::row_major(good.scale_b.scales.data, DType::bf16, n, 2);
  expect_rejected(a, b, d, options, {"scale_b"});
  // Group 48 (neither 32, a power of two from 64, nor at least K).
  options = good;
  options.scale_b.group = 48;
  expect_rejected(a, b, d, options, {"scale_b", "48"});
  // Group 0 (never set).
  options = good;
  options.scale_b.group = 0;
  expect_rejected(a, b, d, options, {"scale_b", "group"});
  // Scales and zero points of another type than A's.
  options = good;
  options.scale_b.scales.dtype = DType::f16;
  expect_rejected(a, b, d, options, {"scale_b: dtype"});
  options = good;
  options.scale_b.zeros->dtype = DType::f16;
  expect_rejected(a, b, d, options, {"scale_b.zeros: dtype"});
  // u4 without scales, or with MX ones.
  options = good;
  options.scale_b = {};
  expect_rejected(a, b, d, options, {"scale_b: mode none"});
  options = good;
  options.scale_b.mode = ScaleMode::mx;
  options.scale_b.zeros.reset();
  expect_rejected(a, b, d, options, {"scale_b: mode mx"});
  // u4 A (4-bit activations are e2m1 only).
  expect_rejected(TensorView::matrix(b.data, DType::u4, m, k, k, 1), b, d, good, {"A: dtype"});
  expect_d_untouched(problem);

  // e2m1: mx scales ceil(256/32) = 8 x 64; zero points refused; group scales refused.
  ProblemSpec fp4_spec{.m = m, .n = n, .k = k, .in = DType::bf16, .out = DType::bf16, .in_b = DType::e2m1};
  fp4_spec.scale_b = ScaleMode::mx;
  DeviceProblem fp4(fp4_spec, testing::fresh_seed());
  fp4.prepare_output(nullptr);
  DeviceBuffer zeros(size_t(8 * n) * 2);
  options = fp4.options(nullptr);
  options.scale_b.zeros = TensorView::row_major(zeros.data, DType::bf16, 8, n);
  expect_rejected(fp4.a(), fp4.b(), fp4.d(), options, {"scale_b", "zero points"});
  options = fp4.options(nullptr);
  options.scale_b.group = 64;
  expect_rejected(fp4.a(), fp4.b(), fp4.d(), options, {"scale_b: group 64"});
  expect_d_untouched(fp4);

  ProblemSpec grouped_fp4 = fp4_spec;  // e2m1 with u4's mode: scales bf16, 2 x 64
  grouped_fp4.scale_b = ScaleMode::group;
  DeviceProblem wrong_mode(grouped_fp4, testing::fresh_seed());
  wrong_mode.prepare_output(nullptr);
  expect_rejected(wrong_mode.a(), wrong_mode.b(), wrong_mode.d(), wrong_mode.options(nullptr), {"scale_b: mode group"});
  expect_d_untouched(wrong_mode);
}

// W4A8's refusals, each by name with D untouched: e5m2 activations, and the activations' scale
// modes the kernels do not take with 4-bit weights (mx, and 128x128 blocks).
TEST_F(LowbitErrors, W4a8CombinationsItDoesNotTakeAreRejectedByName) {
  ProblemSpec w4a8{.m = 16, .n = 96, .k = 512, .in = DType::e4m3, .out = DType::bf16, .in_b = DType::u4};
  w4a8.scale_b = ScaleMode::group;
  w4a8.zeros = true;
  ProblemSpec e5m2 = w4a8;
  e5m2.in = DType::e5m2;
  expect_spec_refused(e5m2, {"B: ", "u4", "e5m2"});
  ProblemSpec mx_activations = w4a8;
  mx_activations.scale_a = ScaleMode::mx;
  expect_spec_refused(mx_activations, {"scale_a", "mx"});
  ProblemSpec square_blocks = w4a8;  // A's scales ceil(16/128) x ceil(512/128) = 1 x 4
  square_blocks.scale_a = ScaleMode::block;
  square_blocks.scale_a_block_rows = 128;
  expect_spec_refused(square_blocks, {"scale_a", "128"});
}

// MXFP4 activations' refusals, each by name with D untouched: e2m1 A without its exponents (mode
// none, or rowwise f32 scales), A not K-contiguous (M-contiguous, or every other element) or with
// an odd row or batch stride (rows and batches from a byte, as 4-bit weights' columns), a second
// B (dense 4-bit weights take none); e2m1 A against 16-bit or FP8 B; against u4 in groups other
// than 32 (64, 128, per-channel), named scale_b or scale_a, the message saying groups of 32.
TEST_F(LowbitErrors, Mxfp4ActivationsCombinationsItDoesNotTakeAreRejectedByName) {
  constexpr int64_t m = 16, n = 96, k = 512;
  ProblemSpec fp4{.m = m, .n = n, .k = k, .batch = 2, .in = DType::e2m1, .out = DType::bf16, .in_b = DType::e2m1};
  fp4.scale_a = ScaleMode::mx;
  fp4.scale_b = ScaleMode::mx;
  fp4.pad_a = 2;  // A's rows 514 elements (257 bytes) apart: an odd row stride fits inside
  DeviceProblem problem(fp4, testing::fresh_seed());
  problem.prepare_output(nullptr);
  const TensorView a = problem.a(), b = problem.b(), d = problem.d();
  const GemmOptions good = problem.options(nullptr);
  ASSERT_EQ(a.row_stride(), k + 2);
  ASSERT_EQ(a.col_stride(), 1);
  ASSERT_EQ(a.batch_stride(), m * (k + 2));

  GemmOptions options = good;
  options.scale_a = {};
  expect_rejected(a, b, d, options, {"scale_a"});
  DeviceBuffer rowwise(size_t(2 * m) * 4);
  options.scale_a = {ScaleMode::rowwise, TensorView::batched(rowwise.data, DType::f32, 2, m, 1, m, 1, 1)};
  expect_rejected(a, b, d, options, {"scale_a"});
  // Each view within A's buffer (2 x 16 rows of 514 elements, 16448 in all).
  const auto a_view = [&](int64_t batch_stride, int64_t row_stride, int64_t col_stride) {
    return TensorView::batched(a.data, DType::e2m1, 2, m, k, batch_stride, row_stride, col_stride);
  };
  expect_rejected(a_view(m * k, 1, m), b, d, good, {"A: ", "stride"});                // M-contiguous
  expect_rejected(a_view(m * (k + 1), k + 1, 1), b, d, good, {"A: ", "stride"});      // odd row stride
  expect_rejected(a_view(m * (k + 2) - 1, k + 2, 1), b, d, good, {"A: ", "stride"});  // odd batch stride
  // Every other element along K: one A (1024-element rows) for both batches.
  expect_rejected(TensorView::matrix(a.data, DType::e2m1, m, k, 2 * k, 2), b, d, good, {"A: ", "stride"});
  options = good;
  options.b2 = b;
  options.scale_b2 = good.scale_b;
  expect_rejected(a, b, d, options, {"options.b2"});
  expect_d_untouched(problem);

  ProblemSpec against = fp4;
  against.batch = 1;
  against.pad_a = 0;
  against.scale_b = ScaleMode::none;
  for (DType weights : {DType::bf16, DType::f16, DType::e4m3, DType::e5m2}) {
    against.in_b = weights;
    expect_spec_refused(against, {"B: "});
  }

  // u4 weights in groups of 64, 128 and 512 (K: per-channel), with and without zero points.
  ProblemSpec u4 = fp4;
  u4.batch = 1;
  u4.pad_a = 0;
  u4.in_b = DType::u4;
  u4.scale_b = ScaleMode::group;
  for (int64_t group : {64, 128, 512}) {
    u4.group = group;
    u4.zeros = group == 128;
    SCOPED_TRACE(u4.describe());
    DeviceProblem grouped(u4, testing::fresh_seed());
    grouped.prepare_output(nullptr);
    const std::string why = rejection(grouped.a(), grouped.b(), grouped.d(), grouped.options(nullptr));
    EXPECT_TRUE(why.rfind("scale_b", 0) == 0 || why.rfind("scale_a", 0) == 0)
        << "names neither scale_b nor scale_a: " << why;
    EXPECT_NE(why.find("32"), std::string::npos) << why;
    expect_d_untouched(grouped);
  }
}

// W4A8 widens each weight's q - zero exactly to e4m3, which AWQ's zero points (integers 0 to 15)
// allow; a zero point with which it cannot (a fraction, or 17: q - 17 down to -17 needs 5
// significant bits) makes NaN of every output it reaches: the whole column of the user's D that
// its weight row feeds (M 1, 64, 300 and 2048, whose weights are widened into a copy first; D
// row- and column-major), and nothing else, which
// matches the reference. (Integers just outside 0 to 15, -1 and 16, are exact too: not tested
// either way.)
using W4a8ZeroPoints = testing::GpuTest;

TEST_F(W4a8ZeroPoints, ZeroPointsOffTheIntegersGiveNanInTheirColumnsOnly) {
  struct OffGrid {
    int64_t group, column;
    float zero;
  };
  // K 1000: groups 0 to 7 of 128, the last partial.
  const std::vector<OffGrid> off_grid = {{0, 3, 7.5f}, {7, 200, 17.0f}, {3, 256, 0.25f}};
  const std::set<int64_t> nan_columns = {3, 200, 256};
  struct Run {
    int64_t m;
    ScaleMode scale_a;
    DType group_scales;
    bool d_col_major;
  };
  for (const Run& run : {Run{1, ScaleMode::none, DType::bf16, false}, Run{64, ScaleMode::rowwise, DType::f16, true},
                         Run{300, ScaleMode::block, DType::bf16, false}, Run{2048, ScaleMode::tensor, DType::bf16, true}}) {
    ProblemSpec spec{.m = run.m, .n = 257, .k = 1000, .in = DType::e4m3, .out = DType::bf16, .in_b = DType::u4};
    spec.scale_a = run.scale_a;
    spec.scale_b = ScaleMode::group;
    spec.group = 128;
    spec.zeros = true;
    spec.group_scale_type = run.group_scales;
    spec.d_col_major = run.d_col_major;
    SCOPED_TRACE(spec.describe());
    DeviceProblem problem(spec, testing::fresh_seed());
    const GemmOptions options = problem.options(nullptr);
    const TensorView& zeros = *options.scale_b.zeros;
    for (const OffGrid& z : off_grid) {
      const uint16_t bits = zeros.dtype == DType::bf16 ? reference::float_to_bf16(z.zero) : reference::float_to_f16(z.zero);
      const int64_t index = z.group * zeros.row_stride() + z.column * zeros.col_stride();
      char* at = static_cast<char*>(zeros.data) + index * int64_t(dtype_size(zeros.dtype));
      ASSERT_EQ(cudaMemcpy(at, &bits, sizeof bits, cudaMemcpyHostToDevice), cudaSuccess);
    }
    problem.prepare_output(nullptr);
    gemm(problem.a(), problem.b(), problem.d(), options);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    const std::vector<char> host = problem.copy_output();  // offset_d 0: D's view starts the buffer
    const TensorView d = problem.d();
    int64_t misplaced = 0;
    for (int64_t i = 0; i < spec.m; ++i) {
      for (int64_t j = 0; j < spec.n; ++j) {
        const double value = reference::load_element(host.data(), d.dtype, i * d.row_stride() + j * d.col_stride());
        const bool nan_expected = nan_columns.count(j) > 0;
        if (nan_expected ? std::isnan(value) : std::isfinite(value)) continue;
        if (misplaced++ == 0) {
          ADD_FAILURE() << "D(" << i << ", " << j << ") = " << value << "; expected "
                        << (nan_expected ? "NaN" : "a finite value");
        }
      }
    }
    EXPECT_EQ(misplaced, 0);
    // Everything else as the reference, which dequantises the off-grid zero points as they are.
    const reference::Comparison result = problem.check(nullptr);
    EXPECT_EQ(result.nan, spec.m * int64_t(nan_columns.size())) << result.summary();
    EXPECT_EQ(result.bad, result.nan) << result.summary();
    EXPECT_EQ(result.written_outside, 0) << result.summary();
  }
}

// What DeviceProblem cannot lay out for 4-bit weights it refuses, naming the spec.
TEST_F(LowbitErrors, DeviceProblemRefusesLayoutsItCannotBuild) {
  ProblemSpec spec{.m = 16, .n = 64, .k = 256, .layout = "NN", .in = DType::bf16, .in_b = DType::u4};
  spec.scale_b = ScaleMode::group;
  EXPECT_THROW(DeviceProblem(spec, 1), Error);  // B N-contiguous
  spec.layout = "NT";
  spec.pad_b = 1;
  EXPECT_THROW(DeviceProblem(spec, 1), Error);  // columns not on bytes
  spec.pad_b = 0;
  spec.scale_b = ScaleMode::mx;
  spec.zeros = true;
  EXPECT_THROW(DeviceProblem(spec, 1), Error);  // zero points without group scales
}

// The plans a process keeps for its shapes key on the group scales' dtype, which W4A8 leaves free:
// the same problem with bf16, then f16, then bf16 scales and zero points each matches the
// reference (one plan for all three read f16 scales as bf16).
using W4a8Plans = testing::GpuTest;

TEST_F(W4a8Plans, TheSameShapeWithEachScalesTypeMatchesTheReference) {
  for (DType type : {DType::bf16, DType::f16, DType::bf16}) {
    ProblemSpec spec{.m = 17, .n = 257, .k = 1000, .in = DType::e4m3, .out = DType::bf16, .in_b = DType::u4};
    spec.scale_a = ScaleMode::block;
    spec.scale_b = ScaleMode::group;
    spec.group = 128;
    spec.zeros = true;
    spec.group_scale_type = type;
    SCOPED_TRACE(spec.describe());
    DeviceProblem problem(spec, testing::fresh_seed());
    problem.prepare_output(nullptr);
    gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const reference::Comparison result = problem.check(nullptr);
    EXPECT_TRUE(result.passed()) << result.summary();
  }
}

}  // namespace
}  // namespace gemmkit
