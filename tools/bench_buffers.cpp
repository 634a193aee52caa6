#include "bench_buffers.h"

#include "commands.h"
#include "runtime/driver.h"

namespace gemmkit::tools {
namespace {

// cuBLASLt reads block scales in one layout per kind (baseline/cublaslt.h): A's 1x128 and B's
// 128x128 scales column-major, A's 128x128 and B's 128x1 ones row-major. Our kernels take any
// strides, so the buffers get the layout cuBLASLt can read where one choice fits both operands
// (DeepSeek's 1x128 x 128x128 does). Rowwise and per-tensor scales read the same either way.
bool scales_col_major_for_cublaslt(const reference::ProblemSpec& spec) {
  if (spec.scale_a == ScaleMode::block) return spec.scale_a_block_rows == 1;
  if (spec.scale_b == ScaleMode::block) return spec.scale_b_block_cols != 1;
  return false;
}

}  // namespace

reference::ProblemSpec bench_spec(const SuiteProblem& p) {
  reference::ProblemSpec spec = to_spec(p);
  if (is_fp8(spec.in)) spec.scales_col_major = scales_col_major_for_cublaslt(spec);
  return spec;
}

double set_bytes(const reference::ProblemSpec& spec) {
  return double(spec.batch) * (double(spec.m * spec.k) * dtype_size(spec.in) + double(spec.k * spec.n) * dtype_size(spec.b_type()) +
                               double(spec.m * spec.n) * dtype_size(spec.out));
}

CopyBuffers::CopyBuffers(double bytes, int sets) : half(size_t(bytes / 2) / 16 * 16) {
  size_t free_bytes = 0, total_bytes = 0;
  runtime::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  if (half == 0 || 2 * half * size_t(sets) > free_bytes / 2) return;
  void* p = nullptr;
  if (cudaMalloc(&p, 2 * half * size_t(sets)) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  memory.reset(p);
}

void CopyBuffers::copy(int set, cudaStream_t stream) const {
  char* base = static_cast<char*>(memory.get()) + size_t(set) * 2 * half;
  runtime::check(cudaMemcpyAsync(base + half, base, half, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
}

}  // namespace gemmkit::tools
