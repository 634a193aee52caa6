#include "runtime/launch.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <utility>
#include <unordered_map>

#include "core/checked_math.h"
#include "kernels/sm90/params.h"
#include "kernels/sm90/smem_layout.h"
#include "runtime/driver.h"
#include "runtime/tensor_map.h"
#include "runtime/utility_kernels.h"
#include "runtime/words_hash.h"
#include "runtime/workspace.h"

namespace gemmkit::runtime {
namespace {

GemmMatrix matrix(const MatrixRef& m) { return {m.data, m.batch_stride, m.row_stride, m.col_stride}; }

GemmScale scale(const ScaleRef& s) {
  return {s.m.data, s.m.batch_stride, s.m.row_stride, s.m.col_stride, s.block_rows, s.block_cols, matrix(s.zeros)};
}

static_assert(kMaxEpilogueTensors == GEMMKIT_MAX_EPILOGUE_TENSORS);

GemmParams params(const Problem& p) {
  GemmParams args{p.m,         p.n,         p.k,         p.batch,     p.alpha,          p.beta,           matrix(p.a),
                  matrix(p.b), matrix(p.c), matrix(p.d), scale(p.scale_a), scale(p.scale_b), nullptr,     nullptr,
                  1,           TileOrder{},  p.groups.sizes, p.groups.int64 ? 1 : 0, EpilogueParams{},
                  matrix(p.b2), matrix(p.scale_d), scale(p.scale_b2)};
  for (int i = 0; i < p.epilogue.tensor_count; ++i) {
    const MatrixRef& t = p.epilogue.tensors[size_t(i)];
    args.epilogue.tensors[i] = {t.data, t.batch_stride, t.row_stride, t.col_stride};
  }
  return args;
}


MatrixRef transposed(MatrixRef m) {
  std::swap(m.row_stride, m.col_stride);
  return m;
}

// The staged copy of an operand seen as [batch] rows x cols, dense along cols: rows `ld`
// elements apart, one copy per batch where the operand has a batch stride, else one for all.
// Rows are rounded up to 128 bytes, not just the 16 TMA needs: each row of a 128-byte-deep TMA
// box then reads one 128-byte L2 line, and none starts off a 32-byte sector, which TMA reads at a
// fraction of its speed (rows_aligned, dispatch/cost_model.cpp).
struct StagedOperand {
  MatrixRef source;  // the operand as rows x cols
  int64_t rows = 0, cols = 0, ld = 0, copies = 0;
  bool transposed = false;  // rows x cols is the operand transposed
  size_t bytes = 0;
};

// `m` is the operand as the kernel takes it (A: M x K, B: K x N); the copy runs along its cols
// unless `along_rows`.
StagedOperand staged_operand(const MatrixRef& m, int64_t batch, int64_t rows, int64_t cols, bool along_rows, bool staged) {
  if (!staged) return {};
  StagedOperand s;
  s.transposed = along_rows;
  s.source = along_rows ? transposed(m) : m;
  s.rows = along_rows ? cols : rows;
  s.cols = along_rows ? rows : cols;
  const int64_t row_elements = 128 / dtype_size(m.dtype);
  s.ld = (s.cols + row_elements - 1) / row_elements * row_elements;
  s.copies = batch > 1 && m.batch_stride != 0 ? batch : 1;
  s.bytes = size_t(s.copies * s.rows * s.ld * dtype_size(m.dtype));
  return s;
}

// The copy of the operand into `scratch`; with `padded_groups`, of p's groups along K (the copy's
// cols), which take p.k of the source's cols, and their ends in the copy to `padded_ends` where
// given.
StageJob stage_job(const StagedOperand& s, void* scratch, const Problem& p, bool padded_groups, int* padded_ends) {
  StageJob job{s.source, s.copies, s.rows, s.cols, scratch, s.ld};
  if (padded_groups) {
    job.cols = p.k;
    job.groups = p.groups;
    job.group_count = p.batch;
    job.padded_ends = padded_ends;
  }
  return job;
}

// The view of the operand's copy in `scratch`, as the kernel takes the operand.
MatrixRef staged_view(const StagedOperand& s, void* scratch) {
  MatrixRef copy = s.source;
  copy.data = scratch;
  copy.batch_stride = s.copies > 1 ? s.rows * s.ld : 0;
  copy.row_stride = s.ld;
  copy.col_stride = 1;
  return s.transposed ? transposed(copy) : copy;
}

// Row classes (row_classes.cuh): where row r of each group of 8 rows of A starts, in elements past
// the 16-byte granule that holds A's first element.
int64_t row_class_start(const MatrixRef& a, int r) {
  return int64_t(reinterpret_cast<uintptr_t>(a.data) % 16 / 2) + r * a.row_stride;
}

// A as row classes see it: one row per group of 8 rows, from A's first granule to the end of
// the group's last row.
MatrixRef row_class_groups(const MatrixRef& a) {
  MatrixRef groups = a;
  groups.data = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(a.data) / 16 * 16);
  groups.row_stride = 8 * a.row_stride;
  return groups;
}

// B's copy for each class, shifted right as far as the class's rows of A: B (K x N, K contiguous)
// seen as N rows of K, 8 times over into `scratch`, rows row_class_width(K) long.
StageJob row_class_copies(const Problem& p, void* scratch) {
  StageJob job{transposed(p.b), 8, p.n, p.k, scratch, row_class_width(p.k)};
  job.m.batch_stride = 0;
  job.width = job.ld;
  for (int r = 0; r < 8; ++r) job.shift[r] = int(row_class_start(p.a, r) % 8);
  return job;
}

// Tensor maps by everything that goes into one, so that calls on the same buffers (the usual
// case: weights, and activations reused by the caller's allocator) skip the encoding. Per
// thread, so that threads never wait on each other; bounded, since pointers may vary without end.
CUtensorMap cached_tensor_map(const MatrixRef& m, int64_t batch, int64_t rows, int64_t cols, bool cols_contiguous,
                              uint32_t box_inner, uint32_t box_outer, bool swizzled = true) {
  using Key = std::array<int64_t, 10>;
  thread_local std::unordered_map<Key, CUtensorMap, WordsHash> maps;
  const Key key = {int64_t(reinterpret_cast<uintptr_t>(m.data)),
                   int64_t(m.dtype) | int64_t(cols_contiguous) << 4 | int64_t(swizzled) << 5,
                   batch,
                   rows,
                   cols,
                   m.batch_stride,
                   m.row_stride,
                   m.col_stride,
                   box_inner,
                   box_outer};
  if (auto it = maps.find(key); it != maps.end()) return it->second;
  if (maps.size() >= 1024) maps.clear();
  return maps.emplace(key, make_tensor_map(m, batch, rows, cols, cols_contiguous, box_inner, box_outer, swizzled))
      .first->second;
}

// Inner scales (block, mx) as the TMA kernel reads them (kernels/sm90/promote.cuh,
// load_stage_scales), seen as [batch] rows x cols: A's M (or M blocks) x K blocks (mx: K
// granules), B's K blocks (granules) x N (or N blocks). 1-wide blocks' and mx exponents are read
// with M (N) contiguous, a box of the tile's rows (columns) by one K block (four granules);
// 128-wide blocks' with K contiguous, a box of four K blocks by the 128 blocks the tile touches.
// These are the layouts torch, cuBLASLt and DeepGEMM take for block scales. Scales laid out
// otherwise, or whose base or strides TMA cannot take (16-byte aligned), are staged in that
// layout first (`staged`).
struct InnerScales {
  MatrixRef m;  // the scales as the kernel reads them: the caller's, or where staged, their copy
  int64_t rows = 0, cols = 0;
  bool cols_contiguous = false;
  uint32_t box_inner = 0, box_outer = 0;
  StagedOperand staged;
};

// Whether TMA reads `m` ([batch] rows x cols) as it is along the contiguous dimension.
bool tma_reads(const MatrixRef& m, int64_t batch, int64_t rows, int64_t cols, bool cols_contiguous) {
  const int64_t bytes = dtype_size(m.dtype);
  const int64_t inner = cols_contiguous ? cols : rows, outer = cols_contiguous ? rows : cols;
  const int64_t inner_stride = cols_contiguous ? m.col_stride : m.row_stride;
  const int64_t outer_stride = cols_contiguous ? m.row_stride : m.col_stride;
  return reinterpret_cast<uintptr_t>(m.data) % 16 == 0 && (inner == 1 || inner_stride == 1) &&
         (outer == 1 || (outer_stride > 0 && outer_stride * bytes % 16 == 0)) &&
         (batch == 1 || m.batch_stride == 0 || m.batch_stride * bytes % 16 == 0);
}

// `tile`: the tile's rows (A) or the columns of one operand's part of it (B, B2); `any_start`:
// tiles start at any row (A) or column (B), as grouped kernels' do, and the boxes are longer
// (smem_layout.h).
InnerScales inner_scales(const ScaleRef& s, bool is_a, const Problem& p, int tile, bool any_start) {
  InnerScales b;
  if (s.mode != ScaleMode::block && s.mode != ScaleMode::mx) return b;
  const bool mx = s.mode == ScaleMode::mx;
  const bool fine = mx || (is_a ? s.block_rows : s.block_cols) == 1;  // 1x128 (A), 128x1 (B), mx
  const int64_t k_blocks = ceil_div(p.k, mx ? 32 : 128), mn = is_a ? p.m : p.n;
  const int64_t mn_blocks = fine ? mn : ceil_div(mn, 128);
  b.rows = is_a ? mn_blocks : k_blocks;
  b.cols = is_a ? k_blocks : mn_blocks;
  b.cols_contiguous = is_a != fine;  // A: K contiguous where coarse; B: N contiguous where fine
  const int mode = mx ? GEMMKIT_SCALE_MX : GEMMKIT_SCALE_BLOCK;
  b.box_inner = fine ? uint32_t(tile + (any_start ? sm90::scale_box_alignment(mode) : 0)) : 4;
  b.box_outer = mx ? 4 : fine || is_a ? 1 : uint32_t(sm90::b_scale_blocks(tile));
  b.m = s.m;
  if (!tma_reads(s.m, p.batch, b.rows, b.cols, b.cols_contiguous)) {
    b.staged = staged_operand(s.m, p.batch, b.rows, b.cols, !b.cols_contiguous, true);
  }
  return b;
}

// A 4-bit A's scales or zero points `m` (M x K groups), as the TMA kernel reads them
// (widen.cuh): the weights' rows contiguous, a box of the tile's rows by `groups` K groups; staged so
// where TMA cannot read them as they lie (gpt-oss's [N, K/32] MXFP4 scales, transposed with the
// problem).
InnerScales widened_scales(const MatrixRef& m, const Problem& p, int tile, int groups) {
  InnerScales s;
  s.rows = p.m;
  s.cols = ceil_div(p.k, p.scale_a.block_cols);
  s.cols_contiguous = false;
  s.box_inner = uint32_t(tile);
  s.box_outer = uint32_t(groups);
  s.m = m;
  if (!tma_reads(m, p.batch, s.rows, s.cols, s.cols_contiguous)) {
    s.staged = staged_operand(m, p.batch, s.rows, s.cols, !s.cols_contiguous, true);
  }
  return s;
}

unsigned clamp_grid(int64_t blocks, int64_t limit) { return unsigned(std::max<int64_t>(1, std::min(blocks, limit))); }

}  // namespace

// A GEMM kernel's launch lets it start while the kernel before it in the stream still runs
// (programmatic dependent launch): the kernels wait for that one's end before touching memory
// (utility.cuh), so only their launch and setup overlap its last wave and the gap between the
// two. Captured into a CUDA graph, the launch becomes a programmatic edge, with the same effect
// on replay.
void launch_kernel(const LoadedKernel& kernel, unsigned gx, unsigned gy, unsigned gz, unsigned threads, unsigned smem,
                   int cluster, bool programmatic, cudaStream_t stream, void** args) {
  CUlaunchAttribute attributes[2] = {};
  unsigned count = 0;
  if (cluster > 1) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attributes[count].value.clusterDim.x = unsigned(cluster);
    attributes[count].value.clusterDim.y = attributes[count].value.clusterDim.z = 1;
    ++count;
  }
  if (programmatic) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attributes[count].value.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  CUlaunchConfig config{};
  config.gridDimX = gx;
  config.gridDimY = gy;
  config.gridDimZ = gz;
  config.blockDimX = threads;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = smem;
  config.hStream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  check(driver().launch_kernel_ex(&config, kernel.function, args, nullptr), "cuLaunchKernelEx");
}

// With p = ceil(log2 d) and mul = ceil(2^(31 + p) / d), mul * d exceeds 2^(31 + p) by less than
// d <= 2^p, so for n < 2^31 the product n * mul / 2^(31 + p) exceeds n / d by less than 1 / d:
// its floor is n / d (Granlund and Montgomery's bound). mul < 2^32 since d > 2^(p - 1).
FastDivisor fast_divisor(int64_t d) {
  const int p = std::bit_width(uint64_t(d - 1));
  const uint64_t scale = uint64_t(1) << (31 + p);
  return {unsigned((scale + uint64_t(d) - 1) / uint64_t(d)), unsigned(31 + p)};
}

namespace {

// A TMA kernel's launch, worked out: its parameters, tensor maps and grid.
struct TmaLaunch {
  GemmParams args;
  KernelMaps maps{};  // those the configuration uses
  unsigned grid = 0;
};

void launch_tma(const LoadedKernel& kernel, const KernelConfig& config, TmaLaunch& launch, cudaStream_t stream) {
  void* pointers[] = {&launch.maps, &launch.args};
  launch_kernel(kernel, launch.grid, 1, 1, config.threads(), config.smem_bytes(), config.cluster_m, true, stream,
                pointers);
}

// A thread's last TMA launch that neither splits K nor stages an operand (whose scratch is the
// stream's, or the call's own), kept whole: a call that repeats it (the same operands, as a
// decode loop or a caller's reused buffers make) launches it again as it was: working a launch
// out costs ~0.3 us per call once the driver's own launch work has evicted it from the caches
// (H200).
struct RepeatableLaunch {
  const LoadedKernel* kernel = nullptr;
  KernelConfig config;
  ProblemWords problem{};
  int sm_count = 0;
  TmaLaunch launch;
};

}  // namespace

void zero_reductions(const EpilogueRef& epilogue, cudaStream_t stream) {
  for (int i = 0; i < epilogue.tensor_count; ++i) {
    if (const int64_t bytes = epilogue.zeroed_bytes[size_t(i)]) {
      check(cudaMemsetAsync(epilogue.tensors[size_t(i)].data, 0, size_t(bytes), stream), "cudaMemsetAsync");
    }
  }
}

bool launch_gemm(const LoadedKernel& kernel, const KernelConfig& config, const Problem& p, int sm_count,
                 cudaStream_t stream) {
  thread_local RepeatableLaunch last;
  const ProblemWords words = config.kind == KernelKind::tma ? problem_words(p) : ProblemWords{};
  if (config.kind == KernelKind::tma && last.kernel == &kernel && last.sm_count == sm_count && last.problem == words &&
      last.config == config) {
    launch_tma(kernel, config, last.launch, stream);
    return true;
  }
  TmaLaunch launch;
  GemmParams& args = launch.args;
  args = params(p);
  if (config.kind == KernelKind::gemv) {
    void* pointers[] = {&args};
    launch_kernel(kernel, clamp_grid(ceil_div(p.n, config.tile_n), INT32_MAX), clamp_grid(p.batch, 65535), 1,
                  config.threads(), 0, 1, true, stream, pointers);
    return true;
  }
  if (config.kind == KernelKind::fallback) {
    void* pointers[] = {&args};
    launch_kernel(kernel, clamp_grid((p.n + 63) / 64, INT32_MAX), clamp_grid((p.m + 63) / 64, 65535),
                  clamp_grid(p.batch, 65535), config.threads(), 0, 1, true, stream, pointers);
    return true;
  }
  const int cluster = config.cluster_m;
  // The kernel's tile order (gemm.cuh, TileScheduler): cluster rows of tiles by tile columns.
  // Grouped, the kernel counts each group's rows (or columns, along N) itself: at most one more
  // cluster row (tile column) per group than the groups' rows (columns) together make.
  TileOrder& order = args.order;
  order.rows = ceil_div(tile_rows(config, p.m), cluster);
  const int tile_cols = config.tile_cols(config.tile_n);  // D's columns a tile stores
  order.tiles_n = ceil_div(p.n, tile_cols);
  const bool tokens_split = p.shares_tokens();
  const int64_t cluster_tiles = !tokens_split        ? order.rows * order.tiles_n * p.batch
                                : p.groups.along_n ? order.rows * (order.tiles_n + p.batch)
                                                   : (order.rows + p.batch) * order.tiles_n;
  // Split-K: no part may be empty.
  const int64_t splits = std::min<int64_t>(config.splits, ceil_div(p.k, config.tile_k()));
  if (cluster_tiles * splits >= kMaxWorkUnits) return false;
  const int64_t tiles = cluster_tiles * cluster;
  WorkspaceNeeds needs;
  if (splits > 1) {
    needs.partial_bytes = size_t(tiles * splits * config.tile_m * config.tile_n * 4);
    needs.counters = size_t(tiles * (config.tile_m / 64));
  }
  // An FP8 weight gradient's operands are staged K-major, each group's tokens (K) from a whole
  // K block on (stage.cuh): K grows by a block a group, and the kernel takes the groups' ends in
  // the copies, which the staging writes after B's copy.
  const bool padded_groups = p.pads_groups_along_k();
  const int64_t staged_k = p.padded_group_k();
  // 4-bit weights (A) are read (and staged) as bytes, ceil(K / 2) a row.
  const bool widen_a = is_4bit(p.a.dtype);
  const MatrixRef operand_a = widen_a ? packed_bytes(p.a, true) : p.a;
  const int64_t k_a = widen_a ? ceil_div(p.k, 2) : staged_k;
  const StagedOperand staged_a = staged_operand(operand_a, p.rows_batch(), p.m, k_a, !config.a_k_major, config.stage_a);
  const StagedOperand staged_b = staged_operand(p.b, p.cols_batch(), staged_k, p.n, config.b_k_major, config.stage_b);
  // A dual GEMM's B2 is staged with B, its copy after B's in B's scratch.
  const StagedOperand staged_b2 =
      staged_operand(p.b2, p.batch, staged_k, p.n, config.b_k_major, config.stage_b && config.dual);
  // Inner scales the kernel cannot read as they are: A's copy after A's, B's and B2's after the
  // rest of B's scratch (each a whole number of 128-byte rows, so each starts aligned).
  const int tile_b = config.dual ? config.tile_n / 2 : config.tile_n;  // one operand's columns
  const InnerScales scales_a = widen_a ? widened_scales(p.scale_a.m, p, config.tile_m, config.widen_groups())
                                       : inner_scales(p.scale_a, true, p, config.tile_m, config.grouped());
  const InnerScales scales_b = inner_scales(p.scale_b, false, p, tile_b, config.grouped() && config.group_along_n);
  const InnerScales scales_b2 = inner_scales(p.scale_b2, false, p, tile_b, false);
  // A u4 A's zero points, staged after its scales.
  const InnerScales zeros = widen_a && p.scale_a.zeros.data
                                ? widened_scales(p.scale_a.zeros, p, config.tile_m, config.widen_groups())
                                                           : InnerScales{};
  needs.staged_a_bytes = staged_a.bytes + scales_a.staged.bytes + zeros.staged.bytes;
  const size_t b_scratch = config.row_classes
                               ? size_t(8 * p.n * row_class_width(p.k) * dtype_size(p.b.dtype))
                               : staged_b.bytes + staged_b2.bytes + (padded_groups ? size_t(4 * p.batch) : 0);
  const size_t scales_b_at = (b_scratch + 127) / 128 * 128, scales_b2_at = scales_b_at + scales_b.staged.bytes;
  needs.staged_b_bytes = scales_b.staged.bytes + scales_b2.staged.bytes > 0
                             ? scales_b2_at + scales_b2.staged.bytes
                             : b_scratch;
  // Where no workspace can be had (the stream's growing during a graph capture, with no scratch
  // allocator set), the kernel runs unsplit; operands that must be staged cannot run here at all
  // (the caller runs another kernel). Held until the kernels are queued.
  const bool stages_scales = scales_a.staged.bytes + scales_b.staged.bytes + scales_b2.staged.bytes + zeros.staged.bytes > 0;
  const bool stages = config.stage_a || config.stage_b || config.row_classes || stages_scales;
  const LaunchScratch scratch(p.device, stream, needs);
  const Workspace* workspace = scratch.workspace();
  if (!workspace && stages) return false;
  if (workspace && splits > 1) {
    args.partials = workspace->partials;
    args.counters = workspace->counters;
    args.splits = int(splits);
  }
  // Its divisors: the order walks raster groups of group_m / cluster cluster rows.
  const int64_t group = config.group_m / cluster;
  order.per_batch = fast_divisor(order.rows * order.tiles_n);
  order.group_tiles = fast_divisor(group * order.tiles_n);
  order.last_group = fast_divisor(order.rows % group == 0 ? 1 : order.rows % group);
  order.splits = fast_divisor(args.splits);
  // The tile row reaching past M moves up to end within 15 rows of it (kShiftLastRow, epilogue.cuh)
  // where M is more than one tile row and not a whole number of them.
  if (!config.row_classes && p.m > config.tile_m && p.m % config.tile_m != 0) {
    order.shift_from = int(p.m / config.tile_m * config.tile_m);
    order.shift_to = int((p.m - config.tile_m + 15) / 16 * 16);
  }
  // So does the tile column reaching past N move left (kShiftLastCol, epilogue.cuh), by whole
  // store boxes where D may alias C and TMA stores it (a box starting left of the columns the
  // moved tile stores is stored whole, from C the tile to its left may have overwritten).
  if (p.n > tile_cols && p.n % tile_cols != 0) {
    const int64_t step = config.has_c && config.tma_store ? config.store_box_bytes() / dtype_size(p.d.dtype) : 16;
    order.col_shift_from = int(p.n / tile_cols * tile_cols);
    order.col_shift_to = int(std::min<int64_t>(ceil_div(p.n - tile_cols, step) * step, order.col_shift_from));
  }
  // The operands as the kernel reads them: staged ones replaced by their copies, made in one launch.
  Problem q = p;
  q.a = operand_a;
  std::array<StageJob, 7> jobs;
  size_t staged = 0;
  int* padded_ends = padded_groups ? reinterpret_cast<int*>(static_cast<char*>(workspace->staged_b) + staged_b.bytes)
                                    : nullptr;
  if (padded_groups) {
    q.k = staged_k;
    q.groups.sizes = padded_ends;
    q.groups.int64 = false;
    args.k = q.k;
    args.group_sizes = padded_ends;
    args.group_sizes_64 = 0;
  }
  if (config.stage_a) {
    jobs[staged++] = stage_job(staged_a, workspace->staged_a, p, padded_groups, padded_ends);
    q.a = staged_view(staged_a, workspace->staged_a);
  }
  if (config.row_classes) {  // B's scratch holds its shifted copies (needs.staged_b_bytes)
    jobs[staged++] = row_class_copies(p, workspace->staged_b);
    const int64_t width = row_class_width(p.k);
    q.b.data = workspace->staged_b;
    q.b.batch_stride = p.n * width;
    q.b.row_stride = 1;
    q.b.col_stride = width;
  } else if (config.stage_b) {
    jobs[staged++] = stage_job(staged_b, workspace->staged_b, p, padded_groups, nullptr);
    q.b = staged_view(staged_b, workspace->staged_b);
    if (config.dual) {
      void* scratch = static_cast<char*>(workspace->staged_b) + staged_b.bytes;  // whole 128-byte rows: aligned
      jobs[staged++] = stage_job(staged_b2, scratch, p, false, nullptr);
      q.b2 = staged_view(staged_b2, scratch);
    }
  }
  // The scales' copies, and the views the kernel's maps take of them.
  const auto scales_view = [&](const InnerScales& s, void* scratch) {
    if (s.staged.bytes == 0) return s.m;
    jobs[staged++] = stage_job(s.staged, scratch, p, false, nullptr);
    return staged_view(s.staged, scratch);
  };
  char* const staged_a_scratch = workspace ? static_cast<char*>(workspace->staged_a) : nullptr;
  char* const staged_b_scratch = workspace ? static_cast<char*>(workspace->staged_b) : nullptr;
  const MatrixRef scales_a_view = scales_view(scales_a, staged_a_scratch + staged_a.bytes);
  const MatrixRef scales_b_view = scales_view(scales_b, staged_b_scratch + scales_b_at);
  const MatrixRef scales_b2_view = scales_view(scales_b2, staged_b_scratch + scales_b2_at);
  const MatrixRef zeros_view = scales_view(zeros, staged_a_scratch + staged_a.bytes + scales_a.staged.bytes);
  stage_copies(std::span(jobs.data(), staged), stream);
  args.a = matrix(q.a);
  args.b = matrix(q.b);

  // Boxes: K-major operands load rows x tile_k (128 bytes) at once (B shared out among a
  // cluster's CTAs), MN-major (16-bit) ones 64 x 64 per block.
  const uint32_t k_box = uint32_t(config.tile_k());
  // Realigned operands have none: the kernel reads them from the parameters.
  CUtensorMap& map_a = launch.maps.a;
  CUtensorMap& map_b = launch.maps.b;
  if (config.row_classes) {
    // Group rows long enough for the last row of a group, which starts past 7 others.
    map_a = cached_tensor_map(row_class_groups(p.a), 1, p.m / 8, row_class_start(p.a, 7) + p.k, true, k_box,
                              config.tile_m);
    map_b = cached_tensor_map(q.b, 8, row_class_width(p.k), p.n, false, k_box, config.tile_n);
  } else if (widen_a) {  // packed rows, unswizzled: the consumers read their fragments from them (widen.cuh)
    map_a = cached_tensor_map(q.a, p.batch, p.m, k_a, true, k_box / 2, config.tile_m, false);
  } else if (!config.realign_a) {
    map_a = cached_tensor_map(q.a, p.rows_batch(), p.m, q.k, config.a_k_major, config.a_k_major ? k_box : 64,
                              config.a_k_major ? config.tile_m : 64);
  }
  if (!config.realign_b && !config.row_classes) {
    // A dual GEMM's B and B2 each fill half a stage: a K-major half is shared out among the
    // cluster's CTAs whole, one each where there are two (gemm.cuh, load_stage).
    const uint32_t b_rows = uint32_t(config.tile_n / (config.dual ? 2 : config.cluster_m));
    map_b = cached_tensor_map(q.b, p.cols_batch(), q.k, p.n, !config.b_k_major, config.b_k_major ? k_box : 64,
                              config.b_k_major ? b_rows : 64);
    launch.maps.b2 = config.dual ? cached_tensor_map(q.b2, p.batch, q.k, p.n, !config.b_k_major,
                                                    config.b_k_major ? k_box : 64, config.b_k_major ? b_rows : 64)
                                : map_b;
  }
  if (config.tma_store) {
    // One warp's 16 rows of a 128-byte column group (or of a narrower box), as lines of 16 rows
    // where D is stored by columns.
    const uint32_t box_cols = uint32_t(config.store_box_bytes() / dtype_size(p.d.dtype));
    launch.maps.d = config.d_by_columns ? cached_tensor_map(p.d, p.batch, p.m, p.n, false, 16, box_cols)
                                       : cached_tensor_map(p.d, p.d_batch(), p.m, p.n, true, box_cols, 16);
  }
  const auto scales_map = [&](const InnerScales& s, const MatrixRef& view) {
    return cached_tensor_map(view, p.batch, s.rows, s.cols, s.cols_contiguous, s.box_inner, s.box_outer, false);
  };
  if (scales_a.rows > 0) launch.maps.scale_a = scales_map(scales_a, scales_a_view);
  if (scales_b.rows > 0) launch.maps.scale_b = scales_map(scales_b, scales_b_view);
  if (scales_b2.rows > 0) launch.maps.scale_b2 = scales_map(scales_b2, scales_b2_view);
  if (zeros.rows > 0) launch.maps.zeros = scales_map(zeros, zeros_view);
  // A persistent grid: as many CTAs as fit on the SMs at most (ctas_per_sm), whole clusters, no
  // more than there are work units.
  launch.grid = clamp_grid(cluster_tiles * args.splits, sm_count * config.ctas_per_sm() / cluster) * unsigned(cluster);
  launch_tma(kernel, config, launch, stream);
  if (splits == 1 && !stages) last = {&kernel, config, words, sm_count, launch};
  return true;
}

void launch_reference(const LoadedKernel& kernel, const Problem& p, double* ref, double* ref_abs,
                      cudaStream_t stream) {
  GemmParams args = params(p);
  void* pointers[] = {&args, &ref, &ref_abs};
  const int64_t count = p.batch * p.m * p.n;
  launch_kernel(kernel, clamp_grid((count + 255) / 256, 1 << 20), 1, 1, 256, 0, 1, false, stream, pointers);
}

}  // namespace gemmkit::runtime
