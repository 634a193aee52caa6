// The pieces of gemmkit::quantize that need no GPU: argument checks, the launch plan and the
// kernel source. quantize.cpp holds the entry point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "../../kernels/sm90/quantize.cuh"
#include "gemmkit/quantize.h"

namespace gemmkit {

inline constexpr const char* kQuantizeKernel = "gemmkit_quantize";

struct QuantizeProblem {
  TensorView x, q, scales;
  int64_t block_rows = 1, block_cols = 1;
  bool power_of_two = false;  // options.power_of_two_scales or ue8m0 scales
  bool empty = false;         // no element to write: nothing to launch
};

// Checks quantize's arguments or throws Error(invalid_argument) naming the argument, what it
// was and what was expected. Does not touch the device.
QuantizeProblem validate_quantize(const TensorView& x, const TensorView& q, const TensorView& scales,
                                  int64_t block_rows, int64_t block_cols, const QuantizeOptions& options);

struct QuantizeLaunch {
  QuantizeParams params{};  // params.phase is FUSED, or AMAX for the first of two launches
  unsigned grid = 0;
  unsigned smem_bytes = 0;
  bool two_pass = false;
  size_t amax_count = 0;    // scratch words of the two-pass path
};

// How the kernel covers a non-empty problem on a device of `sm_count` SMs.
QuantizeLaunch plan_quantize(const QuantizeProblem& problem, int sm_count);

// The kernel source for one combination of types, power-of-two scales, elements per lane
// (QuantizeParams::vec: 1, 4 or 8) and sub-lane blocks (block_fast < vec); kQuantizeKernel is
// its entry point.
struct QuantizeVariant {
  DType x = DType::bf16, q = DType::e4m3, scales = DType::f32;
  bool power_of_two = false;
  int vec = 1;
  bool sub_lane = false;
  auto operator<=>(const QuantizeVariant&) const = default;
};
std::string quantize_source(const QuantizeVariant& variant);

// The variant that runs `launch` of `problem`.
QuantizeVariant quantize_variant(const QuantizeProblem& problem, const QuantizeLaunch& launch);

}  // namespace gemmkit
