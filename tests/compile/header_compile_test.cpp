// Every kernels/sm90 file compiles on its own: a source that includes only it, expanded as
// codegen expands kernel sources, with a representative kernel_config.cuh where it includes
// one, compiles with NVRTC for sm_90a. So no file relies on another that it does not include.
#include <gtest/gtest.h>

#include <string>

#include "api/quantize.h"
#include "api/quantize_4bit.h"
#include "codegen/kernel_files.h"
#include "codegen/kernel_source.h"
#include "dispatch/device_limits.h"
#include "runtime/nvrtc_compiler.h"

namespace gemmkit {
namespace {

// The configuration the file's kernel, if any, is built from.
std::string config_for(const std::string& name) {
  KernelConfig config;
  if (name == "gemv.cuh") {
    config.kind = KernelKind::gemv;
    config.tile_n = 16;
  } else {
    config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
  }
  return codegen::config_header(config);
}

TEST(KernelHeaders, EachCompilesAlone) {
  int files = 0;
  for (const codegen::KernelFile& file : codegen::kernel_files()) {
    const std::string name = file.name;
    SCOPED_TRACE(name);
    ++files;
    // quantize.cuh's and quantize_4bit.cuh's kernel_config.cuh come from their own generators.
    const std::string source =
        name == "quantize.cuh"        ? quantize_source({DType::bf16, DType::e4m3, DType::f32, false, 8, false})
        : name == "quantize_4bit.cuh" ? quantize_4bit_source({DType::bf16, DType::u4, DType::bf16, true})
                                      : codegen::expand_includes("#include \"" + name + "\"\n", config_for(name));
    try {
      runtime::compile_kernel(source, "none");
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << " alone: " << e.what();
    }
  }
  EXPECT_GE(files, 15);
}

}  // namespace
}  // namespace gemmkit
