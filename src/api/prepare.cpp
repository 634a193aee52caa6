#include "api/prepare.h"

#include <array>

#include "api/device_checks.h"
#include "api/tensor_checks.h"
#include "api/validate.h"
#include "dispatch/operand_access.h"
#include "dispatch/plan.h"

namespace gemmkit::api {
namespace {

// The device of every operand the kernel will touch, each inside the memory it points into.
int operands_device(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options,
                    const Problem& p) {
  std::array<Operand, 6> operands;
  size_t count = 0;
  operands[count++] = {&d, p.batch, "D"};
  if (p.k > 0) {
    operands[count++] = {&a, p.batch, "A"};
    operands[count++] = {&b, p.batch, "B"};
    if (p.scale_a.mode != ScaleMode::none) operands[count++] = {&options.scale_a.scales, p.batch, "scale_a"};
    if (p.scale_b.mode != ScaleMode::none) operands[count++] = {&options.scale_b.scales, p.batch, "scale_b"};
  }
  if (p.has_c()) operands[count++] = {&*options.c, p.batch, "C"};
  return check_device_memory({operands.data(), count});
}

// Group 0's matrix of a [G, rows, cols] view.
TensorView first_matrix(const TensorView& t) {
  return TensorView::matrix(t.data, t.dtype, t.rows(), t.cols(), t.row_stride(), t.col_stride());
}

// The grouped problem as far as the host can check it: shapes, types and scales as gemm() checks
// them (for contiguous groups on group 0's B and scales, then B batched by group).
Problem validate_grouped(const TensorView& a, const TensorView& b, const TensorView& d, const GroupSizes& sizes,
                         const GemmOptions& options) {
  const int64_t groups = sizes.count;
  if (groups < 1 || groups > kMaxGroups) {
    fail("sizes: count " + std::to_string(groups) + "; expected 1 to " + std::to_string(kMaxGroups) + " groups");
  }
  check_form(b, "B");
  if (b.rank != 3 || b.batch() != groups) {
    fail("B: shape " + shape_text(b) + "; expected [G, K, N] with G = sizes.count = " + std::to_string(groups));
  }
  if (options.beta != 0.0f) {
    fail("options.beta: " + std::to_string(options.beta) + "; expected 0 (grouped_gemm takes no C)");
  }
  if (options.max_sms < 0) {
    fail("options.max_sms: " + std::to_string(options.max_sms) + "; expected 0 (every SM) or a number of SMs");
  }
  GemmOptions dense = options;  // as validate_gemm checks the rest
  dense.max_sms = 0;
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
    if (options.scale_b.mode != ScaleMode::none) {
      const TensorView& s = options.scale_b.scales;
      check_form(s, "scale_b");
      if (s.rank == 3 && s.batch() != groups) {
        fail("scale_b: shape " + shape_text(s) + "; expected a batch of G = " + std::to_string(groups) +
             " (one scale tensor per group) or a rank-2 tensor for every group");
      }
      first.scale_b.scales = first_matrix(s);
    }
    p = validate_gemm(a, first_matrix(b), d, first);
    p.batch = groups;
    p.b.batch_stride = b.batch_stride();
    if (options.scale_b.mode != ScaleMode::none) p.scale_b.m.batch_stride = options.scale_b.scales.batch_stride();
  }
  if (p.k == 0 && p.m > 0 && p.n > 0) fail("A: K = 0; expected K >= 1 for grouped_gemm");
  const uintptr_t word = sizes.int64 ? 8 : 4;
  if (sizes.data == nullptr || reinterpret_cast<uintptr_t>(sizes.data) % word != 0) {
    fail("sizes: data is " + std::string(sizes.data ? "not " + std::to_string(word) + "-byte aligned" : "null") +
         "; expected a device array of G " + (sizes.int64 ? "int64" : "int32") + " values");
  }
  p.groups = {sizes.layout, sizes.data, sizes.int64, sizes.check};
  p.max_sms = options.max_sms;
  if (p.m > 0 && p.n > 0 && !grouped_operands_readable(p)) {
    fail(std::string("A, B: not readable by TMA as they lie; expected 16-byte-aligned data and strides, a contiguous "
                     "dimension in each") +
         (is_fp8(p.a.dtype) ? ", and FP8 A and B both K-major (A's K and B's K contiguous)" : ""));
  }
  return p;
}

}  // namespace

PreparedGemm prepare_grouped(const TensorView& a, const TensorView& b, const TensorView& d, const GroupSizes& sizes,
                             const GemmOptions& options, int device) {
  Problem problem = validate_grouped(a, b, d, sizes, options);
  if (device != kOperandsDevice) problem.device = device;
  if (problem.m == 0 || problem.n == 0) return {problem, true};
  if (device == kOperandsDevice) {
    // The sizes as words (int64: two each), for the memory check.
    const TensorView words = TensorView::row_major(const_cast<void*>(sizes.data), DType::f32, 1,
                                                   sizes.count * (sizes.int64 ? 2 : 1));
    problem.device = operands_device(a, b, d, options, problem);
    const Operand both[] = {{&d, problem.rows_batch(), "D"}, {&words, 1, "sizes"}};
    check_device_memory(both);
  }
  check_apart(a, b, d, options, problem);
  return {problem, false};
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
