#include "runtime/driver.h"

#include <string>

#include "gemmkit/error.h"
#include "runtime/device.h"

namespace gemmkit::runtime {
namespace {

template <typename Function>
void resolve(Function& function, const char* symbol) {
  void* pointer = nullptr;
  cudaDriverEntryPointQueryResult found{};
  cudaError_t status = cudaGetDriverEntryPointByVersion(symbol, &pointer, 12000, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || pointer == nullptr) {
    throw Error(ErrorCode::no_device,
                std::string("the CUDA driver does not provide ") + symbol + " (driver too old or missing)");
  }
  function = reinterpret_cast<Function>(pointer);
}

Driver load_driver() {
  require_device();
  Driver d;
  resolve(d.module_load_data, "cuModuleLoadData");
  resolve(d.module_get_function, "cuModuleGetFunction");
  resolve(d.func_set_attribute, "cuFuncSetAttribute");
  resolve(d.func_get_attribute, "cuFuncGetAttribute");
  resolve(d.launch_kernel, "cuLaunchKernel");
  resolve(d.launch_kernel_ex, "cuLaunchKernelEx");
  resolve(d.tensor_map_encode_tiled, "cuTensorMapEncodeTiled");
  resolve(d.get_error_string, "cuGetErrorString");
  resolve(d.pointer_get_attributes, "cuPointerGetAttributes");
  resolve(d.ctx_get_device, "cuCtxGetDevice");
  resolve(d.device_get, "cuDeviceGet");
  return d;
}

}  // namespace

const Driver& driver() {
  static const Driver table = load_driver();
  return table;
}

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw Error(ErrorCode::cuda_error,
              std::string(what) + " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

void check(CUresult status, const char* what) {
  if (status == CUDA_SUCCESS) return;
  const char* text = nullptr;
  if (driver().get_error_string(status, &text) != CUDA_SUCCESS || text == nullptr) text = "unknown error";
  throw Error(ErrorCode::cuda_error, std::string(what) + " failed: CUresult " + std::to_string(int(status)) + " (" + text + ")");
}

}  // namespace gemmkit::runtime
