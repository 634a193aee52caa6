// Kernels ready to launch: compiled once (or read from the disk cache) and loaded once per
// device and process.
#pragma once

#include <cuda.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/disk_cache.h"

namespace gemmkit::runtime {

struct LoadedKernel {
  CUfunction function = nullptr;
  int registers = 0;
  int local_bytes = 0;  // per-thread local memory: spills or stack, 0 when clean
  bool set_aside = false;  // never launched (set_aside_kernel)
};

// The kernel `entry_point` of `source` loaded on `device` (the current device must be
// `device`), with its dynamic shared-memory limit raised to `smem_bytes`, and where
// `ctas_per_sm` is above 1, the SM's shared memory at its largest, so that they fit beside each
// other. Thread-safe; the reference stays valid for the life of the process.
const LoadedKernel& load_kernel(int device, const std::string& source, const std::string& entry_point,
                                int smem_bytes, int ctas_per_sm = 1);

// What load_kernel takes: a kernel's source, its entry point, its dynamic shared memory and the
// CTAs that share an SM.
struct KernelSpec {
  std::string source, entry;
  int smem_bytes = 0;
  int ctas_per_sm = 1;
};

// The kernel that `key` names on `device`: loaded from make()'s KernelSpec on the first call for
// that key and device, then found by the key alone (a kernel's source, load_kernel's own key, is
// long to generate and to compare). One table per caller (each passes a lambda of its own type);
// thread-safe.
template <class Key, class Make>
const LoadedKernel& loaded_once(int device, const Key& key, const Make& make) {
  static std::mutex mutex;
  static std::map<std::pair<int, Key>, const LoadedKernel*> kernels;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = kernels.find({device, key}); it != kernels.end()) return *it->second;
  }
  const KernelSpec spec = make();
  const LoadedKernel& kernel = load_kernel(device, spec.source, spec.entry, spec.smem_bytes, spec.ctas_per_sm);
  std::lock_guard<std::mutex> lock(mutex);
  kernels[{device, key}] = &kernel;
  return kernel;
}

// Marks a loaded kernel as one the caller will not launch (a fused kernel that spills, which
// the plan replaces by a narrower tile's: dispatch/plan.cpp). Thread-safe. (load_kernel keeps no
// kernel that spills in the disk cache: each process compiles such a one again.)
void set_aside_kernel(const LoadedKernel& kernel);

// Kernels loaded in this process, and not set aside, that use local memory (spills or a stack),
// which the kernels are written never to: each one's entry point and its source's first line (a
// GEMM kernel's config, codegen/kernel_source.cpp), with the bytes it uses per thread.
struct LocalMemoryUse {
  std::string kernel;
  int bytes_per_thread = 0;
};
std::vector<LocalMemoryUse> kernels_using_local_memory();

// Compiles `source` into the disk cache unless it is there already; needs no GPU. Returns
// whether it compiled.
bool precompile_kernel(const std::string& source, const std::string& entry_point);

// The process-wide disk cache (directory from DiskCache::default_directory()).
const DiskCache& kernel_disk_cache();

// The disk-cache key of a source: everything that changes the compiled binary.
std::string kernel_cache_key(const std::string& source, const std::string& entry_point);

}  // namespace gemmkit::runtime
