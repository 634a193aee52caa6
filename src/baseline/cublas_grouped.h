// cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx) as the comparison point for
// gemmkit::grouped_gemm, on the same buffers. cuBLAS reads no group sizes on the device: each
// call's sizes come from the host, one cuBLAS group per group of ours that has rows.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gemmkit/grouped.h"

namespace gemmkit::baseline {

class CublasGrouped {
 public:
  // One call's arguments: per group, host arrays; the groups' matrices as arrays of pointers,
  // which cuBLAS reads from device memory.
  struct Call {
    struct CudaFree {
      void operator()(void* p) const { cudaFree(p); }
    };
    cudaDataType_t type = CUDA_R_16BF;  // of A, B and D
    std::vector<cublasOperation_t> trans_a, trans_b;
    std::vector<int> m, n, k, lda, ldb, ldc, group_size;
    std::vector<float> alpha, beta;
    // count() pointers to cuBLAS's A matrices (our B's), then to its B's (our A's), then to its
    // C's (our D's); on the host, and in device memory once uploaded.
    std::vector<const void*> matrices;
    std::unique_ptr<void, CudaFree> device_matrices;
    int count() const { return int(m.size()); }
  };

  // A cuBLAS handle on the current device.
  CublasGrouped();
  ~CublasGrouped();
  CublasGrouped(const CublasGrouped&) = delete;
  CublasGrouped& operator=(const CublasGrouped&) = delete;

  // The call that computes grouped_gemm(a, b, d) (gemmkit/grouped.h: B [G, K, N]) for groups of
  // `rows` rows laid out as `layout` says, or nothing, with the reason in *why, where cuBLAS
  // cannot: its grouped GEMM takes A and B both bf16 or both f16 with D of their type (no FP8, no
  // other output), A and D need a unit column stride (row-major rows) and B one unit stride,
  // every size and stride must fit an int, and some group must have rows. Touches no device.
  static std::optional<Call> plan(const TensorView& a, const TensorView& b, const TensorView& d, GroupLayout layout,
                                  const std::vector<int64_t>& rows, std::string* why);

  // Copies the call's pointer arrays to device memory (synchronously), as run() needs them.
  static void upload(Call& call);

  // Runs an uploaded call on `stream`; throws Error(cuda_error) where cuBLAS fails.
  void run(const Call& call, cudaStream_t stream);

 private:
  cublasHandle_t handle_ = nullptr;
};

}  // namespace gemmkit::baseline
