// Writes the cubin of every kernel the compile tests build (compile_cases.h, and the reference
// kernel), for scripts/sass_diff.sh: DIR/NNNN.cubin and DIR/index.tsv, one "NNNN<TAB>label"
// line per kernel in enumeration order.
// Usage: kernel_cubins DIR [THREADS]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "codegen/kernel_source.h"
#include "compile_cases.h"
#include "runtime/nvrtc_compiler.h"

int main(int argc, char** argv) {
  using namespace gemmkit;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [THREADS]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int threads = argc > 2 ? std::max(1, std::atoi(argv[2])) : 1;
  struct Job {
    std::string source, entry, label;
  };
  std::vector<Job> jobs;
  for (const testing::CompileCase& c : testing::all_compile_cases()) {
    jobs.push_back({codegen::gemm_source(c.config), codegen::gemm_kernel_name(c.config), c.what});
  }
  jobs.push_back({codegen::reference_source({.has_c = true}), codegen::kReferenceKernel, "reference"});

  std::vector<std::string> names(jobs.size());
  std::atomic<size_t> next{0};
  std::atomic<int> failures{0};
  auto work = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      char name[16];
      std::snprintf(name, sizeof name, "%04zu", i);
      names[i] = name;
      try {
        const runtime::CompiledKernel k = runtime::compile_kernel(jobs[i].source, jobs[i].entry);
        std::ofstream(dir + "/" + name + ".cubin", std::ios::binary) << k.cubin;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s (%s): %s\n", name, jobs[i].label.c_str(), e.what());
        ++failures;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();
  std::ofstream index(dir + "/index.tsv");
  for (size_t i = 0; i < jobs.size(); ++i) index << names[i] << '\t' << jobs[i].label << '\n';
  return failures ? 1 : 0;
}
