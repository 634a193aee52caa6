#include "reference/quantized_gemm.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "api/validate.h"
#include "gemmkit/gemm.h"
#include "gemmkit/quantize.h"
#include "reference/compare.h"
#include "reference/gpu_reference.h"
#include "reference/host_numeric.h"
#include "runtime/driver.h"

namespace gemmkit::reference {
namespace {

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DeviceMemory = std::unique_ptr<void, CudaFree>;

DeviceMemory device_memory(size_t bytes) {
  void* p = nullptr;
  runtime::check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
  return DeviceMemory(p);
}

// The largest finite value and half the smallest subnormal step of an 8-bit type.
double max_finite(DType t) { return t == DType::e4m3 ? 448.0 : 57344.0; }
double half_subnormal_step(DType t) { return t == DType::e4m3 ? 0x1p-10 : 0x1p-17; }

// An 8-bit copy of `x` (same strides over a buffer of as many elements) and its scales,
// quantised in the spec's mode for A (is_a) or B.
struct Quantized {
  DeviceMemory values, scales;
  TensorView view;
  Scale scale;
};

Quantized quantized(const ProblemSpec& spec, bool is_a, const TensorView& x, int64_t span_elements) {
  Quantized q;
  const DType type = is_a ? spec.in : spec.b_type();
  q.values = device_memory(size_t(span_elements));
  q.view = x;
  q.view.data = q.values.get();
  q.view.dtype = type;
  const auto [block_rows, block_cols] = scale_blocks(spec, is_a);
  const auto [rows, cols] = scale_shape(spec, is_a);
  const ScaleMode mode = is_a ? spec.scale_a : spec.scale_b;
  const DType scale_type = mode == ScaleMode::mx ? DType::ue8m0 : DType::f32;
  q.scales = device_memory(size_t(spec.batch * rows * cols * dtype_size(scale_type)));
  q.scale.mode = mode;
  q.scale.scales = spec.batch == 1 ? TensorView::row_major(q.scales.get(), scale_type, rows, cols)
                                   : TensorView::batched(q.scales.get(), scale_type, spec.batch, rows, cols, rows * cols,
                                                         cols, 1);
  quantize(x, q.view, q.scale.scales, block_rows, block_cols);
  return q;
}

// Elements the view's strides span: one past the largest offset.
int64_t span(const TensorView& t) {
  int64_t last = 0;
  for (int i = 0; i < t.rank; ++i) last += (t.sizes[i] - 1) * t.strides[i];
  return last + 1;
}

}  // namespace

std::string QuantizedComparison::summary() const {
  char line[256];
  if (passed()) {
    std::snprintf(line, sizeof line, "ok: rel %.1e (bound %.1e) over %lld", relative_norm, norm_bound,
                  static_cast<long long>(checked));
  } else {
    std::snprintf(line, sizeof line, "FAIL: %lld of %lld outside the elementwise bound; rel %.1e (bound %.1e)",
                  static_cast<long long>(bad), static_cast<long long>(checked), relative_norm, norm_bound);
  }
  return line;
}

QuantizedComparison quantized_gemm_check(const ProblemSpec& spec, uint64_t seed) {
  ProblemSpec bf16 = spec;
  bf16.in = DType::bf16;
  bf16.in_b.reset();
  bf16.scale_a = bf16.scale_b = ScaleMode::none;
  DeviceProblem problem(bf16, seed);
  const TensorView a = problem.a(), b = problem.b();
  const Quantized qa = quantized(spec, true, a, span(a)), qb = quantized(spec, false, b, span(b));
  GemmOptions options;
  options.scale_a = qa.scale;
  options.scale_b = qb.scale;
  problem.prepare_output(nullptr);
  gemm(qa.view, qb.view, problem.d(), options);
  runtime::check(cudaDeviceSynchronize(), "quantised GEMM");

  const Problem p = validate_gemm(a, b, problem.d(), problem.options(nullptr));
  const int64_t count = p.batch * p.m * p.n;
  const DeviceMemory device_ref = device_memory(size_t(count) * 2 * sizeof(double));
  double* ref_d = static_cast<double*>(device_ref.get());
  gpu_gemm(p, ref_d, ref_d + count, nullptr);
  std::vector<double> ref(static_cast<size_t>(count)), ref_abs(static_cast<size_t>(count));
  runtime::check(cudaMemcpy(ref.data(), ref_d, ref.size() * sizeof(double), cudaMemcpyDeviceToHost), "copy ref");
  runtime::check(cudaMemcpy(ref_abs.data(), ref_d + count, ref.size() * sizeof(double), cudaMemcpyDeviceToHost),
                 "copy ref_abs");
  const std::vector<char> d = problem.copy_output();

  const double ua = unit_roundoff(spec.in), ub = unit_roundoff(spec.b_type());
  Problem fp8 = p;
  fp8.a.dtype = spec.in;
  const double relative = ua + ub + ua * ub + accumulation_tolerance(fp8);
  // Subnormals: half a step times a scale of at most 2 amax / max_finite (powers of two round
  // up), amax <= 1, on one factor of magnitude at most 1, for each of K products.
  const double subnormal = double(p.k) * (half_subnormal_step(spec.in) * 2 / max_finite(spec.in) +
                                          half_subnormal_step(spec.b_type()) * 2 / max_finite(spec.b_type()));
  QuantizedComparison result;
  double error_sq = 0, ref_sq = 0;
  for (int64_t batch = 0; batch < p.batch; ++batch) {
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        const int64_t index = (batch * p.m + i) * p.n + j;
        const double value = load_element(d.data(), p.d.dtype,
                                          p.d.batch_stride * batch + p.d.row_stride * i + p.d.col_stride * j);
        const double error = std::fabs(value - ref[size_t(index)]);
        const double bound = relative * ref_abs[size_t(index)] + subnormal +
                             2 * unit_roundoff(p.d.dtype) * std::fabs(ref[size_t(index)]);
        result.bad += !(error <= bound);
        ++result.checked;
        error_sq += error * error;
        ref_sq += ref[size_t(index)] * ref[size_t(index)];
      }
    }
  }
  result.relative_norm = ref_sq > 0 ? std::sqrt(error_sq / ref_sq) : 0;
  result.norm_bound = 2 * std::sqrt((ua * ua + ub * ub) / 3);
  return result;
}

}  // namespace gemmkit::reference
