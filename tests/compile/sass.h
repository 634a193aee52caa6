// A compiled kernel's SASS, for tests that pin where the compiler placed instructions. Needs
// cuobjdump and the nvdisasm it runs: GEMMKIT_CUOBJDUMP names cuobjdump, else it is looked for on
// PATH and in the CUDA toolkit (the toolkit on the GPU machines has both; CI installs PyPI's
// nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace gemmkit::testing {

inline std::optional<std::string> find_cuobjdump() {
  if (const char* named = std::getenv("GEMMKIT_CUOBJDUMP"); named && *named) return std::string(named);
  if (std::system("command -v cuobjdump > /dev/null 2>&1") == 0) return std::string("cuobjdump");
  if (std::filesystem::exists("/usr/local/cuda/bin/cuobjdump")) return std::string("/usr/local/cuda/bin/cuobjdump");
  return std::nullopt;
}

// cuobjdump -sass of `cubin`, or nullopt where it cannot run.
inline std::optional<std::string> disassemble(const std::string& cuobjdump, const std::string& cubin,
                                              const std::string& scratch_name) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() / (scratch_name + ".cubin");
  std::ofstream(file, std::ios::binary) << cubin;
  const std::string command = cuobjdump + " -sass " + file.string() + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return std::nullopt;
  std::string sass;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) sass.append(buffer, n);
  const int status = pclose(pipe);
  std::filesystem::remove(file);
  if (status != 0) return std::nullopt;
  return sass;
}

// A kernel's wgmma batches in its SASS: the instructions from a WARPGROUP.ARRIVE (wgmma.fence)
// to the wgmma that closes the group (gsb0). Counts the batches, the wgmma in them, and the
// shared-memory loads (LDS) placed between a batch's first wgmma and its last.
struct WgmmaBatches {
  int batches = 0, wgmma = 0, loads_among = 0;
  std::string first_load_among;  // that load's line, for the failure message
};

inline WgmmaBatches wgmma_batches(const std::string& sass) {
  WgmmaBatches b;
  bool open = false, started = false;  // inside a batch; past its first wgmma
  size_t at = 0;
  while (at < sass.size()) {
    size_t end = sass.find('\n', at);
    if (end == std::string::npos) end = sass.size();
    const std::string line = sass.substr(at, end - at);
    at = end + 1;
    const bool wgmma = line.find("GMMA.") != std::string::npos;  // HGMMA, QGMMA
    if (line.find("WARPGROUP.ARRIVE") != std::string::npos) {
      open = true;
      started = false;
    } else if (open && wgmma) {
      ++b.wgmma;
      started = true;
      if (line.find("gsb0") != std::string::npos) {
        ++b.batches;
        open = false;
      }
    } else if (open && started && line.find(" LDS") != std::string::npos) {
      if (b.loads_among++ == 0) b.first_load_among = line;
    }
  }
  return b;
}

}  // namespace gemmkit::testing
