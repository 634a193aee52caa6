// cuBLASLt as a comparison point: runs a gemmkit Problem on the same device buffers.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstdint>
#include <map>
#include <memory>

#include "dispatch/problem.h"

namespace gemmkit::baseline {

class CublasLt {
 public:
  // Creates a cuBLASLt handle and a 32 MiB workspace on `device`.
  explicit CublasLt(int device);
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  // Runs p with cuBLASLt on `stream`. The first call for a shape (sizes, strides, dtypes, presence
  // of C, pointer alignments) builds descriptors and takes cuBLASLt's first heuristic algorithm;
  // later calls reuse them, so data pointers may change between calls.
  // Throws Error(invalid_argument) if !supports(p), Error(cuda_error) if cuBLASLt fails.
  void run(const Problem& p, cudaStream_t stream);

  // False for layouts and dtype combinations cuBLASLt cannot take: every operand needs a unit
  // stride in one of its matrix dimensions, C must be laid out like D, A/B must be bf16 or f16,
  // D must be A's type or f32, and C must be D's type.
  bool supports(const Problem& p) const;

 private:
  struct OperandKey {
    DType dtype = DType::bf16;
    int64_t batch_stride = 0, row_stride = 0, col_stride = 0;
    uint32_t alignment = 0;  // bytes, the largest power of two up to 256 dividing the address
    auto operator<=>(const OperandKey&) const = default;
  };
  struct Key {
    int64_t m = 0, n = 0, k = 0, batch = 0;
    OperandKey a, b, c, d;  // c is all zero when there is no C
    auto operator<=>(const Key&) const = default;
  };
  struct Plan;  // descriptors and algorithm for one Key

  const Plan& plan_for(const Problem& p);

  int device_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace gemmkit::baseline
