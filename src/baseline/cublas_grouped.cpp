#include "baseline/cublas_grouped.h"

#include <climits>

#include "gemmkit/error.h"
#include "runtime/driver.h"

namespace gemmkit::baseline {
namespace {

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(ErrorCode::cuda_error,
                std::string("cuBLAS grouped baseline: ") + what + " failed: " + cublasGetStatusName(status));
  }
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

// Where row `row` of matrix `matrix` of a view starts.
const void* row_of(const TensorView& t, int64_t matrix, int64_t row) {
  return static_cast<const char*>(t.data) + (matrix * t.batch_stride() + row * t.row_stride()) * dtype_size(t.dtype);
}

}  // namespace

CublasGrouped::CublasGrouped() { check_cublas(cublasCreate(&handle_), "cublasCreate"); }

CublasGrouped::~CublasGrouped() { cublasDestroy(handle_); }

std::optional<CublasGrouped::Call> CublasGrouped::plan(const TensorView& a, const TensorView& b, const TensorView& d,
                                                       GroupLayout layout, const std::vector<int64_t>& rows,
                                                       std::string* why) {
  const auto fail = [&](const std::string& reason) {
    *why = reason;
    return std::nullopt;
  };
  if (is_fp8(a.dtype)) return fail("cuBLAS's grouped GEMM takes no FP8 inputs");
  if (a.dtype != b.dtype || (a.dtype != DType::bf16 && a.dtype != DType::f16) || d.dtype != a.dtype) {
    return fail("cuBLAS's grouped GEMM takes A and B both bf16 or both f16, and D of their type");
  }
  if (a.col_stride() != 1 || d.col_stride() != 1 || (b.row_stride() != 1 && b.col_stride() != 1)) {
    return fail("A and D must be row-major and B must have a unit stride");
  }
  const bool b_by_rows = b.col_stride() == 1;  // stored [G, K, N]; else [G, N, K]
  const int64_t n = d.cols(), k = a.cols(), ld_b = b_by_rows ? b.row_stride() : b.col_stride();
  for (int64_t v : {n, k, ld_b, a.row_stride(), d.row_stride()}) {
    if (!fits_int(v)) return fail("a size or stride past an int: " + std::to_string(v));
  }

  // cuBLAS is column-major, where a row-major matrix reads as its transpose: it computes
  // D_g^T (N x rows) = B_g^T (N x K) A_g^T (K x rows), its A our B and its B our A.
  Call call;
  call.type = a.dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  std::vector<const void*> their_b, their_d;
  int64_t start = 0;  // contiguous: the group's first row
  for (size_t g = 0; g < rows.size(); ++g) {
    const int64_t count = rows[g];
    const bool masked = layout == GroupLayout::masked;
    const int64_t matrix = masked ? int64_t(g) : 0, first = masked ? 0 : start;
    start += count;
    if (count == 0) continue;
    if (!fits_int(count)) return fail("group " + std::to_string(g) + "'s rows past an int: " + std::to_string(count));
    call.trans_a.push_back(b_by_rows ? CUBLAS_OP_N : CUBLAS_OP_T);
    call.trans_b.push_back(CUBLAS_OP_N);
    call.m.push_back(int(n));
    call.n.push_back(int(count));
    call.k.push_back(int(k));
    call.lda.push_back(int(ld_b));
    call.ldb.push_back(int(a.row_stride()));
    call.ldc.push_back(int(d.row_stride()));
    call.group_size.push_back(1);
    call.alpha.push_back(1.0f);
    call.beta.push_back(0.0f);
    call.matrices.push_back(row_of(b, int64_t(g), 0));
    their_b.push_back(row_of(a, matrix, first));
    their_d.push_back(row_of(d, matrix, first));
  }
  if (call.count() == 0) return fail("no group has rows");

  call.matrices.insert(call.matrices.end(), their_b.begin(), their_b.end());
  call.matrices.insert(call.matrices.end(), their_d.begin(), their_d.end());
  return call;
}

void CublasGrouped::upload(Call& call) {
  const size_t bytes = call.matrices.size() * sizeof(void*);
  void* device = nullptr;
  runtime::check(cudaMalloc(&device, bytes), "cudaMalloc of cuBLAS's pointer arrays");
  call.device_matrices.reset(device);
  runtime::check(cudaMemcpy(device, call.matrices.data(), bytes, cudaMemcpyHostToDevice), "copying cuBLAS's pointer arrays");
}

void CublasGrouped::run(const Call& call, cudaStream_t stream) {
  check_cublas(cublasSetStream(handle_, stream), "cublasSetStream");
  const int count = call.count();
  const auto* inputs = static_cast<const void* const*>(call.device_matrices.get());
  void* const* outputs = static_cast<void* const*>(call.device_matrices.get()) + 2 * count;
  check_cublas(cublasGemmGroupedBatchedEx(handle_, call.trans_a.data(), call.trans_b.data(), call.m.data(), call.n.data(),
                                   call.k.data(), call.alpha.data(), inputs, call.type, call.lda.data(), inputs + count,
                                   call.type, call.ldb.data(), call.beta.data(), outputs, call.type, call.ldc.data(),
                                   count, call.group_size.data(), CUBLAS_COMPUTE_32F),
        "cublasGemmGroupedBatchedEx");
}

}  // namespace gemmkit::baseline
