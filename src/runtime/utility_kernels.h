// Small helper kernels the library itself needs: a random fill (tuning runs on scratch inputs),
// a spin (timings queue their launches behind it) and the staging copy of operands TMA
// cannot read as they are.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <span>

#include "core/problem.h"
#include "runtime/kernel_cache.h"

namespace gemmkit::runtime {

// Fills `count` elements at `data` (device memory of `type`) with uniform values in [lo, hi).
void fill_random(void* data, DType type, int64_t count, uint64_t seed, float lo, float hi, cudaStream_t stream);

// Stops the stream's context with a message (a trap) where a grouped problem's `count` sizes
// (1 to 1024) are out of range: ends decreasing or past `bound`, counts outside [0, bound].
void check_group_sizes(const GroupRef& groups, int64_t count, int64_t bound, cudaStream_t stream);

// Zeros in the rows of `d` that no group of grouped_gemm's owns (GroupSizes::zero_unowned): `count`
// groups over `rows` x `cols`, past the last end (contiguous: d one matrix) or past each group's
// count (masked: d batched by group).
void zero_unowned_rows(const MatrixRef& d, const GroupRef& groups, int64_t count, int64_t rows, int64_t cols,
                       cudaStream_t stream);

// A staging copy: the matrix `m` of 8- or 16-bit elements, seen as [batch] rows x cols (any
// strides), copied into `dst` densely: rows `ld` elements apart, batches rows * ld apart.
// Where m's cols are contiguous, copy b < 8 may be shifted (StageCopy in kernels/sm90/params.h):
// `width` elements of each of its rows written (0: cols), holding the source's columns
// shift[b] (below 16) to their left, zeros where there are none.
// With `groups` (an FP8 weight gradient's operands: cols are tokens in contiguous groups), group
// g's cols are copied from a multiple of 128 on, zero-filled to whole 128s (at least one): dst's
// rows need ld >= cols + 128 G. `padded_ends`, where given, receives the copy's G group ends.
struct StageJob {
  MatrixRef m;
  int64_t batch, rows, cols;
  void* dst;
  int64_t ld;
  int64_t width = 0;
  std::array<int, 8> shift{};
  GroupRef groups{};
  int64_t group_count = 0;
  int* padded_ends = nullptr;
};

// Runs the copies (kernels/sm90/stage.cuh), those of one element size in one launch. The launch
// waits for the kernels before it in the stream and lets the one after it start early
// (programmatic dependent launch).
void stage_copies(std::span<const StageJob> jobs, cudaStream_t stream);

// FP4 x FP4: the e2m1 codes of `codes` (4-bit, K contiguous: [batch] lines x k codes, seen
// through packed_bytes) widened exactly to e4m3 bytes at `dst`: lines `ld` bytes apart, batches
// lines * ld (kernels/sm90/widened_copies.cuh).
void widen_e2m1(const MatrixRef& codes, int64_t batch, int64_t lines, int64_t k, void* dst, int64_t ld,
                cudaStream_t stream);

// Many tokens against 4-bit weights (kernels/sm90/widened_copies.cuh): `weights`, a problem's A
// ([batch] lines x k codes, K contiguous), widened into `dst`, lines `ld` apart and batches
// lines * ld (ld in elements, a multiple of 16: the kernels write 16 at a time):
// - widen_u4_e4m3: u4 in groups along K of a multiple of 128 (`scale`: A's group scales and zero
//   points), as e4m3 q - z, and their scales as f32 per 128 of K at `scales`, lines contiguous:
//   [batch][ceil(k / 128)][scales_ld].
// - widen_mxfp4_bf16: e2m1 with ue8m0 `exponents` per 32 of K (lines x granules), as bf16 values.
void widen_u4_e4m3(const MatrixRef& weights, const ScaleRef& scale, int64_t batch, int64_t lines, int64_t k, void* dst,
                   int64_t ld, float* scales, int64_t scales_ld, cudaStream_t stream);
void widen_mxfp4_bf16(const MatrixRef& weights, const MatrixRef& exponents, int64_t batch, int64_t lines, int64_t k,
                      void* dst, int64_t ld, cudaStream_t stream);

// Keeps the stream's GPU busy for about `cycles` SM clock cycles.
void gpu_spin(int64_t cycles, cudaStream_t stream);

// bench --overhead's bare launch, the floor under a GEMM call's host time: an empty kernel of the
// current device, with the TMA GEMM kernel's parameters, launched with them zeroed, `blocks` x
// `threads` and no dynamic shared memory through cuLaunchKernelEx with the programmatic-launch
// attribute, as launch_gemm launches. The kernel is looked up once, apart, since a lookup is no
// part of a launch.
const LoadedKernel& empty_kernel();
void launch_empty(const LoadedKernel& kernel, unsigned blocks, unsigned threads, cudaStream_t stream);

}  // namespace gemmkit::runtime
