// Turns a kernel configuration into one self-contained CUDA source for NVRTC: a generated
// prelude of constants and instruction wrappers, followed by the embedded kernels/sm90 files.
#pragma once

#include <string>

#include "dispatch/config.h"

namespace gemmkit::codegen {

// Entry-point names of the generated kernels.
inline constexpr const char* kGemmKernel = "gemmkit_gemm";
inline constexpr const char* kFallbackKernel = "gemmkit_fallback";
inline constexpr const char* kGemvKernel = "gemmkit_gemv";
inline constexpr const char* kReferenceKernel = "gemmkit_reference";

// The GEMM kernel (TMA, GEMV or fallback) that `config` describes.
std::string gemm_source(const KernelConfig& config);

// The double-precision reference kernel for inputs of `in`, C of `c` (if has_c).
std::string reference_source(DType in, bool has_c, DType c);

// The wgmma wrapper for one 64 x tile_n x 16 step, with the given operand majorness.
std::string wgmma_function(int tile_n, DType in, bool a_k_major, bool b_k_major);

// Entry-point name of the kernel in gemm_source(config).
const char* gemm_kernel_name(const KernelConfig& config);

}  // namespace gemmkit::codegen
