// What the cost model knows of a device: its SMs, the shared memory a block may take and its L2.
// The defaults are an H100 SXM's.
#pragma once

#include <cstdint>

namespace gemmkit {

struct DeviceLimits {
  int sm_count = 132;
  int smem_per_block = 232448;
  int64_t l2_bytes = 50 << 20;
};

}  // namespace gemmkit
