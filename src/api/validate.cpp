#include "api/validate.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "api/epilogue_checks.h"
#include "api/tensor_checks.h"
#include "core/checked_math.h"
#include "gemmkit/error.h"

namespace gemmkit {
namespace {

using namespace api;  // the argument checks of api/tensor_checks.h

MatrixRef matrix_ref(const TensorView& t) {
  return {t.data, t.dtype, t.rank == 3 ? t.batch_stride() : 0, t.row_stride(), t.col_stride()};
}



// The scales of operand `x` (A: rows M, cols K; B: rows K, cols N) as the kernels read them:
// the mode's shape (see gemm.h) decides the blocks, and anything else is an error.
// `name` the scales' and `operand` x's, as messages call them.
ScaleRef scale_ref(const Scale& scale, const TensorView& x, bool is_a, int64_t rows, int64_t cols, const std::string& name,
                   const std::string& operand) {
  ScaleRef ref;
  ref.mode = scale.mode;
  if (scale.zeros && scale.mode != ScaleMode::group) {
    fail(name + ": zero points given with mode " + std::string(scale_mode_name(scale.mode)) +
         "; expected them only in mode group (u4 weights)");
  }
  if (scale.mode == ScaleMode::none) return ref;
  if (scale.mode == ScaleMode::group && !is_4bit(x.dtype)) {
    fail(name + ": mode group given for " + operand + " of dtype " + std::string(dtype_name(x.dtype)) +
         "; expected it only for u4 weights");
  }
  if (!is_fp8(x.dtype) && !(is_a && x.dtype == DType::e2m1)) {  // MXFP4 activations: mx (check_activation_codes)
    fail(name + ": mode " + std::string(scale_mode_name(scale.mode)) + " given for " + operand + " of dtype " +
         std::string(dtype_name(x.dtype)) + "; expected scales only for e4m3 or e5m2 inputs (mode none otherwise)");
  }
  const TensorView& t = scale.scales;
  check_form(t, name.c_str());
  const DType wanted = scale.mode == ScaleMode::mx ? DType::ue8m0 : DType::f32;
  if (t.dtype != wanted) {
    fail(name + ": dtype " + std::string(dtype_name(t.dtype)) + " with mode " + std::string(scale_mode_name(scale.mode)) +
         "; expected " + std::string(dtype_name(wanted)));
  }
  // Candidate blocks (along rows, along cols) of the mode, in the order the message lists them.
  const int64_t whole_rows = std::max<int64_t>(rows, 1), whole_cols = std::max<int64_t>(cols, 1);
  std::vector<std::pair<int64_t, int64_t>> blocks;
  switch (scale.mode) {
    case ScaleMode::tensor: blocks = {{whole_rows, whole_cols}}; break;
    case ScaleMode::rowwise: blocks = {is_a ? std::pair{int64_t(1), whole_cols} : std::pair{whole_rows, int64_t(1)}}; break;
    case ScaleMode::block:
      blocks = is_a ? std::vector<std::pair<int64_t, int64_t>>{{1, 128}, {128, 128}}
                    : std::vector<std::pair<int64_t, int64_t>>{{128, 128}, {128, 1}};
      break;
    case ScaleMode::mx: blocks = {is_a ? std::pair{int64_t(1), int64_t(32)} : std::pair{int64_t(32), int64_t(1)}}; break;
    case ScaleMode::none:
    case ScaleMode::group: break;  // 4-bit weights' (weight_scale_ref)
  }
  std::string expected;
  for (auto [br, bc] : blocks) {
    const int64_t want_rows = ceil_div(rows, br), want_cols = ceil_div(cols, bc);
    if (t.rows() == want_rows && t.cols() == want_cols) {
      // The kernels read f32 scales as words.
      if (reinterpret_cast<uintptr_t>(t.data) % uintptr_t(dtype_size(t.dtype)) != 0) {
        fail(name + ": data is not " + std::to_string(dtype_size(t.dtype)) + "-byte aligned; expected " +
             std::string(dtype_name(t.dtype)) + " scales at a multiple of " + std::to_string(dtype_size(t.dtype)) +
             " bytes");
      }
      ref.m = matrix_ref(t);
      ref.block_rows = br;
      ref.block_cols = bc;
      return ref;
    }
    expected += (expected.empty() ? "" : " or ") + std::to_string(want_rows) + " x " + std::to_string(want_cols) +
                (scale.mode == ScaleMode::block ? " (" + std::to_string(br) + "x" + std::to_string(bc) + " blocks)" : "");
  }
  fail(name + ": shape " + shape_text(t) + " does not fit " + std::string(scale_mode_name(scale.mode)) + " scaling of " +
       operand + " (" + std::to_string(rows) + " x " + std::to_string(cols) + "); expected " + expected);
}

// The scales of 4-bit weights B (K x N) against A of type `wide`: u4 in mode group, its scales
// (and zero points) ceil(K/group) x N of A's type (bf16 or f16) or, against an e4m3 A, either; e2m1
// in mode mx, ue8m0, ceil(K/32) x N. A group at least K (one scale a column) is kept as the
// smallest power of two from 128 that covers K, so that the kernels find a K element's group by a
// shift.
ScaleRef weight_scale_ref(const Scale& scale, const TensorView& b, DType wide, int64_t k, int64_t n) {
  const bool u4 = b.dtype == DType::u4, eight_bit = is_fp8(wide);
  const ScaleMode wanted = u4 ? ScaleMode::group : ScaleMode::mx;
  if (scale.mode != wanted) {
    fail("scale_b: mode " + std::string(scale_mode_name(scale.mode)) + " for B of dtype " +
         std::string(dtype_name(b.dtype)) + "; expected " + std::string(scale_mode_name(wanted)) +
         (u4 ? " (one scale, and zero point, per `group` K elements of a column)" : " (one ue8m0 scale per 32 of K)"));
  }
  if (scale.zeros && !u4) fail("scale_b: zero points given for e2m1 weights; expected them only for u4");
  int64_t group = 32;
  if (u4) {
    group = scale.group;
    const bool power = group >= 32 && (group & (group - 1)) == 0;
    if (group < 1 || (group < k && !power)) {
      fail("scale_b: group " + std::to_string(group) + "; expected 32, a power of two from 64, or at least K = " +
           std::to_string(k) + " (one scale a column)");
    }
  } else if (scale.group != 0 && scale.group != 32) {
    fail("scale_b: group " + std::to_string(scale.group) + " with mode mx; expected 0 or 32 (MX blocks are 32 of K)");
  }
  const TensorView& t = scale.scales;
  check_form(t, "scale_b");
  const DType type = u4 ? wide : DType::ue8m0;
  if (u4 && eight_bit ? t.dtype != DType::bf16 && t.dtype != DType::f16 : t.dtype != type) {
    fail("scale_b: dtype " + std::string(dtype_name(t.dtype)) + "; expected " +
         (u4 && eight_bit ? std::string("bf16 or f16") : std::string(dtype_name(type)) + (u4 ? " (A's dtype)" : "")));
  }
  const int64_t groups = ceil_div(k, group);
  auto check_shape = [&](const TensorView& v, const char* name) {
    if (v.rows() != groups || v.cols() != n) {
      fail(std::string(name) + ": shape " + shape_text(v) + "; expected ceil(K/" + std::to_string(group) + ") x N = " +
           std::to_string(groups) + " x " + std::to_string(n));
    }
    if (reinterpret_cast<uintptr_t>(v.data) % uintptr_t(dtype_size(v.dtype)) != 0) {
      fail(std::string(name) + ": data is not " + std::to_string(dtype_size(v.dtype)) + "-byte aligned");
    }
  };
  check_shape(t, "scale_b");
  // The kernels read a batch's scales where they read its weights (widen.cuh).
  auto batched = [](const TensorView& v) { return v.rank == 3 && v.batch() > 1 && v.batch_stride() != 0; };
  for (const TensorView* v : {&t, scale.zeros ? &*scale.zeros : &t}) {
    if (batched(*v) != batched(b)) {
      fail(std::string(v == &t ? "scale_b" : "scale_b.zeros") + ": " + (batched(*v) ? "batched" : "shared by every batch") +
           " but B is " + (batched(b) ? "batched" : "shared") + "; expected both batched or both shared");
    }
  }
  ScaleRef ref;
  ref.mode = scale.mode;
  ref.m = matrix_ref(t);
  ref.block_rows = group < k ? group : std::max<int64_t>(128, int64_t(std::bit_ceil(uint64_t(k))));
  ref.block_cols = 1;
  if (scale.zeros) {
    const TensorView& z = *scale.zeros;
    check_form(z, "scale_b.zeros");
    if (z.dtype != t.dtype) {
      fail("scale_b.zeros: dtype " + std::string(dtype_name(z.dtype)) + "; expected the scales', " +
           std::string(dtype_name(t.dtype)));
    }
    check_shape(z, "scale_b.zeros");
    ref.zeros = matrix_ref(z);
  }
  return ref;
}

// 4-bit weights B: K contiguous, two elements a byte: the other strides even, so that every
// row (and batch) starts on a byte.
void check_weight_layout(const TensorView& b) {
  if (b.rows() > 1 && b.row_stride() != 1) {
    fail("B: strides " + strides_text(b) + " for 4-bit weights of shape " + shape_text(b) +
         "; expected K contiguous (row stride 1: a checkpoint's [N, K/2] bytes are B with strides {1, K})");
  }
  if ((b.cols() > 1 && b.col_stride() % 2 != 0) || (b.rank == 3 && b.batch() > 1 && b.batch_stride() % 2 != 0)) {
    fail("B: strides " + strides_text(b) +
         " for 4-bit weights; expected even column and batch strides (two elements a byte, each column from a byte)");
  }
}

// MXFP4 activations A (M x K): two codes a byte along K, as 4-bit weights are packed (K
// contiguous, the other strides even), each 32 of K with its ue8m0 exponent (scale_a mx, whose
// shape scale_ref checks).
void check_activation_codes(const TensorView& a, const Scale& scale_a) {
  if ((a.cols() > 1 && a.col_stride() != 1) || (a.rows() > 1 && a.row_stride() % 2 != 0) ||
      (a.rank == 3 && a.batch() > 1 && a.batch_stride() % 2 != 0)) {
    fail("A: strides " + strides_text(a) + " for e2m1 activations of shape " + shape_text(a) +
         "; expected K contiguous and the other strides even (two codes a byte along K, each row from a byte)");
  }
  if (scale_a.mode != ScaleMode::mx) {
    fail("scale_a: mode " + std::string(scale_mode_name(scale_a.mode)) +
         " for e2m1 activations A; expected mx (one ue8m0 exponent per 32 of K: MXFP4)");
  }
}

// D's scales (GemmOptions::scale_d): mode block, f32, ceil(N / 128) a row, where D is e4m3; none
// otherwise. check_batch: validate_gemm's, against D's batch.
template <class CheckBatch>
MatrixRef scale_d_ref(const Scale& scale, const TensorView& d, int64_t m, int64_t n, const CheckBatch& check_batch) {
  if (d.dtype != DType::e4m3) {
    if (scale.mode != ScaleMode::none) {
      fail("scale_d: mode " + std::string(scale_mode_name(scale.mode)) + " given for D of dtype " +
           std::string(dtype_name(d.dtype)) + "; expected scale_d only for an e4m3 D (mode none otherwise)");
    }
    return {};
  }
  if (scale.mode != ScaleMode::block) {
    fail("scale_d: mode " + std::string(scale_mode_name(scale.mode)) +
         " for an e4m3 D; expected block: one f32 scale per 128 columns of a row, which the call writes");
  }
  const TensorView& t = scale.scales;
  check_form(t, "scale_d");
  if (t.dtype != DType::f32) fail("scale_d: dtype " + std::string(dtype_name(t.dtype)) + "; expected f32");
  if (t.rows() != m || t.cols() != ceil_div(n, 128)) {
    fail("scale_d: shape " + shape_text(t) + "; expected M x ceil(N/128) = " + std::to_string(m) + " x " +
         std::to_string(ceil_div(n, 128)) + " (1x128 blocks of D)");
  }
  if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0) fail("scale_d: data is not 4-byte aligned; expected f32 scales");
  check_batch(t, "scale_d");
  if (d.rank == 3 && d.batch() > 1 && t.rank == 2) {
    fail("scale_d: shape " + shape_text(t) + " for a batch of " + std::to_string(d.batch()) +
         " D matrices; expected [batch, M, ceil(N/128)], one scale tensor per batch");
  }
  return matrix_ref(t);
}

// A dual GEMM's second B (options.b2) beside B: its form, type, shape and batch, and what the
// dual kernel does not take. check_batch: validate_gemm's, against D's batch.
template <class CheckBatch>
void check_dual(const GemmOptions& options, const TensorView& b, bool use_c, const CheckBatch& check_batch) {
  const TensorView& b2 = *options.b2;
  check_form(b2, "options.b2");
  if (b2.dtype != b.dtype) {
    fail("options.b2: dtype " + std::string(dtype_name(b2.dtype)) + "; expected B's, " + std::string(dtype_name(b.dtype)));
  }
  if (b2.rows() != b.rows() || b2.cols() != b.cols()) {
    fail("options.b2: shape " + shape_text(b2) + "; expected B's, K x N = " + std::to_string(b.rows()) + " x " +
         std::to_string(b.cols()));
  }
  check_batch(b2, "options.b2");
  if ((b.rank == 3 && b.batch() > 1 && b.batch_stride() != 0) != (b2.rank == 3 && b2.batch() > 1 && b2.batch_stride() != 0)) {
    fail("options.b2: " + std::string(b2.rank == 3 ? "batched" : "shared by every batch") + " but B is " +
         (b.rank == 3 ? "batched" : "shared") + "; expected both batched or both shared");
  }
  if (use_c) {
    fail("options.beta: " + std::to_string(options.beta) +
         " with options.b2; expected 0: a dual GEMM takes no C (read it in the epilogue instead, e.g. \"... + c[m, n]\")");
  }
}

// A dual GEMM's B2's scales (options.scale_b2): scale_b's mode and blocks where B2 is FP8, none
// otherwise.
ScaleRef scale_b2_ref(const GemmOptions& options, const ScaleRef& scale_b, int64_t k, int64_t n) {
  const Scale& scale = options.scale_b2;
  const std::string mode = std::string(scale_mode_name(scale.mode)), wanted = std::string(scale_mode_name(scale_b.mode));
  if (!options.b2) {
    if (scale.mode != ScaleMode::none) fail("options.scale_b2: mode " + mode + " given without options.b2; expected mode none");
    return {};
  }
  if (scale.mode != scale_b.mode) {
    fail("options.scale_b2: mode " + mode + (scale.mode == ScaleMode::none ? " with FP8 options.b2; expected B2's scales in mode " + wanted
                                                                             : "; expected scale_b's mode, " + wanted));
  }
  const ScaleRef ref = scale_ref(scale, *options.b2, /*is_a=*/false, k, n, "options.scale_b2", "options.b2");
  if (ref.block_rows != scale_b.block_rows || ref.block_cols != scale_b.block_cols) {
    auto blocks = [](const ScaleRef& s) { return std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols); };
    fail("options.scale_b2: shape " + shape_text(scale.scales) + " (" + blocks(ref) + " blocks); expected scale_b's blocks, " +
         blocks(scale_b) + " (" + std::to_string(ceil_div(k, scale_b.block_rows)) + " x " +
         std::to_string(ceil_div(n, scale_b.block_cols)) + ")");
  }
  return ref;
}

}  // namespace

Problem validate_gemm(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options) {
  check_form(a, "A");
  check_form(b, "B");
  check_form(d, "D");
  if (options.max_sms != 0) {
    fail("options.max_sms: " + std::to_string(options.max_sms) +
         "; expected 0: only grouped_gemm takes an SM budget so far");
  }
  const bool use_c = options.beta != 0.0f;
  if (use_c && !options.c) {
    fail("options.c: beta is " + std::to_string(options.beta) + " but no C was given; expected C when beta != 0");
  }
  if (use_c) check_form(*options.c, "C");

  if (a.dtype != DType::bf16 && a.dtype != DType::f16 && !is_fp8(a.dtype) && a.dtype != DType::e2m1) {
    fail("A: dtype " + std::string(dtype_name(a.dtype)) +
         " is not supported; expected bf16, f16, e4m3, e5m2, or e2m1 (MXFP4 activations against 4-bit weights)");
  }
  // 4-bit weights against a 16-bit A (W4A16), an e4m3 one (W4A8), or MXFP4 activations, which
  // multiply as their exact e4m3 values (FP4 x FP4: `wide`, A's type as the kernels multiply it).
  const DType wide = a.dtype == DType::e2m1 ? DType::e4m3 : a.dtype;
  const bool weights_4bit = is_4bit(b.dtype) && (!is_fp8(wide) || wide == DType::e4m3);
  const bool fits = weights_4bit || (a.dtype != DType::e2m1 && (is_fp8(a.dtype) ? is_fp8(b.dtype) : b.dtype == a.dtype));
  if (!fits) {
    fail("B: dtype " + std::string(dtype_name(b.dtype)) + " does not go with A's " + std::string(dtype_name(a.dtype)) +
         "; expected A and B both bf16, both f16, each e4m3 or e5m2, or A bf16, f16, e4m3 or e2m1 and B 4-bit (u4 or "
         "e2m1)");
  }
  if (weights_4bit) {
    check_weight_layout(b);
    if (options.b2) fail("options.b2: given with 4-bit weights B; expected none (no dual GEMM on 4-bit weights yet)");
  }
  if (a.dtype == DType::e2m1) check_activation_codes(a, options.scale_a);
  if (d.dtype != DType::bf16 && d.dtype != DType::f16 && d.dtype != DType::f32 && d.dtype != DType::e4m3) {
    fail("D: dtype " + std::string(dtype_name(d.dtype)) + " is not supported; expected bf16, f16, f32 or e4m3");
  }
  if (use_c && options.c->dtype != DType::bf16 && options.c->dtype != DType::f16 && options.c->dtype != DType::f32) {
    fail("C: dtype " + std::string(dtype_name(options.c->dtype)) + " is not supported; expected bf16, f16 or f32");
  }

  const int64_t m = a.rows(), k = a.cols(), n = b.cols();
  if (b.rows() != k) {
    fail("B: shape " + shape_text(b) + " has " + std::to_string(b.rows()) + " rows but A " + shape_text(a) + " has K = " +
         std::to_string(k) + " columns; expected B to be K x N");
  }
  if (d.rows() != m || d.cols() != n) {
    fail("D: shape " + shape_text(d) + "; expected M x N = " + std::to_string(m) + " x " + std::to_string(n));
  }
  if (use_c && (options.c->rows() != m || options.c->cols() != n)) {
    fail("C: shape " + shape_text(*options.c) + "; expected the shape of D, M x N = " + std::to_string(m) + " x " +
         std::to_string(n));
  }

  // The batch comes from D; a rank-2 input is shared by every batch.
  const int64_t batch = d.batch();
  auto check_batch = [&](const TensorView& t, const char* name) {
    if (t.rank == 3 && t.batch() != batch) {
      fail(std::string(name) + ": batch " + std::to_string(t.batch()) + "; expected D's batch " + std::to_string(batch) +
           (d.rank == 2 ? " (D is a single matrix)" : ""));
    }
  };
  check_batch(a, "A");
  check_batch(b, "B");
  if (use_c) check_batch(*options.c, "C");
  if (options.b2) check_dual(options, b, use_c, check_batch);
  // Before any arithmetic on the sizes: past 2^63 elements or bytes it would wrap (a problem
  // of 2^32 x 2^32 would count as empty).
  const int widest = std::max({dtype_size(a.dtype), dtype_size(b.dtype), dtype_size(d.dtype),
                               use_c ? dtype_size(options.c->dtype) : 1});
  check_addressable(m, n, k, batch, widest);
  const MatrixRef scale_d = scale_d_ref(options.scale_d, d, m, n, check_batch);
  const ScaleRef scale_a = scale_ref(options.scale_a, a, /*is_a=*/true, m, k, "scale_a", "A");
  const ScaleRef scale_b = weights_4bit ? weight_scale_ref(options.scale_b, b, wide, k, n)
                                        : scale_ref(options.scale_b, b, /*is_a=*/false, k, n, "scale_b", "B");
  const ScaleRef scale_b2 = scale_b2_ref(options, scale_b, k, n);
  // W4A8 promotes each K block of 128 (or each of its groups of 32 or 64) by its weights' group
  // scales and A's inner ones: 1x128 blocks, or mx exponents (MXFP8 activations) where the
  // weights' groups are 32 of K too (e2m1, u4 in groups of 32).
  const bool groups_of_32 = b.dtype == DType::e2m1 || scale_b.block_rows == 32;
  if (weights_4bit && is_fp8(wide) &&
      ((scale_a.mode == ScaleMode::mx && !groups_of_32) || (scale_a.mode == ScaleMode::block && scale_a.block_rows != 1))) {
    fail("scale_a: mode " + std::string(scale_mode_name(scale_a.mode)) +
         (scale_a.mode == ScaleMode::block ? " in 128x128 blocks"
          : scale_b.block_rows >= k         ? " with B in one group of all K = " + std::to_string(k) + " (a scale a column)"
                                            : " with B in groups of " + std::to_string(scale_b.block_rows)) +
         " with 4-bit weights B; expected none, tensor, rowwise, block in 1x128 blocks, or mx against weights in groups "
         "of 32 (e2m1, or u4 with group 32)");
  }
  if (scale_a.mode != ScaleMode::none) check_batch(options.scale_a.scales, "scale_a");
  if (scale_b.mode != ScaleMode::none) check_batch(options.scale_b.scales, "scale_b");
  if (scale_b.zeros.data) check_batch(*options.scale_b.zeros, "scale_b.zeros");
  if (scale_b2.mode != ScaleMode::none) check_batch(options.scale_b2.scales, "options.scale_b2");

  Problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.batch = batch;
  p.alpha = options.alpha;
  p.beta = options.beta;
  p.a = matrix_ref(a);
  p.b = matrix_ref(b);
  p.d = matrix_ref(d);
  if (use_c) p.c = matrix_ref(*options.c);
  if (options.b2) p.b2 = matrix_ref(*options.b2);
  p.scale_a = scale_a;
  p.scale_b = scale_b;
  p.scale_b2 = scale_b2;
  p.scale_d = scale_d;
  p.epilogue = api::epilogue_ref(options.epilogue, p);

  if (element_count(d) == 0) return p;  // nothing to compute or touch

  auto check_data = [](const TensorView& t, const char* name) {
    if (t.data == nullptr && element_count(t) > 0) fail(std::string(name) + ": data is null; expected a device pointer");
  };
  check_data(a, "A");
  check_data(b, "B");
  if (options.b2) check_data(*options.b2, "options.b2");
  check_data(d, "D");
  if (use_c) check_data(*options.c, "C");
  if (scale_a.mode != ScaleMode::none) check_data(options.scale_a.scales, "scale_a");
  if (scale_b.mode != ScaleMode::none) check_data(options.scale_b.scales, "scale_b");
  if (options.scale_b.zeros) check_data(*options.scale_b.zeros, "scale_b.zeros");
  if (scale_b2.mode != ScaleMode::none) check_data(options.scale_b2.scales, "options.scale_b2");
  if (scale_d.data || d.dtype == DType::e4m3) check_data(options.scale_d.scales, "scale_d");
  check_no_self_overlap(d, batch, "D");
  if (scale_d.data) check_no_self_overlap(options.scale_d.scales, batch, "scale_d");
  return p;
}

namespace {

// D's scales, written, apart from every other tensor the call reads or writes. On every call with
// an e4m3 D: no allocation but the message's.
void check_scale_d_apart(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options,
                         const Problem& p) {
  const int64_t batch = p.batch;
  const api::ByteRange scales = byte_range(options.scale_d.scales, batch, "scale_d");
  auto overlaps = [&](const TensorView& t, const char* name) {
    return element_count(t) > 0 && byte_range(t, batch, name).overlaps(scales);
  };
  auto overlap = [](const std::string& what) {
    fail("scale_d: memory overlaps " + what + "; expected D's scales apart from every other tensor");
  };
  std::array<api::Operand, 8> others;
  size_t count = 0;
  others[count++] = {&d, batch, "D"};
  if (p.k > 0) {
    others[count++] = {&a, batch, "A"};
    others[count++] = {&b, batch, "B"};
    if (options.b2) others[count++] = {&*options.b2, batch, "options.b2"};
    if (options.scale_a.mode != ScaleMode::none) others[count++] = {&options.scale_a.scales, batch, "scale_a"};
    if (options.scale_b.mode != ScaleMode::none) others[count++] = {&options.scale_b.scales, batch, "scale_b"};
    if (options.scale_b2.mode != ScaleMode::none) others[count++] = {&options.scale_b2.scales, batch, "options.scale_b2"};
  }
  if (p.has_c()) others[count++] = {&*options.c, batch, "C"};
  for (size_t i = 0; i < count; ++i) {
    if (overlaps(*others[i].view, others[i].name)) overlap(others[i].name);
  }
  for (const EpilogueTensor& e : options.epilogue.tensors) {
    if (overlaps(e.tensor, "epilogue tensor")) overlap("epilogue tensor '" + e.name + "'");
  }
}

}  // namespace

void check_apart(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options,
                 const Problem& p) {
  const int64_t batch = p.batch, k = p.k;
  const bool use_c = p.has_c();
  const api::ByteRange d_range = byte_range(d, batch, "D");
  if (k > 0 && byte_range(a, batch, "A").overlaps(d_range)) fail("D: memory overlaps A; expected D apart from the inputs");
  if (k > 0 && byte_range(b, batch, "B").overlaps(d_range)) fail("D: memory overlaps B; expected D apart from the inputs");
  if (k > 0 && options.b2 && byte_range(*options.b2, batch, "options.b2").overlaps(d_range)) {
    fail("D: memory overlaps options.b2; expected D apart from the inputs");
  }
  for (auto [scale, name] : {std::pair{&options.scale_a, "scale_a"}, std::pair{&options.scale_b, "scale_b"},
                             std::pair{&options.scale_b2, "options.scale_b2"}}) {
    if (k > 0 && scale->mode != ScaleMode::none && byte_range(scale->scales, batch, name).overlaps(d_range)) {
      fail(std::string("D: memory overlaps ") + name + "; expected D apart from the inputs");
    }
  }
  if (k > 0 && options.scale_b.zeros && byte_range(*options.scale_b.zeros, batch, "scale_b.zeros").overlaps(d_range)) {
    fail("D: memory overlaps scale_b.zeros; expected D apart from the inputs");
  }
  if (p.scale_d.data) check_scale_d_apart(a, b, d, options, p);
  if (p.epilogue.fused()) {  // its outputs apart from everything the call reads
    std::array<api::Operand, 8> inputs;
    size_t count = 0;
    if (k > 0) {
      inputs[count++] = {&a, batch, "A"};
      inputs[count++] = {&b, batch, "B"};
      if (options.b2) inputs[count++] = {&*options.b2, batch, "options.b2"};
    }
    for (auto [scale, name] : {std::pair{&options.scale_a, "scale_a"}, std::pair{&options.scale_b, "scale_b"},
                               std::pair{&options.scale_b2, "options.scale_b2"}}) {
      if (k > 0 && scale->mode != ScaleMode::none) inputs[count++] = {&scale->scales, batch, name};
    }
    if (k > 0 && options.scale_b.zeros) inputs[count++] = {&*options.scale_b.zeros, batch, "scale_b.zeros"};
    if (use_c) inputs[count++] = {&*options.c, batch, "C"};
    api::check_epilogue_apart(options.epilogue, p, d_range, {inputs.data(), count});
  }
  if (use_c) {
    const TensorView& c = *options.c;
    const bool same_as_d = c.data == d.data && c.dtype == d.dtype && c.batch_stride() == d.batch_stride() &&
                           c.row_stride() == d.row_stride() && c.col_stride() == d.col_stride();
    if (!same_as_d && byte_range(c, batch, "C").overlaps(d_range)) {
      fail("D: memory overlaps C; expected C to be D itself (same pointer, dtype and strides) or apart from it");
    }
  }
}

}  // namespace gemmkit
