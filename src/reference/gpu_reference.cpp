#include "reference/gpu_reference.h"

#include <algorithm>

#include "codegen/kernel_source.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "runtime/launch.h"

namespace gemmkit::reference {
namespace {

// The reference source for a type combination; the fill kernel rides in the same module.
const runtime::LoadedKernel& reference_kernel(int device, DType in, bool has_c, DType c, const char* entry) {
  return runtime::load_kernel(device, codegen::reference_source(in, has_c, c), entry, 0);
}

int current_device() {
  int device = 0;
  runtime::check(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

}  // namespace

void gpu_gemm(const Problem& p, double* ref, double* ref_abs, cudaStream_t stream) {
  const auto& kernel = reference_kernel(current_device(), p.a.dtype, p.has_c(), p.has_c() ? p.c.dtype : DType::f32,
                                        codegen::kReferenceKernel);
  runtime::launch_reference(kernel, p, ref, ref_abs, stream);
}

void fill_random(void* data, DType type, int64_t count, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (count <= 0) return;
  const auto& kernel = reference_kernel(current_device(), DType::bf16, false, DType::f32, "gemmkit_fill_random");
  int type_code = type == DType::bf16 ? 0 : type == DType::f16 ? 1 : 2;  // GEMMKIT_* in utility.cuh
  void* args[] = {&data, &type_code, &count, &seed, &lo, &hi};
  unsigned blocks = unsigned(std::min<int64_t>((count + 255) / 256, 1 << 16));
  runtime::check(runtime::driver().launch_kernel(kernel.function, blocks, 1, 1, 256, 1, 1, 0, stream, args, nullptr),
                 "cuLaunchKernel(fill)");
}

void gpu_spin(int64_t cycles, cudaStream_t stream) {
  const auto& kernel = reference_kernel(current_device(), DType::bf16, false, DType::f32, "gemmkit_spin");
  void* args[] = {&cycles};
  runtime::check(runtime::driver().launch_kernel(kernel.function, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr),
                 "cuLaunchKernel(spin)");
}

}  // namespace gemmkit::reference
