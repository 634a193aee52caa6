// Turns a kernel configuration into one self-contained CUDA source for NVRTC: the kernel's
// kernels/sm90 file with every #include "x" of another embedded file expanded in place, each
// file once, and one generated header among them, kConfigHeader: the configuration's constants
// (and the wgmma wrapper for its tile, and the GEMM kernels' epilogue functions: the fused
// epilogue's code, or a pass-through), which the kernel files that need them include.
#pragma once

#include <string>

#include "core/kernel_config.h"

namespace gemmkit::codegen {

// Entry-point names of the generated kernels.
inline constexpr const char* kGemmKernel = "gemmkit_gemm";
inline constexpr const char* kFallbackKernel = "gemmkit_fallback";
inline constexpr const char* kGemvKernel = "gemmkit_gemv";
inline constexpr const char* kReferenceKernel = "gemmkit_reference";

// The generated header a kernel reads its configuration from.
inline constexpr const char* kConfigHeader = "kernel_config.cuh";

// The GEMM kernel (TMA, GEMV or fallback) that `config` describes.
std::string gemm_source(const KernelConfig& config);

// What every kernel's kernel_config.cuh says about its operands: element types and scale modes.
struct OperandTypes {
  DType a = DType::bf16, b = DType::bf16, out = DType::f32;
  bool has_c = false;
  DType c = DType::f32;
  ScaleMode scale_a = ScaleMode::none, scale_b = ScaleMode::none;
  // The type of a 4-bit operand's group scales and zero points (scale mode group): bf16 or f16,
  // the 16-bit A's own type, or either against an e4m3 A (W4A8), so it cannot be inferred.
  DType group_scale = DType::bf16;
};

// The double-precision reference kernel for operands of `types` (its output is f64), with the
// utility kernels (random fill, spin, staging copies, the check of group sizes) beside it.
std::string reference_source(const OperandTypes& types);

// The kConfigHeader of `config`'s kernel, and of the reference kernel for operands of `types`.
std::string config_header(const KernelConfig& config);
std::string config_header(const OperandTypes& types);

// `root` with every line #include "name" replaced by the text of the embedded kernels/sm90 file
// `name` (`config` for kConfigHeader), headed by a comment that names it and without its
// include guard pragma, recursively; a file already expanded is left out. Throws
// std::logic_error for a name that is not embedded.
std::string expand_includes(const std::string& root, const std::string& config);

// The wgmma wrapper for one 64 x tile_n x (32 bytes of K) step, with the given operand types and
// majorness (8-bit operands are K-major).
std::string wgmma_function(int tile_n, DType a, DType b, bool a_k_major, bool b_k_major);

// The same with A from registers (4-bit weights widened into them, widen.cuh): wgmma_tile_registers.
std::string wgmma_registers_function(int tile_n, DType type, bool b_k_major);

// The GEMMKIT_* code device code knows an element type by (codes.h), e.g. "GEMMKIT_BF16".
const char* type_code(DType t);

// Entry-point name of the kernel in gemm_source(config).
const char* gemm_kernel_name(const KernelConfig& config);

}  // namespace gemmkit::codegen
