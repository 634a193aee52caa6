// gemmkit quantize: for each FP8 problem of a suite, random bf16 data quantised in the problem's
// mode and multiplied in FP8, against the double product of the bf16 data.
#include <cstdio>
#include <random>

#include "commands.h"
#include "gemmkit/error.h"
#include "reference/quantized_gemm.h"
#include "runtime/device.h"

namespace gemmkit::tools {

int run_quantize(const std::vector<SuiteProblem>& problems) {
  for (const SuiteProblem& p : problems) {
    if (!p.fp8()) {
      throw Error(ErrorCode::invalid_argument, "quantize: line " + std::to_string(p.line) + " (" + dtype_spec(p) +
                                                   ") has " + (p.w4() ? "4-bit weights" : "16-bit inputs") +
                                                   "; expected FP8 problems only");
    }
  }
  runtime::require_device();
  std::random_device seeds;
  int failures = 0;
  for (const SuiteProblem& p : problems) {
    const reference::ProblemSpec spec = to_spec(p);
    const reference::QuantizedComparison result = reference::quantized_gemm_check(spec, (uint64_t(seeds()) << 32) | seeds());
    failures += !result.passed();
    std::printf("%s  %-60s  %s\n", result.passed() ? "PASS" : "FAIL", spec.describe().c_str(), result.summary().c_str());
  }
  std::printf("%zu passed, %d failed\n", problems.size() - failures, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace gemmkit::tools
