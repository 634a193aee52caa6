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

// What every kernel's prelude says about its operands: element types and scale modes.
struct OperandTypes {
  DType a = DType::bf16, b = DType::bf16, out = DType::f32;
  bool has_c = false;
  DType c = DType::f32;
  ScaleMode scale_a = ScaleMode::none, scale_b = ScaleMode::none;
};

// The double-precision reference kernel for operands of `types` (its output is f64), with the
// utility kernels (random fill, spin, 8-bit staging copy) beside it.
std::string reference_source(const OperandTypes& types);

// The wgmma wrapper for one 64 x tile_n x (32 bytes of K) step, with the given operand types and
// majorness (8-bit operands are K-major).
std::string wgmma_function(int tile_n, DType a, DType b, bool a_k_major, bool b_k_major);

// The GEMMKIT_* code device code knows an element type by (utility.cuh), e.g. "GEMMKIT_BF16".
const char* type_code(DType t);

// The text of an embedded kernels/sm90 file, headed by its name and without its include guard
// pragma, for splicing into one source.
std::string file_text(const std::string& name);

// Entry-point name of the kernel in gemm_source(config).
const char* gemm_kernel_name(const KernelConfig& config);

}  // namespace gemmkit::codegen
