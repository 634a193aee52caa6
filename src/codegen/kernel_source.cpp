#include "codegen/kernel_source.h"

#include <sstream>
#include <stdexcept>

#include "codegen/kernel_files.h"

namespace gemmkit::codegen {
namespace {

const char* scale_code(ScaleMode mode) {
  switch (mode) {
    case ScaleMode::none: return "GEMMKIT_SCALE_NONE";
    case ScaleMode::tensor: return "GEMMKIT_SCALE_TENSOR";
    case ScaleMode::rowwise: return "GEMMKIT_SCALE_ROWWISE";
    case ScaleMode::block: return "GEMMKIT_SCALE_BLOCK";
    case ScaleMode::mx: return "GEMMKIT_SCALE_MX";
  }
  return "";
}

std::string bool_text(bool b) { return b ? "true" : "false"; }

// The element types and scale modes every kernel reads, then the scale lookups.
void operand_prelude(std::ostringstream& s, const OperandTypes& t) {
  s << file_text("utility.cuh") << file_text("params.h") << "// ---- generated prelude\n"
    << "constexpr int kAType = " << type_code(t.a) << ";\n"
    << "constexpr int kBType = " << type_code(t.b) << ";\n"
    << "constexpr int kOutType = " << type_code(t.out) << ";\n"
    << "constexpr int kCType = " << type_code(t.c) << ";\n"
    << "constexpr bool kHasC = " << bool_text(t.has_c) << ";\n"
    << "constexpr int kScaleA = " << scale_code(t.scale_a) << ";\n"
    << "constexpr int kScaleB = " << scale_code(t.scale_b) << ";\n"
    << file_text("scales.cuh");
}

}  // namespace

const char* type_code(DType t) {
  switch (t) {
    case DType::bf16: return "GEMMKIT_BF16";
    case DType::f16: return "GEMMKIT_F16";
    case DType::f32: return "GEMMKIT_F32";
    case DType::e4m3: return "GEMMKIT_E4M3";
    case DType::e5m2: return "GEMMKIT_E5M2";
    case DType::ue8m0: return "GEMMKIT_UE8M0";
  }
  return "";
}

std::string file_text(const std::string& name) {
  for (const KernelFile& file : kernel_files()) {
    if (name != file.name) continue;
    std::string text = file.text;
    const std::string pragma = "#pragma once\n";
    if (auto at = text.find(pragma); at != std::string::npos) text.erase(at, pragma.size());
    return "// ---- " + name + "\n" + text;
  }
  throw std::logic_error("kernel file not embedded: " + name);
}

std::string wgmma_function(int tile_n, DType a, DType b, bool a_k_major, bool b_k_major) {
  const int registers = tile_n / 2;
  // One instruction reads 32 bytes of K: 16 16-bit or 32 8-bit elements. 8-bit operands are
  // K-major by definition and take no transpose bits.
  const int k = 32 / dtype_size(a);
  std::ostringstream s;
  s << "// D(64x" << tile_n << ", f32) += A(64x" << k << ") * B(" << k << "x" << tile_n << "), both from shared memory;\n"
    << "// `accumulate` = 0 overwrites D instead.\n"
    << "__device__ __forceinline__ void wgmma_tile(float* d, u64 desc_a, u64 desc_b, u32 accumulate) {\n"
    << "  asm volatile(\n"
    << "      \"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" << registers + 2 << ", 0;\\n\"\n"
    << "      \"wgmma.mma_async.sync.aligned.m64n" << tile_n << "k" << k << ".f32." << dtype_name(a) << "."
    << dtype_name(b) << " {";
  for (int i = 0; i < registers; ++i) s << (i ? ", " : "") << "%" << i;
  s << "}, %" << registers << ", %" << registers + 1 << ", p, 1, 1";
  if (!is_fp8(a)) s << ", " << (a_k_major ? 0 : 1) << ", " << (b_k_major ? 0 : 1);
  s << ";\\n}\\n\"\n      : ";
  for (int i = 0; i < registers; ++i) s << (i ? ", " : "") << "\"+f\"(d[" << i << "])";
  s << "\n      : \"l\"(desc_a), \"l\"(desc_b), \"r\"(accumulate));\n}\n";
  return s.str();
}

const char* gemm_kernel_name(const KernelConfig& config) {
  switch (config.kind) {
    case KernelKind::tma: return kGemmKernel;
    case KernelKind::gemv: return kGemvKernel;
    case KernelKind::fallback: return kFallbackKernel;
  }
  return kFallbackKernel;
}

std::string gemm_source(const KernelConfig& requested) {
  const KernelConfig config = compiled(requested);
  std::ostringstream s;
  // The first line names the kernel in full (kernels_using_local_memory reports it).
  s << "// gemmkit kernel: " << config.name() << "; " << dtype_name(config.in) << " x " << dtype_name(config.in_b) << " -> "
    << dtype_name(config.out) << (config.has_c ? ", C " + std::string(dtype_name(config.c)) : "") << ", scales "
    << scale_mode_name(config.scale_a) << " (" << config.scale_a_mn << ") / " << scale_mode_name(config.scale_b) << " ("
    << config.scale_b_mn << ")\n";
  operand_prelude(s, {config.in, config.in_b, config.out, config.has_c, config.c, config.scale_a, config.scale_b});
  if (config.kind == KernelKind::gemv) {
    s << "constexpr int kGemvColumns = " << config.tile_n / 8 << ";\n" << file_text("gemv.cuh");
    return s.str();
  }
  if (config.kind != KernelKind::tma) {
    s << file_text("fallback.cuh");
    return s.str();
  }
  s << "constexpr int kTileM = " << config.tile_m << ";\n"
    << "constexpr int kTileN = " << config.tile_n << ";\n"
    << "constexpr int kStages = " << config.stages << ";\n"
    << "constexpr int kGroupM = " << config.group_m << ";\n"
    << "constexpr int kClusterM = " << config.cluster_m << ";\n"
    << "constexpr bool kSplitK = " << bool_text(config.splits > 1) << ";\n"
    << "constexpr bool kAKMajor = " << bool_text(config.a_k_major) << ";\n"
    << "constexpr bool kBKMajor = " << bool_text(config.b_k_major) << ";\n"
    << "constexpr bool kABatched = " << bool_text(config.a_batched) << ";\n"
    << "constexpr bool kBBatched = " << bool_text(config.b_batched) << ";\n"
    << "constexpr bool kRealignA = " << bool_text(config.realign_a) << ";\n"
    << "constexpr bool kRealignB = " << bool_text(config.realign_b) << ";\n"
    << "constexpr bool kRowClasses = " << bool_text(config.row_classes) << ";\n"
    << "constexpr bool kTmaStore = " << bool_text(config.tma_store) << ";\n"
    << "constexpr bool kRowStore = " << bool_text(config.row_store()) << ";\n"
    << "constexpr bool kDByColumns = " << bool_text(config.d_by_columns) << ";\n"
    << "constexpr int kStoreBoxBytes = " << config.store_box_bytes() << ";\n"
    << "constexpr int kStoreBuffers = " << config.store_buffers << ";\n"
    << "constexpr unsigned kSmemBytes = " << config.smem_bytes() << ";\n"
    << "constexpr int kScaleMNA = " << config.scale_a_mn << ";\n"
    << "constexpr int kScaleMNB = " << config.scale_b_mn << ";\n"
    << file_text("common.cuh") << file_text("row_classes.cuh")
    << wgmma_function(config.tile_n, config.in, config.in_b, config.a_k_major, config.b_k_major)
    << file_text("epilogue.cuh") << file_text("split_k.cuh") << file_text("promote.cuh") << file_text("realign.cuh")
    << file_text("gemm.cuh");
  return s.str();
}

std::string reference_source(const OperandTypes& types) {
  std::ostringstream s;
  s << "// gemmkit reference kernel\n";
  operand_prelude(s, types);
  s << file_text("reference.cuh") << file_text("stage.cuh");
  return s.str();
}

}  // namespace gemmkit::codegen
