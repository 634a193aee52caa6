#include "runtime/utility_kernels.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "codegen/kernel_source.h"
#include "core/checked_math.h"
#include "kernels/sm90/params.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "runtime/launch.h"
#include "runtime/tensor_map.h"

namespace gemmkit::runtime {
namespace {

// The utility kernels ride in the reference module (kernels/sm90/reference.cuh, stage.cuh), of
// one fixed type set. Each is looked up once per device: the module's source, the key of
// load_kernel's cache, is long to build and to compare, and staging runs on every call of an
// unaligned problem.
const LoadedKernel& utility_kernel(const char* entry) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  return loaded_once(device, std::string_view(entry),  // entries are literals
                     [&] { return KernelSpec{codegen::reference_source({}), entry, 0}; });
}

// A job's kernel parameters. Rows are copied a warp's 512 bytes at a time, 8 warps a block;
// tiles 64 x 64 a block (always with groups, whose copy holds 128 more cols a group). With groups,
// every block first builds the table of them (stage.cuh, pad_groups), so there are few blocks,
// about one wave of them, each copying many tiles: a block a tile took 4.8x as long (DeepSeek-V3
// up's weight gradient, H100).
StageCopy stage_copy_params(const StageJob& job) {
  const MatrixRef& m = job.m;
  const int64_t width = job.width > 0 ? job.width : job.cols;
  const int64_t copy_cols = job.cols + Problem::kGroupKBlock * job.group_count;
  const int64_t units = m.col_stride == 1 && job.group_count == 0
                            ? (job.batch * job.rows * ((width * dtype_size(m.dtype) + 511) / 512) + 7) / 8
                            : job.batch * ((job.rows + 63) / 64) * ((copy_cols + 63) / 64);
  StageCopy copy{m.data,  m.batch_stride, m.row_stride, m.col_stride, job.batch,
                 job.rows, job.cols,      job.dst,      job.ld,       std::min<int64_t>(units, job.group_count > 0 ? 1024 : 1 << 16),
                 width,    0,             job.groups.sizes, job.group_count, job.groups.int64 ? 1 : 0,
                 job.padded_ends};
  for (int b = 0; b < 8; ++b) copy.shifts |= uint64_t(job.shift[b] & 15) << (4 * b);
  return copy;
}

}  // namespace

void fill_random(void* data, DType type, int64_t count, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (count <= 0) return;
  const LoadedKernel& kernel = utility_kernel("gemmkit_fill_random");
  int type_code = int(type);  // GEMMKIT_* in utility.cuh follow DType's order
  void* args[] = {&data, &type_code, &count, &seed, &lo, &hi};
  unsigned blocks = unsigned(std::min<int64_t>((count + 255) / 256, 1 << 16));
  check(driver().launch_kernel(kernel.function, blocks, 1, 1, 256, 1, 1, 0, stream, args, nullptr),
        "cuLaunchKernel(fill)");
}

void stage_copies(std::span<const StageJob> jobs, cudaStream_t stream) {
  for (size_t i = 0; i < jobs.size();) {
    // This job and the next, where its elements are of the same size.
    const int element_bytes = dtype_size(jobs[i].m.dtype);
    const bool pair = i + 1 < jobs.size() && dtype_size(jobs[i + 1].m.dtype) == element_bytes;
    StageCopy first = stage_copy_params(jobs[i]), second{};
    if (pair) second = stage_copy_params(jobs[i + 1]);
    i += pair ? 2 : 1;
    const int64_t blocks = first.blocks + second.blocks;
    if (blocks == 0) continue;  // nothing to copy
    const LoadedKernel& kernel = utility_kernel(element_bytes == 1   ? "gemmkit_stage_8bit"
                                                : element_bytes == 2 ? "gemmkit_stage_16bit"
                                                                     : "gemmkit_stage_32bit");
    void* args[] = {&first, &second};
    launch_kernel(kernel, unsigned(blocks), 1, 1, 256, 0, 1, true, stream, args);
  }
}

void gpu_spin(int64_t cycles, cudaStream_t stream) {
  const LoadedKernel& kernel = utility_kernel("gemmkit_spin");
  void* args[] = {&cycles};
  check(driver().launch_kernel(kernel.function, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr), "cuLaunchKernel(spin)");
}

void check_group_sizes(const GroupRef& groups, int64_t count, int64_t bound, cudaStream_t stream) {
  const LoadedKernel& kernel = utility_kernel("gemmkit_check_group_sizes");
  const void* sizes = groups.sizes;
  int int64 = groups.int64 ? 1 : 0, groups_count = int(count), ends = groups.layout == GroupLayout::contiguous ? 1 : 0;
  void* args[] = {&sizes, &int64, &groups_count, &bound, &ends};
  check(driver().launch_kernel(kernel.function, 1, 1, 1, unsigned(count), 1, 1, 0, stream, args, nullptr),
        "cuLaunchKernel(check_group_sizes)");
}

void zero_unowned_rows(const MatrixRef& d, const GroupRef& groups, int64_t count, int64_t rows, int64_t cols,
                       cudaStream_t stream) {
  const LoadedKernel& kernel = utility_kernel("gemmkit_zero_unowned_rows");
  void* data = d.data;
  int64_t batch_stride = d.batch_stride, row_stride = d.row_stride, col_stride = d.col_stride;
  int element_bytes = dtype_size(d.dtype), int64 = groups.int64 ? 1 : 0, groups_count = int(count);
  const bool masked = groups.layout == GroupLayout::masked;
  int ends = masked ? 0 : 1;
  const void* sizes = groups.sizes;
  void* args[] = {&data, &batch_stride, &row_stride, &col_stride, &element_bytes, &rows, &cols, &sizes,
                  &int64, &groups_count, &ends};
  const int64_t row_blocks = (rows + 15) / 16;  // kUnownedRowsPerBlock, kernels/sm90/unowned_rows.cuh
  check(driver().launch_kernel(kernel.function, unsigned(std::min<int64_t>(row_blocks, 1 << 16)), masked ? unsigned(count) : 1,
                               1, 256, 1, 1, 0, stream, args, nullptr),
        "cuLaunchKernel(zero_unowned_rows)");
}

void widen_e2m1(const MatrixRef& codes, int64_t batch, int64_t lines, int64_t k, void* dst, int64_t ld,
                cudaStream_t stream) {
  if (batch * lines * k == 0) return;
  const LoadedKernel& kernel = utility_kernel("gemmkit_widen_e2m1");
  const MatrixRef bytes = packed_bytes(codes, false);  // lines are B's columns: K contiguous
  const void* src = bytes.data;
  int64_t src_batch = batch > 1 ? bytes.batch_stride : 0, src_ld = bytes.col_stride;
  int64_t dst_batch = lines * ld;
  void* args[] = {&src, &src_batch, &src_ld, &dst, &dst_batch, &ld, &batch, &lines, &k};
  const int64_t count = batch * lines * ((k + 1) / 2);
  check(driver().launch_kernel(kernel.function, unsigned(std::min<int64_t>((count + 255) / 256, 1 << 16)), 1, 1, 256,
                               1, 1, 0, stream, args, nullptr),
        "cuLaunchKernel(widen_e2m1)");
}

namespace {

// A launch of one widening kernel: a thread per chunk of 16 codes, at most 2^16 blocks.
void launch_widening(const char* entry, int64_t chunks, void** args, cudaStream_t stream) {
  const LoadedKernel& kernel = utility_kernel(entry);
  check(driver().launch_kernel(kernel.function, unsigned(std::min<int64_t>((chunks + 255) / 256, 1 << 16)), 1, 1, 256,
                               1, 1, 0, stream, args, nullptr),
        entry);
}

}  // namespace

void widen_u4_e4m3(const MatrixRef& weights, const ScaleRef& scale, int64_t batch, int64_t lines, int64_t k, void* dst,
                   int64_t ld, float* scales, int64_t scales_ld, cudaStream_t stream) {
  if (batch * lines * k == 0) return;
  const MatrixRef bytes = packed_bytes(weights, true);
  const void* src = bytes.data;
  const void* scale_data = scale.m.data;
  const void* zeros = scale.zeros.data;
  int scale_type = int(scale.m.dtype);
  int64_t src_batch = batch > 1 ? bytes.batch_stride : 0, src_ld = bytes.row_stride;
  int64_t s_batch = batch > 1 ? scale.m.batch_stride : 0, s_line = scale.m.row_stride, s_group = scale.m.col_stride;
  int64_t z_batch = batch > 1 ? scale.zeros.batch_stride : 0, z_line = scale.zeros.row_stride,
          z_group = scale.zeros.col_stride;
  int64_t group = scale.block_cols, dst_batch = lines * ld;
  void* args[] = {&src,     &src_batch, &src_ld, &scale_data, &s_batch, &s_line,    &s_group, &zeros, &z_batch, &z_line,
                  &z_group, &scale_type, &group, &dst,        &dst_batch, &ld,       &scales,  &scales_ld, &batch, &lines,
                  &k};
  launch_widening("gemmkit_widen_u4_e4m3", batch * lines * ceil_div(k, 16), args, stream);
}

void widen_mxfp4_bf16(const MatrixRef& weights, const MatrixRef& exponents, int64_t batch, int64_t lines, int64_t k,
                      void* dst, int64_t ld, cudaStream_t stream) {
  if (batch * lines * k == 0) return;
  const MatrixRef bytes = packed_bytes(weights, true);
  const void* src = bytes.data;
  const void* e = exponents.data;
  int64_t src_batch = batch > 1 ? bytes.batch_stride : 0, src_ld = bytes.row_stride;
  int64_t e_batch = batch > 1 ? exponents.batch_stride : 0, e_line = exponents.row_stride, e_granule = exponents.col_stride;
  int64_t dst_batch = lines * ld;
  void* args[] = {&src, &src_batch, &src_ld, &e, &e_batch, &e_line, &e_granule, &dst, &dst_batch, &ld, &batch, &lines, &k};
  launch_widening("gemmkit_widen_mxfp4_bf16", batch * lines * ceil_div(k, 16), args, stream);
}

const LoadedKernel& empty_kernel() { return utility_kernel("gemmkit_empty"); }

void launch_empty(const LoadedKernel& kernel, unsigned blocks, unsigned threads, cudaStream_t stream) {
  KernelMaps maps{};
  GemmParams params{};
  void* args[] = {&maps, &params};
  launch_kernel(kernel, blocks, 1, 1, threads, 0, 1, true, stream, args);  // as launch_gemm launches
}

}  // namespace gemmkit::runtime
