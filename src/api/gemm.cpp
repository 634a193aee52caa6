#include "gemmkit/gemm.h"

#include <string>

#include "api/validate.h"
#include "dispatch/plan.h"
#include "gemmkit/error.h"
#include "runtime/device.h"

namespace gemmkit {
namespace {

// Every operand the kernel will touch must live on one device; returns it.
int common_device(const Problem& p) {
  runtime::require_device();
  const int device = runtime::pointer_device(p.d.data, "D");
  auto same = [&](const void* data, const char* name) {
    if (data == nullptr) return;
    const int other = runtime::pointer_device(data, name);
    if (other != device) {
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": on device " + std::to_string(other) +
                                                   " but D is on device " + std::to_string(device) +
                                                   "; expected every tensor on one device");
    }
  };
  if (p.k > 0) {
    same(p.a.data, "A");
    same(p.b.data, "B");
  }
  same(p.c.data, "C");
  return device;
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
  problem.device = common_device(problem);
  runtime::DeviceGuard guard(problem.device);
  const Problem normalized = normalize(problem);
  run_plan(make_plan(normalized, nullptr, options.stream), normalized, options.stream);
}

}  // namespace gemmkit
