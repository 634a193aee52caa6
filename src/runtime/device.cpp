#include "runtime/device.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "gemmkit/error.h"
#include "runtime/driver.h"

namespace gemmkit::runtime {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" status for later calls
    return 0;
  }
  return count;
}

CudaVersions cuda_versions() {
  CudaVersions v;
  // The runtime loads the driver by this name; whether it can tells "no driver" from the rest.
  if (void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    v.driver_loads = true;
    dlclose(handle);
  }
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = 0;
  cudaGetLastError();
  return v;
}

std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string driver_description() {
  const CudaVersions v = cuda_versions();
  if (!v.driver_loads) return "none";
  const std::string cuda = "CUDA " + cuda_version_text(v.driver);
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..." (or "... Open
  // Kernel Module for x86_64  580.95.05 ..."): the first word of digits and dots is the version.
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  std::getline(in, line);
  std::istringstream words(line);
  std::string version, word;
  while (version.empty() && words >> word) {
    const bool numeric = std::isdigit(static_cast<unsigned char>(word[0])) &&
                         word.find_first_not_of("0123456789.") == std::string::npos && word.find('.') != std::string::npos;
    if (numeric) version = word;
  }
  return version.empty() ? cuda : version + " (" + cuda + ")";
}

std::string no_device_message(int status, int count, const CudaVersions& v, const char* visible_devices) {
  if (!v.driver_loads) {
    return "no NVIDIA driver found (libcuda.so.1 could not be loaded): gemmkit needs an NVIDIA Hopper GPU (sm_90) and its "
           "driver";
  }
  if (status == cudaErrorInsufficientDriver) {
    return "the NVIDIA driver supports CUDA " + cuda_version_text(v.driver) + ", older than the CUDA " +
           cuda_version_text(v.runtime) + " runtime gemmkit is built with: update the NVIDIA driver";
  }
  if (status == cudaErrorNoDevice || (status == cudaSuccess && count == 0)) {
    std::string message = "no CUDA device visible";
    if (visible_devices != nullptr) {
      message += std::string(" (CUDA_VISIBLE_DEVICES=") + (*visible_devices ? visible_devices : "\"\"") + ")";
    }
    return message;
  }
  const auto error = static_cast<cudaError_t>(status);
  return std::string("no usable CUDA device: ") + cudaGetErrorString(error) + " (" + cudaGetErrorName(error) + ")";
}

void require_device() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess && count > 0) return;
  cudaGetLastError();
  throw Error(ErrorCode::no_device, no_device_message(status, count, cuda_versions(), std::getenv("CUDA_VISIBLE_DEVICES")));
}

void select_device(int ordinal) {
  require_device();
  const int count = device_count();
  if (ordinal < 0 || ordinal >= count) {
    throw Error(ErrorCode::invalid_argument, "device " + std::to_string(ordinal) + " does not exist: " +
                                                 std::to_string(count) + (count == 1 ? " CUDA device is" : " CUDA devices are") +
                                                 " visible (0 to " + std::to_string(count - 1) + ")");
  }
  check(cudaSetDevice(ordinal), "cudaSetDevice");
}

const DeviceInfo& device_info(int ordinal) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<DeviceInfo>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = cache[ordinal];
  if (slot) return *slot;
  require_device();
  auto info = std::make_unique<DeviceInfo>();
  info->ordinal = ordinal;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
  info->name = prop.name;
  auto attribute = [&](cudaDeviceAttr a) {
    int value = 0;
    check(cudaDeviceGetAttribute(&value, a, ordinal), "cudaDeviceGetAttribute");
    return value;
  };
  info->sm_count = attribute(cudaDevAttrMultiProcessorCount);
  info->cc_major = attribute(cudaDevAttrComputeCapabilityMajor);
  info->cc_minor = attribute(cudaDevAttrComputeCapabilityMinor);
  info->smem_per_block_optin = attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  info->l2_bytes = attribute(cudaDevAttrL2CacheSize);
  info->sm_clock_khz = attribute(cudaDevAttrClockRate);
  info->memory_clock_khz = attribute(cudaDevAttrMemoryClockRate);
  info->memory_bus_bits = attribute(cudaDevAttrGlobalMemoryBusWidth);
  slot = std::move(info);
  return *slot;
}

void require_sm90(const DeviceInfo& info) {
  if (info.cc_major == 9 && info.cc_minor == 0) return;
  std::ostringstream message;
  message << "device " << info.ordinal << " (" << info.name << ") is sm_" << info.cc_major << info.cc_minor
          << "; gemmkit needs sm_90 (H100, H200)";
  throw Error(ErrorCode::unsupported_device, message.str());
}

namespace {

struct PointerAttributes {
  unsigned memory_type = 0, managed = 0;
  int device = -1;
  CUdeviceptr range_start = 0;
  size_t range_size = 0;
};

// The driver's query of just these attributes costs half of cudaPointerGetAttributes, which
// gemm() would pay three times a call. Memory unknown to CUDA reads as type 0.
CUresult query(const void* pointer, PointerAttributes& a) {
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                      CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* values[] = {&a.memory_type, &a.managed, &a.device, &a.range_start, &a.range_size};
  return driver().pointer_get_attributes(5, attributes, values, reinterpret_cast<CUdeviceptr>(pointer));
}

bool device_or_managed(const PointerAttributes& a) { return a.memory_type == CU_MEMORYTYPE_DEVICE || a.managed; }

}  // namespace

DeviceMemory device_memory(const void* pointer, const char* argument) {
  PointerAttributes a;
  const CUresult status = query(pointer, a);
  if (status != CUDA_SUCCESS) {
    const char* text = nullptr;
    if (driver().get_error_string(status, &text) != CUDA_SUCCESS || text == nullptr) text = "unknown error";
    throw Error(ErrorCode::invalid_argument,
                std::string(argument) + ": CUDA does not recognise pointer (" + text + "); expected device memory");
  }
  if (!device_or_managed(a)) {
    std::ostringstream message;
    message << argument << ": pointer " << pointer << " is "
            << (a.memory_type == CU_MEMORYTYPE_HOST ? "pinned host memory" : "not device memory")
            << "; expected device memory";
    throw Error(ErrorCode::invalid_argument, message.str());
  }
  return {a.device, uintptr_t(a.range_start), uintptr_t(a.range_start) + a.range_size};
}

bool is_device_memory(const void* pointer, int ordinal) {
  PointerAttributes a;
  return query(pointer, a) == CUDA_SUCCESS && device_or_managed(a) && a.device == ordinal;
}

// The current context's device, where a context is current (the usual case), is what
// cudaGetDevice reports, for less (H200, paired in one process: 0.025 us against 0.039). A thread
// that has made no CUDA call yet (torch's autograd threads, say) has no current context, while
// cudaGetDevice already reports device 0: cudaSetDevice makes the device's primary context
// current, which the driver calls gemmkit makes (module loads, launches) need.
DeviceGuard::DeviceGuard(int ordinal) {
  CUdevice current_context = -1, wanted = -1;
  const bool has_context = driver().ctx_get_device(&current_context) == CUDA_SUCCESS;
  if (has_context && driver().device_get(&wanted, ordinal) == CUDA_SUCCESS && current_context == wanted) return;
  int current = -1;
  check(cudaGetDevice(&current), "cudaGetDevice");
  if (current == ordinal && has_context) return;
  check(cudaSetDevice(ordinal), "cudaSetDevice");
  if (current != ordinal) previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace gemmkit::runtime
