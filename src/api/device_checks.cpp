#include "api/device_checks.h"

#include <string>

#include "api/tensor_checks.h"
#include "runtime/device.h"

namespace gemmkit::api {

// Without a device, the first pointer query reports that (runtime::driver() loads only with one).
int check_device_memory(std::span<const Operand> operands) {
  int device = -1;
  const char* first_name = nullptr;
  for (const Operand& o : operands) {
    const runtime::DeviceMemory memory = runtime::device_memory(o.view->data, o.name);
    if (first_name == nullptr) {
      device = memory.device;
      first_name = o.name;
    } else if (memory.device != device) {
      fail(std::string(o.name) + ": on device " + std::to_string(memory.device) + " but " + first_name + " is on device " +
           std::to_string(device) + "; expected every tensor on one device");
    }
    const ByteRange range = byte_range(*o.view, o.batch, o.name);
    if (range.last > memory.last && !runtime::is_device_memory(reinterpret_cast<const void*>(range.last - 1), device)) {
      fail(std::string(o.name) + ": sizes " + shape_text(*o.view) + " with strides " + strides_text(*o.view) + " span " +
           std::to_string(range.last - range.first) + " bytes from the pointer, past the end of its allocation " +
           std::to_string(memory.last - range.first) + " bytes on; expected a view inside the memory it points into");
    }
  }
  return device;
}

}  // namespace gemmkit::api
