// The pieces of gemmkit::quantize_int4 and gemmkit::quantize_mxfp4 that need no GPU: argument
// checks, the launch plan and the kernel source. quantize_4bit.cpp holds the entry points.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "../../kernels/sm90/quantize_4bit.cuh"
#include "gemmkit/quantize.h"

namespace gemmkit {

inline constexpr const char* kQuantize4bitKernel = "gemmkit_quantize_4bit";

struct Quantize4bitProblem {
  TensorView w, q, scales;
  std::optional<TensorView> zeros;  // int4 with zero points
  int64_t group = 32;               // K elements a scale covers (MXFP4: 32)
  bool empty = false;               // no element to write: nothing to launch
};

// Check the arguments of quantize_int4 and quantize_mxfp4, or throw Error(invalid_argument)
// naming the argument, what it was and what was expected. Neither touches the device.
Quantize4bitProblem validate_quantize_int4(const TensorView& w, const TensorView& q, const TensorView& scales,
                                           const std::optional<TensorView>& zeros, int64_t group,
                                           const QuantizeOptions& options);
Quantize4bitProblem validate_quantize_mxfp4(const TensorView& w, const TensorView& q, const TensorView& scales,
                                            const QuantizeOptions& options);

struct Quantize4bitLaunch {
  Quantize4bitParams params{};
  unsigned grid = 0;  // CTAs of GEMMKIT_QUANTIZE_4BIT_THREADS threads, one warp a block at a time
};

// How the kernel covers a non-empty problem on a device of `sm_count` SMs.
Quantize4bitLaunch plan_quantize_4bit(const Quantize4bitProblem& problem, int sm_count);

// The kernel source for one combination of weight type, 4-bit format (u4 or e2m1), scale type
// (bf16 or f16 for u4, ue8m0 for e2m1) and zero points (u4 only); kQuantize4bitKernel is its
// entry point.
struct Quantize4bitVariant {
  DType w = DType::bf16, q = DType::u4, scales = DType::bf16;
  bool zeros = false;
  auto operator<=>(const Quantize4bitVariant&) const = default;
};
std::string quantize_4bit_source(const Quantize4bitVariant& variant);

// The variant that runs `problem`.
Quantize4bitVariant quantize_4bit_variant(const Quantize4bitProblem& problem);

}  // namespace gemmkit
