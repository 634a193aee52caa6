#include "gemmkit/quantize.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <sstream>
#include <utility>

#include "api/device_checks.h"
#include "api/quantize.h"
#include "api/tensor_checks.h"
#include "codegen/kernel_source.h"
#include "core/checked_math.h"
#include "gemmkit/error.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"

namespace gemmkit {
namespace {

using namespace api;  // the argument checks of api/tensor_checks.h

// ---- argument checks --------------------------------------------------------------------------

// ---- launch plan --------------------------------------------------------------------------------

int64_t floor_pow2(int64_t v) {
  int64_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// Elements per lane along fast: vector accesses need x and q contiguous along fast, every row
// and batch start aligned to the vector, and blocks that do not split a vector unevenly.
int vector_width(const QuantizeParams& p, DType x_type) {
  if (p.x.fast_stride != 1 || p.q.fast_stride != 1) return 1;
  const int x_bytes = dtype_size(x_type);
  for (int v = 16 / x_bytes; v >= 4; v /= 2) {  // 8 or 4 (as quantize.cuh instantiates)
    if (p.fast % v != 0 || (p.block_fast % v != 0 && v % p.block_fast != 0)) continue;
    auto aligned = [&](const QuantizeOperand& o, int bytes) {
      return reinterpret_cast<uintptr_t>(o.data) % uintptr_t(v * bytes) == 0 &&
             (p.slow == 1 || o.slow_stride % v == 0) && (p.batch == 1 || o.batch_stride % v == 0);
    };
    if (aligned(p.x, x_bytes) && aligned(p.q, 1)) return v;
  }
  return 1;
}

// The loaded kernel for one type combination, looked up without hashing its source again.
const runtime::LoadedKernel& quantize_kernel(int device, const QuantizeVariant& variant) {
  return runtime::loaded_once(device, variant,
                              [&] { return runtime::KernelSpec{quantize_source(variant), kQuantizeKernel, 0}; });
}

void launch_quantize(const runtime::LoadedKernel& kernel, QuantizeParams params, const QuantizeLaunch& launch,
                     cudaStream_t stream) {
  void* args[] = {&params};
  runtime::check(runtime::driver().launch_kernel(kernel.function, launch.grid, 1, 1, GEMMKIT_QUANTIZE_THREADS, 1, 1,
                                                 launch.smem_bytes, stream, args, nullptr),
                 "cuLaunchKernel(quantize)");
}

}  // namespace

QuantizeProblem validate_quantize(const TensorView& x, const TensorView& q, const TensorView& scales,
                                  int64_t block_rows, int64_t block_cols, const QuantizeOptions& options) {
  check_form(x, "x");
  check_form(q, "q");
  check_form(scales, "scales");
  if (x.dtype != DType::bf16 && x.dtype != DType::f16 && x.dtype != DType::f32) {
    fail("x: dtype " + std::string(dtype_name(x.dtype)) + " is not supported; expected bf16, f16 or f32");
  }
  if (!is_fp8(q.dtype)) {
    fail("q: dtype " + std::string(dtype_name(q.dtype)) + " is not supported; expected e4m3 or e5m2");
  }
  if (scales.dtype != DType::f32 && scales.dtype != DType::ue8m0) {
    fail("scales: dtype " + std::string(dtype_name(scales.dtype)) +
         " is not supported; expected f32, or ue8m0 for power-of-two scales");
  }
  if (block_rows < 1) {
    fail("block_rows: " + std::to_string(block_rows) + "; expected a block of at least 1 row");
  }
  if (block_cols < 1) {
    fail("block_cols: " + std::to_string(block_cols) + "; expected a block of at least 1 column");
  }
  const int64_t rows = x.rows(), cols = x.cols(), batch = x.batch();
  if (q.rows() != rows || q.cols() != cols) {
    fail("q: shape " + shape_text(q) + "; expected x's R x C = " + std::to_string(rows) + " x " + std::to_string(cols));
  }
  if (q.batch() != batch) {
    fail("q: batch " + std::to_string(q.batch()) + "; expected x's batch " + std::to_string(batch));
  }
  const int64_t want_rows = ceil_div(rows, block_rows), want_cols = ceil_div(cols, block_cols);
  if (scales.rows() != want_rows || scales.cols() != want_cols) {
    fail("scales: shape " + shape_text(scales) + " does not fit blocks of " + std::to_string(block_rows) + " x " +
         std::to_string(block_cols) + " over x (" + std::to_string(rows) + " x " + std::to_string(cols) +
         "); expected ceil(R / block_rows) x ceil(C / block_cols) = " + std::to_string(want_rows) + " x " +
         std::to_string(want_cols));
  }
  if (scales.batch() != batch) {
    fail("scales: batch " + std::to_string(scales.batch()) + "; expected x's batch " + std::to_string(batch));
  }

  QuantizeProblem problem;
  problem.x = x;
  problem.q = q;
  problem.scales = scales;
  problem.block_rows = block_rows;
  problem.block_cols = block_cols;
  problem.power_of_two = options.power_of_two_scales || scales.dtype == DType::ue8m0;
  problem.empty = element_count(x) == 0;
  if (problem.empty) return problem;

  for (auto [t, name] : {std::pair{&x, "x"}, std::pair{&q, "q"}, std::pair{&scales, "scales"}}) {
    if (t->data == nullptr) fail(std::string(name) + ": data is null; expected a device pointer");
  }
  check_no_self_overlap(q, q.batch(), "q");
  check_no_self_overlap(scales, scales.batch(), "scales");
  const api::ByteRange x_range = byte_range(x, x.batch(), "x"), q_range = byte_range(q, q.batch(), "q"),
                       scales_range = byte_range(scales, scales.batch(), "scales");
  if (q_range.overlaps(x_range)) fail("q: memory overlaps x; expected q apart from x");
  if (scales_range.overlaps(x_range)) fail("scales: memory overlaps x; expected scales apart from x");
  if (scales_range.overlaps(q_range)) fail("scales: memory overlaps q; expected scales apart from q");
  return problem;
}

QuantizeLaunch plan_quantize(const QuantizeProblem& problem, int sm_count) {
  const TensorView &x = problem.x, &q = problem.q, &scales = problem.scales;
  const int64_t rows = x.rows(), cols = x.cols();
  // Lanes run along x's contiguous dimension: "fast" is the columns unless x is column-major.
  const bool fast_cols = !(rows > 1 && (cols == 1 || x.row_stride() < x.col_stride()));
  auto operand = [&](const TensorView& t) {
    return QuantizeOperand{t.data, t.rank == 3 ? t.batch_stride() : 0, fast_cols ? t.row_stride() : t.col_stride(),
                           fast_cols ? t.col_stride() : t.row_stride()};
  };
  QuantizeParams p{};
  p.x = operand(x);
  p.q = operand(q);
  p.scales = operand(scales);
  p.batch = x.batch();
  p.slow = fast_cols ? rows : cols;
  p.fast = fast_cols ? cols : rows;
  p.block_slow = std::min<int64_t>(fast_cols ? problem.block_rows : problem.block_cols, p.slow);
  p.block_fast = std::min<int64_t>(fast_cols ? problem.block_cols : problem.block_rows, p.fast);
  p.blocks_slow = ceil_div(p.slow, p.block_slow);
  p.blocks_fast = ceil_div(p.fast, p.block_fast);

  const int v = vector_width(p, x.dtype);
  const int loads = v == 1 ? 8 : 4;  // as kLoads in quantize.cuh
  const int64_t bs = p.block_slow, bf = p.block_fast, strip = 32 * v;
  // Blocks of 32 V or more, or of an uneven number of lanes, take units confined to one block
  // column, all lanes in that block; smaller ones share a strip, in aligned groups of lanes
  // (block_fast / V of them) or several to a lane (block_fast < V).
  const bool whole_warp = bf >= strip || (bf >= v && !is_pow2(bf / v));
  p.vec = v;
  p.unit_strips = whole_warp ? int(std::min<int64_t>(floor_pow2(ceil_div(bf, strip)), loads)) : 1;
  p.lane_width = whole_warp ? 32 : bf < v ? 1 : int(bf / v);
  const int64_t unit_len = p.unit_strips * strip;

  // Tiles of whole blocks: at least a strip wide, about kTarget elements.
  constexpr int64_t kTarget = 8192, kMaxFusedTile = 65536, kMaxTileBlocks = 4096;
  const int64_t kf = std::min<int64_t>(whole_warp ? 1 : ceil_div(std::min<int64_t>(p.fast, strip), bf), p.blocks_fast);
  int64_t ms = std::max<int64_t>(1, kTarget / (kf * bf * bs));
  ms = std::min<int64_t>({ms, std::max<int64_t>(1, kMaxTileBlocks / kf), p.blocks_slow});
  const int64_t fused_tiles = p.batch * ceil_div(p.blocks_slow, ms) * ceil_div(p.blocks_fast, kf);

  QuantizeLaunch launch;
  int64_t smem_rows = 1;
  p.smem_pitch = 1;
  // One launch when the tiles are small, or many enough to fill the device (and short enough
  // for the kernel's 32-bit counts within a tile).
  const bool fits = kf * bf <= (int64_t(1) << 28) && ms * bs <= (int64_t(1) << 28);
  // Register-resident tiles where each warp's share of whole blocks is one unit of one batch
  // (blocks up to 32 rows of up to 8 strips): x is read once.
  constexpr int64_t kWarps = GEMMKIT_QUANTIZE_THREADS / 32, kResidentLoads = 8;  // as quantize.cuh
  const int64_t resident_strips = whole_warp ? std::min<int64_t>(floor_pow2(ceil_div(bf, strip)), kResidentLoads) : 1;
  const int64_t resident_units = whole_warp ? ceil_div(bf, resident_strips * strip) : 1;
  const int64_t resident_warps_fast = floor_pow2(std::min(kWarps, resident_units));
  const int64_t resident_rows = (kResidentLoads / resident_strips) * (kWarps / resident_warps_fast);
  if (bf >= v && resident_units == resident_warps_fast && bs <= resident_rows) {
    p.phase = GEMMKIT_QUANTIZE_FUSED;
    p.resident = 1;
    p.unit_strips = int(resident_strips);
    const int64_t m = std::min<int64_t>(resident_rows / bs, p.blocks_slow);
    p.tile_fast = {kf * bf, 1, kf * bf, ceil_div(p.blocks_fast, kf), kf};
    p.tile_slow = {m * bs, 1, m * bs, ceil_div(p.blocks_slow, m), m};
    p.smem_pitch = int(kf);
    smem_rows = m;
  } else if (fits && (kf * bf * ms * bs <= kMaxFusedTile || fused_tiles >= 2 * int64_t(sm_count))) {
    p.phase = GEMMKIT_QUANTIZE_FUSED;
    p.tile_fast = {kf * bf, 1, kf * bf, ceil_div(p.blocks_fast, kf), kf};
    p.tile_slow = {ms * bs, 1, ms * bs, ceil_div(p.blocks_slow, ms), ms};
    p.smem_pitch = int(kf);
    smem_rows = ms;
  } else {
    // Two passes: tiles may cut blocks, whose amax meet in the global scratch.
    launch.two_pass = true;
    p.phase = GEMMKIT_QUANTIZE_AMAX;
    if (whole_warp && bf > 8 * unit_len) {
      const int64_t len = 8 * unit_len, per = ceil_div(bf, len);
      p.tile_fast = {bf, per, len, p.blocks_fast * per, 1};
    } else {
      p.tile_fast = {kf * bf, 1, kf * bf, ceil_div(p.blocks_fast, kf), kf};
      p.smem_pitch = int(kf);
    }
    const int64_t tile_rows = std::max<int64_t>(1, kTarget / std::min<int64_t>(p.tile_fast.len, p.fast));
    if (bs <= tile_rows) {
      const int64_t m = std::min<int64_t>({tile_rows / bs, p.blocks_slow, std::max<int64_t>(1, kMaxTileBlocks / p.smem_pitch)});
      p.tile_slow = {m * bs, 1, m * bs, ceil_div(p.blocks_slow, m), m};
      smem_rows = m;
    } else {
      const int64_t per = ceil_div(bs, tile_rows);
      p.tile_slow = {bs, per, tile_rows, p.blocks_slow * per, 1};
    }
    launch.amax_count = size_t(p.batch * p.blocks_slow * p.blocks_fast);
  }
  p.unit_per = whole_warp ? int(ceil_div(std::min<int64_t>(bf, p.tile_fast.len), p.unit_strips * strip)) : 0;
  while (!whole_warp && (int64_t(1) << p.block_fast_log2) < bf) ++p.block_fast_log2;  // a power of two here
  const int64_t units_fast = whole_warp ? p.unit_per : ceil_div(std::min<int64_t>(p.tile_fast.len, p.fast), strip);
  p.warps_fast = int(floor_pow2(std::min<int64_t>(GEMMKIT_QUANTIZE_THREADS / 32, units_fast)));
  p.tiles_per_batch = p.tile_slow.count * p.tile_fast.count;
  p.tiles = p.batch * p.tiles_per_batch;
  if (p.tiles >= (int64_t(1) << 31)) {  // the kernel counts tiles in 32 bits
    fail("x: " + std::to_string(p.batch) + " x " + std::to_string(rows) + " x " + std::to_string(cols) +
         " is too large to quantise in one call; expected fewer than 2^31 tiles of about 8192 elements");
  }

  launch.params = p;
  launch.grid = unsigned(std::min<int64_t>(p.tiles, int64_t(std::max(sm_count, 1)) * 16));
  launch.smem_bytes = unsigned(smem_rows * p.smem_pitch * int64_t(sizeof(unsigned)));
  return launch;
}

std::string quantize_source(const QuantizeVariant& v) {
  auto text = [](bool b) { return b ? "true" : "false"; };
  std::ostringstream config;  // the kernel's kernel_config.cuh
  config << "#include \"utility.cuh\"\n\nnamespace gemmkit::sm90 {\n\n"
         << "constexpr int kQuantXType = " << codegen::type_code(v.x) << ";\n"
         << "constexpr int kQuantQType = " << codegen::type_code(v.q) << ";\n"
         << "constexpr int kQuantScaleType = " << codegen::type_code(v.scales) << ";\n"
         << "constexpr bool kQuantPow2 = " << text(v.power_of_two || v.scales == DType::ue8m0) << ";\n"
         << "constexpr int kQuantVec = " << v.vec << ";\n"
         << "constexpr bool kQuantSubLane = " << text(v.vec > 1 && v.sub_lane) << ";\n\n"
         << "}  // namespace gemmkit::sm90\n";
  return "// gemmkit quantize kernel\n" + codegen::expand_includes("#include \"quantize.cuh\"\n", config.str());
}

QuantizeVariant quantize_variant(const QuantizeProblem& problem, const QuantizeLaunch& launch) {
  const QuantizeParams& p = launch.params;
  return {problem.x.dtype, problem.q.dtype, problem.scales.dtype, problem.power_of_two, p.vec,
          p.block_fast < p.vec};
}

void quantize(const TensorView& x, const TensorView& q, const TensorView& scales, int64_t block_rows,
              int64_t block_cols, const QuantizeOptions& options) {
  const QuantizeProblem problem = validate_quantize(x, q, scales, block_rows, block_cols, options);
  if (problem.empty) return;
  const api::Operand operands[] = {{&x, x.batch(), "x"}, {&q, q.batch(), "q"}, {&scales, scales.batch(), "scales"}};
  const int device = api::check_device_memory(operands);
  runtime::DeviceGuard guard(device);
  const runtime::DeviceInfo& info = runtime::device_info(device);
  runtime::require_sm90(info);
  const QuantizeLaunch launch = plan_quantize(problem, info.sm_count);
  const runtime::LoadedKernel& kernel = quantize_kernel(device, quantize_variant(problem, launch));
  cudaStream_t stream = options.stream;
  if (!launch.two_pass) {
    launch_quantize(kernel, launch.params, launch, stream);
    return;
  }
  void* scratch = nullptr;
  const size_t bytes = launch.amax_count * sizeof(unsigned);
  runtime::check(cudaMallocAsync(&scratch, bytes, stream), "cudaMallocAsync(quantize scratch)");
  try {
    runtime::check(cudaMemsetAsync(scratch, 0, bytes, stream), "cudaMemsetAsync(quantize scratch)");
    QuantizeParams params = launch.params;
    params.amax = static_cast<unsigned*>(scratch);
    params.phase = GEMMKIT_QUANTIZE_AMAX;
    launch_quantize(kernel, params, launch, stream);
    params.phase = GEMMKIT_QUANTIZE_APPLY;
    launch_quantize(kernel, params, launch, stream);
  } catch (...) {
    cudaFreeAsync(scratch, stream);
    throw;
  }
  runtime::check(cudaFreeAsync(scratch, stream), "cudaFreeAsync(quantize scratch)");
}

}  // namespace gemmkit
