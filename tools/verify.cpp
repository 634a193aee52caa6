// gemmkit verify: runs problems through gemmkit::gemm and checks them against the GPU reference.
#include <cstdio>
#include <random>

#include "commands.h"
#include "bench/report.h"
#include "api/prepare.h"
#include "reference/device_problem.h"
#include "runtime/device.h"

namespace gemmkit::tools {

reference::ProblemSpec to_spec(const SuiteProblem& p) {
  reference::ProblemSpec spec;
  spec.m = p.m;
  spec.n = p.n;
  spec.k = p.k;
  spec.batch = p.batch;
  spec.layout = p.layout;
  spec.in = p.in_dtype;
  spec.in_b = p.in_b;
  spec.out = p.out_dtype;
  // FP8: both operands scaled in the line's mode; block keeps ProblemSpec's defaults, 1x128 blocks
  // for A (activations) and 128x128 for B (weights), DeepSeek-V3's recipe.
  if (p.fp8()) spec.scale_a = spec.scale_b = p.mode;
  if (p.w4()) {  // 4-bit weights: B's scales in the format's mode; A's, of W4A8 lines, in mode_a
    spec.scale_a = p.mode_a;
    spec.scale_b = p.mode;
    spec.group = p.group;
    spec.zeros = p.zeros;
  }
  return spec;
}

Problem stand_in_problem(const SuiteProblem& sp, int device) {
  const reference::ProblemSpec spec = to_spec(sp);
  spec.check_addressable();  // the batch strides below are products of the sizes
  auto* base = reinterpret_cast<char*>(uintptr_t(1) << 40);
  const int64_t gap = int64_t(1) << 38;
  auto view = [&](int64_t rows, int64_t cols, bool transposed, DType type, char* data, int64_t batch_stride) {
    TensorView v = transposed ? TensorView::matrix(data, type, rows, cols, 1, rows) : TensorView::row_major(data, type, rows, cols);
    if (spec.batch <= 1) return v;
    return TensorView::batched(v.data, type, spec.batch, rows, cols, batch_stride, v.row_stride(), v.col_stride());
  };
  const TensorView a = view(spec.m, spec.k, spec.layout[0] == 'T', spec.in, base, spec.m * spec.k);
  // 4-bit weights: K x N with K contiguous, columns an even number of elements apart.
  const TensorView b = is_4bit(spec.b_type())
                           ? TensorView::matrix(base + gap, spec.b_type(), spec.k, spec.n, 1, spec.k + spec.k % 2)
                           : view(spec.k, spec.n, spec.layout[1] == 'T', spec.b_type(), base + gap, spec.k * spec.n);
  const TensorView d = view(spec.m, spec.n, false, spec.out, base + 2 * gap, spec.m * spec.n);
  GemmOptions options;
  for (bool is_a : {true, false}) {
    const ScaleMode mode = is_a ? spec.scale_a : spec.scale_b;
    if (mode == ScaleMode::none) continue;
    const auto [rows, cols] = reference::scale_shape(spec, is_a);
    const DType type = reference::scale_dtype(spec, mode);
    Scale& scale = is_a ? options.scale_a : options.scale_b;
    scale.mode = mode;
    scale.scales = view(rows, cols, false, type, base + (3 + is_a) * gap, rows * cols);
    if (mode == ScaleMode::group) scale.group = spec.group;
    if (spec.zeros && !is_a) scale.zeros = view(rows, cols, false, type, base + 6 * gap, rows * cols);
  }
  if (spec.out == DType::e4m3) {  // D's 1x128 block scales
    const int64_t blocks = (spec.n + 127) / 128;
    options.scale_d = {ScaleMode::block, view(spec.m, blocks, false, DType::f32, base + 5 * gap, spec.m * blocks), 0, std::nullopt};
  }
  return api::prepare_gemm(a, b, d, options, device).problem;
}

std::string chosen_config(const reference::DeviceProblem& problem) {
  return chosen_config(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
}

int run_verify(const std::vector<SuiteProblem>& problems, float beta) {
  runtime::require_device();
  std::random_device seeds;
  int failures = 0;
  for (const SuiteProblem& suite_problem : problems) {
    reference::ProblemSpec spec = to_spec(suite_problem);
    spec.beta = beta;
    reference::DeviceProblem problem(spec, (uint64_t(seeds()) << 32) | seeds());
    problem.prepare_output(nullptr);
    gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
    const reference::Comparison result = problem.check(nullptr);
    failures += !result.passed();
    std::printf("%s  %-40s  %-28s  %s\n", result.passed() ? "PASS" : "FAIL", spec.describe().c_str(),
                chosen_config(problem).c_str(), result.summary().c_str());
  }
  std::printf("%zu passed, %d failed\n", problems.size() - failures, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace gemmkit::tools
