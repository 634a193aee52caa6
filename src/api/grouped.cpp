#include "gemmkit/grouped.h"

#include "api/prepare.h"
#include "dispatch/plan.h"
#include "runtime/device.h"

namespace gemmkit {

void grouped_gemm(const TensorView& a, const TensorView& b, const TensorView& d, const GroupSizes& sizes,
                  const GemmOptions& options) {
  const api::PreparedGemm prepared = api::prepare_grouped(a, b, d, sizes, options);
  if (prepared.empty) return;
  runtime::DeviceGuard guard(prepared.problem.device);
  run_plan(make_plan(prepared.problem, nullptr, options.stream), prepared.problem, options.stream);
}

}  // namespace gemmkit
