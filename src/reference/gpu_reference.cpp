#include "reference/gpu_reference.h"

#include "codegen/kernel_source.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "runtime/launch.h"

namespace gemmkit::reference {
namespace {

int current_device() {
  int device = 0;
  runtime::check(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

}  // namespace

void gpu_gemm(const Problem& p, double* ref, double* ref_abs, cudaStream_t stream) {
  const codegen::OperandTypes types{.a = p.a.dtype,
                                    .b = p.b.dtype,
                                    .out = DType::f32,
                                    .has_c = p.has_c(),
                                    .c = p.has_c() ? p.c.dtype : DType::f32,
                                    .scale_a = p.scale_a.mode,
                                    .scale_b = p.scale_b.mode,
                                    .group_scale = p.group_scale_type()};
  const auto& kernel = runtime::load_kernel(current_device(), codegen::reference_source(types), codegen::kReferenceKernel, 0);
  runtime::launch_reference(kernel, p, ref, ref_abs, stream);
}

}  // namespace gemmkit::reference
