#include "runtime/utility_kernels.h"

#include <algorithm>

#include "codegen/kernel_source.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"

namespace gemmkit::runtime {
namespace {

// The utility kernels ride in the reference module (kernels/sm90/reference.cuh, stage.cuh), of
// one fixed type set.
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

void stage_k_major(const MatrixRef& m, int64_t batch, int64_t rows, int64_t k, void* dst, int64_t ld,
                   cudaStream_t stream) {
  if (batch <= 0 || rows <= 0 || k <= 0) return;
  const LoadedKernel& kernel = utility_kernel("gemmkit_stage_k_major");
  const void* src = m.data;
  int64_t batch_stride = m.batch_stride, row_stride = m.row_stride, k_stride = m.col_stride;
  void* args[] = {&src, &batch_stride, &row_stride, &k_stride, &batch, &rows, &k, &dst, &ld};
  const int64_t tiles = batch * ((rows + 63) / 64) * ((k + 63) / 64);
  const unsigned blocks = unsigned(std::min<int64_t>(tiles, 1 << 16));
  check(driver().launch_kernel(kernel.function, blocks, 1, 1, 256, 1, 1, 0, stream, args, nullptr),
        "cuLaunchKernel(stage)");
}

void gpu_spin(int64_t cycles, cudaStream_t stream) {
  const LoadedKernel& kernel = utility_kernel("gemmkit_spin");
  void* args[] = {&cycles};
  check(driver().launch_kernel(kernel.function, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr), "cuLaunchKernel(spin)");
}

}  // namespace gemmkit::runtime
