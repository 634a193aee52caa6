#include "api/prepare.h"

#include <array>

#include "api/device_checks.h"
#include "api/validate.h"
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

}  // namespace

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
