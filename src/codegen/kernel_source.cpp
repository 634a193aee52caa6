#include "codegen/kernel_source.h"

#include <sstream>
#include <stdexcept>

#include "codegen/kernel_files.h"

namespace gemmkit::codegen {
namespace {

const char* type_code(DType t) {
  switch (t) {
    case DType::bf16: return "GEMMKIT_BF16";
    case DType::f16: return "GEMMKIT_F16";
    case DType::f32: return "GEMMKIT_F32";
  }
  return "";
}

// The text of an embedded file, without its include guard pragma (everything becomes one file).
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

std::string bool_text(bool b) { return b ? "true" : "false"; }

void element_types(std::ostringstream& s, DType in, DType out, bool has_c, DType c) {
  s << "constexpr int kInType = " << type_code(in) << ";\n"
    << "constexpr int kOutType = " << type_code(out) << ";\n"
    << "constexpr int kCType = " << type_code(c) << ";\n"
    << "constexpr bool kHasC = " << bool_text(has_c) << ";\n";
}

}  // namespace

std::string wgmma_function(int tile_n, DType in, bool a_k_major, bool b_k_major) {
  const int registers = tile_n / 2;
  std::ostringstream s;
  s << "// D(64x" << tile_n << ", f32) += A(64x16) * B(16x" << tile_n << "), both from shared memory;\n"
    << "// `accumulate` = 0 overwrites D instead.\n"
    << "__device__ __forceinline__ void wgmma_tile(float* d, u64 desc_a, u64 desc_b, u32 accumulate) {\n"
    << "  asm volatile(\n"
    << "      \"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" << registers + 2 << ", 0;\\n\"\n"
    << "      \"wgmma.mma_async.sync.aligned.m64n" << tile_n << "k16.f32." << dtype_name(in) << "."
    << dtype_name(in) << " {";
  for (int i = 0; i < registers; ++i) s << (i ? ", " : "") << "%" << i;
  s << "}, %" << registers << ", %" << registers + 1 << ", p, 1, 1, " << (a_k_major ? 0 : 1) << ", "
    << (b_k_major ? 0 : 1) << ";\\n}\\n\"\n      : ";
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
  s << "// gemmkit kernel: " << config.name() << "\n" << file_text("utility.cuh") << file_text("params.h")
    << "// ---- generated prelude\n";
  element_types(s, config.in, config.out, config.has_c, config.c);
  if (config.kind != KernelKind::tma) {
    s << file_text(config.kind == KernelKind::gemv ? "gemv.cuh" : "fallback.cuh");
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
    << "constexpr bool kTmaStore = " << bool_text(config.tma_store) << ";\n"
    << "constexpr int kStoreBoxBytes = " << config.store_box_bytes() << ";\n"
    << "constexpr int kStoreBuffers = " << config.store_buffers << ";\n"
    << "constexpr unsigned kSmemBytes = " << config.smem_bytes() << ";\n"
    << file_text("common.cuh")
    << wgmma_function(config.tile_n, config.in, config.a_k_major, config.b_k_major)
    << file_text("epilogue.cuh") << file_text("split_k.cuh") << file_text("gemm.cuh");
  return s.str();
}

std::string reference_source(DType in, bool has_c, DType c) {
  std::ostringstream s;
  s << "// gemmkit reference kernel\n" << file_text("utility.cuh") << file_text("params.h")
    << "// ---- generated prelude\n";
  element_types(s, in, DType::f32, has_c, c);
  s << file_text("reference.cuh");
  return s.str();
}

}  // namespace gemmkit::codegen
