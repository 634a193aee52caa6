// gemmkit verify: runs problems through gemmkit::gemm and checks them against the GPU reference.
#include <cstdio>
#include <random>

#include "commands.h"
#include "api/validate.h"
#include "dispatch/plan.h"
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
  spec.out = p.out_dtype;
  return spec;
}

// The configuration gemmkit::gemm picks for a problem (for reports).
std::string chosen_config(const reference::DeviceProblem& problem) {
  Problem p = validate_gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
  if (p.m == 0 || p.n == 0 || p.batch == 0) return "none (empty)";
  int device = 0;
  cudaGetDevice(&device);
  p.device = device;
  return make_plan(normalize(p)).config.name();
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
