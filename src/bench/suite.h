// Benchmark suites: plain-text lists of GEMM problems, one `M N K [layout] [dtype] [mode] [batch]`
// a line (4-bit weights in the dtype: `bf16,w4:int4g128`, `e4m3,w4:int4g128`, `e2m1,w4:mxfp4`), or a grouped GEMM,
// `grouped OP G M N K dtype [mode] dist` (4-bit weights too: `grouped masked 128 4 5760 2880
// e4m3,w4:mxfp4 balanced`; bench only: gemmkit bench and python -m gemmkit.bench); `epilogue TEXT`
// lines fuse an epilogue into the lines below them (gemmkit bench only).
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/group_sizes.h"
#include "gemmkit/gemm.h"
#include "gemmkit/tensor.h"

namespace gemmkit::tools {

struct SuiteProblem {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  std::string layout = "NT";  // NN, NT, TN or TT; row-major convention, first letter A, second B
  DType in_dtype = DType::bf16, out_dtype = DType::bf16;
  // B's type where it differs from A's: the other 8-bit type (e4m3 x e5m2), or 4-bit weights
  // (u4 for int4gG, e2m1 for mxfp4) against a bf16, f16 or e4m3 A (W4A8), or against an e2m1 A
  // (MXFP4 activations, FP4 x FP4).
  std::optional<DType> in_b;
  // How both FP8 operands are scaled (gemmkit/gemm.h): tensor unless the line names another
  // mode. 4-bit weights: B's mode, as the format names it (group for int4, mx for mxfp4). None
  // for 16-bit inputs.
  ScaleMode mode = ScaleMode::none;
  // A's scales where they are not `mode`'s: W4A8 lines (e4m3 A against 4-bit B) scale A in
  // rowwise (per token, the default), tensor or block (1x128) mode, f32, or on dense lines with
  // weights in groups of 32 of K (mxfp4, int4g32) in mx mode (1x32 ue8m0 exponents: MXFP8
  // activations); mx on FP4 x FP4 lines (e2m1 A, always); none on every other line (16-bit A is
  // unscaled, FP8 lines scale both operands in `mode`).
  ScaleMode mode_a = ScaleMode::none;
  // 4-bit weights: the K elements of B one scale covers (int4gG: G; mxfp4: 32), and whether u4
  // B has zero points (int4gGz); 0 and false otherwise.
  int64_t group = 0;
  bool zeros = false;
  int line = 0;  // 1-based line in the file; 0 for a problem given on the command line
  // The fused epilogue's text the line is timed with (gemmkit bench), from the `epilogue TEXT`
  // line above it; empty: none.
  std::string epilogue;

  DType b_dtype() const { return in_b.value_or(in_dtype); }
  bool fp8() const;   // A and B are both 8-bit (e4m3 or e5m2)
  bool w4() const;    // B is 4-bit weights (u4 or e2m1; A bf16 or f16, or e4m3 for W4A8)
  bool w4a8() const;  // B is 4-bit weights against an e4m3 A
  bool fp4x4() const; // B is 4-bit weights against an e2m1 A (MXFP4 activations, mode_a mx)
  // What the GEMM reads and writes at the least, in bytes: gemm_bytes() of its sizes and types.
  double bytes() const;
};

// What an M x N x K GEMM over `batch` matrices reads and writes at the least, in bytes: A, B
// and D once each per batch entry, dtype_size() bytes an element, except a 4-bit B (u4, e2m1):
// half a byte an element, plus its scales, ceil(K/group) x N of them, and as many zero points
// where `zeros`. u4 scales (group mode) and zero points are two bytes each (bf16 or f16: A's type
// for 16-bit A, bf16 for an e4m3 A); e2m1's (mx) are one-byte ue8m0, one per 32 of K whatever
// `group` says. FP8 scales (f32, A's of a W4A8 line too) are left out (as gemm_gbps leaves them
// out). An e2m1 A (MXFP4 activations) is counted as an e2m1 B is, M x K: packed codes and a
// ue8m0 exponent per 32 of K. `group` and `zeros` are read for a u4 B only.
double gemm_bytes(int64_t m, int64_t n, int64_t k, int64_t batch, DType a, DType b, DType d, int64_t group = 0,
                  bool zeros = false);

// B's share of gemm_bytes(): one K x N matrix of weights of type `b`, dtype_size() bytes an
// element, or 4-bit (u4, e2m1) packed two a byte with their scales and zero points as gemm_bytes
// counts them.
double weight_bytes(int64_t n, int64_t k, DType b, int64_t group = 0, bool zeros = false);

// Parses one problem from its fields: M, N, K, then optionally layout, dtype, scaling mode and
// batch, in that order. The dtype is IN or IN:OUT: IN is bf16, f16, e4m3, e5m2, A,B (two 8-bit
// types, e.g. e4m3,e5m2) or A,w4:FORMAT (4-bit weights against A bf16 or f16, e4m3: W4A8, or
// e2m1: MXFP4 activations, FP4 x FP4, against mxfp4 or int4g32[z] only);
// OUT is bf16, f16 or f32 (or e4m3, quantised in 1x128 blocks, except with 4-bit weights) and
// defaults to A's type for 16-bit A and to bf16 for 8-bit A. fp16/float16, bfloat16 and
// fp32/float32 are accepted, in any case. FORMAT is
//   int4gG    u4 B, one scale per G of K (group mode), G 32 or a power of two >= 64; the scales
//             are A's type, bf16 for e4m3 A
//   int4gGz   the same with zero points (AWQ's)
//   mxfp4     e2m1 B, one ue8m0 scale per 32 of K (mx mode)
// and holds no colon, so the colon of "w4:" belongs to IN and OUT follows the next one:
// bf16,w4:int4g128, f16,w4:int4g32z:f32, bf16,w4:mxfp4:f16, e4m3,w4:int4g128. 4-bit weights
// need B stored N x K (K-contiguous): layout NT or TT. The mode (tensor, rowwise, block or mx)
// may follow an 8-bit dtype only and defaults to tensor; with 4-bit weights the format sets B's
// mode, and a W4A8 line's mode field, tensor, rowwise, block (1x128) or, where the weights are in
// groups of 32 of K (mxfp4; int4g32 with K > 32), mx (1x32 ue8m0), is A's (mode_a; rowwise by
// default). An e2m1 A is always mx (its mode field, if any, mx), stored M x K (layout NT), packed
// as the weights are; int4g32 weights need K > 32 there too. A field after the dtype that is a number is the batch. `where` prefixes every
// error message, e.g. "dense.txt:12" or "command line". Throws gemmkit::Error(invalid_argument)
// on anything malformed, and on a problem too large for 64-bit addressing (check_addressable in
// core/problem.h).
SuiteProblem parse_problem(const std::vector<std::string>& fields, const std::string& where);

// Parses a whole field as a base-10 integer no smaller than `min`; `what` names it and `where`
// prefixes the error message. Throws gemmkit::Error(invalid_argument) otherwise.
int64_t parse_int(const std::string& field, const char* what, int64_t min, const std::string& where);

// The whitespace-separated fields of one suite line, a `#` comment dropped; none for a blank line.
std::vector<std::string> line_fields(std::string text);

// The passes of a mixture-of-experts layer that a grouped line names (gemmkit/grouped.h):
//   fwd     contiguous forward: A tokens [M, K], weights stored [G, N, K], D [M, N]
//   dgrad   contiguous input gradient: A = dD [M, N], the same weights read as [G, N, K] with N
//           the contraction (N-major), D = dA [M, K]
//   wgrad   weight gradient dW_g [N, K] = dD_g^T X_g over each group's M_g rows (no kernel yet)
//   masked  masked forward: A [G, max_m, K], D [G, max_m, N], a row count per group
enum class GroupedOp { fwd, dgrad, wgrad, masked };
std::string_view grouped_op_name(GroupedOp op);

// One `grouped` line.
struct GroupedProblem {
  GroupedOp op = GroupedOp::fwd;
  int64_t m = 0, n = 0, k = 0;  // the line's M (masked: max_m), N and K
  GroupDist dist;
  std::vector<int64_t> rows;  // each group's rows, from dist (split_rows, masked: masked_rows)
  // The line's types, mode and line number, on the dense GEMM that does every group's work at
  // once, as a dense line would give it: all rows x N x K NT (fwd, masked), M x K x N NN (dgrad:
  // dD times the weights stored [N, K]), N x K x M TN (wgrad: dD^T times X).
  SuiteProblem dense;

  int64_t groups() const { return int64_t(rows.size()); }
  // What every group's GEMM reads and writes at the least: the rows of A and D the groups own
  // (MXFP4 activations packed with their exponents, as gemm_bytes counts an e2m1 A), and the
  // weights of each group that has rows (4-bit ones packed, with their scales and zero points, as
  // weight_bytes counts them; FP8 scales left out), in bytes.
  double bytes() const;
};

// Parses a grouped line's fields: `grouped`, then OP (fwd, dgrad, wgrad, masked), G (1 to
// kMaxGroups of gemmkit/grouped.h), M (masked: max_m), N, K, a dtype as parse_problem() takes
// it, for FP8 optionally a mode (tensor, rowwise or block: A 1x128, B 128x128 per group), and the
// distribution (parse_dist). 4-bit weights (A,w4:FORMAT, e.g. bf16,w4:mxfp4 or
// e4m3,w4:int4g128z) go on fwd and masked lines only, each group's weights as a dense line's
// [N, K] (the format sets B's scales, a set per group); a W4A8 line's mode field is A's (tensor,
// rowwise, block, or against weights in groups of 32 of K, mxfp4 or int4g32 with K > 32, mx;
// rowwise by default), as on dense lines; e2m1 activations (MXFP4, FP4 x FP4: e2m1,w4:mxfp4 or
// e2m1,w4:int4g32[z] with K > 32) as on dense lines too, their mode mx (the field may name it).
// Errors as parse_problem()'s.
GroupedProblem parse_grouped(const std::vector<std::string>& fields, const std::string& where);

// A distribution as a line names it: balanced, skew:R (R > 0), zipf:S (S >= 0), random:SEED or
// routed:SEED (an integer >= 0), in any case. Throws gemmkit::Error(invalid_argument) prefixed by `where`.
GroupDist parse_dist(const std::string& field, const std::string& where);

// The distribution's field, canonical: "balanced", "skew:10", "zipf:1.2", "random:7".
std::string dist_spec(const GroupDist& dist);

// A suite's lines in file order, dense and grouped apart.
struct Suite {
  std::string name;  // what error messages call the file
  std::vector<SuiteProblem> dense;
  std::vector<GroupedProblem> grouped;
};

// Parses a whole suite, dense and grouped lines; `name` is used in error messages
// ("<name>:<line>: ..."). A line `epilogue TEXT` (the fused epilogue's text form, gemmkit/gemm.h)
// applies to the lines below it, dense and grouped (GroupedProblem::dense), up to the next such
// line; `epilogue none` ends it.
Suite parse_bench_suite(std::istream& in, const std::string& name);

// The suite's dense problems; throws gemmkit::Error(invalid_argument) naming its first grouped
// line, which only gemmkit bench and python -m gemmkit.bench run, or its first line under an
// epilogue, which only gemmkit bench times.
std::vector<SuiteProblem> dense_lines(const Suite& suite);

// Parses a whole suite of dense lines only: dense_lines(parse_bench_suite(in, name)).
std::vector<SuiteProblem> parse_suite(std::istream& in, const std::string& name);

// Reads and parses the suite at `path`; throws gemmkit::Error(io_error) if it cannot be read.
Suite load_bench_suite(const std::string& path);
std::vector<SuiteProblem> load_suite(const std::string& path);  // dense lines only

// The dtype field, canonical: "bf16" when 16-bit input and output types match, else "IN:OUT",
// e.g. "bf16:f32"; FP8 always as "IN:OUT", e.g. "e4m3:bf16" or "e4m3,e5m2:f32"; 4-bit weights
// as "A,w4:FORMAT", with ":OUT" only where OUT is not the default (A's type, bf16 for e4m3 A):
// "bf16,w4:int4g128", "f16,w4:int4g64z:f32", "bf16,w4:mxfp4", "e4m3,w4:int4g128",
// "e2m1,w4:mxfp4" (bf16 D the default for e2m1 A too). Parses back
// as given.
std::string dtype_spec(const SuiteProblem& p);

// The dense GEMMs a line with 4-bit weights is set against (gemmkit bench: BenchRecord::dense16_us
// and the rest; a grouped row's stand-in baseline, grouped_stand_in): dense16_problem is its
// shape, layout, batch and output type with both operands in A's 16-bit type (bf16 for a W4A8
// line's e4m3 A or an FP4 x FP4 line's e2m1 one), plain, without the epilogue; fp8_problem the
// same with both operands e4m3,
// per-tensor scales, or for a W4A8 line scaled as its A is, B in the mode cuBLASLt pairs with A's
// (rowwise: per channel; block: 1x128 A, 128x128 B; mx: both 1x32 along K, MXFP8, which cuBLASLt
// does not run on Hopper, so that bench times its per-tensor stand-in), for an FP4 x FP4 line
// in mx (A's mode) likewise.
SuiteProblem dense16_problem(const SuiteProblem& sp);
SuiteProblem fp8_problem(const SuiteProblem& sp);

// The dtype and, for FP8, the mode, as a suite line has them: "bf16", "e4m3:bf16 block",
// "bf16,w4:mxfp4" (4-bit weights: the dtype alone, which names B's mode), "e4m3,w4:int4g128
// rowwise", "e4m3,w4:mxfp4 mx" (W4A8: A's mode after it), "e2m1,w4:mxfp4 mx" (FP4 x FP4: mx).
std::string type_spec(const SuiteProblem& p);

}  // namespace gemmkit::tools
