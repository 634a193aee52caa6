#include "runtime/nvrtc_compiler.h"

#include <nvrtc.h>

#include <regex>

#include "gemmkit/error.h"

namespace gemmkit::runtime {
namespace {

void check_nvrtc(nvrtcResult status, const char* what) {
  if (status != NVRTC_SUCCESS) {
    throw Error(ErrorCode::compile_error, std::string(what) + " failed: " + nvrtcGetErrorString(status));
  }
}

// Owns an nvrtcProgram so every exit path destroys it.
struct Program {
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle) nvrtcDestroyProgram(&handle);
  }
};

}  // namespace

// --no-cache: NVRTC (12.9 and later) keeps a cache of its own, and a program it finds there
// comes back without ptxas' report, which the compile tests read. Our disk cache sits in front.
const std::vector<std::string>& nvrtc_options() {
  static const std::vector<std::string> options = {
      "--gpu-architecture=sm_90a", "--std=c++17", "--ptxas-options=--verbose", "--no-cache", "-DNDEBUG"};
  return options;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

CompiledKernel compile_kernel(const std::string& source, const std::string& entry_point) {
  Program program;
  check_nvrtc(nvrtcCreateProgram(&program.handle, source.c_str(), (entry_point + ".cu").c_str(), 0, nullptr, nullptr),
              "nvrtcCreateProgram");
  std::vector<const char*> options;
  for (const std::string& option : nvrtc_options()) options.push_back(option.c_str());
  nvrtcResult compiled = nvrtcCompileProgram(program.handle, int(options.size()), options.data());

  CompiledKernel result;
  size_t log_size = 0;
  check_nvrtc(nvrtcGetProgramLogSize(program.handle, &log_size), "nvrtcGetProgramLogSize");
  result.log.resize(log_size);
  check_nvrtc(nvrtcGetProgramLog(program.handle, result.log.data()), "nvrtcGetProgramLog");
  while (!result.log.empty() && result.log.back() == '\0') result.log.pop_back();
  if (compiled != NVRTC_SUCCESS) {
    throw Error(ErrorCode::compile_error,
                "NVRTC could not compile " + entry_point + ": " + nvrtcGetErrorString(compiled) + "\n" + result.log);
  }
  size_t cubin_size = 0;
  check_nvrtc(nvrtcGetCUBINSize(program.handle, &cubin_size), "nvrtcGetCUBINSize");
  result.cubin.resize(cubin_size);
  check_nvrtc(nvrtcGetCUBIN(program.handle, result.cubin.data()), "nvrtcGetCUBIN");
  result.report = parse_ptxas_report(result.log, entry_point);
  return result;
}

PtxasReport parse_ptxas_report(const std::string& log, const std::string& entry_point) {
  PtxasReport report;
  const std::string marker = "Function properties for " + entry_point;
  size_t at = log.find(marker);
  if (at == std::string::npos) return report;
  std::smatch match;
  std::string tail = log.substr(at + marker.size());
  static const std::regex frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  if (std::regex_search(tail, match, frame)) {
    report.stack_bytes = std::stoi(match[1]);
    report.spill_store_bytes = std::stoi(match[2]);
    report.spill_load_bytes = std::stoi(match[3]);
  }
  static const std::regex used(R"(Used (\d+) registers)");
  if (std::regex_search(tail, match, used)) report.registers = std::stoi(match[1]);
  return report;
}

}  // namespace gemmkit::runtime
