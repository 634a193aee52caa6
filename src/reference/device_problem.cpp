#include "reference/device_problem.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <sstream>
#include <utility>
#include <stdexcept>
#include <vector>

#include "api/validate.h"
#include "core/checked_math.h"
#include "gemmkit/error.h"
#include "reference/gpu_reference.h"
#include "reference/host_numeric.h"
#include "runtime/driver.h"
#include "runtime/utility_kernels.h"

namespace gemmkit::reference {
namespace {

// Strides (row, col) of a rows x cols operand stored as written (row-major) or transposed.
struct Strides {
  int64_t row, col, span;
};
// Sizes within 64-bit addressing (ProblemSpec::check_addressable) keep the rounding exact; a
// padding that takes the span past it is an error.
Strides operand_strides(int64_t rows, int64_t cols, bool transposed, int64_t pad, bool align) {
  const int64_t inner = transposed ? rows : cols, outer = transposed ? cols : rows;
  const std::optional<int64_t> leading = checked_sum(align ? (inner + 7) / 8 * 8 : inner, pad);
  const std::optional<int64_t> span = leading ? checked_product({outer, *leading}) : std::nullopt;
  if (!span) {
    throw Error(ErrorCode::invalid_argument, "a " + std::to_string(rows) + " x " + std::to_string(cols) +
                                                 " operand padded by " + std::to_string(pad) +
                                                 " elements a row overflows 64-bit addressing");
  }
  return transposed ? Strides{1, *leading, *span} : Strides{*leading, 1, *span};
}

// Strides of a 4-bit operand, K contiguous, two elements a byte: weights B (K x N) {1, ld}, MXFP4
// activations A (M x K) {ld, 1}, ld K rounded up to even (align: to 32, 16 bytes) plus the
// operand's pad, so that every column of B (row of A) starts on a byte.
Strides packed_strides(const ProblemSpec& spec, bool is_a) {
  const char* operand = is_a ? "A" : "B";
  const char letter = spec.layout[is_a ? 0 : 1], k_major = is_a ? 'N' : 'T';
  if (letter != k_major) {
    throw Error(ErrorCode::invalid_argument,
                spec.describe() + ": layout " + spec.layout + " stores " + operand + (is_a ? " M" : " N") +
                    "-contiguous; 4-bit " + operand + " is K-contiguous (" +
                    (is_a ? "[M, K/2] bytes): layout N" + spec.layout.substr(1, 1)
                          : "a checkpoint's [N, K/2] bytes): layout " + spec.layout.substr(0, 1) + "T"));
  }
  const int64_t pad = is_a ? spec.pad_a : spec.pad_b, offset = is_a ? spec.offset_a : spec.offset_b;
  if (pad % 2 != 0 || offset % 2 != 0) {
    const std::string which = is_a ? "_a " : "_b ";
    throw Error(ErrorCode::invalid_argument, spec.describe() + ": pad" + which + std::to_string(pad) + " and offset" +
                                                 which + std::to_string(offset) + " must be even for 4-bit " + operand +
                                                 " (two elements a byte, each " + (is_a ? "row" : "column") +
                                                 " from a byte)");
  }
  const int64_t round = spec.align_leading ? 32 : 2;
  const std::optional<int64_t> leading = checked_sum((spec.k + round - 1) / round * round, pad);
  const std::optional<int64_t> span = leading ? checked_product({is_a ? spec.m : spec.n, *leading}) : std::nullopt;
  if (!span) {
    throw Error(ErrorCode::invalid_argument, spec.describe() + ": 4-bit " + operand + " padded by " +
                                                 std::to_string(pad) + " elements a " + (is_a ? "row" : "column") +
                                                 " overflows 64-bit addressing");
  }
  return is_a ? Strides{*leading, 1, *span} : Strides{1, *leading, *span};
}

// Sets every element of `buffer` outside its view to all ones (NaN in every float type): the
// `offset` elements before the view, and each run's padding up to the leading dimension.
void poison_outside(void* base, int64_t offset, DType type, int64_t rows, int64_t cols, bool transposed,
                    const Strides& s, int64_t batch) {
  const size_t bytes = dtype_size(type);
  runtime::check(cudaMemset(base, 0xff, size_t(offset) * bytes), "poison before the view");
  const int64_t inner = transposed ? rows : cols, runs = (transposed ? cols : rows) * batch;
  const int64_t leading = transposed ? s.col : s.row;
  if (leading == inner || runs == 0) return;
  char* first_pad = static_cast<char*>(base) + (offset + inner) * int64_t(bytes);
  runtime::check(cudaMemset2D(first_pad, size_t(leading) * bytes, 0xff, size_t(leading - inner) * bytes, size_t(runs)),
                 "poison the padding");
}

// What DeviceProblem cannot build around 4-bit operands (packed_strides checks their layouts). It
// builds some problems gemmkit rejects (e2m1 with group scales, u4 with mx ones, group 48, e5m2 A
// with u4 B, e2m1 A against 16-bit or FP8 B or u4 in groups of 128, ...), for tests of that.
void check_4bit_spec(const ProblemSpec& spec) {
  auto fail = [&](const std::string& why) { throw Error(ErrorCode::invalid_argument, spec.describe() + ": " + why); };
  if (spec.in == DType::u4) {
    fail("u4 A; 4-bit weights are B's (in_b u4 or e2m1, against a bf16, f16, e4m3 or e2m1 A), 4-bit activations e2m1");
  }
  if (spec.in == DType::e2m1 && spec.scale_a != ScaleMode::mx) {
    fail("e2m1 A with scale_a " + std::string(scale_mode_name(spec.scale_a)) +
         "; MXFP4 activations take scale_a mx (a ue8m0 exponent per 32 of K)");
  }
  if (spec.scale_a == ScaleMode::group) fail("scale_a group; group scales are 4-bit B's");
  if (spec.scale_b == ScaleMode::group) {
    if (spec.group < 1) fail("group " + std::to_string(spec.group) + "; expected at least 1");
    // Zero points are written as 16-bit words (make_zeros).
    const DType type = spec.group_scale_dtype();
    if (type != DType::bf16 && type != DType::f16) {
      fail("group scales of type " + std::string(dtype_name(type)) +
           " (A's where group_scale_type is unset); expected bf16 or f16");
    }
  }
  if (spec.zeros && spec.scale_b != ScaleMode::group) {
    fail("zero points go with group scales (scale_b group), not mode " + std::string(scale_mode_name(spec.scale_b)));
  }
}

// A 4-bit operand's buffer (packed_strides): `runs` runs of k elements (A's rows, B's columns,
// over the batch), ld apart, after `offset` elements; offset and ld even, so each run starts on a
// byte.
struct PackedRuns {
  int64_t offset, k, runs, ld;
  int64_t offset_bytes() const { return offset / 2; }
  int64_t ld_bytes() const { return ld / 2; }
  int64_t bytes() const { return offset_bytes() + runs * ld_bytes(); }
};

std::vector<unsigned char> copy_bytes_to_host(const void* base, int64_t bytes, const char* what) {
  std::vector<unsigned char> host(size_t(std::max<int64_t>(bytes, 0)));
  runtime::check(cudaMemcpy(host.data(), base, host.size(), cudaMemcpyDeviceToHost), what);
  return host;
}

// poison_outside for a 4-bit operand: the bytes before the view and those past each run's k
// elements set to all ones (code 15: u4 7 or more scales from zero, e2m1 -6), and for an odd k
// the high nibble of each run's last byte.
void poison_outside_4bit(void* base, const PackedRuns& r) {
  const int64_t used_bytes = (r.k + 1) / 2;
  runtime::check(cudaMemset(base, 0xff, size_t(r.offset_bytes())), "poison before the view");
  if (r.runs == 0) return;
  char* first_pad = static_cast<char*>(base) + r.offset_bytes() + used_bytes;
  if (r.ld_bytes() > used_bytes) {
    const size_t pad_bytes = size_t(r.ld_bytes() - used_bytes);
    runtime::check(cudaMemset2D(first_pad, size_t(r.ld_bytes()), 0xff, pad_bytes, size_t(r.runs)),
                   "poison the padding");
  }
  if (r.k % 2 == 0) return;
  // Half a byte: through the host, byte by byte (tests' sizes).
  std::vector<unsigned char> host = copy_bytes_to_host(base, r.bytes(), "copy a 4-bit operand to poison it");
  for (int64_t run = 0; run < r.runs; ++run) host[size_t(r.offset_bytes() + run * r.ld_bytes() + r.k / 2)] |= 0xF0;
  runtime::check(cudaMemcpy(base, host.data(), host.size(), cudaMemcpyHostToDevice), "poison the last nibbles");
}

// Random e2m1 codes are +-0 one time in eight, so a tiny operand could hold nothing else: where
// every code of the view is zero, its first element becomes 1.0 (code 2, the low nibble of the
// first byte). A test of MXFP4 activations then always multiplies something.
void make_e2m1_nonzero(void* base, const PackedRuns& r) {
  if (r.runs == 0 || r.k == 0) return;
  const std::vector<unsigned char> host = copy_bytes_to_host(base, r.bytes(), "copy a 4-bit operand");
  for (int64_t run = 0; run < r.runs; ++run) {
    for (int64_t c = 0; c < r.k; ++c) {
      const unsigned char byte = host[size_t(r.offset_bytes() + run * r.ld_bytes() + c / 2)];
      if (((byte >> (4 * (c % 2))) & 0x7) != 0) return;
    }
  }
  const unsigned char first = (host[size_t(r.offset_bytes())] & 0xF0) | 0x2;
  runtime::check(cudaMemcpy(static_cast<unsigned char*>(base) + r.offset_bytes(), &first, 1, cudaMemcpyHostToDevice),
                 "make an e2m1 operand nonzero");
}

}  // namespace

std::string ProblemSpec::describe() const {
  std::ostringstream s;
  s << m << "x" << n << "x" << k;
  if (batch != 1) s << " batch " << batch;
  s << " " << layout << " " << dtype_name(in);
  if (b_type() != in) s << "*" << dtype_name(b_type());
  s << "->" << dtype_name(out);
  if (scale_a != ScaleMode::none) {
    s << " scale_a " << scale_mode_name(scale_a);
    if (scale_a == ScaleMode::block) s << " " << scale_a_block_rows << "x128";
    if (scale_a_col_major && *scale_a_col_major != scales_col_major) s << (*scale_a_col_major ? " col-major" : " row-major");
  }
  if (scale_b != ScaleMode::none) {
    s << " scale_b " << scale_mode_name(scale_b);
    if (scale_b == ScaleMode::block) s << " 128x" << scale_b_block_cols;
    if (scale_b == ScaleMode::group) {
      s << " " << group << (group >= k ? " (per-channel)" : "");
      if (group_scale_dtype() != in) s << " " << dtype_name(group_scale_dtype()) << " scales";
    }
  }
  if (zeros) s << (fractional_zeros ? " fractional zeros" : " zeros");
  if (scales_col_major) s << " scales col-major";
  if (pad_scales) s << " scales pad " << pad_scales;
  if (beta != 0.0f) s << " beta " << beta << (c_is_d ? " (C=D)" : "");
  if (d_col_major) s << " D col-major";
  if (pad_a || pad_b || pad_d) s << " pad " << pad_a << "/" << pad_b << "/" << pad_d;
  if (offset_a || offset_b || offset_d) s << " offset " << offset_a << "/" << offset_b << "/" << offset_d;
  if (nan_outside) s << " NaN outside";
  if (align_leading) s << " aligned-ld";
  if (input_lo != -1.0f) s << " inputs from " << input_lo;
  return s.str();
}

void* DeviceProblem::Buffer::data() const { return static_cast<char*>(base) + offset * dtype_size(type); }

void ProblemSpec::check_addressable() const {
  const int scale_bytes = scale_a != ScaleMode::none || scale_b != ScaleMode::none ? 4 : 1;
  gemmkit::check_addressable(m, n, k, batch, std::max({dtype_size(in), dtype_size(b_type()), dtype_size(out), scale_bytes}));
}

DeviceProblem::Buffer DeviceProblem::allocate(DType type, int64_t offset, int64_t span, int64_t batch) {
  Buffer buffer;
  buffer.type = type;
  buffer.offset = offset;
  const std::optional<int64_t> elements = checked_product({span, batch});
  const std::optional<int64_t> total = elements ? checked_sum(offset, std::max<int64_t>(*elements, 1)) : std::nullopt;
  if (!total || !checked_product({*total, dtype_size(type)})) {
    throw Error(ErrorCode::invalid_argument, spec_.describe() + ": a buffer of " + std::to_string(batch) + " x " +
                                                 std::to_string(span) + " elements after " + std::to_string(offset) +
                                                 " overflows 64-bit addressing");
  }
  buffer.elements = *total;
  runtime::check(cudaMalloc(&buffer.base, size_t(buffer.elements) * dtype_size(type)), "cudaMalloc");
  return buffer;
}

DeviceProblem::DeviceProblem(const ProblemSpec& spec, uint64_t seed) : spec_(spec), seed_(seed) {
  if (spec.layout.size() != 2) throw std::invalid_argument("layout must be two letters: " + spec.layout);
  spec.check_addressable();
  const bool a_t = spec.layout[0] == 'T', b_t = spec.layout[1] == 'T';
  const bool a_4bit = is_4bit(spec.in), b_4bit = is_4bit(spec.b_type());
  check_4bit_spec(spec);  // before anything is allocated
  const Strides sa =
      a_4bit ? packed_strides(spec, true) : operand_strides(spec.m, spec.k, a_t, spec.pad_a, spec.align_leading);
  const Strides sb =
      b_4bit ? packed_strides(spec, false) : operand_strides(spec.k, spec.n, b_t, spec.pad_b, spec.align_leading);
  const Strides sd = operand_strides(spec.m, spec.n, spec.d_col_major, spec.pad_d, spec.align_leading);
  // A 4-bit operand's buffer in bytes: offset and span are even (packed_strides).
  auto allocate_input = [&](DType type, int64_t offset, int64_t span) {
    return is_4bit(type) ? allocate(type, offset / 2, span / 2, spec.batch) : allocate(type, offset, span, spec.batch);
  };
  a_buf_ = allocate_input(spec.in, spec.offset_a, sa.span);
  b_buf_ = allocate_input(spec.b_type(), spec.offset_b, sb.span);
  d_buf_ = allocate(spec.out, spec.offset_d, sd.span, spec.batch);
  auto view = [&](const Buffer& buffer, int64_t rows, int64_t cols, const Strides& s) {
    return spec.batch == 1 ? TensorView::matrix(buffer.data(), buffer.type, rows, cols, s.row, s.col)
                           : TensorView::batched(buffer.data(), buffer.type, spec.batch, rows, cols, s.span, s.row, s.col);
  };
  a_ = view(a_buf_, spec.m, spec.k, sa);
  b_ = view(b_buf_, spec.k, spec.n, sb);
  d_ = view(d_buf_, spec.m, spec.n, sd);
  // A 4-bit fill counts elements: two a byte, random bits (every code).
  auto fill_input = [&](const Buffer& buffer, uint64_t fill_seed) {
    const int64_t elements = is_4bit(buffer.type) ? 2 * buffer.elements : buffer.elements;
    runtime::fill_random(buffer.base, buffer.type, elements, fill_seed, spec.input_lo, 1.0f, nullptr);
  };
  fill_input(a_buf_, seed);
  fill_input(b_buf_, seed + 1);
  // The runs of a 4-bit A (its rows, K contiguous) and B (its columns).
  const PackedRuns a_runs{spec.offset_a, spec.k, spec.m * spec.batch, sa.row};
  const PackedRuns b_runs{spec.offset_b, spec.k, spec.n * spec.batch, sb.col};
  if (spec.in == DType::e2m1) {
    runtime::check(cudaDeviceSynchronize(), "filling inputs");
    make_e2m1_nonzero(a_buf_.base, a_runs);
  }
  if (spec.nan_outside) {
    runtime::check(cudaDeviceSynchronize(), "filling inputs");
    if (a_4bit) {
      poison_outside_4bit(a_buf_.base, a_runs);
    } else {
      poison_outside(a_buf_.base, spec.offset_a, spec.in, spec.m, spec.k, a_t, sa, spec.batch);
    }
    if (b_4bit) {
      poison_outside_4bit(b_buf_.base, b_runs);
    } else {
      poison_outside(b_buf_.base, spec.offset_b, spec.b_type(), spec.k, spec.n, b_t, sb, spec.batch);
    }
  }
  scale_a_ = make_scale(spec.scale_a, true, scale_a_buf_, seed + 3);
  scale_b_ = make_scale(spec.scale_b, false, scale_b_buf_, seed + 4);
  if (spec.scale_b == ScaleMode::group) scale_b_.group = spec.group;
  make_zeros(seed + 5);
  if (spec.out == DType::e4m3) {  // D's scales, dense: [batch,] M x ceil(N/128)
    const int64_t blocks = (spec.n + 127) / 128;
    scale_d_buf_ = allocate(DType::f32, 0, spec.m * blocks, spec.batch);
    scale_d_.mode = ScaleMode::block;
    scale_d_.scales = spec.batch == 1 ? TensorView::row_major(scale_d_buf_.data(), DType::f32, spec.m, blocks)
                                      : TensorView::batched(scale_d_buf_.data(), DType::f32, spec.batch, spec.m, blocks,
                                                            spec.m * blocks, blocks, 1);
  }
  if (spec.beta != 0.0f) {
    // C has D's type and strides; with C = D it is also the pristine copy D is reset from.
    c_buf_ = allocate(spec.out, spec.offset_d, sd.span, spec.batch);
    c_ = view(c_buf_, spec.m, spec.n, sd);
    runtime::fill_random(c_buf_.base, spec.out, c_buf_.elements, seed + 2, -1.0f, 1.0f, nullptr);
  }
  runtime::check(cudaDeviceSynchronize(), "filling inputs");
}

std::pair<int64_t, int64_t> scale_blocks(const ProblemSpec& spec, bool is_a) {
  const ScaleMode mode = is_a ? spec.scale_a : spec.scale_b;
  const int64_t rows = is_a ? spec.m : spec.k, cols = is_a ? spec.k : spec.n;
  // Blocks along the operand's rows and columns (A: M x K, B: K x N), as gemmkit/gemm.h lists them.
  int64_t block_rows = std::max<int64_t>(rows, 1), block_cols = std::max<int64_t>(cols, 1);
  if (mode == ScaleMode::rowwise) (is_a ? block_rows : block_cols) = 1;
  if (mode == ScaleMode::block) {
    block_rows = is_a ? spec.scale_a_block_rows : 128;
    block_cols = is_a ? 128 : spec.scale_b_block_cols;
  }
  if (mode == ScaleMode::mx) {
    block_rows = is_a ? 1 : 32;
    block_cols = is_a ? 32 : 1;
  }
  if (mode == ScaleMode::group) {  // `group` along K (at least K: one scale a column or row)
    block_rows = is_a ? 1 : std::max<int64_t>(spec.group, 1);
    block_cols = is_a ? std::max<int64_t>(spec.group, 1) : 1;
  }
  return {block_rows, block_cols};
}

DType scale_dtype(const ProblemSpec& spec, ScaleMode mode) {
  if (mode == ScaleMode::mx) return DType::ue8m0;
  if (mode == ScaleMode::group) return spec.group_scale_dtype();
  return DType::f32;
}

std::pair<int64_t, int64_t> scale_shape(const ProblemSpec& spec, bool is_a) {
  const int64_t rows = is_a ? spec.m : spec.k, cols = is_a ? spec.k : spec.n;
  const auto [block_rows, block_cols] = scale_blocks(spec, is_a);
  return {(rows + block_rows - 1) / block_rows, (cols + block_cols - 1) / block_cols};
}

Scale DeviceProblem::make_scale(ScaleMode mode, bool is_a, Buffer& buffer, uint64_t seed) {
  if (mode == ScaleMode::none) return {};
  const auto [scale_rows, scale_cols] = scale_shape(spec_, is_a);
  const DType type = scale_dtype(spec_, mode);
  const bool col_major = is_a ? spec_.scale_a_col_major.value_or(spec_.scales_col_major) : spec_.scales_col_major;
  const Strides st = operand_strides(scale_rows, scale_cols, col_major, spec_.pad_scales, false);
  buffer = allocate(type, 0, st.span, spec_.batch);
  if (mode == ScaleMode::mx) {
    runtime::fill_random(buffer.base, type, buffer.elements, seed, 0.25f, 4.0f, nullptr);
  } else {
    runtime::fill_random(buffer.base, type, buffer.elements, seed, 0.5f, 2.0f, nullptr);
  }
  Scale scale;
  scale.mode = mode;
  scale.scales = spec_.batch == 1
                     ? TensorView::matrix(buffer.data(), type, scale_rows, scale_cols, st.row, st.col)
                     : TensorView::batched(buffer.data(), type, spec_.batch, scale_rows, scale_cols, st.span, st.row, st.col);
  return scale;
}

void DeviceProblem::make_zeros(uint64_t seed) {
  if (!spec_.zeros) return;
  // The scales' type, element count and views, over a buffer of its own.
  const DType type = scale_b_buf_.type;
  zeros_b_buf_ = allocate(type, 0, scale_b_buf_.elements, 1);
  std::vector<uint16_t> host(size_t(zeros_b_buf_.elements));
  std::mt19937_64 random(seed);
  for (uint16_t& z : host) {
    // Integers (as AWQ's), exact in bf16 and f16; halves where asked (the kernel's other path).
    const float value = float(random() % 16) + (spec_.fractional_zeros && random() % 5 == 0 ? 0.5f : 0.0f);
    z = type == DType::bf16 ? float_to_bf16(value) : float_to_f16(value);
  }
  runtime::check(cudaMemcpy(zeros_b_buf_.base, host.data(), host.size() * sizeof(uint16_t), cudaMemcpyHostToDevice),
                 "copy zero points");
  TensorView zeros = scale_b_.scales;
  zeros.data = zeros_b_buf_.data();
  scale_b_.zeros = zeros;
}

DeviceProblem::~DeviceProblem() {
  for (Buffer* b : {&a_buf_, &b_buf_, &d_buf_, &c_buf_, &scale_a_buf_, &scale_b_buf_, &scale_d_buf_, &zeros_b_buf_}) {
    if (b->base) cudaFree(b->base);
  }
}

TensorView DeviceProblem::a() const { return a_; }
TensorView DeviceProblem::b() const { return b_; }
TensorView DeviceProblem::d() const { return d_; }

GemmOptions DeviceProblem::options(cudaStream_t stream) const {
  GemmOptions o;
  o.alpha = spec_.alpha;
  o.beta = spec_.beta;
  o.stream = stream;
  if (spec_.beta != 0.0f) o.c = spec_.c_is_d ? d_ : c_;
  o.scale_a = scale_a_;
  o.scale_b = scale_b_;
  o.scale_d = scale_d_;
  return o;
}

void DeviceProblem::prepare_output(cudaStream_t stream) {
  const size_t bytes = size_t(d_buf_.elements) * dtype_size(spec_.out);
  if (spec_.c_is_d) {
    runtime::check(cudaMemcpyAsync(d_buf_.base, c_buf_.base, bytes, cudaMemcpyDeviceToDevice, stream), "copy C to D");
  } else {
    runtime::check(cudaMemsetAsync(d_buf_.base, 0xff, bytes, stream), "poison D");
  }
}

int64_t DeviceProblem::bytes() const {
  int64_t total = 0;
  for (const Buffer* b : {&a_buf_, &b_buf_, &d_buf_, &c_buf_, &scale_a_buf_, &scale_b_buf_, &zeros_b_buf_}) {
    total += b->elements * dtype_size(b->type);
  }
  return total;
}

Comparison DeviceProblem::check(cudaStream_t stream) const {
  GemmOptions reference_options = options(stream);
  if (spec_.beta != 0.0f) reference_options.c = c_;  // the original C, also when C is D
  return check_against(validate_gemm(a_, b_, d_, reference_options), stream);
}

std::vector<char> DeviceProblem::copy_output() const {
  std::vector<char> host(static_cast<size_t>(d_buf_.elements) * dtype_size(spec_.out));
  runtime::check(cudaMemcpy(host.data(), d_buf_.base, host.size(), cudaMemcpyDeviceToHost), "copy D");
  return host;
}

Comparison DeviceProblem::check_against(Problem p, cudaStream_t stream) const {
  const int64_t count = p.batch * p.m * p.n;
  double* device_ref = nullptr;
  runtime::check(cudaMalloc(reinterpret_cast<void**>(&device_ref), size_t(std::max<int64_t>(count, 1)) * 2 * sizeof(double)),
                 "cudaMalloc");
  std::vector<double> ref(static_cast<size_t>(count)), ref_abs(static_cast<size_t>(count));
  std::vector<char> host_d, host_scale_d;
  try {
    gpu_gemm(p, device_ref, device_ref + count, stream);
    runtime::check(cudaStreamSynchronize(stream), "reference GEMM");
    runtime::check(cudaMemcpy(ref.data(), device_ref, count * sizeof(double), cudaMemcpyDeviceToHost), "copy ref");
    runtime::check(cudaMemcpy(ref_abs.data(), device_ref + count, count * sizeof(double), cudaMemcpyDeviceToHost),
                   "copy ref_abs");
    host_d = copy_output();
    if (spec_.out == DType::e4m3) {
      host_scale_d.resize(size_t(scale_d_buf_.elements) * 4);
      runtime::check(cudaMemcpy(host_scale_d.data(), scale_d_buf_.base, host_scale_d.size(), cudaMemcpyDeviceToHost),
                     "copy D's scales");
    }
  } catch (...) {
    cudaFree(device_ref);
    throw;
  }
  cudaFree(device_ref);
  p.d.data = host_d.data() + d_buf_.offset * dtype_size(spec_.out);
  if (p.quantizes_d()) p.scale_d.data = host_scale_d.data();
  Comparison result = compare(p, p.d.data, ref.data(), ref_abs.data(), p.scale_d.data);
  result.written_outside = changed_outside_d(host_d);
  return result;
}

int64_t DeviceProblem::changed_outside_d(const std::vector<char>& host_d) const {
  // D's buffer held all-ones bytes before the GEMM, or with C = D a copy of C's.
  std::vector<char> before(host_d.size(), char(0xff));
  if (spec_.c_is_d) {
    runtime::check(cudaMemcpy(before.data(), c_buf_.base, before.size(), cudaMemcpyDeviceToHost), "copy C");
  }
  const Strides sd = operand_strides(spec_.m, spec_.n, spec_.d_col_major, spec_.pad_d, spec_.align_leading);
  const int64_t leading = spec_.d_col_major ? sd.col : sd.row, inner = spec_.d_col_major ? spec_.m : spec_.n;
  const size_t bytes = dtype_size(spec_.out);
  int64_t changed = 0;
  for (int64_t i = 0; i < d_buf_.elements; ++i) {
    const int64_t in_view = i - d_buf_.offset;
    const bool inside = in_view >= 0 && in_view < sd.span * spec_.batch && in_view % sd.span % leading < inner;
    if (!inside && std::memcmp(&host_d[i * bytes], &before[i * bytes], bytes) != 0) ++changed;
  }
  return changed;
}

}  // namespace gemmkit::reference
