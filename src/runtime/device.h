// What gemmkit needs to know about CUDA devices, and the checks that need a live driver.
#pragma once

#include <cstdint>
#include <string>

namespace gemmkit::runtime {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int smem_per_block_optin = 0;  // bytes of dynamic shared memory a block may opt into
  int l2_bytes = 0;
  int sm_clock_khz = 0;
  int memory_clock_khz = 0;
  int memory_bus_bits = 0;
};

// Number of CUDA devices; 0 when there is no driver or no device. Never throws.
int device_count();

// Throws Error(no_device) with a one-line explanation when no device can be used: no driver
// (libcuda.so.1 does not load), a driver older than the runtime, no device visible.
void require_device();

// Makes `ordinal` the current device (cudaSetDevice). Throws Error(no_device) as require_device
// does, Error(invalid_argument) naming the ordinal and the device count where it is out of range.
void select_device(int ordinal);

// The CUDA versions in play, as 1000 * major + 10 * minor (13000 for 13.0).
struct CudaVersions {
  bool driver_loads = false;  // libcuda.so.1 can be loaded
  int driver = 0;             // the newest CUDA the driver supports; 0 without a driver
  int runtime = 0;            // the CUDA runtime gemmkit is linked with
};
CudaVersions cuda_versions();

// "13.0" for 13000.
std::string cuda_version_text(int version);

// The NVIDIA driver's own version, e.g. "580.65.06 (CUDA 13.0)", from /proc/driver/nvidia/version
// where readable ("CUDA 13.0" otherwise); "none" without a driver.
std::string driver_description();

// The message require_device throws, for what cudaGetDeviceCount returned (`status`, a
// cudaError_t, and `count`), the versions and $CUDA_VISIBLE_DEVICES (null where unset).
std::string no_device_message(int status, int count, const CudaVersions& versions, const char* visible_devices);

// Cached properties of one device. Throws Error(no_device / cuda_error).
const DeviceInfo& device_info(int ordinal);

// Throws Error(unsupported_device), naming the device and its sm_XY, unless it is sm_90 (H100,
// H200).
void require_sm90(const DeviceInfo& info);

// Device memory a pointer points into: its device, and the address range [first, last) of the
// allocation holding it (of the piece holding it, for memory mapped piece by piece with cuMemMap,
// as PyTorch's expandable segments are).
struct DeviceMemory {
  int device = -1;
  uintptr_t first = 0, last = 0;
};

// The device memory `pointer` points into; throws Error(invalid_argument) naming `argument` when
// it is host memory or unknown to CUDA.
DeviceMemory device_memory(const void* pointer, const char* argument);

// Whether `pointer` points into device (or managed) memory of device `ordinal`. Never throws.
bool is_device_memory(const void* pointer, int ordinal);

// Makes `ordinal` the current device for the lifetime of the guard, then restores the caller's.
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // the caller's device where the guard changed it
};

}  // namespace gemmkit::runtime
