// GPU timing with the discipline `gemmkit bench` and the autotuner share: warm-up runs, then
// timed runs of every side alternating run by run, each after an empty kernel that no run may
// overlap and between two events, all queued behind a spin kernel so the host's launch cost
// does not leak into the GPU times; medians reported.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace gemmkit::tuning {

class GpuTimer {
 public:
  // `sm_clock_khz` sizes the spin (about 20 ms).
  GpuTimer(cudaStream_t stream, int warmup, int runs, int sm_clock_khz);

  // Median microseconds of each launcher; launch(set) must queue one run on buffer set `set` of
  // `sets` onto the timer's stream. Every run, whichever side, takes the next set in turn, so a
  // side never runs on the buffers the run before it has just pulled into L2.
  std::vector<double> median_us(int sets, const std::vector<std::function<void(int)>>& launchers) const;

 private:
  cudaStream_t stream_;
  int warmup_, runs_;
  int64_t spin_cycles_;
};

// The median of the values; NaN when there are none.
double median(std::vector<double> values);

}  // namespace gemmkit::tuning
