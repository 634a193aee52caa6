#include "runtime/utility_kernels.h"

#include <algorithm>

#include "codegen/kernel_source.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"

namespace gemmkit::runtime {
namespace {

// Both kernels ride in the reference module (kernels/sm90/reference.cuh), of one fixed type set.
const LoadedKernel& utility_kernel(const char* entry) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  return load_kernel(device, codegen::reference_source({}), entry, 0);
}

}  // namespace

void fill_random(void* data, DType type, int64_t count, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (count <= 0) return;
  const LoadedKernel& kernel = utility_kernel("gemmkit_fill_random");
  int type_code = int(type);  // GEMMKIT_* in utility.cuh follow DType's order
  void* args[] = {&data, &type_code, &count, &seed, &lo, &hi};
  unsigned blocks = unsigned(std::min<int64_t>((count + 255) / 256, 1 << 16));
  check(driver().launch_kernel(kernel.function, blocks, 1, 1, 256, 1, 1, 0, stream, args, nullptr),
        "cuLaunchKernel(fill)");
}

void gpu_spin(int64_t cycles, cudaStream_t stream) {
  const LoadedKernel& kernel = utility_kernel("gemmkit_spin");
  void* args[] = {&cycles};
  check(driver().launch_kernel(kernel.function, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr), "cuLaunchKernel(spin)");
}

}  // namespace gemmkit::runtime
