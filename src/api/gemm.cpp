#include "gemmkit/gemm.h"

#include <array>
#include <string>

#include "api/device_checks.h"
#include "api/validate.h"
#include "dispatch/plan.h"
#include "gemmkit/error.h"
#include "runtime/device.h"

namespace gemmkit {
namespace {

// The device of every operand the kernel will touch, each inside the memory it points into.
int operands_device(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options,
                    const Problem& p) {
  std::array<api::Operand, 6> operands;
  size_t count = 0;
  operands[count++] = {&d, p.batch, "D"};
  if (p.k > 0) {
    operands[count++] = {&a, p.batch, "A"};
    operands[count++] = {&b, p.batch, "B"};
    if (p.scale_a.mode != ScaleMode::none) operands[count++] = {&options.scale_a.scales, p.batch, "scale_a"};
    if (p.scale_b.mode != ScaleMode::none) operands[count++] = {&options.scale_b.scales, p.batch, "scale_b"};
  }
  if (p.has_c()) operands[count++] = {&*options.c, p.batch, "C"};
  return api::check_device_memory({operands.data(), count});
}

}  // namespace

std::string_view scale_mode_name(ScaleMode mode) {
  switch (mode) {
    case ScaleMode::none: return "none";
    case ScaleMode::tensor: return "tensor";
    case ScaleMode::rowwise: return "rowwise";
    case ScaleMode::block: return "block";
    case ScaleMode::mx: return "mx";
  }
  return "unknown";
}

void gemm(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options) {
  Problem problem = validate_gemm(a, b, d, options);
  if (problem.m == 0 || problem.n == 0 || problem.batch == 0) return;
  problem.device = operands_device(a, b, d, options, problem);
  check_apart(a, b, d, options, problem);
  runtime::DeviceGuard guard(problem.device);
  const Problem normalized = normalize(problem);
  run_plan(make_plan(normalized, nullptr, options.stream), normalized, options.stream);
}

}  // namespace gemmkit
