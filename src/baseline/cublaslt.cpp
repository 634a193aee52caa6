#include "baseline/cublaslt.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "gemmkit/error.h"

namespace gemmkit::baseline {
namespace {

constexpr uint64_t kWorkspaceBytes = 32ull << 20;

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(ErrorCode::cuda_error,
                std::string("cuBLASLt baseline: ") + what + " failed: " + cublasLtGetStatusName(status));
  }
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(ErrorCode::cuda_error,
                std::string("cuBLASLt baseline: ") + what + " failed: " + cudaGetErrorName(status));
  }
}

// Makes a device current for a scope and restores the previous one. Does not throw, so that the
// destructor of CublasLt can use it; callers that care check status().
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    status_ = cudaGetDevice(&previous_);
    if (status_ == cudaSuccess && previous_ != device) {
      status_ = cudaSetDevice(device);
      switched_ = status_ == cudaSuccess;
    }
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int previous_ = 0;
  bool switched_ = false;
  cudaError_t status_;
};

// A stored matrix as cuBLASLt reads it: column-major, rows x cols, leading dimension ld.
// `transposed` says that this is the transpose of the matrix we described.
struct ColumnMajor {
  bool transposed = false;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
};

// The leading dimension of a rows x cols matrix with strides (rs, cs) read as column-major, if it
// can be: consecutive rows must be adjacent, and cuBLASLt wants ld >= rows. A stride along an
// extent-1 dimension is never used, so it does not disqualify the matrix.
std::optional<int64_t> leading_dim(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if (rs != 1 && rows != 1) return std::nullopt;
  const int64_t ld = cols == 1 ? rows : cs;
  if (ld < rows) return std::nullopt;
  return ld;
}

// Column-major storage (unit row stride) is read as is; row-major storage (unit col stride) is
// read as the transpose, cols x rows, with ld = the row stride.
std::optional<ColumnMajor> column_major(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if (auto ld = leading_dim(rows, cols, rs, cs)) {
    return ColumnMajor{false, uint64_t(rows), uint64_t(cols), *ld};
  }
  if (auto ld = leading_dim(cols, rows, cs, rs)) {
    return ColumnMajor{true, uint64_t(cols), uint64_t(rows), *ld};
  }
  return std::nullopt;
}

MatrixRef transposed(MatrixRef m) {
  std::swap(m.row_stride, m.col_stride);
  return m;
}

// The problem in cuBLASLt's terms: D' (m x n) = op(A') op(B') + C', every operand column-major.
struct Mapping {
  bool swap = false;  // A' is our B^T, B' our A^T, D' our D^T
  uint64_t m = 0, n = 0, k = 0;
  ColumnMajor a, b, c, d;
};

// cuBLASLt transposes A and B but never C or D, so D fixes the orientation. If our D is
// column-major, compute D = A B as written. If it is row-major, column-major reads it as D^T, so
// compute D^T = B^T A^T: A' = B^T, B' = A^T, m' = N, n' = M. Transposing an operand only swaps
// its two strides; each of A', B' is then read as is or transposed (transa/transb) by whichever
// of its strides is 1, and C' must read like D' (no transpose). Returns nullopt, with the reason
// in *why, where cuBLASLt cannot take the problem.
std::optional<Mapping> map_problem(const Problem& p, std::string* why) {
  const auto fail = [&](const char* reason) {
    *why = reason;
    return std::nullopt;
  };
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.batch <= 0) return fail("empty problem");
  if (p.batch > std::numeric_limits<int32_t>::max()) return fail("batch too large");
  if (p.a.dtype != p.b.dtype || p.a.dtype == DType::f32) return fail("A and B must be both bf16 or both f16");
  if (p.d.dtype != p.a.dtype && p.d.dtype != DType::f32) return fail("D must have A's dtype or be f32");
  if (p.has_c() && p.c.dtype != p.d.dtype) return fail("C must have D's dtype");
  if (p.a.batch_stride < 0 || p.b.batch_stride < 0 || p.d.batch_stride < 0 ||
      (p.has_c() && p.c.batch_stride < 0)) {
    return fail("negative batch stride");
  }

  const auto d_view = column_major(p.m, p.n, p.d.row_stride, p.d.col_stride);
  if (!d_view) return fail("D has no unit stride (or a leading dimension below its extent)");
  Mapping map;
  map.swap = d_view->transposed;
  const MatrixRef a = map.swap ? transposed(p.b) : p.a;
  const MatrixRef b = map.swap ? transposed(p.a) : p.b;
  const MatrixRef c = map.swap ? transposed(p.c) : p.c;
  const MatrixRef d = map.swap ? transposed(p.d) : p.d;
  map.m = uint64_t(map.swap ? p.n : p.m);
  map.n = uint64_t(map.swap ? p.m : p.n);
  map.k = uint64_t(p.k);

  const auto a_view = column_major(map.m, map.k, a.row_stride, a.col_stride);
  const auto b_view = column_major(map.k, map.n, b.row_stride, b.col_stride);
  const auto dd_view = column_major(map.m, map.n, d.row_stride, d.col_stride);
  if (!a_view) return fail("A has no unit stride (or a leading dimension below its extent)");
  if (!b_view) return fail("B has no unit stride (or a leading dimension below its extent)");
  map.a = *a_view;
  map.b = *b_view;
  map.d = *dd_view;  // not transposed, by the choice of swap
  if (p.has_c()) {
    const auto c_view = column_major(map.m, map.n, c.row_stride, c.col_stride);
    if (!c_view || c_view->transposed) return fail("C must be laid out like D (row- or column-major)");
    map.c = *c_view;
  }
  return map;
}

cudaDataType cuda_type(DType dtype) {
  switch (dtype) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::f32: return CUDA_R_32F;
  }
  return CUDA_R_32F;
}

uint32_t alignment(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

}  // namespace

struct CublasLt::Plan {
  bool swap = false;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;  // c null: pass d
  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulAlgo_t algo{};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    for (cublasLtMatrixLayout_t layout : {a, b, c, d}) {
      if (layout) cublasLtMatrixLayoutDestroy(layout);
    }
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

namespace {

// Fills *layout (owned by a Plan, so it is freed even if a later call throws).
void make_layout(cublasLtMatrixLayout_t* layout, const ColumnMajor& view, DType dtype,
                 int64_t batch, int64_t batch_stride) {
  check(cublasLtMatrixLayoutCreate(layout, cuda_type(dtype), view.rows, view.cols, view.ld),
        "cublasLtMatrixLayoutCreate");
  const int32_t count = int32_t(batch);
  check(cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                         sizeof count),
        "setting the batch count");
  check(cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                         &batch_stride, sizeof batch_stride),
        "setting the batch stride");
}

void set_preference(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attr,
                    uint32_t value) {
  check(cublasLtMatmulPreferenceSetAttribute(preference, attr, &value, sizeof value),
        "cublasLtMatmulPreferenceSetAttribute");
}

}  // namespace

CublasLt::CublasLt(int device) : device_(device) {
  DeviceGuard guard(device);
  check(guard.status(), "cudaSetDevice");
  check(cublasLtCreate(&handle_), "cublasLtCreate");
  if (cudaError_t status = cudaMalloc(&workspace_, kWorkspaceBytes); status != cudaSuccess) {
    cublasLtDestroy(handle_);
    check(status, "cudaMalloc of the workspace");
  }
}

CublasLt::~CublasLt() {
  plans_.clear();
  DeviceGuard guard(device_);
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

bool CublasLt::supports(const Problem& p) const {
  std::string why;
  return map_problem(p, &why).has_value();
}

const CublasLt::Plan& CublasLt::plan_for(const Problem& p) {
  const auto operand_key = [](const MatrixRef& m) {
    return OperandKey{m.dtype, m.batch_stride, m.row_stride, m.col_stride, alignment(m.data)};
  };
  const Key key{p.m, p.n, p.k, p.batch, operand_key(p.a), operand_key(p.b),
                p.has_c() ? operand_key(p.c) : OperandKey{}, operand_key(p.d)};
  if (auto found = plans_.find(key); found != plans_.end()) return *found->second;

  std::string why;
  const std::optional<Mapping> map = map_problem(p, &why);
  if (!map) throw Error(ErrorCode::invalid_argument, "cuBLASLt baseline cannot run this problem: " + why);
  const MatrixRef& a = map->swap ? p.b : p.a;  // cuBLASLt's A and B
  const MatrixRef& b = map->swap ? p.a : p.b;

  auto plan = std::make_unique<Plan>();
  plan->swap = map->swap;
  check(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t trans_a = map->a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t trans_b = map->b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a),
        "setting transa");
  check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b),
        "setting transb");

  make_layout(&plan->a, map->a, a.dtype, p.batch, a.batch_stride);
  make_layout(&plan->b, map->b, b.dtype, p.batch, b.batch_stride);
  make_layout(&plan->d, map->d, p.d.dtype, p.batch, p.d.batch_stride);
  if (p.has_c()) make_layout(&plan->c, map->c, p.c.dtype, p.batch, p.c.batch_stride);

  check(cublasLtMatmulPreferenceCreate(&plan->preference), "cublasLtMatmulPreferenceCreate");
  const uint64_t workspace = kWorkspaceBytes;
  check(cublasLtMatmulPreferenceSetAttribute(plan->preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace, sizeof workspace),
        "setting the workspace size");
  // The heuristic assumes 256-byte aligned pointers unless told otherwise; the alignments are part
  // of the key, so a reused algorithm never sees a less aligned pointer than it was chosen for.
  set_preference(plan->preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(a.data));
  set_preference(plan->preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(b.data));
  set_preference(plan->preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                 alignment(p.has_c() ? p.c.data : p.d.data));
  set_preference(plan->preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(p.d.data));

  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  check(cublasLtMatmulAlgoGetHeuristic(handle_, plan->op, plan->a, plan->b, plan->c ? plan->c : plan->d,
                                       plan->d, plan->preference, 1, &result, &count),
        "cublasLtMatmulAlgoGetHeuristic");
  if (count == 0) check(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoGetHeuristic (no algorithm)");
  plan->algo = result.algo;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void CublasLt::run(const Problem& p, cudaStream_t stream) {
  if (p.device != device_) {
    throw Error(ErrorCode::invalid_argument, "cuBLASLt baseline: problem is on device " +
                                                 std::to_string(p.device) + ", baseline on " +
                                                 std::to_string(device_));
  }
  DeviceGuard guard(device_);
  check(guard.status(), "cudaSetDevice");
  const Plan& plan = plan_for(p);
  const float alpha = p.alpha;
  const float beta = p.has_c() ? p.beta : 0.0f;
  check(cublasLtMatmul(handle_, plan.op, &alpha, plan.swap ? p.b.data : p.a.data, plan.a,
                       plan.swap ? p.a.data : p.b.data, plan.b, &beta,
                       p.has_c() ? p.c.data : p.d.data, plan.c ? plan.c : plan.d, p.d.data, plan.d,
                       &plan.algo, workspace_, kWorkspaceBytes, stream),
        "cublasLtMatmul");
}

}  // namespace gemmkit::baseline
