#include "gemmkit/gemm.h"

#include <string>

#include "api/prepare.h"
#include "dispatch/plan.h"
#include "gemmkit/error.h"
#include "runtime/device.h"

namespace gemmkit {

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
  const api::PreparedGemm prepared = api::prepare_gemm(a, b, d, options);
  if (prepared.empty) return;
  runtime::DeviceGuard guard(prepared.problem.device);
  run_plan(make_plan(prepared.problem, nullptr, options.stream), prepared.problem, options.stream);
}

}  // namespace gemmkit
