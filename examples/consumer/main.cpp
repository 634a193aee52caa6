// Multiplies two 256 x 256 bf16 matrices of ones with gemmkit and checks one element.
#include <gemmkit/gemmkit.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  const int n = 256;
  std::vector<uint16_t> ones(n * n, 0x3f80);  // 1.0 in bf16
  void *a = nullptr, *b = nullptr, *d = nullptr;
  if (cudaMalloc(&a, n * n * 2) != cudaSuccess || cudaMalloc(&b, n * n * 2) != cudaSuccess ||
      cudaMalloc(&d, n * n * 4) != cudaSuccess) {
    std::printf("no CUDA device: nothing to run\n");
    return 0;
  }
  cudaMemcpy(a, ones.data(), n * n * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(b, ones.data(), n * n * 2, cudaMemcpyHostToDevice);
  try {
    using gemmkit::DType;
    using gemmkit::TensorView;
    gemmkit::gemm(TensorView::row_major(a, DType::bf16, n, n), TensorView::row_major(b, DType::bf16, n, n),
                  TensorView::row_major(d, DType::f32, n, n));
  } catch (const gemmkit::Error& e) {
    std::printf("gemmkit: %s\n", e.what());
    return 1;
  }
  float corner = 0;
  cudaMemcpy(&corner, d, sizeof corner, cudaMemcpyDeviceToHost);
  std::printf("D[0][0] = %g (expected %d)\n", corner, n);
  return corner == n ? 0 : 1;
}
