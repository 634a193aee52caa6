// Checks of tensor views against the device memory they point into, shared by the entry points
// (gemm, quantize). Each throws Error(invalid_argument) naming the argument.
#pragma once

#include <cstdint>
#include <span>

#include "gemmkit/tensor.h"

namespace gemmkit::api {

// A view the call will touch, over `batch` matrices (a rank-2 view's batch stride is 0).
struct Operand {
  const TensorView* view = nullptr;
  int64_t batch = 1;
  const char* name = "";
};

// Every operand in device memory of one device (the first operand's, which is returned), and
// each view inside the memory its pointer points into: a view that runs past the end of its
// allocation into memory that is not the same device's is an error saying so. (Memory mapped
// piece by piece reports one piece as the allocation; the view's last byte decides there.)
int check_device_memory(std::span<const Operand> operands);

}  // namespace gemmkit::api
