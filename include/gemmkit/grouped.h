// Grouped GEMM (mixture of experts): one GEMM per group (expert), each of its own number of rows
// (tokens), in one launch, with the group sizes in device memory.
#pragma once

#include <cstdint>

#include "gemmkit/gemm.h"
#include "gemmkit/tensor.h"

namespace gemmkit {

// How the groups' rows lie in A and D.
//   contiguous: A is [M_total, K] and D [M_total, N], the groups' rows one after another (tokens
//               sorted by expert); `sizes` holds G cumulative ends (torch._grouped_mm's offs):
//               group g has rows [ends[g-1], ends[g]), ends[-1] = 0. Rows past the last end are
//               not written (but see GroupSizes::zero_unowned).
//   masked:     A is [G, max_m, K] and D [G, max_m, N]; `sizes` holds each group's valid row
//               count (<= max_m). Rows past a group's count are not written.
enum class GroupLayout { contiguous, masked };

// G integers in device memory, int32 or int64, read by the kernel when it runs: a CUDA graph
// replays with whatever they hold then. Sizes out of range (ends decreasing or past M_total,
// counts past max_m) are clamped by the kernel, which never writes out of bounds.
struct GroupSizes {
  GroupLayout layout = GroupLayout::contiguous;
  const void* data = nullptr;
  bool int64 = false;  // int64_t elements, else int32_t
  int64_t count = 0;   // G, which B's batch must match
  // Where true, a small kernel run before the GEMM checks the sizes, and sizes out of range stop
  // it with a message on stdout (a trap: the context is lost, and the call's stream reports an
  // error) instead of being clamped.
  bool check = false;
  // Where true, grouped_gemm sets D's rows that no group owns (past the last end; past a group's
  // count) to zero, as a gradient's must be, by a small kernel run before the GEMM on the same
  // stream (about a launch where every row is owned). grouped_gemm_wgrad writes every group's
  // output and ignores it.
  bool zero_unowned = false;
};

// The most groups one call takes (the kernel keeps their table in shared memory).
inline constexpr int64_t kMaxGroups = 1024;

// D_g = alpha * A_g * B_g for every group g, where A_g and D_g are group g's rows (see
// GroupLayout) and B is [G, K, N] (any strides: weights stored [G, N, K] are the forward's "NT";
// stored [G, K, N], the input gradient dA_g = dD_g * W_g). Types and scales as gemm() takes them
// (gemm.h), with per-group B scales: scale_b's batch is G, A's scales cover A's rows (M_total or
// [G, max_m]). options.beta must be 0. A and B must be TMA-addressable: 16-byte-aligned bases and
// strides, FP8 A K-major; FP8 B that is not K-major (an input gradient's weights as they lie) is
// first copied K-major, each group's, into the stream's workspace (a capture cannot grow it: make
// one call of the size before). options.max_sms caps the SMs the kernel runs on.
// 4-bit weights (MoE experts in int4 or MXFP4): B u4 or e2m1, [G, K, N] with K contiguous (the
// checkpoint's [G, N, K/2] bytes), with scale_b and its zero points as gemm() takes them for one
// matrix (gemm.h), batched by group ([G, ceil(K/group), N]); A bf16 or f16, or e4m3 with scale_a
// none, tensor, rowwise, 1x128 blocks, or mx exponents against weights in groups of 32 (e2m1, u4
// with group 32), each covering A's rows as for 16-bit weights; or e2m1 (MXFP4 activations, FP4 x
// FP4) with mx exponents against weights in groups of 32, widened to e4m3 in the stream's scratch
// first, as gemm() does; a fused epilogue
// (options.epilogue) as with 16-bit weights, its tensors in D's orientation ([G, 1, N] one a
// group, [M_total, 1] or masked [G, max_m, 1] one a token). The kernel runs them transposed,
// each group's tokens as columns, and hands the epilogue D's element: a group with no tokens reads
// none of its weights.
// Weights or tokens TMA cannot read as they lie (K not a multiple of 32 for the packed bytes) are
// first copied into the stream's workspace, every call. Throws gemmkit::Error naming the argument
// at fault.
void grouped_gemm(const TensorView& a, const TensorView& b, const TensorView& d, const GroupSizes& sizes,
                  const GemmOptions& options = {});

// The weight gradient of grouped_gemm's contiguous groups: d_g = alpha * x_g^T y_g + beta * C_g for
// every group g, contracting over the group's own rows: x is [M_total, P] and y [M_total, Q], the
// groups' rows one after another as `sizes` (contiguous: G cumulative ends) says; d is [G, P, Q]
// (for weights stored [G, N, K]: x = dD [M_total, N], y = A [M_total, K]; for weights stored
// [G, K, N], x = A and y = dD). options.c (beta != 0) may be d itself, to accumulate. An empty group
// gives alpha * 0 + beta * C_g (zeros, or C_g as it was). d bf16, f16 or f32. 16-bit x and y with P
// and Q contiguous (x's and y's rows aligned for TMA); or FP8 (e4m3, e5m2, any mix, any strides),
// which is first copied, each group's tokens from a multiple of 128 on, into the stream's workspace
// (as grouped_gemm's FP8 B), with tensor or rowwise scales as gemm() takes them for A = x^T
// (P x M_total) and B = y: options.scale_a [1, 1] or [P, 1], scale_b [1, 1] or [1, Q], or one set a
// group, [G, 1, 1], [G, P, 1] and [G, 1, Q] (block scales along the tokens would straddle groups).
// Throws gemmkit::Error naming the argument.
void grouped_gemm_wgrad(const TensorView& x, const TensorView& y, const TensorView& d, const GroupSizes& sizes,
                        const GemmOptions& options = {});

}  // namespace gemmkit
