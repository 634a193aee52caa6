// cuBLASLt as a comparison point: runs a gemmkit Problem on the same device buffers.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/problem.h"

namespace gemmkit::baseline {

// One of cuBLASLt's own fused epilogues (CUBLASLT_EPILOGUE_*) with its tensors, in our terms:
// `bias` one value a column of D (a contiguous [1, N] vector; a batch stride of 0 shares it;
// DGELU_BGRAD writes the bias gradient there), `aux` an M x N matrix laid out like D (GELU's
// input, which the _AUX kinds store and DGELU reads); supports() says which dtypes. Data is null
// where the kind has none. baseline/cublaslt_epilogue.h finds the kind that computes an epilogue
// text.
struct LtEpilogue {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  MatrixRef bias, aux;
};

class CublasLt {
 public:
  // Creates a cuBLASLt handle and a 32 MiB workspace on `device`. With fast_fp8_accumulation,
  // FP8 products are summed in the tensor cores over all of K (CUBLASLT_MATMUL_DESC_FAST_ACCUM):
  // single-level accumulation, which a test uses to show what two-level accumulation guards
  // against; bench never does.
  explicit CublasLt(int device, bool fast_fp8_accumulation = false);
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  // Runs p with cuBLASLt on `stream`. The first call for a shape (sizes, strides, dtypes, presence
  // of C, pointer alignments, scale modes and layouts) builds descriptors and takes cuBLASLt's first
  // heuristic algorithm; later calls reuse them, so data pointers (scales' included) may change
  // between calls.
  // With an epilogue other than the default, cuBLASLt fuses it (its pointers, like the data
  // pointers, may change between calls).
  // Throws Error(invalid_argument) if !supports(p, epilogue), Error(cuda_error) if cuBLASLt fails
  // (e.g. it has no algorithm for the problem).
  void run(const Problem& p, cudaStream_t stream, const LtEpilogue& epilogue = {});

  // False for problems cuBLASLt cannot take, with the reason in *why (when given):
  //  - every operand needs a unit stride in one of its matrix dimensions, C must be laid out like
  //    D, C must have D's dtype;
  //  - 16-bit: A and B both bf16 or both f16, D A's type or f32;
  //  - FP8 (e4m3/e5m2, not e5m2 x e5m2): both operands K-major (A stored M x K, B stored N x K:
  //    layout NT; cuBLASLt runs FP8 only as "TN"), A, B, C, D 16-byte aligned, D bf16, f16 or f32,
  //    and scales cuBLASLt can read (a single matrix, not a batch, except per-tensor scales shared
  //    by every batch entry; 16-byte aligned):
  //      both none/tensor  SCALAR_32F, one f32 per operand
  //      both rowwise      OUTER_VEC_32F, M (N) contiguous f32; not at M = 1 or N = 1 (wrong
  //                        results at M = 1 with cuBLAS 13.0)
  //      block, 1x128 (A)  VEC128_32F: stored with M (N) contiguous and ld = M (N), i.e. A's
  //        or 128x1 (B)    scales column-major, B's row-major; M (N) a multiple of 4 (else no
  //                        algorithm, or at M = 1 wrong results)
  //      block, 128x128    BLK128x128_32F: stored with the K blocks contiguous and ld =
  //                        ceil(K/128) rounded up to a multiple of 4, i.e. A's scales
  //                        row-major, B's column-major
  //                        (one side at least must be 1x128 / 128x1)
  //      mx                never (cuBLASLt's VEC32_UE8M0 is Blackwell-only, with tiled scales)
  // These layouts were checked against the fp64 reference on an H100 with cuBLAS 13.0 (D row- and
  // column-major, e4m3/e5m2 mixes, bf16/f16/f32 out, ld 8 for K = 640). cuBLASLt's heuristic may
  // still have no algorithm for a supported problem (e.g. rowwise at N = 12): run() then throws.
  // FP8 accumulation is cuBLASLt's default two-level one (FAST_ACCUM off), like ours, unless
  // the object was made with fast_fp8_accumulation.
  static bool supports(const Problem& p, std::string* why = nullptr);

  // supports(p), and cuBLASLt can fuse `epilogue` into it:
  //  - the kinds DEFAULT, BIAS, RELU, RELU_BIAS, GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU
  //    and DGELU_BGRAD;
  //  - a bias only with D row-major (or of one row): cuBLASLt's bias is one value a row of its
  //    column-major D, which is our D^T; of D's type (an FP8 product's bias with an f32 D is
  //    bf16 in cuBLASLt: declined), or f32 where it is DGELU_BGRAD's gradient (whether cuBLASLt
  //    has a kernel for that with a 16-bit D, run() finds out); contiguous;
  //  - aux laid out like D, of D's type, its leading dimension and batch stride multiples of 8.
  static bool supports(const Problem& p, const LtEpilogue& epilogue, std::string* why = nullptr);

  // p with each FP8 operand's scales replaced by one f32 1.0 that this object owns on the device
  // (mode tensor, shared by every batch entry): what to time where cuBLASLt rejects p's scaling
  // mode or scale layout, on the same shape and operand buffers. 16-bit problems are returned as
  // they are.
  Problem per_tensor_stand_in(const Problem& p) const;

 private:
  struct OperandKey {
    DType dtype = DType::bf16;
    int64_t batch_stride = 0, row_stride = 0, col_stride = 0;
    uint32_t alignment = 0;  // bytes, the largest power of two up to 256 dividing the address
    auto operator<=>(const OperandKey&) const = default;
  };
  struct ScaleKey {
    ScaleMode mode = ScaleMode::none;
    int64_t block_rows = 0, block_cols = 0, batch_stride = 0, row_stride = 0, col_stride = 0;
    uint32_t alignment = 0;
    auto operator<=>(const ScaleKey&) const = default;
  };
  struct Key {
    int64_t m = 0, n = 0, k = 0, batch = 0;
    OperandKey a, b, c, d;  // c is all zero when there is no C
    ScaleKey scale_a, scale_b;
    int32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    OperandKey bias, aux;  // all zero where the epilogue has none
    auto operator<=>(const Key&) const = default;
  };
  struct Plan;  // descriptors and algorithm for one Key

  const Plan& plan_for(const Problem& p, const LtEpilogue& epilogue);

  int device_;
  bool fast_fp8_accumulation_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  float* unit_scale_ = nullptr;  // a device f32 1.0 right after the workspace (per_tensor_stand_in)
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace gemmkit::baseline
