#include "baseline/cublaslt.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "core/checked_math.h"
#include "gemmkit/error.h"
#include "gemmkit/tensor.h"

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

uint32_t alignment(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}


// The problem in cuBLASLt's terms: D' (m x n) = op(A') op(B') + C', every operand column-major.
struct Mapping {
  bool swap = false;  // A' is our B^T, B' our A^T, D' our D^T
  uint64_t m = 0, n = 0, k = 0;
  ColumnMajor a, b, c, d;
  ColumnMajor aux;  // a fused epilogue's auxiliary matrix, laid out like D'
  bool fp8 = false;
  // FP8: cuBLASLt's scale modes of A' and B' (cublasLtMatmulMatrixScale_t).
  int32_t scale_mode_a = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, scale_mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
};

// cuBLASLt's scale mode for the scales of our A (is_a) or B, or nullopt with the reason in *why.
// cuBLASLt has no strides for scales: each mode has one layout, described in terms of the
// operand's outer dimension (M for A, N for B) and K, whichever side of the product it is on.
std::optional<int32_t> scale_mode(const Problem& p, bool is_a, std::string* why) {
  const ScaleRef& s = is_a ? p.scale_a : p.scale_b;
  const auto fail = [&](const std::string& reason) {
    *why = std::string(is_a ? "scale_a" : "scale_b") + ": " + reason;
    return std::nullopt;
  };
  if (s.mode == ScaleMode::none) return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;  // no pointer: 1
  if (s.mode == ScaleMode::tensor) {
    if (p.batch > 1 && s.m.batch_stride != 0) return fail("a scale per batch entry; cuBLASLt takes one for the batch");
    return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  }
  if (s.mode == ScaleMode::mx) return fail("mx scales; cuBLASLt's VEC32_UE8M0 is for Blackwell, with tiled scales");
  if (p.batch > 1) return fail("rowwise and block scales of a batch; cuBLASLt takes them for one matrix");
  if (alignment(s.m.data) < 16) return fail("scales not 16-byte aligned");

  // Extents and strides along the outer dimension and along K, in scale elements.
  const int64_t outer = is_a ? p.m : p.n;
  const int64_t outer_block = is_a ? s.block_rows : s.block_cols;
  const int64_t outer_stride = is_a ? s.m.row_stride : s.m.col_stride;
  const int64_t k_stride = is_a ? s.m.col_stride : s.m.row_stride;
  const int64_t outer_count = ceil_div(outer, outer_block), k_count = ceil_div(p.k, 128);
  const std::string outer_name = is_a ? "M" : "N";
  if (s.mode == ScaleMode::rowwise) {
    // cuBLAS 13.0 on an H100 returned wrong results (mostly zeros) for rowwise scaling at M = 1,
    // with D row- or column-major; N = 1 is declined alike.
    if (outer == 1) return fail("rowwise scaling at " + outer_name + " = 1, where cuBLASLt's results are wrong");
    if (outer_stride != 1) return fail("rowwise scales must be contiguous");
    return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  }
  if (outer_block == 1) {  // 1x128 (A) or 128x1 (B): VEC128, the outer dimension contiguous, ld = outer
    // cuBLAS 13.0 on an H100 has no algorithm for other M (2, 3, 6, 18, 130 tried) except M = 1,
    // where it runs and returns wrong results.
    if (outer % 4 != 0) {
      return fail(outer_name + " = " + std::to_string(outer) + " is not a multiple of 4 (cuBLASLt's 1x128 scales)");
    }
    if ((outer > 1 && outer_stride != 1) || (k_count > 1 && k_stride != outer)) {
      return fail(std::string("1x128 scales must be stored with ") + outer_name + " contiguous and ld = " +
                  outer_name + " (" + (is_a ? "column" : "row") + "-major)");
    }
    return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  }
  // 128x128: BLK128x128, the K blocks contiguous, ld = their count rounded up to a multiple of 4.
  const int64_t ld = (k_count + 3) / 4 * 4;
  if ((k_count > 1 && k_stride != 1) || (outer_count > 1 && outer_stride != ld)) {
    return fail(std::string("128x128 scales must be stored with the K blocks contiguous and ld = ") + std::to_string(ld) +
                " (" + (is_a ? "row" : "column") + "-major, ld rounded up to a multiple of 4)");
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

// Scale modes come in families that cuBLASLt pairs only with their own: per-tensor, outer
// vectors, 128-element blocks.
int scale_family(int32_t mode) {
  switch (mode) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F: return 0;
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: return 1;
    default: return 2;
  }
}

// The epilogue kinds run() takes, and which of their tensors each reads or writes.
struct KindUse {
  cublasLtEpilogue_t kind;
  bool bias, aux;
  bool bias_gradient = false;  // the bias written: the column sums of what D holds
};
constexpr KindUse kKindUses[] = {
    {CUBLASLT_EPILOGUE_DEFAULT, false, false},  {CUBLASLT_EPILOGUE_BIAS, true, false},
    {CUBLASLT_EPILOGUE_RELU, false, false},     {CUBLASLT_EPILOGUE_RELU_BIAS, true, false},
    {CUBLASLT_EPILOGUE_GELU, false, false},     {CUBLASLT_EPILOGUE_GELU_BIAS, true, false},
    {CUBLASLT_EPILOGUE_GELU_AUX, false, true},  {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, true, true},
    {CUBLASLT_EPILOGUE_DGELU, false, true},     {CUBLASLT_EPILOGUE_DGELU_BGRAD, true, true, true},
};

const KindUse* kind_use(cublasLtEpilogue_t kind) {
  for (const KindUse& use : kKindUses) {
    if (use.kind == kind) return &use;
  }
  return nullptr;
}

// The epilogue's checks beyond the GEMM's, on p's mapping (whose D' is our D^T wherever the
// epilogue has a bias); fills map->aux. False, with the reason in *why, where cuBLASLt cannot
// fuse it.
bool map_epilogue(const Problem& p, const LtEpilogue& epilogue, const KindUse& use, Mapping* map, std::string* why) {
  const auto fail = [&](const std::string& reason) {
    *why = "epilogue " + reason;
    return false;
  };
  if ((epilogue.bias.data != nullptr) != use.bias) return fail(use.bias ? "without its bias" : "with a bias it does not take");
  if ((epilogue.aux.data != nullptr) != use.aux) return fail(use.aux ? "without its aux matrix" : "with an aux matrix it does not take");
  if (use.bias) {
    if (!map->swap) return fail("bias over D's columns with D column-major: cuBLASLt's bias is one value a row of its D");
    // A bias gradient may be f32 too, as our column sums are: cuBLASLt is asked for that type
    // (BIAS_DATA_TYPE), and its heuristic says whether it has a kernel for it.
    const bool f32_gradient = use.bias_gradient && epilogue.bias.dtype == DType::f32;
    if (epilogue.bias.dtype != p.d.dtype && !f32_gradient) {
      return fail(std::string("bias must have D's dtype") + (use.bias_gradient ? " or be f32" : ""));
    }
    if (map->fp8 && p.d.dtype == DType::f32) return fail("bias of an FP8 product with an f32 D (cuBLASLt's is bf16 there)");
    if (p.n > 1 && epilogue.bias.col_stride != 1) return fail("bias must be contiguous");
    if (epilogue.bias.batch_stride < 0) return fail("bias with a negative batch stride");
  }
  if (use.aux) {
    if (epilogue.aux.dtype != p.d.dtype) return fail("aux must have D's dtype");
    const MatrixRef aux = map->swap ? transposed(epilogue.aux) : epilogue.aux;
    const auto view = column_major(int64_t(map->m), int64_t(map->n), aux.row_stride, aux.col_stride);
    if (!view || view->transposed) return fail("aux must be laid out like D (row- or column-major)");
    if (view->ld % 8 != 0 || epilogue.aux.batch_stride < 0 || (p.batch > 1 && epilogue.aux.batch_stride % 8 != 0)) {
      return fail("aux's leading dimension and batch stride must be multiples of 8 elements");
    }
    map->aux = *view;
  }
  return true;
}

// cuBLASLt transposes A and B but never C or D, so D fixes the orientation. If our D is
// column-major, compute D = A B as written. If it is row-major, column-major reads it as D^T, so
// compute D^T = B^T A^T: A' = B^T, B' = A^T, m' = N, n' = M. Transposing an operand only swaps
// its two strides; each of A', B' is then read as is or transposed (transa/transb) by whichever
// of its strides is 1, and C' must read like D' (no transpose). FP8 runs only as "TN": A' read
// transposed and B' as is, i.e. both of our operands K-major. With a fused epilogue, its tensors
// are mapped too (map_epilogue). Returns nullopt, with the reason in *why, where cuBLASLt cannot
// take the problem.
std::optional<Mapping> map_problem(const Problem& p, const LtEpilogue& epilogue, std::string* why) {
  const auto fail = [&](const char* reason) {
    *why = reason;
    return std::nullopt;
  };
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.batch <= 0) return fail("empty problem");
  if (p.batch > std::numeric_limits<int32_t>::max()) return fail("batch too large");
  const KindUse* use = kind_use(epilogue.kind);
  if (!use) return fail("an epilogue kind the baseline does not run");
  const bool fp8 = is_fp8(p.a.dtype) || is_fp8(p.b.dtype);
  if (fp8) {
    if (!is_fp8(p.a.dtype) || !is_fp8(p.b.dtype)) return fail("A and B must both be e4m3 or e5m2");
    if (p.a.dtype == DType::e5m2 && p.b.dtype == DType::e5m2) return fail("cuBLASLt has no e5m2 x e5m2 kernels");
    if (p.d.dtype != DType::bf16 && p.d.dtype != DType::f16 && p.d.dtype != DType::f32) {
      return fail("D must be bf16, f16 or f32");
    }
  } else {
    if (p.a.dtype != p.b.dtype || (p.a.dtype != DType::bf16 && p.a.dtype != DType::f16)) {
      return fail("A and B must be both bf16 or both f16");
    }
    if (p.d.dtype != p.a.dtype && p.d.dtype != DType::f32) return fail("D must have A's dtype or be f32");
  }
  if (p.has_c() && p.c.dtype != p.d.dtype) return fail("C must have D's dtype");
  if (p.a.batch_stride < 0 || p.b.batch_stride < 0 || p.d.batch_stride < 0 ||
      (p.has_c() && p.c.batch_stride < 0)) {
    return fail("negative batch stride");
  }

  const auto d_view = column_major(p.m, p.n, p.d.row_stride, p.d.col_stride);
  if (!d_view) return fail("D has no unit stride (or a leading dimension below its extent)");
  Mapping map;
  map.swap = d_view->transposed;
  // cuBLASLt's bias is one value a row of its D, so a bias over our D's columns wants D read as
  // D^T, which a D of one row (or column) allows however its strides read.
  if (use->bias && leading_dim(p.n, p.m, p.d.col_stride, p.d.row_stride)) map.swap = true;
  map.fp8 = fp8;
  const MatrixRef a = map.swap ? transposed(p.b) : p.a;
  const MatrixRef b = map.swap ? transposed(p.a) : p.b;
  const MatrixRef c = map.swap ? transposed(p.c) : p.c;
  const MatrixRef d = map.swap ? transposed(p.d) : p.d;
  map.m = uint64_t(map.swap ? p.n : p.m);
  map.n = uint64_t(map.swap ? p.m : p.n);
  map.k = uint64_t(p.k);

  std::optional<ColumnMajor> a_view, b_view;
  if (fp8) {
    // A' (m x k) stored transposed, k x m with K contiguous; B' (k x n) stored as is, K contiguous.
    if (auto ld = leading_dim(int64_t(map.k), int64_t(map.m), a.col_stride, a.row_stride)) {
      a_view = ColumnMajor{true, map.k, map.m, *ld};
    }
    if (auto ld = leading_dim(int64_t(map.k), int64_t(map.n), b.row_stride, b.col_stride)) {
      b_view = ColumnMajor{false, map.k, map.n, *ld};
    }
    if (!a_view || !b_view) {
      return fail("FP8 needs both operands K-major (A stored M x K, B stored N x K: layout NT), as cuBLASLt runs FP8 only as TN");
    }
    for (const void* pointer : {p.a.data, p.b.data, p.d.data, p.has_c() ? p.c.data : p.d.data}) {
      if (alignment(pointer) < 16) return fail("FP8 needs A, B, C and D 16-byte aligned");
    }
  } else {
    a_view = column_major(map.m, map.k, a.row_stride, a.col_stride);
    b_view = column_major(map.k, map.n, b.row_stride, b.col_stride);
    if (!a_view) return fail("A has no unit stride (or a leading dimension below its extent)");
    if (!b_view) return fail("B has no unit stride (or a leading dimension below its extent)");
  }
  const auto dd_view = column_major(map.m, map.n, d.row_stride, d.col_stride);
  map.a = *a_view;
  map.b = *b_view;
  map.d = *dd_view;  // not transposed, by the choice of swap
  if (p.has_c()) {
    const auto c_view = column_major(map.m, map.n, c.row_stride, c.col_stride);
    if (!c_view || c_view->transposed) return fail("C must be laid out like D (row- or column-major)");
    map.c = *c_view;
  }
  if (fp8) {
    const std::optional<int32_t> mode_a = scale_mode(p, true, why);
    if (!mode_a) return std::nullopt;
    const std::optional<int32_t> mode_b = scale_mode(p, false, why);
    if (!mode_b) return std::nullopt;
    if (scale_family(*mode_a) != scale_family(*mode_b)) {
      return fail("cuBLASLt scales both operands alike: per tensor, rowwise or in 128-element blocks");
    }
    if (*mode_a == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F && *mode_b == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F) {
      return fail("cuBLASLt has no 128x128 x 128x128 block scaling; one side needs 1x128 blocks");
    }
    map.scale_mode_a = map.swap ? *mode_b : *mode_a;
    map.scale_mode_b = map.swap ? *mode_a : *mode_b;
  }
  if (!map_epilogue(p, epilogue, *use, &map, why)) return std::nullopt;
  return map;
}

cudaDataType cuda_type(DType dtype) {
  switch (dtype) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::f32: return CUDA_R_32F;
    case DType::e4m3: return CUDA_R_8F_E4M3;
    case DType::e5m2: return CUDA_R_8F_E5M2;
    case DType::ue8m0: return CUDA_R_8F_UE8M0;
    case DType::u4:
    case DType::e2m1: break;  // no cuBLASLt baseline takes 4-bit weights
  }
  return CUDA_R_32F;
}

}  // namespace

struct CublasLt::Plan {
  bool swap = false;
  bool fp8 = false;    // run() sets the scale pointers
  bool fused = false;  // and the epilogue's
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

// The scale pointers of cuBLASLt's A and B: our scales, swapped with the operands (null: mode
// none, every scale 1).
void set_scale_pointers(cublasLtMatmulDesc_t op, const Problem& p, bool swap) {
  const void* ours_a = p.scale_a.mode == ScaleMode::none ? nullptr : p.scale_a.m.data;
  const void* ours_b = p.scale_b.mode == ScaleMode::none ? nullptr : p.scale_b.m.data;
  const void* lt_a = swap ? ours_b : ours_a;
  const void* lt_b = swap ? ours_a : ours_b;
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &lt_a, sizeof lt_a),
        "setting A's scale pointer");
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &lt_b, sizeof lt_b),
        "setting B's scale pointer");
}

template <typename T>
void set_attribute(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attribute, const T& value, const char* what) {
  check(cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof value), what);
}

// The pointers of a fused epilogue's tensors (null: the kind has none).
void set_epilogue_pointers(cublasLtMatmulDesc_t op, const LtEpilogue& epilogue) {
  set_attribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(epilogue.bias.data), "setting the bias pointer");
  set_attribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, epilogue.aux.data, "setting the aux pointer");
}

void set_preference(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attr,
                    uint32_t value) {
  check(cublasLtMatmulPreferenceSetAttribute(preference, attr, &value, sizeof value),
        "cublasLtMatmulPreferenceSetAttribute");
}

}  // namespace

CublasLt::CublasLt(int device, bool fast_fp8_accumulation) : device_(device), fast_fp8_accumulation_(fast_fp8_accumulation) {
  DeviceGuard guard(device);
  check(guard.status(), "cudaSetDevice");
  check(cublasLtCreate(&handle_), "cublasLtCreate");
  // The workspace, then 256 bytes for the unit scale of per_tensor_stand_in().
  if (cudaError_t status = cudaMalloc(&workspace_, kWorkspaceBytes + 256); status != cudaSuccess) {
    cublasLtDestroy(handle_);
    check(status, "cudaMalloc of the workspace");
  }
  unit_scale_ = reinterpret_cast<float*>(static_cast<char*>(workspace_) + kWorkspaceBytes);
  const float one = 1.0f;
  if (cudaError_t status = cudaMemcpy(unit_scale_, &one, sizeof one, cudaMemcpyHostToDevice); status != cudaSuccess) {
    cudaFree(workspace_);
    cublasLtDestroy(handle_);
    check(status, "cudaMemcpy of the unit scale");
  }
}

CublasLt::~CublasLt() {
  plans_.clear();
  DeviceGuard guard(device_);
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

bool CublasLt::supports(const Problem& p, std::string* why) { return supports(p, LtEpilogue{}, why); }

bool CublasLt::supports(const Problem& p, const LtEpilogue& epilogue, std::string* why) {
  std::string reason;
  const bool ok = map_problem(p, epilogue, &reason).has_value();
  if (why) *why = ok ? std::string() : reason;
  return ok;
}

Problem CublasLt::per_tensor_stand_in(const Problem& p) const {
  Problem q = p;
  const auto unit = [&](const MatrixRef& operand, int64_t rows, int64_t cols) {
    ScaleRef s;
    if (!is_fp8(operand.dtype)) return s;  // mode none
    s.mode = ScaleMode::tensor;
    s.m = MatrixRef{unit_scale_, DType::f32, /*batch_stride=*/0, /*row_stride=*/1, /*col_stride=*/1};
    s.block_rows = std::max<int64_t>(rows, 1);
    s.block_cols = std::max<int64_t>(cols, 1);
    return s;
  };
  q.scale_a = unit(p.a, p.m, p.k);
  q.scale_b = unit(p.b, p.k, p.n);
  return q;
}

const CublasLt::Plan& CublasLt::plan_for(const Problem& p, const LtEpilogue& epilogue) {
  const auto operand_key = [](const MatrixRef& m) {
    return OperandKey{m.dtype, m.batch_stride, m.row_stride, m.col_stride, alignment(m.data)};
  };
  const auto scale_key = [](const ScaleRef& s) {
    if (s.mode == ScaleMode::none) return ScaleKey{};
    return ScaleKey{s.mode,         s.block_rows,   s.block_cols, s.m.batch_stride,
                    s.m.row_stride, s.m.col_stride, alignment(s.m.data)};
  };
  const Key key{p.m,
                p.n,
                p.k,
                p.batch,
                operand_key(p.a),
                operand_key(p.b),
                p.has_c() ? operand_key(p.c) : OperandKey{},
                operand_key(p.d),
                scale_key(p.scale_a),
                scale_key(p.scale_b),
                int32_t(epilogue.kind),
                epilogue.bias.data ? operand_key(epilogue.bias) : OperandKey{},
                epilogue.aux.data ? operand_key(epilogue.aux) : OperandKey{}};
  if (auto found = plans_.find(key); found != plans_.end()) return *found->second;

  std::string why;
  const std::optional<Mapping> map = map_problem(p, epilogue, &why);
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
  plan->fp8 = map->fp8;
  if (map->fp8) {
    check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &map->scale_mode_a,
                                         sizeof map->scale_mode_a),
          "setting A's scale mode");
    check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &map->scale_mode_b,
                                         sizeof map->scale_mode_b),
          "setting B's scale mode");
    // Two-level accumulation (promotion to f32 along K), as our kernels do, unless asked
    // otherwise; off is the default, set so that it stays so.
    const int8_t fast_accumulation = fast_fp8_accumulation_ ? 1 : 0;
    check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accumulation,
                                         sizeof fast_accumulation),
          "setting fast accumulation");
    set_scale_pointers(plan->op, p, map->swap);
  }
  plan->fused = epilogue.kind != CUBLASLT_EPILOGUE_DEFAULT;
  if (plan->fused) {
    set_attribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(epilogue.kind), "setting the epilogue");
    if (epilogue.bias.data) {
      set_attribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(cuda_type(epilogue.bias.dtype)),
                    "setting the bias type");
      set_attribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, epilogue.bias.batch_stride,
                    "setting the bias batch stride");
    }
    if (epilogue.aux.data) {
      set_attribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, map->aux.ld, "setting the aux leading dimension");
      set_attribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, epilogue.aux.batch_stride,
                    "setting the aux batch stride");
    }
    set_epilogue_pointers(plan->op, epilogue);  // the heuristic reads their alignment
  }

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

void CublasLt::run(const Problem& p, cudaStream_t stream, const LtEpilogue& epilogue) {
  if (p.device != device_) {
    throw Error(ErrorCode::invalid_argument, "cuBLASLt baseline: problem is on device " +
                                                 std::to_string(p.device) + ", baseline on " +
                                                 std::to_string(device_));
  }
  DeviceGuard guard(device_);
  check(guard.status(), "cudaSetDevice");
  const Plan& plan = plan_for(p, epilogue);
  // The plan may have been made for other buffers.
  if (plan.fp8) set_scale_pointers(plan.op, p, plan.swap);
  if (plan.fused) set_epilogue_pointers(plan.op, epilogue);
  const float alpha = p.alpha;
  const float beta = p.has_c() ? p.beta : 0.0f;
  check(cublasLtMatmul(handle_, plan.op, &alpha, plan.swap ? p.b.data : p.a.data, plan.a,
                       plan.swap ? p.a.data : p.b.data, plan.b, &beta,
                       p.has_c() ? p.c.data : p.d.data, plan.c ? plan.c : plan.d, p.d.data, plan.d,
                       &plan.algo, workspace_, kWorkspaceBytes, stream),
        "cublasLtMatmul");
}

}  // namespace gemmkit::baseline
