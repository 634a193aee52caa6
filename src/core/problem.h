// A validated GEMM problem: D = alpha * A * B + beta * C, every stride explicit. Plain types
// below dispatch, codegen and runtime, which all take problems.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "gemmkit/gemm.h"
#include "gemmkit/grouped.h"

namespace gemmkit {

// One operand seen as [batch,] rows x cols with a stride (in elements) per dimension.
// For A the dimensions are (M, K), for B (K, N), for C and D (M, N).
struct MatrixRef {
  void* data = nullptr;
  DType dtype = DType::bf16;
  int64_t batch_stride = 0;
  int64_t row_stride = 0;
  int64_t col_stride = 0;
};

// The scales of an FP8 operand seen as rows x cols (A: M x K, B: K x N): element (r, c) is
// multiplied by scales(r / block_rows, c / block_cols). Blocks are at least 1; a tensor-wide
// scale has blocks as large as the operand. Mode none: no data, every scale is 1.
struct ScaleRef {
  ScaleMode mode = ScaleMode::none;
  MatrixRef m;  // f32, or ue8m0 for mx; a u4 operand's group scales A's 16-bit type
  int64_t block_rows = 1, block_cols = 1;
  MatrixRef zeros;  // a u4 operand's zero points (group mode), m's shape and type; data null: 8
};

// A grouped problem's groups (gemmkit/grouped.h): `batch` groups, B batched by group. contiguous:
// A, C and D are one matrix of M_total = m rows split among the groups by the ends at `sizes`;
// masked: A, C and D are batched by group, group g's valid rows counted at sizes[g]. Along K (the
// weight gradient, contiguous): A (M x K) and B (K x N) are shared, K split among the groups by
// the ends, C and D batched by group. Along N: the groups of rows transposed (transposed_problem;
// 4-bit weights, which the kernel widens as A): A batched by group, B, C and D's columns the
// groups' tokens, split (contiguous) or counted (masked) as the rows were. Dense problems have no
// sizes.
struct GroupRef {
  GroupLayout layout = GroupLayout::contiguous;
  const void* sizes = nullptr;
  bool int64 = false;
  bool check = false;  // trap on sizes out of range, rather than clamp them
  bool along_k = false;
  bool zero_unowned = false;  // zero D's rows no group owns, before the GEMM
  bool along_n = false;       // set by transposed_problem only

  bool grouped() const { return sizes != nullptr; }
};

// A fused epilogue (epilogue/program.h) as the kernels run it: its device code
// (codegen/epilogue_source.h), interned so that equal code is one pointer, and its tensors, the
// program's inputs then its auxiliary outputs, in D's orientation: element (b, m, n) of D's.
// b is the batch, or a grouped problem's group; tensors a batch does not step have batch stride
// 0. A problem transposed (transposed_problem) keeps them as they are and says so: the kernel
// then hands the epilogue its column as m and its row as n.
inline constexpr int kMaxEpilogueTensors = 8;
struct EpilogueRef {
  const std::string* code = nullptr;  // null: no epilogue
  int tensor_count = 0;
  std::array<MatrixRef, kMaxEpilogueTensors> tensors{};
  // Per tensor, the bytes zeroed before the kernel runs: a reduction's output, contiguous f32,
  // which the kernel adds into. 0 for the others.
  std::array<int64_t, kMaxEpilogueTensors> zeroed_bytes{};
  bool transposed = false;

  bool fused() const { return code != nullptr; }
};

struct Problem {  // every field goes into problem_words
  int64_t m = 0, n = 0, k = 0, batch = 1;
  MatrixRef a, b, d;
  MatrixRef c;  // data is null unless beta != 0
  MatrixRef b2;  // a dual GEMM's second B (K x N, gemm.h GemmOptions::b2); data is null otherwise
  ScaleRef scale_a, scale_b;
  ScaleRef scale_b2;  // a dual GEMM's B2's where it is FP8 (scale_b's mode and blocks); else none
  MatrixRef scale_d;  // an e4m3 D's f32 scales, [batch,] M x ceil(N/128) (gemm.h, scale_d); else null
  float alpha = 1.0f, beta = 0.0f;
  int device = 0;
  GroupRef groups;
  int max_sms = 0;  // at most this many SMs run the kernel (0: all)
  EpilogueRef epilogue;

  bool has_c() const { return c.data != nullptr; }
  // A dual GEMM: the kernel multiplies A by B and by b2 and pairs the products column by column,
  // so it never runs transposed (its pairs would lie along M).
  bool dual() const { return b2.data != nullptr; }
  // D quantised in 1x128 blocks along its rows: never run transposed either.
  bool quantizes_d() const { return scale_d.data != nullptr; }
  bool grouped() const { return groups.grouped(); }
  // Contiguous groups of tokens (rows, or columns along N) share one matrix of them: A or B, and D.
  bool shares_tokens() const { return grouped() && groups.layout == GroupLayout::contiguous && !groups.along_k; }
  // The batch of A's rows, of B's columns, and of C's and D's: 1 where their tokens are shared.
  int64_t rows_batch() const { return shares_tokens() && !groups.along_n ? 1 : batch; }
  int64_t cols_batch() const { return shares_tokens() && groups.along_n ? 1 : batch; }
  int64_t d_batch() const { return shares_tokens() ? 1 : batch; }
  // Groups along K with FP8 operands (the FP8 weight gradient) are staged K-major, each group's K
  // from a whole block of kGroupKBlock on (kernels/sm90/stage.cuh); the copies' K, at most one
  // block a group more than K.
  bool pads_groups_along_k() const;
  int64_t padded_group_k() const { return pads_groups_along_k() ? k + kGroupKBlock * batch : k; }
  // The dtype of a u4 operand's group scales (and zero points): bf16 or f16; bf16 where there are none.
  DType group_scale_type() const;
  static constexpr int64_t kGroupKBlock = 128;
};

// A 4-bit operand's bytes (A: M x K, B: K x N, K contiguous): the same matrix with K counted in
// bytes, ceil(K / 2) of them, and its strides in bytes (halved: two elements a byte).
MatrixRef packed_bytes(const MatrixRef& m, bool is_a);

// Throws Error(invalid_argument) where 64-bit addressing cannot reach an operand of the
// M x N x K problem over `batch` matrices, elements at most `element_bytes` wide: a size, or
// the elements of A (M x K), B (K x N) or C and D (M x N), one matrix or the batch, or their
// bytes, past 2^63 - 1. The message names the sizes and the product, e.g. "problem 4294967296
// x 4294967296 x 8: M x N = 2^64 elements overflows 64-bit addressing". Sizes are >= 0.
void check_addressable(int64_t m, int64_t n, int64_t k, int64_t batch, int element_bytes);

// Every field of a problem as 64-bit words, pointers included: equal words, equal problems.
using ProblemWords = std::array<int64_t, 80 + 6 * kMaxEpilogueTensors>;
ProblemWords problem_words(const Problem& p);

// "NT"-style layout letters, row-major convention: the first letter is A, the second B;
// N means the operand is stored as written (A as M x K, B as K x N, row-major), T means
// it is stored transposed (A as K x M, B as N x K, row-major).
std::string layout_name(const Problem& p);

// D^T = B^T A^T: the same memory with A and B swapped and every operand transposed (the
// epilogue's tensors stay in D's orientation; see EpilogueRef). Not for dual problems nor an
// e4m3 D: throws.
Problem transposed_problem(const Problem& p);

}  // namespace gemmkit
