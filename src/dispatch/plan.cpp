#include "dispatch/plan.h"

#include <map>
#include <mutex>
#include <utility>

#include "codegen/kernel_source.h"
#include "runtime/device.h"
#include "runtime/launch.h"

namespace gemmkit {
namespace {

MatrixRef transposed(const MatrixRef& m) {
  MatrixRef t = m;
  std::swap(t.row_stride, t.col_stride);
  return t;
}

}  // namespace

Problem normalize(const Problem& p) {
  const bool d_by_columns = p.d.col_stride != 1 && p.d.row_stride == 1 && p.n > 1;
  if (!d_by_columns) return p;
  Problem t = p;
  t.m = p.n;
  t.n = p.m;
  t.a = transposed(p.b);
  t.b = transposed(p.a);
  t.d = transposed(p.d);
  if (p.has_c()) t.c = transposed(p.c);
  return t;
}

Plan make_plan(const Problem& normalized, const KernelConfig* forced) {
  const runtime::DeviceInfo& info = runtime::device_info(normalized.device);
  runtime::require_sm90(info);
  Plan plan;
  plan.sm_count = info.sm_count;
  plan.config = forced ? *forced : choose_config(normalized, {info.sm_count, info.smem_per_block_optin});

  // Configs already loaded on this device skip source generation entirely.
  static std::mutex mutex;
  static std::map<std::pair<int, KernelConfig>, const runtime::LoadedKernel*> loaded;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = loaded.find({normalized.device, plan.config});
    if (it != loaded.end()) {
      plan.kernel = it->second;
      return plan;
    }
  }
  const runtime::LoadedKernel& kernel =
      runtime::load_kernel(normalized.device, codegen::gemm_source(plan.config),
                           codegen::gemm_kernel_name(plan.config), plan.config.smem_bytes());
  std::lock_guard<std::mutex> lock(mutex);
  loaded[{normalized.device, plan.config}] = &kernel;
  plan.kernel = &kernel;
  return plan;
}

void run_plan(const Plan& plan, const Problem& normalized, cudaStream_t stream) {
  runtime::launch_gemm(*plan.kernel, plan.config, normalized, plan.sm_count, stream);
}

}  // namespace gemmkit
