#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "gemmkit/error.h"
#include "runtime/device.h"

using namespace gemmkit;
using runtime::CudaVersions;
using runtime::no_device_message;

namespace {

bool driver_loads() {
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (handle != nullptr) dlclose(handle);
  return handle != nullptr;
}

// On a machine without a driver, what every entry point that needs a device says.
TEST(DeviceErrors, NoDriverIsNamedAsSuch) {
  if (driver_loads()) GTEST_SKIP() << "libcuda.so.1 loads here: the no-driver path cannot be reached";
  EXPECT_FALSE(runtime::cuda_versions().driver_loads);
  EXPECT_EQ(runtime::driver_description(), "none");
  try {
    runtime::require_device();
    FAIL() << "require_device() returned without a driver";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::no_device);
    EXPECT_STREQ(e.what(),
                 "no NVIDIA driver found (libcuda.so.1 could not be loaded): gemmkit needs an NVIDIA Hopper GPU (sm_90) "
                 "and its driver");
  }
  try {
    runtime::select_device(0);
    FAIL() << "select_device(0) returned without a driver";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::no_device);
  }
}

TEST(DeviceErrors, TheRuntimeVersionIsKnownWithoutADriver) {
  EXPECT_EQ(runtime::cuda_versions().runtime, CUDART_VERSION);
  EXPECT_EQ(runtime::cuda_version_text(13000), "13.0");
  EXPECT_EQ(runtime::cuda_version_text(12080), "12.8");
}

TEST(DeviceErrors, EachCaseHasItsMessage) {
  const CudaVersions no_driver{false, 0, 13000}, old_driver{true, 12040, 13000}, driver{true, 13000, 13000};
  EXPECT_NE(no_device_message(cudaErrorInsufficientDriver, 0, no_driver, nullptr).find("no NVIDIA driver found"),
            std::string::npos);
  EXPECT_EQ(no_device_message(cudaErrorInsufficientDriver, 0, old_driver, nullptr),
            "the NVIDIA driver supports CUDA 12.4, older than the CUDA 13.0 runtime gemmkit is built with: update the "
            "NVIDIA driver");
  EXPECT_EQ(no_device_message(cudaErrorNoDevice, 0, driver, nullptr), "no CUDA device visible");
  EXPECT_EQ(no_device_message(cudaSuccess, 0, driver, "3"), "no CUDA device visible (CUDA_VISIBLE_DEVICES=3)");
  EXPECT_EQ(no_device_message(cudaErrorNoDevice, 0, driver, ""), "no CUDA device visible (CUDA_VISIBLE_DEVICES=\"\")");
  EXPECT_NE(no_device_message(cudaErrorDevicesUnavailable, 0, driver, nullptr).find("cudaErrorDevicesUnavailable"),
            std::string::npos);
}

TEST(DeviceErrors, NotSm90NamesTheDeviceAndItsSm) {
  runtime::DeviceInfo info;
  info.ordinal = 1;
  info.name = "NVIDIA A100-SXM4-80GB";
  info.cc_major = 8;
  info.cc_minor = 0;
  try {
    runtime::require_sm90(info);
    FAIL() << "an sm_80 device passed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported_device);
    EXPECT_STREQ(e.what(), "device 1 (NVIDIA A100-SXM4-80GB) is sm_80; gemmkit needs sm_90 (H100, H200)");
  }
  info.cc_major = 9;
  info.cc_minor = 0;
  EXPECT_NO_THROW(runtime::require_sm90(info));
}

}  // namespace
