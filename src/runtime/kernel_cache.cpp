#include "runtime/kernel_cache.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "runtime/driver.h"
#include "runtime/nvrtc_compiler.h"

namespace gemmkit::runtime {

const DiskCache& kernel_disk_cache() {
  static const DiskCache cache(DiskCache::default_directory());
  return cache;
}

std::string kernel_cache_key(const std::string& source, const std::string& entry_point) {
  std::string key = "arch=sm_90a\nnvrtc=" + nvrtc_version() + "\nentry=" + entry_point + "\noptions=";
  for (const std::string& option : nvrtc_options()) key += option + " ";
  return key + "\nsource=\n" + source;
}

bool precompile_kernel(const std::string& source, const std::string& entry_point) {
  const std::string key = kernel_cache_key(source, entry_point);
  if (kernel_disk_cache().load(key)) return false;
  kernel_disk_cache().store(key, compile_kernel(source, entry_point).cubin);
  return true;
}

namespace {

// Every kernel loaded in the process, by device, entry point and source.
struct LoadedKernels {
  std::mutex mutex;
  std::map<std::tuple<int, std::string, std::string>, std::unique_ptr<LoadedKernel>> kernels;
};

LoadedKernels& loaded_kernels() {
  static LoadedKernels loaded;
  return loaded;
}

}  // namespace

const LoadedKernel& load_kernel(int device, const std::string& source, const std::string& entry_point,
                                int smem_bytes, int ctas_per_sm) {
  LoadedKernels& loaded = loaded_kernels();
  // One lock over compile and load: a second thread asking for the same kernel waits rather
  // than compiling it again.
  std::lock_guard<std::mutex> lock(loaded.mutex);
  auto& slot = loaded.kernels[{device, entry_point, source}];
  if (slot) return *slot;

  const std::string key = kernel_cache_key(source, entry_point);
  std::string cubin;
  if (auto hit = kernel_disk_cache().load(key)) {
    cubin = std::move(*hit);
  } else {
    const CompiledKernel compiled = compile_kernel(source, entry_point);
    cubin = compiled.cubin;
    // Best effort: a read-only cache only costs time. A kernel that spills or keeps a stack is
    // not kept: none is meant to run (a fused epilogue's plan sets one aside for a narrower tile,
    // dispatch/plan.cpp), and the cache holds only kernels fit to.
    const PtxasReport& r = compiled.report;
    if (r.spill_store_bytes <= 0 && r.spill_load_bytes <= 0 && r.stack_bytes <= 0) kernel_disk_cache().store(key, cubin);
  }

  const Driver& d = driver();
  CUmodule module = nullptr;
  check(d.module_load_data(&module, cubin.data()), "cuModuleLoadData");
  auto kernel = std::make_unique<LoadedKernel>();
  check(d.module_get_function(&kernel->function, module, entry_point.c_str()), "cuModuleGetFunction");
  if (smem_bytes > 48 * 1024) {
    check(d.func_set_attribute(kernel->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes),
          "cuFuncSetAttribute(max dynamic shared memory)");
  }
  if (ctas_per_sm > 1) {
    check(d.func_set_attribute(kernel->function, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100),
          "cuFuncSetAttribute(shared memory carveout)");
  }
  check(d.func_get_attribute(&kernel->registers, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel->function),
        "cuFuncGetAttribute(registers)");
  check(d.func_get_attribute(&kernel->local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, kernel->function),
        "cuFuncGetAttribute(local memory)");
  slot = std::move(kernel);
  return *slot;
}

void set_aside_kernel(const LoadedKernel& kernel) {
  LoadedKernels& loaded = loaded_kernels();
  std::lock_guard<std::mutex> lock(loaded.mutex);
  const_cast<LoadedKernel&>(kernel).set_aside = true;  // every LoadedKernel is the map's own
}

std::vector<LocalMemoryUse> kernels_using_local_memory() {
  LoadedKernels& loaded = loaded_kernels();
  std::lock_guard<std::mutex> lock(loaded.mutex);
  std::vector<LocalMemoryUse> uses;
  for (const auto& [key, kernel] : loaded.kernels) {
    if (!kernel || kernel->local_bytes == 0 || kernel->set_aside) continue;
    const std::string& source = std::get<2>(key);
    uses.push_back({std::get<1>(key) + " (" + source.substr(0, source.find('\n')) + ")", kernel->local_bytes});
  }
  return uses;
}

}  // namespace gemmkit::runtime
