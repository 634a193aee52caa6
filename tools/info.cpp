// gemmkit info: what the library sees of the machine; gemmkit --version: what it is built from
// and runs on.
#include <cstdio>
#include <exception>

#include "commands.h"
#include "gemmkit/version.h"
#include "runtime/device.h"
#include "runtime/kernel_cache.h"
#include "runtime/nvrtc_compiler.h"

namespace gemmkit::tools {
namespace {

// The number of devices; where there are none, prints why first.
int count_devices() {
  const int count = runtime::device_count();
  if (count == 0) {
    try {
      runtime::require_device();
    } catch (const std::exception& e) {
      std::printf("%s\n", e.what());
    }
  }
  return count;
}

}  // namespace

std::string version_text() {
  const std::string commit = git_commit();
  return version() + (commit.empty() ? "" : " (commit " + commit + ")");
}

int run_version() {
  std::printf("gemmkit %s\n", version_text().c_str());
  const runtime::CudaVersions cuda = runtime::cuda_versions();
  std::printf("CUDA runtime %s\n", runtime::cuda_version_text(cuda.runtime).c_str());
  if (!cuda.driver_loads) {
    std::printf("NVIDIA driver: none (libcuda.so.1 could not be loaded)\n");
    return 0;
  }
  std::printf("NVIDIA driver %s\n", runtime::driver_description().c_str());
  const int count = count_devices();
  for (int i = 0; i < count; ++i) {
    const runtime::DeviceInfo& d = runtime::device_info(i);
    std::printf("device %d: %s, sm_%d%d\n", i, d.name.c_str(), d.cc_major, d.cc_minor);
  }
  return 0;
}

int run_info(int only_device) {
  const auto& cache = runtime::kernel_disk_cache();
  const auto usage = cache.usage();
  std::printf("nvrtc %s, kernels for sm_90a\n", runtime::nvrtc_version().c_str());
  std::printf("kernel cache: %s (%llu entries, %.1f MB)\n", cache.directory().c_str(),
              static_cast<unsigned long long>(usage.entries), usage.bytes / 1e6);
  const int count = count_devices();
  for (int i = 0; i < count; ++i) {
    if (only_device >= 0 && i != only_device) continue;
    const runtime::DeviceInfo& d = runtime::device_info(i);
    std::printf("device %d: %s, compute capability %d.%d, %d SMs, SM clock %d MHz, memory clock %d MHz, %d-bit bus, "
                "L2 %d MB, %d KB shared memory per block%s\n",
                i, d.name.c_str(), d.cc_major, d.cc_minor, d.sm_count, d.sm_clock_khz / 1000, d.memory_clock_khz / 1000,
                d.memory_bus_bits, d.l2_bytes >> 20, d.smem_per_block_optin >> 10,
                d.cc_major == 9 && d.cc_minor == 0 ? "" : " (not sm_90: gemmkit cannot run here)");
  }
  return 0;
}

}  // namespace gemmkit::tools
