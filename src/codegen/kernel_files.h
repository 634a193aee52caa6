// The device-code files of kernels/sm90, embedded in the library at build time.
#pragma once

#include <string>
#include <vector>

namespace gemmkit::codegen {

struct KernelFile {
  const char* name;  // e.g. "gemm.cuh"
  std::string text;
};

const std::vector<KernelFile>& kernel_files();

}  // namespace gemmkit::codegen
