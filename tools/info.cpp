// gemmkit info: what the library sees of the machine.
#include <cstdio>
#include <exception>

#include "commands.h"
#include "runtime/device.h"
#include "runtime/kernel_cache.h"
#include "runtime/nvrtc_compiler.h"

namespace gemmkit::tools {

int run_info() {
  const auto& cache = runtime::kernel_disk_cache();
  const auto usage = cache.usage();
  std::printf("nvrtc %s, kernels for sm_90a\n", runtime::nvrtc_version().c_str());
  std::printf("kernel cache: %s (%llu entries, %.1f MB)\n", cache.directory().c_str(),
              static_cast<unsigned long long>(usage.entries), usage.bytes / 1e6);
  const int count = runtime::device_count();
  if (count == 0) {
    try {
      runtime::require_device();
    } catch (const std::exception& e) {
      std::printf("%s\n", e.what());
    }
    return 0;
  }
  for (int i = 0; i < count; ++i) {
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
