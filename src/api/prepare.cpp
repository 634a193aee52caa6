#include "api/prepare.h"

#include <array>

#include "api/device_checks.h"
#include "api/epilogue_checks.h"
#include "api/tensor_checks.h"
#include "api/validate.h"
#include "dispatch/operand_access.h"
#include "dispatch/plan.h"
#include "runtime/device.h"
#include "runtime/utility_kernels.h"

namespace gemmkit::api {
namespace {

// The device of every operand the kernel will touch, each inside the memory it points into.
int operands_device(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options,
                    const Problem& p) {
  std::array<Operand, 9 + kMaxEpilogueTensors> operands;
  size_t count = 0;
  operands[count++] = {&d, p.batch, "D"};
  if (p.quantizes_d()) operands[count++] = {&options.scale_d.scales, p.batch, "scale_d"};
  if (p.k > 0) {
    operands[count++] = {&a, p.batch, "A"};
    operands[count++] = {&b, p.batch, "B"};
    if (options.b2) operands[count++] = {&*options.b2, p.batch, "options.b2"};
    if (p.scale_a.mode != ScaleMode::none) operands[count++] = {&options.scale_a.scales, p.batch, "scale_a"};
    if (p.scale_b.mode != ScaleMode::none) operands[count++] = {&options.scale_b.scales, p.batch, "scale_b"};
    if (p.scale_b2.mode != ScaleMode::none) operands[count++] = {&options.scale_b2.scales, p.batch, "options.scale_b2"};
  }
  if (p.has_c()) operands[count++] = {&*options.c, p.batch, "C"};
  count += epilogue_operands(options.epilogue, p, std::span(operands).subspan(count));
  return check_device_memory({operands.data(), count});
}

// x [rows, cols] seen as its transpose, the same memory.
TensorView transposed_view(const TensorView& x) {
  return TensorView::matrix(x.data, x.dtype, x.cols(), x.rows(), x.col_stride(), x.row_stride());
}

// Group 0's matrix of a [G, rows, cols] view.
TensorView first_matrix(const TensorView& t) {
  return TensorView::matrix(t.data, t.dtype, t.rows(), t.cols(), t.row_stride(), t.col_stride());
}

// The checks every grouped entry point makes: the sizes array and the SM budget.
void check_sizes_and_budget(const GroupSizes& sizes, const GemmOptions& options) {
  if (sizes.count < 1 || sizes.count > kMaxGroups) {
    fail("sizes: count " + std::to_string(sizes.count) + "; expected 1 to " + std::to_string(kMaxGroups) + " groups");
  }
  const uintptr_t word = sizes.int64 ? 8 : 4;
  if (sizes.data == nullptr || reinterpret_cast<uintptr_t>(sizes.data) % word != 0) {
    fail("sizes: data is " + std::string(sizes.data ? "not " + std::to_string(word) + "-byte aligned" : "null") +
         "; expected a device array of G " + (sizes.int64 ? "int64" : "int32") + " values");
  }
  if (options.max_sms < 0) {
    fail("options.max_sms: " + std::to_string(options.max_sms) + "; expected 0 (every SM) or a number of SMs");
  }
}

// The grouped problem as far as the host can check it: shapes, types and scales as gemm() checks
// them (for contiguous groups on group 0's B and scales, then B batched by group).
Problem validate_grouped(const TensorView& a, const TensorView& b, const TensorView& d, const GroupSizes& sizes,
                         const GemmOptions& options) {
  check_sizes_and_budget(sizes, options);
  const int64_t groups = sizes.count;
  check_form(b, "B");
  if (is_4bit(b.dtype)) {
    if (b.rank == 3 && b.batch() > 1 && b.batch_stride() % 2 != 0) {
      fail("B: strides " + strides_text(b) + " for 4-bit weights; expected an even group stride (two elements a byte, "
           "each group's weights from a byte)");
    }
    // The kernel reads a group's scales (and zero points) where it reads its weights (widen.cuh).
    auto batched = [](const TensorView& v) { return v.rank == 3 && v.batch() > 1 && v.batch_stride() != 0; };
    const TensorView& scales = options.scale_b.scales;
    for (auto [v, name] : {std::pair{&scales, "scale_b"}, std::pair{options.scale_b.zeros ? &*options.scale_b.zeros : &scales,
                                                                  "scale_b.zeros"}}) {
      if (v->data != nullptr && batched(*v) != batched(b)) {
        fail(std::string(name) + ": " + (batched(*v) ? "batched" : "shared by every group") + " but B is " +
             (batched(b) ? "batched" : "shared") + "; expected [G, ceil(K/group), N], one per group, as B is [G, K, N]");
      }
    }
  }
  if (b.rank != 3 || b.batch() != groups) {
    fail("B: shape " + shape_text(b) + "; expected [G, K, N] with G = sizes.count = " + std::to_string(groups));
  }
  if (options.beta != 0.0f) {
    fail("options.beta: " + std::to_string(options.beta) + "; expected 0 (grouped_gemm takes no C)");
  }
  if (options.b2) {  // a dual grouped GEMM (the MoE up-projection): B2 batched by group as B is
    check_form(*options.b2, "options.b2");
    if (options.b2->rank != 3 || options.b2->batch() != groups) {
      fail("options.b2: shape " + shape_text(*options.b2) + "; expected [G, K, N] like B, with G = sizes.count = " +
           std::to_string(groups));
    }
  }
  GemmOptions dense = options;  // as validate_gemm checks the rest; the epilogue, for the groups, after it
  dense.max_sms = 0;
  dense.epilogue = {};
  const bool masked = sizes.layout == GroupLayout::masked;
  for (auto [t, name] : {std::pair{&a, "A"}, std::pair{&d, "D"}}) {
    check_form(*t, name);
    const bool ok = masked ? t->rank == 3 && t->batch() == groups : t->rank == 2;
    if (!ok) {
      fail(std::string(name) + ": shape " + shape_text(*t) + "; expected " +
           (masked ? "[G, max_m, " + std::string(name == std::string("A") ? "K" : "N") + "] with G = " + std::to_string(groups)
                   : std::string(name == std::string("A") ? "[M_total, K]" : "[M_total, N]")) +
           " for " + (masked ? "masked" : "contiguous") + " groups");
    }
  }
  Problem p;
  if (masked) {
    p = validate_gemm(a, b, d, dense);
  } else {
    // Group 0's B and scales stand for every group's; their batches are checked here.
    GemmOptions first = dense;
    for (auto [scale, name] : {std::pair{&first.scale_b, "scale_b"}, std::pair{&first.scale_b2, "options.scale_b2"}}) {
      if (scale->mode == ScaleMode::none) continue;
      const TensorView& s = scale->scales;
      check_form(s, name);
      if (s.rank == 3 && s.batch() != groups) {
        fail(std::string(name) + ": shape " + shape_text(s) + "; expected a batch of G = " + std::to_string(groups) +
             " (one scale tensor per group) or a rank-2 tensor for every group");
      }
      scale->scales = first_matrix(s);
    }
    if (options.scale_b.zeros) {  // u4 weights' zero points, batched (or shared) as their scales
      const TensorView& z = *options.scale_b.zeros;
      check_form(z, "scale_b.zeros");
      if (z.rank == 3 && z.batch() != groups) {
        fail("scale_b.zeros: shape " + shape_text(z) + "; expected a batch of G = " + std::to_string(groups) +
             " (one tensor of zero points per group) or a rank-2 tensor for every group");
      }
      first.scale_b.zeros = first_matrix(z);
    }
    if (options.b2) first.b2 = first_matrix(*options.b2);
    p = validate_gemm(a, first_matrix(b), d, first);
    p.batch = groups;
    p.b.batch_stride = b.batch_stride();
    if (options.b2) p.b2.batch_stride = options.b2->batch_stride();
    if (options.scale_b.mode != ScaleMode::none) p.scale_b.m.batch_stride = options.scale_b.scales.batch_stride();
    if (options.scale_b.zeros) p.scale_b.zeros.batch_stride = options.scale_b.zeros->batch_stride();
    if (options.scale_b2.mode != ScaleMode::none) p.scale_b2.m.batch_stride = options.scale_b2.scales.batch_stride();
  }
  if (p.k == 0 && p.m > 0 && p.n > 0) fail("A: K = 0; expected K >= 1 for grouped_gemm");
  p.groups = {sizes.layout, sizes.data, sizes.int64, sizes.check, /*along_k=*/false, sizes.zero_unowned};
  p.max_sms = options.max_sms;
  p.epilogue = epilogue_ref(options.epilogue, p);
  if (p.m > 0 && p.n > 0 && !grouped_operands_readable(p)) {
    fail(std::string(p.dual() ? "A, B, options.b2" : "A, B") +
         ": not readable by TMA as they lie; expected 16-byte-aligned data and strides, a contiguous dimension in "
         "each" + (p.dual() ? std::string(", B and B2 alike") : std::string()) +
         (is_fp8(p.a.dtype) ? ", and FP8 A K-major (A's K contiguous)" : ""));
  }
  return p;
}

}  // namespace

// grouped_gemm_wgrad's problem (prepare.h), checked under the names x, y and d.
Problem validate_grouped_wgrad(const TensorView& x, const TensorView& y, const TensorView& d, const GroupSizes& sizes,
                               const GemmOptions& options) {
  check_sizes_and_budget(sizes, options);
  if (options.b2) fail("options.b2: given to grouped_gemm_wgrad; expected none (a dual GEMM's groups split the rows)");
  if (options.scale_b2.mode != ScaleMode::none) {
    fail("options.scale_b2: given to grouped_gemm_wgrad; expected mode none (it takes no options.b2)");
  }
  if (sizes.layout != GroupLayout::contiguous) {
    fail("sizes: layout masked; expected contiguous groups (G cumulative ends) for grouped_gemm_wgrad");
  }
  check_form(x, "x");
  check_form(y, "y");
  check_form(d, "d");
  if (x.rank != 2 || y.rank != 2 || y.rows() != x.rows()) {
    fail("y: shape " + shape_text(y) + " with x " + shape_text(x) + "; expected x [M_total, P] and y [M_total, Q]");
  }
  if (d.rank != 3 || d.batch() != sizes.count || d.rows() != x.cols() || d.cols() != y.cols()) {
    fail("d: shape " + shape_text(d) + "; expected [G, P, Q] = [" + std::to_string(sizes.count) + ", " +
         std::to_string(x.cols()) + ", " + std::to_string(y.cols()) + "]");
  }
  const bool fp8 = is_fp8(x.dtype) && is_fp8(y.dtype);
  if (!fp8 && ((x.dtype != DType::bf16 && x.dtype != DType::f16) || y.dtype != x.dtype)) {
    fail("x, y: dtypes " + std::string(dtype_name(x.dtype)) + " and " + std::string(dtype_name(y.dtype)) +
         "; expected both bf16, both f16, or each e4m3 or e5m2");
  }
  // Tokens are the contraction here: block scales along them would straddle the unpadded groups.
  for (auto [scale, name] : {std::pair{&options.scale_a, "scale_a"}, std::pair{&options.scale_b, "scale_b"}}) {
    if (scale->mode == ScaleMode::block || scale->mode == ScaleMode::mx) {
      fail(std::string(name) + ": mode " + std::string(scale_mode_name(scale->mode)) +
           "; expected tensor or rowwise scales (or none) for grouped_gemm_wgrad");
    }
  }
  if (x.rows() == 0 && x.cols() > 0 && y.cols() > 0) fail("x: M_total = 0 rows; expected at least one");
  GemmOptions dense = options;
  dense.max_sms = 0;
  dense.epilogue = {};
  Problem p = validate_gemm(transposed_view(x), y, d, dense);
  p.groups = {GroupLayout::contiguous, sizes.data, sizes.int64, sizes.check, /*along_k=*/true};
  p.max_sms = options.max_sms;
  p.epilogue = epilogue_ref(options.epilogue, p);
  if (p.m > 0 && p.n > 0 && !grouped_operands_readable(p)) {
    fail(fp8 ? "x: M_total + 128 G = " + std::to_string(p.padded_group_k()) + " tokens; expected fewer than 2^31"
             : "x, y: not readable by TMA as they lie; expected 16-byte-aligned data and row strides, with P and Q "
               "contiguous");
  }
  return p;
}

// The device of a grouped problem's operands and the sizes, each inside its memory; then no
// output overlapping an input.
void check_grouped_memory(const TensorView& a, const TensorView& b, const TensorView& d, const GroupSizes& sizes,
                          const GemmOptions& options, Problem& problem, int device) {
  if (device == kOperandsDevice) {
    // The sizes as words (int64: two each), for the memory check.
    const TensorView words = TensorView::row_major(const_cast<void*>(sizes.data), DType::f32, 1,
                                                   sizes.count * (sizes.int64 ? 2 : 1));
    problem.device = operands_device(a, b, d, options, problem);
    const Operand both[] = {{&d, problem.d_batch(), "D"}, {&words, 1, "sizes"}};
    check_device_memory(both);
  }
  check_apart(a, b, d, options, problem);
}

PreparedGemm prepare_grouped(const TensorView& a, const TensorView& b, const TensorView& d, const GroupSizes& sizes,
                             const GemmOptions& options, int device) {
  Problem problem = validate_grouped(a, b, d, sizes, options);
  if (device != kOperandsDevice) problem.device = device;
  if (problem.m == 0 || problem.n == 0) return {problem, true};
  check_grouped_memory(a, b, d, sizes, options, problem, device);
  return {normalize(problem), false};
}

PreparedGemm prepare_grouped_wgrad(const TensorView& x, const TensorView& y, const TensorView& d,
                                   const GroupSizes& sizes, const GemmOptions& options, int device) {
  Problem problem = validate_grouped_wgrad(x, y, d, sizes, options);
  if (device != kOperandsDevice) problem.device = device;
  if (problem.m == 0 || problem.n == 0) return {problem, true};
  check_grouped_memory(transposed_view(x), y, d, sizes, options, problem, device);
  return {problem, false};
}

void run_prepared(const PreparedGemm& prepared, cudaStream_t stream) {
  if (prepared.empty) return;
  runtime::DeviceGuard guard(prepared.problem.device);
  const Problem& p = prepared.problem;
  if (p.groups.check) {
    runtime::check_group_sizes(p.groups, p.batch, p.groups.along_k ? p.k : p.groups.along_n ? p.n : p.m, stream);
  }
  if (p.groups.zero_unowned) {  // D's rows, as the caller's problem has them
    const Problem rows = p.groups.along_n ? transposed_problem(p) : p;
    runtime::zero_unowned_rows(rows.d, rows.groups, rows.batch, rows.m, rows.n, stream);
  }
  run_plan(make_plan(prepared.problem, nullptr, stream), prepared.problem, stream);
}

PreparedGemm prepare_gemm(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options,
                          int device) {
  Problem problem = validate_gemm(a, b, d, options);
  if (device != kOperandsDevice) problem.device = device;
  if (problem.m == 0 || problem.n == 0 || problem.batch == 0) return {problem, true};
  if (device == kOperandsDevice) problem.device = operands_device(a, b, d, options, problem);
  check_apart(a, b, d, options, problem);
  return {normalize(problem), false};
}

}  // namespace gemmkit::api
