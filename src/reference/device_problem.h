// A GEMM problem with its own device buffers: random inputs, poisoned output, and a check
// against the double-precision GPU reference. Shared by the GPU tests, `verify` and `bench`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/problem.h"
#include "gemmkit/gemm.h"
#include "reference/compare.h"

namespace gemmkit::reference {

struct ProblemSpec {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  std::string layout = "NT";  // row-major convention, see problem.h
  DType in = DType::bf16, out = DType::bf16;  // out e4m3: quantised in 1x128 blocks (GemmOptions::scale_d)
  std::optional<DType> in_b;  // B's type where it differs from A's (e.g. e4m3 x e5m2)
  // Scales of FP8 inputs (and of MXFP4 A), random in [0.5, 2) (mx: powers of two from 1/4 to
  // 2), shaped as the mode asks (see gemmkit/gemm.h), batched with the operands, row-major unless
  // scales_col_major. Block scales of A cover 1 or 128 rows, those of B 128 or 1 columns.
  ScaleMode scale_a = ScaleMode::none, scale_b = ScaleMode::none;
  int64_t scale_a_block_rows = 1, scale_b_block_cols = 128;
  bool scales_col_major = false;
  // A's scales' layout where it differs from scales_col_major's: W4A8 (e4m3 A against 4-bit B)
  // with A's 1x128 scales M-contiguous, as quantize() lays them out, beside N-contiguous group
  // scales.
  std::optional<bool> scale_a_col_major;
  int64_t pad_scales = 0;  // extra elements in the scale tensors' leading dimension
  // 4-bit weights (in_b u4 or e2m1 against a bf16, f16, e4m3 (W4A8, with scale_a as for FP8) or
  // e2m1 A; scale_b group or mx): random codes (random bytes: every code), B
  // K-contiguous (layout ?T only), strides {1, ld} with ld K rounded up to even (align_leading: to
  // 32 elements, 16 bytes) plus pad_b; pad_b and offset_b even (two elements a byte). Group scales
  // of group_scale_dtype() random in [0.5, 2), mx ones 2^-2 to 2^1, shaped [ceil(K/group), N] (mx:
  // group 32) N-contiguous, or [N, ceil(K/group)] viewed transposed where scales_col_major; with
  // `zeros` (mode group only), zero points of the scales' type, layout and shape, random integers
  // 0 to 15 (with fractional_zeros, one in five plus a half). A group at least K is per-channel.
  // See gemmkit/gemm.h.
  // MXFP4 activations (in e2m1, with scale_a mx, against any B; gemmkit takes them against 4-bit
  // weights in groups of 32): random codes likewise (every code, never all of the view +-0), A
  // K-contiguous (layout N? only), strides {ld, 1} with ld as B's from pad_a (pad_a and offset_a
  // even), poisoned as B's where nan_outside; its exponents mx scales as above ([M, ceil(K/32)],
  // 2^-2 to 2^1). u4 A, and e2m1 A with another scale_a, are refused.
  int64_t group = 128;
  bool zeros = false;
  bool fractional_zeros = false;
  // The group scales' (and zero points') type, bf16 or f16. Unset: A's type where A is 16-bit
  // (the only choice there), bf16 where A is FP8 or e2m1 (which leave it free).
  std::optional<DType> group_scale_type;
  float input_lo = -1.0f;  // A and B are uniform in [input_lo, 1): 0 makes every product positive
  float alpha = 1.0f, beta = 0.0f;
  bool c_is_d = false;     // beta * D accumulates in place
  bool d_col_major = false;
  // Extra elements in each operand's leading dimension (odd values break 16-byte alignment)
  // and elements added to its base pointer (likewise).
  int64_t pad_a = 0, pad_b = 0, pad_d = 0;
  int64_t offset_a = 0, offset_b = 0, offset_d = 0;
  // Round every leading dimension up to a multiple of 8 elements (16 bytes in bf16), so TMA
  // can address operands whose M, N or K is odd.
  bool align_leading = false;
  // NaN in A's and B's buffers outside their views (before the base, in each leading dimension's
  // padding): none of it may reach D.
  bool nan_outside = false;

  DType b_type() const { return in_b.value_or(in); }
  DType group_scale_dtype() const { return group_scale_type.value_or(is_fp8(in) || is_4bit(in) ? DType::bf16 : in); }
  std::string describe() const;
  // Throws gemmkit::Error(invalid_argument) where an operand is too large for 64-bit
  // addressing (check_addressable in core/problem.h), naming the sizes.
  void check_addressable() const;
};

// The type of scales in `mode`: ue8m0 for mx; for group (4-bit B's) group_scale_dtype(); f32
// otherwise.
DType scale_dtype(const ProblemSpec& spec, ScaleMode mode);

// Rows and columns of A's (is_a) or B's blocks that share a scale in the spec's mode, and the
// rows and columns of the scale tensor that takes.
std::pair<int64_t, int64_t> scale_blocks(const ProblemSpec& spec, bool is_a);
std::pair<int64_t, int64_t> scale_shape(const ProblemSpec& spec, bool is_a);

class DeviceProblem {
 public:
  // Allocates on the current device and fills A, B (and C) with uniform values in [-1, 1) (A and
  // B: [input_lo, 1); 4-bit A and B: random codes). Throws Error(invalid_argument) for a 4-bit
  // operand the spec cannot lay out (see ProblemSpec), group scales of a type other than bf16 or
  // f16, u4 A, or e2m1 A without scale_a mx.
  DeviceProblem(const ProblemSpec& spec, uint64_t seed);
  ~DeviceProblem();
  DeviceProblem(const DeviceProblem&) = delete;
  DeviceProblem& operator=(const DeviceProblem&) = delete;

  TensorView a() const;
  TensorView b() const;
  TensorView d() const;
  GemmOptions options(cudaStream_t stream) const;
  const ProblemSpec& spec() const { return spec_; }

  // Before each run: D's buffer is set to all-ones bytes (NaN in bf16, f16 and f32), or, when
  // C is D, to the original C.
  void prepare_output(cudaStream_t stream);
  // Compares D with the GPU reference (synchronises the stream).
  Comparison check(cudaStream_t stream) const;
  // The same for a problem built on this one's buffers with other views (e.g. a broadcast B).
  Comparison check_against(Problem p, cudaStream_t stream) const;
  // The bytes of D's buffer, copied to the host.
  std::vector<char> copy_output() const;
  // Bytes of device memory this problem holds.
  int64_t bytes() const;

 private:
  struct Buffer {
    void* base = nullptr;
    int64_t elements = 0;  // including the offset; a 4-bit buffer's count bytes (two elements each)
    int64_t offset = 0;    // likewise
    DType type = DType::bf16;
    void* data() const;
  };
  // `offset` elements, then `batch` spans of `span` elements (at least one element in all);
  // throws Error(invalid_argument) past 64-bit addressing.
  Buffer allocate(DType type, int64_t offset, int64_t span, int64_t batch);
  // Elements of D's buffer (its host image `host_d`) outside D's view that differ from what
  // prepare_output left there.
  int64_t changed_outside_d(const std::vector<char>& host_d) const;
  // The scales of operand A (is_a) or B, allocated and filled; mode none: none.
  Scale make_scale(ScaleMode mode, bool is_a, Buffer& buffer, uint64_t seed);
  // B's zero points (spec.zeros), beside scale_b_, of its type, shape and strides.
  void make_zeros(uint64_t seed);

  ProblemSpec spec_;
  TensorView a_, b_, d_, c_;
  Buffer a_buf_, b_buf_, d_buf_, c_buf_, scale_a_buf_, scale_b_buf_, scale_d_buf_, zeros_b_buf_;
  Scale scale_a_, scale_b_, scale_d_;
  uint64_t seed_ = 0;
};

}  // namespace gemmkit::reference
