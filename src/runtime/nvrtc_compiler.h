// Compiles generated CUDA source to an sm_90a cubin with NVRTC, and reads ptxas' resource report.
#pragma once

#include <string>
#include <vector>

namespace gemmkit::runtime {

// What ptxas reported for one entry point; -1 where the log did not say.
struct PtxasReport {
  int registers = -1;
  int stack_bytes = -1;
  int spill_store_bytes = -1;
  int spill_load_bytes = -1;
};

struct CompiledKernel {
  std::string cubin;
  std::string log;
  PtxasReport report;
};

// The NVRTC options every kernel is built with (part of the cache key).
const std::vector<std::string>& nvrtc_options();

// "major.minor" of the NVRTC library in use (part of the cache key).
std::string nvrtc_version();

// Compiles `source`; throws Error(compile_error) with NVRTC's log on failure.
CompiledKernel compile_kernel(const std::string& source, const std::string& entry_point);

// Extracts the report for `entry_point` from a ptxas verbose log.
PtxasReport parse_ptxas_report(const std::string& log, const std::string& entry_point);

}  // namespace gemmkit::runtime
