#include "runtime/utility_kernels.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "codegen/kernel_source.h"
#include "kernels/sm90/params.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"

namespace gemmkit::runtime {
namespace {

// The utility kernels ride in the reference module (kernels/sm90/reference.cuh, stage.cuh), of
// one fixed type set. Each is looked up once per device: the module's source, the key of
// load_kernel's cache, is long to build and to compare, and staging runs on every call of an
// unaligned problem.
const LoadedKernel& utility_kernel(const char* entry) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  static std::mutex mutex;
  static std::map<std::pair<int, std::string>, const LoadedKernel*> kernels;
  std::lock_guard<std::mutex> lock(mutex);
  const LoadedKernel*& kernel = kernels[{device, entry}];
  if (!kernel) kernel = &load_kernel(device, codegen::reference_source({}), entry, 0);
  return *kernel;
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

void stage_copy(const MatrixRef& m, int64_t batch, int64_t rows, int64_t cols, void* dst, int64_t ld,
                cudaStream_t stream) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return;
  const int element_bytes = dtype_size(m.dtype);
  const LoadedKernel& kernel = utility_kernel(element_bytes == 1 ? "gemmkit_stage_8bit" : "gemmkit_stage_16bit");
  const void* src = m.data;
  int64_t batch_stride = m.batch_stride, row_stride = m.row_stride, col_stride = m.col_stride;
  void* args[] = {&src, &batch_stride, &row_stride, &col_stride, &batch, &rows, &cols, &dst, &ld};
  // Rows are copied a warp's 512 bytes at a time, 8 warps a block; tiles 64 x 64 a block.
  const int64_t units = col_stride == 1 ? (batch * rows * ((cols * element_bytes + 511) / 512) + 7) / 8
                                        : batch * ((rows + 63) / 64) * ((cols + 63) / 64);
  const unsigned blocks = unsigned(std::min<int64_t>(units, 1 << 16));
  check(driver().launch_kernel(kernel.function, blocks, 1, 1, 256, 1, 1, 0, stream, args, nullptr),
        "cuLaunchKernel(stage)");
}

void gpu_spin(int64_t cycles, cudaStream_t stream) {
  const LoadedKernel& kernel = utility_kernel("gemmkit_spin");
  void* args[] = {&cycles};
  check(driver().launch_kernel(kernel.function, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr), "cuLaunchKernel(spin)");
}

const LoadedKernel& empty_kernel() { return utility_kernel("gemmkit_empty"); }

void launch_empty(const LoadedKernel& kernel, unsigned blocks, unsigned threads, cudaStream_t stream) {
  CUtensorMap maps[3] = {};
  GemmParams params{};
  void* args[] = {&maps[0], &maps[1], &maps[2], &params};
  CUlaunchConfig config{};
  config.gridDimX = blocks;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = threads;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;
  CUlaunchAttribute programmatic{};  // as launch_gemm launches (launch.cpp)
  programmatic.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  programmatic.value.programmaticStreamSerializationAllowed = 1;
  config.attrs = &programmatic;
  config.numAttrs = 1;
  check(driver().launch_kernel_ex(&config, kernel.function, args, nullptr), "cuLaunchKernelEx(empty)");
}

}  // namespace gemmkit::runtime
