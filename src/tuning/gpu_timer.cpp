#include "tuning/gpu_timer.h"

#include <algorithm>
#include <cmath>

#include "runtime/driver.h"
#include "runtime/utility_kernels.h"

namespace gemmkit::tuning {

GpuTimer::GpuTimer(cudaStream_t stream, int warmup, int runs, int sm_clock_khz)
    : stream_(stream), warmup_(warmup), runs_(runs), spin_cycles_(int64_t(sm_clock_khz) * 20) {}

std::vector<double> GpuTimer::median_us(int sets, const std::vector<std::function<void(int)>>& launchers) const {
  const size_t count = launchers.size();
  for (size_t i = 0; i < size_t(warmup_) * count; ++i) launchers[i % count](int(i % sets));
  runtime::check(cudaStreamSynchronize(stream_), "warm-up runs");
  const size_t timed = size_t(runs_) * count;
  std::vector<cudaEvent_t> events(2 * timed);  // each run's start and end
  for (cudaEvent_t& e : events) runtime::check(cudaEventCreate(&e), "cudaEventCreate");
  runtime::gpu_spin(spin_cycles_, stream_);
  for (size_t i = 0; i < timed; ++i) {
    // A run starts after an empty kernel launched without programmatic dependence, so that no
    // part of it overlaps the run before (the GEMM kernels let their successors start early).
    runtime::gpu_spin(0, stream_);
    runtime::check(cudaEventRecord(events[2 * i], stream_), "cudaEventRecord");
    launchers[i % count](int((size_t(warmup_) * count + i) % sets));
    runtime::check(cudaEventRecord(events[2 * i + 1], stream_), "cudaEventRecord");
  }
  runtime::check(cudaStreamSynchronize(stream_), "timed runs");
  std::vector<std::vector<double>> us(count);
  for (size_t i = 0; i < timed; ++i) {
    float ms = 0;
    runtime::check(cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]), "cudaEventElapsedTime");
    us[i % count].push_back(ms * 1e3);
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  std::vector<double> medians;
  for (auto& values : us) medians.push_back(median(values));
  return medians;
}

double median(std::vector<double> values) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace gemmkit::tuning
