// Errors thrown by every gemmkit entry point.
#pragma once

#include <stdexcept>
#include <string>

namespace gemmkit {

enum class ErrorCode {
  invalid_argument,  // the caller passed something gemmkit cannot accept
  no_device,         // no CUDA driver or device is available
  unsupported_device,  // a device is present but is not sm_90
  cuda_error,        // a CUDA runtime or driver call failed
  compile_error,     // NVRTC rejected a generated kernel
  io_error,          // a file could not be read or written
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace gemmkit
