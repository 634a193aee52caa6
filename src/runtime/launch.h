// Launches of the generated kernels on the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include "core/kernel_config.h"
#include "core/problem.h"
#include "kernels/sm90/params.h"
#include "runtime/kernel_cache.h"

namespace gemmkit::runtime {

// One launch of `kernel`, a grid of gx x gy x gz blocks of `threads` with `smem` bytes of
// dynamic shared memory; with cluster > 1, that many consecutive blocks along x form a cluster;
// `programmatic`: it may start while the kernel before it in the stream still runs, which the
// kernel must wait for (griddepcontrol.wait) before touching memory.
void launch_kernel(const LoadedKernel& kernel, unsigned gx, unsigned gy, unsigned gz, unsigned threads, unsigned smem,
                   int cluster, bool programmatic, cudaStream_t stream, void** args);

// Zeroes the outputs of a fused epilogue's reductions (EpilogueRef::zeroed_bytes) on `stream`,
// before the kernel that adds into them.
void zero_reductions(const EpilogueRef& epilogue, cudaStream_t stream);

// Runs the GEMM kernel that `config` describes (TMA, GEMV or fallback) for problem `p`, its
// scratch from the scratch allocator where one is set (runtime/workspace.h). Returns false,
// launching nothing, where the config stages an operand and, with no allocator set, the stream's
// scratch memory would have to grow while the stream is being captured, or where the TMA kernel
// would have kMaxWorkUnits work units or more. Throws what the allocator throws.
bool launch_gemm(const LoadedKernel& kernel, const KernelConfig& config, const Problem& p, int sm_count,
                 cudaStream_t stream);

// The TMA kernel numbers its work units (tiles times split-K parts) in 32 bits.
inline constexpr int64_t kMaxWorkUnits = int64_t(1) << 31;

// n / d as (n * mul) >> shift for every n below 2^31, for 1 <= d < 2^31 (params.h).
FastDivisor fast_divisor(int64_t d);

// Runs the double-precision reference: ref and ref_abs are dense [batch][m][n] device arrays.
void launch_reference(const LoadedKernel& kernel, const Problem& p, double* ref, double* ref_abs,
                      cudaStream_t stream);

}  // namespace gemmkit::runtime
