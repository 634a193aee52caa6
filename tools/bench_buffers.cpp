#include "bench_buffers.h"

#include "commands.h"
#include "epilogue/program.h"
#include "gemmkit/error.h"
#include "runtime/driver.h"
#include "runtime/utility_kernels.h"

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
  if (p.fp8()) spec.scales_col_major = scales_col_major_for_cublaslt(spec);
  // W4A8, which cuBLASLt cannot run: the layouts a model's pipeline hands gemm(), A's 1x128
  // scales M-contiguous as quantize() writes them, the group scales N-contiguous as GPTQ and AWQ
  // store them.
  if (p.w4a8()) spec.scale_a_col_major = spec.scale_a == ScaleMode::block;
  return spec;
}

double set_bytes(const reference::ProblemSpec& spec) {
  return gemm_bytes(spec.m, spec.n, spec.k, spec.batch, spec.in, spec.b_type(), spec.out, spec.group, spec.zeros);
}

EpilogueBuffers::EpilogueBuffers(const std::string& text, const reference::ProblemSpec& spec, uint64_t seed) {
  const epilogue::Program program = epilogue::parse(text);
  auto add = [&](const std::string& name, DType type, int64_t batch, int64_t rows, int64_t cols, bool output) {
    void* data = nullptr;
    runtime::check(cudaMalloc(&data, size_t(batch * rows * cols * dtype_size(type))), "cudaMalloc");
    memory_.emplace_back(data);
    if (!output) runtime::fill_random(data, type, rows * cols, seed++, -1.0f, 1.0f, nullptr);
    epilogue_.tensors.push_back({name, batch > 1 ? TensorView::batched(data, type, batch, rows, cols, rows * cols, cols, 1)
                                                 : TensorView::row_major(data, type, rows, cols)});
  };
  // A tensor of `shape`: its rows and columns.
  auto rows = [&](epilogue::Shape shape) {
    return shape == epilogue::Shape::column_vector || shape == epilogue::Shape::matrix ? spec.m : 1;
  };
  auto cols = [&](epilogue::Shape shape) {
    return shape == epilogue::Shape::row_vector || shape == epilogue::Shape::matrix ? spec.n : 1;
  };
  for (const epilogue::Input& in : program.inputs) add(in.name, DType::bf16, 1, rows(in.shape), cols(in.shape), false);
  // Outputs of D's type and shape; a reduction's f32, one a batch.
  for (const epilogue::Store& out : program.stores) {
    add(out.name, out.reduce == epilogue::Reduce::none ? spec.out : DType::f32, spec.batch, rows(out.shape),
        cols(out.shape), true);
  }
  runtime::check(cudaDeviceSynchronize(), "filling epilogue inputs");
  epilogue_.text = text;
}

DualViews dual_views(const TensorView& b, const TensorView& d, const Scale& scale_b, const std::string& what) {
  const int64_t n = b.cols() / 2;
  if (b.cols() % 2 != 0) {
    throw Error(ErrorCode::invalid_argument, "dual epilogue on " + what + ": expected an even N, the columns of B and B2 "
                                             "side by side");
  }
  // `cols` columns of t from `first` on.
  const auto part = [](const TensorView& t, int64_t first, int64_t cols) {
    char* data = static_cast<char*>(t.data) + first * t.col_stride() * dtype_size(t.dtype);
    return t.rank == 3 ? TensorView::batched(data, t.dtype, t.batch(), t.rows(), cols, t.batch_stride(), t.row_stride(),
                                             t.col_stride())
                       : TensorView::matrix(data, t.dtype, t.rows(), cols, t.row_stride(), t.col_stride());
  };
  DualViews views{part(b, 0, n), part(b, n, n), part(d, 0, n), scale_b, scale_b};
  if (scale_b.mode != ScaleMode::none && scale_b.mode != ScaleMode::tensor) {
    // Scale columns a block of B's columns: N / columns of scales, one each where 2N columns have 2N.
    const TensorView& s = scale_b.scales;
    const int64_t block = (b.cols() + s.cols() - 1) / s.cols();
    if (n % block != 0) {
      throw Error(ErrorCode::invalid_argument, "dual epilogue on " + what + ": B's scale blocks of " +
                                                   std::to_string(block) + " columns straddle B's and B2's halves of " +
                                                   std::to_string(n) + " columns; expected N a multiple of " +
                                                   std::to_string(block));
    }
    views.scale_b.scales = part(s, 0, n / block);
    views.scale_b2.scales = part(s, n / block, n / block);
  }
  return views;
}

DualViews dual_views(const reference::DeviceProblem& set) {
  const reference::ProblemSpec& spec = set.spec();
  if (spec.batch != 1) {
    throw Error(ErrorCode::invalid_argument,
                "dual epilogue on " + spec.describe() + ": expected one matrix (batch 1), the columns of B and B2 side by "
                "side");
  }
  return dual_views(set.b(), set.d(), set.options(nullptr).scale_b, spec.describe());
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
