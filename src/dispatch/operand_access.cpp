#include "dispatch/operand_access.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <tuple>

#include "core/checked_math.h"
#include "dispatch/device_limits.h"

namespace gemmkit {
namespace {

constexpr int64_t kTmaStrideLimit = int64_t(1) << 40;
constexpr int64_t kCoordinateLimit = int64_t(1) << 31;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A stride TMA accepts for a dimension that is actually walked (extent > 1).
bool tma_stride_ok(int64_t stride_elements, int element_bytes, int64_t at_least) {
  int64_t bytes = stride_elements * element_bytes;
  return stride_elements >= at_least && bytes % 16 == 0 && bytes < kTmaStrideLimit;
}

// Along cols, unless the source's rows are contiguous and its cols are not.
bool along_cols(const MatrixRef& m) { return !(m.row_stride == 1 && m.col_stride != 1); }

// Whether an operand of rows x cols is contiguous along cols (or rows): unit stride, or one element.
bool contiguous_along(const MatrixRef& m, int64_t rows, int64_t cols, bool along_cols) {
  return along_cols ? m.col_stride == 1 || cols == 1 : m.row_stride == 1 || rows == 1;
}

// Whether a 16-bit operand TMA cannot read is realigned by the kernel rather than staged: where it
// is larger than Hopper's 50 MB L2. Realigning costs the kernel about twice its aligned time
// (the producer warps' copies and shifts keep a stage ~0.7 us against TMA's ~0.35 on narrow
// tiles); a staged copy costs two more passes over the operand, but one that fits in L2 is read
// back from there. H100, NT bf16, realigned against staged: 16x7168x8191 91 us against 133, but
// 16x4096x4097 (34 MB) 50 against 44. Once one operand is realigned, so is the other where it
// can be: the kernel realigns anyway, and staging would add a launch (and inside a graph capture,
// which cannot grow the scratch, send the whole problem to the fallback kernel). Decode weights
// are read as row classes instead where row_classes_apply takes them (16x7168x8191 53 us).
constexpr int64_t kRealignFromBytes = int64_t(50) << 20;
bool larger_than_l2(const MatrixRef& m, int64_t batch, int64_t rows, int64_t cols) {
  const int64_t copies = batch > 1 && m.batch_stride != 0 ? batch : 1;
  return copies * rows * cols * dtype_size(m.dtype) > kRealignFromBytes;
}

}  // namespace

TmaAccess tma_access(const MatrixRef& m, int64_t batch, int64_t rows, int64_t cols) {
  const int bytes = dtype_size(m.dtype);
  if (!aligned16(m.data) || rows >= kCoordinateLimit || cols >= kCoordinateLimit) return {};
  const bool batch_ok = batch <= 1 || m.batch_stride == 0 ||
                        tma_stride_ok(m.batch_stride, bytes, 1);
  if (!batch_ok) return {};
  // Try K/N-contiguous (columns), then M/K-contiguous (rows). The outer stride must be
  // 16-byte aligned and must not make rows overlap; a batch stride must clear the whole matrix.
  for (bool cols_contiguous : {true, false}) {
    const int64_t inner = cols_contiguous ? cols : rows, outer = cols_contiguous ? rows : cols;
    const int64_t inner_stride = cols_contiguous ? m.col_stride : m.row_stride;
    const int64_t outer_stride = cols_contiguous ? m.row_stride : m.col_stride;
    if (inner > 1 && inner_stride != 1) continue;
    if (outer > 1 && !tma_stride_ok(outer_stride, bytes, inner)) continue;
    if (batch > 1 && m.batch_stride != 0 && m.batch_stride < (outer > 1 ? outer_stride * outer : inner)) continue;
    return {true, cols_contiguous};
  }
  return {};
}

bool tma_can_store(const Problem& p) {
  TmaAccess access = tma_access(p.d, p.batch, p.m, p.n);
  // TMA stores whole 16-byte pieces of a row: where a row's last one reaches past D's last
  // column, it would overwrite what lies there (a wider matrix's next columns, or the next row).
  const bool whole_pieces = (access.cols_contiguous ? p.n : p.m) * dtype_size(p.d.dtype) % 16 == 0;
  return access.ok && whole_pieces && (p.batch <= 1 || p.d.batch_stride != 0);
}

KernelConfig fallback_config(const KernelFacts& facts) {
  KernelConfig f;  // every other fact at its default: the fallback kernel reads any layout
  f.kind = KernelKind::fallback;
  f.tile_m = f.tile_n = 64;
  f.stages = 0;
  f.tma_store = false;
  std::tie(f.has_c, f.in, f.in_b, f.out, f.c, f.scale_a, f.scale_b, f.scale_a_mn, f.scale_b_mn, f.epilogue,
           f.epilogue_transposed, f.dual, f.zeros, f.group_scale) =
      std::tie(facts.has_c, facts.in, facts.in_b, facts.out, facts.c, facts.scale_a, facts.scale_b, facts.scale_a_mn,
               facts.scale_b_mn, facts.epilogue, facts.epilogue_transposed, facts.dual, facts.zeros, facts.group_scale);
  return f;
}

// A 16-bit, K contiguous and not TMA-addressable, unbatched, M a multiple of 8 (a partial last
// group would have its tensor-map row reach past A's end), against at most kRowClassesMaxN
// columns of a B whose K is contiguous (its 8 shifted copies are small); a group row's length
// and stride within TMA's limits.
bool row_classes_apply(const Problem& p) {
  if (is_fp8(p.a.dtype) || p.k <= 0 || p.batch != 1 || p.m % 8 != 0 || p.n > kRowClassesMaxN || p.a.col_stride != 1 ||
      p.b.row_stride != 1 || p.m >= kCoordinateLimit || tma_access(p.a, p.batch, p.m, p.k).ok) {
    return false;
  }
  const int64_t group_row = 7 + 7 * p.a.row_stride + p.k;  // elements, from A's first granule
  return group_row < kCoordinateLimit && tma_stride_ok(8 * p.a.row_stride, dtype_size(p.a.dtype), 1);
}

KernelConfig realigned_instead(const Problem& p, KernelConfig c) {
  c.row_classes = false;
  c.realign_a = true;
  c.realign_b = !tma_access(p.b, p.batch, p.k, p.n).ok;
  c.stages = max_stages(c, DeviceLimits{}.smem_per_block);
  return c;
}

namespace {

// The facts of a problem's types and scales.
KernelConfig typed_config(const Problem& p) {
  KernelConfig config;
  config.in = p.a.dtype;
  config.in_b = p.b.dtype;
  config.scale_a = p.scale_a.mode;
  config.scale_b = p.scale_b.mode;
  if (p.scale_a.mode == ScaleMode::block) config.scale_a_mn = int(p.scale_a.block_rows);
  if (p.scale_b.mode == ScaleMode::block) config.scale_b_mn = int(p.scale_b.block_cols);
  config.zeros = p.scale_a.zeros.data != nullptr || p.scale_b.zeros.data != nullptr;
  // With 16-bit B (W4A8 promotes every K block anyway); with_tile keeps it on narrow tiles.
  config.group_partials = p.a.dtype == DType::u4 && !is_fp8(p.b.dtype) && p.scale_a.block_cols >= 64;
  config.group_scale = p.group_scale_type();
  if (is_4bit(p.a.dtype) && is_fp8(p.b.dtype)) {
    config.widen_granule = p.a.dtype == DType::e2m1 ? 32 : int(std::min<int64_t>(p.scale_a.block_cols, 128));
  }
  config.out = p.d.dtype;
  config.has_c = p.has_c();
  config.c = p.has_c() ? p.c.dtype : p.d.dtype;
  config.epilogue = p.epilogue.code;
  config.epilogue_transposed = p.epilogue.fused() && p.epilogue.transposed;
  config.dual = p.dual();
  return config;
}

}  // namespace

bool grouped_operands_readable(const Problem& p) {
  // FP8 along K: both operands staged, K grown by a block a group (launch.cpp).
  if (p.pads_groups_along_k()) return p.padded_group_k() < kCoordinateLimit;
  // 4-bit weights, and the tokens against them, staged where TMA cannot read them (as dense ones).
  if (is_4bit(p.a.dtype) || is_4bit(p.b.dtype)) {
    return p.m < kCoordinateLimit && p.n < kCoordinateLimit && p.k < kCoordinateLimit;
  }
  const TmaAccess a = tma_access(p.a, p.rows_batch(), p.m, p.k), b = tma_access(p.b, p.batch, p.k, p.n);
  if (!a.ok || p.k >= kCoordinateLimit) return false;
  if (p.groups.along_k) return b.ok && !a.cols_contiguous;  // the kernel clears A's K rows
  if (p.dual()) {  // B2 read by TMA as B is (no grouped kernel stages it)
    const TmaAccess b2 = tma_access(p.b2, p.batch, p.k, p.n);
    return b.ok && b2.ok && b2.cols_contiguous == b.cols_contiguous;
  }
  return is_fp8(p.a.dtype) ? a.cols_contiguous : b.ok;      // FP8 B staged where it must be
}

KernelConfig grouped_problem_config(const Problem& p) {
  KernelConfig config = typed_config(p);
  config.group_layout = p.groups.layout;
  config.group_along_k = p.groups.along_k;
  config.group_along_n = p.groups.along_n;
  config.group_capacity = int(std::max<uint64_t>(32, std::bit_ceil(uint64_t(p.batch))));
  if (p.groups.along_n) {
    // 4-bit weights as A (the groups of rows transposed: normalize), batched by group, and the
    // tokens as B, shared where contiguous: each read K-major by TMA, or staged so (as dense
    // 4-bit problems are); D stored directly, up to each group's last column.
    const TmaAccess packed = tma_access(packed_bytes(p.a, true), p.batch, p.m, ceil_div(p.k, 2));
    const TmaAccess b = tma_access(p.b, p.cols_batch(), p.k, p.n);
    config.stage_a = !(packed.ok && packed.cols_contiguous);
    config.stage_b = !(b.ok && !b.cols_contiguous);
    config.a_k_major = config.b_k_major = true;
    config.a_batched = p.batch > 1 && p.a.batch_stride != 0;
    config.b_batched = p.cols_batch() > 1 && p.b.batch_stride != 0;
    config.tma_store = false;
    return config;
  }
  const int64_t rows_batch = p.rows_batch();
  const TmaAccess b = tma_access(p.b, p.batch, p.k, p.n);
  config.a_k_major = tma_access(p.a, rows_batch, p.m, p.k).cols_contiguous;
  config.b_k_major = !b.cols_contiguous;
  if (is_fp8(p.a.dtype)) {
    // wgmma reads 8-bit operands K-major only: B is staged where TMA cannot read it so (the input
    // gradient's weights as they lie), and along K both are, their groups padded to whole K blocks.
    config.stage_a = p.groups.along_k;
    config.stage_b = p.groups.along_k || !(b.ok && !b.cols_contiguous);
    config.a_k_major = config.b_k_major = true;
  }
  config.a_batched = rows_batch > 1 && p.a.batch_stride != 0;
  config.b_batched = p.batch > 1 && p.b.batch_stride != 0;
  Problem rows = p;  // D as the kernel stores it: one matrix for contiguous groups
  rows.batch = rows_batch;
  config.tma_store = tma_can_store(rows) && tma_access(p.d, rows_batch, p.m, p.n).cols_contiguous;
  return config;
}

namespace {

// A dual GEMM's facts: the TMA kernel where its coordinates fit, storing D by rows (through
// shared memory where TMA can); else the fallback kernel. An A TMA cannot read is staged, and so
// are B and B2 together where TMA cannot read either as it lies or they differ in majorness, each
// along its contiguous dimension (B's where neither has one); 8-bit operands K-major, as wgmma
// reads them. Never the GEMV, row classes or realigned operands.
KernelConfig dual_problem_config(const Problem& p) {
  KernelConfig config = typed_config(p);
  TmaAccess a = tma_access(p.a, p.batch, p.m, p.k), b = tma_access(p.b, p.batch, p.k, p.n);
  const TmaAccess b2 = tma_access(p.b2, p.batch, p.k, p.n);
  const bool coordinates = p.m < kCoordinateLimit && p.n < kCoordinateLimit && p.k < kCoordinateLimit;
  if (p.k == 0 || !coordinates) return fallback_config(config);
  if (is_fp8(p.a.dtype)) {
    config.stage_a = !(a.ok && a.cols_contiguous);
    config.stage_b = !(b.ok && !b.cols_contiguous && b2.ok && !b2.cols_contiguous);
    a = {true, true};
    b = {true, false};
  } else {
    config.stage_a = !a.ok;
    config.stage_b = !b.ok || !b2.ok || b.cols_contiguous != b2.cols_contiguous;
    if (config.stage_a) a = {true, along_cols(p.a)};
    if (config.stage_b) b = {true, b.ok ? b.cols_contiguous : along_cols(p.b)};
  }
  config.a_k_major = a.cols_contiguous;
  config.b_k_major = !b.cols_contiguous;
  config.a_batched = p.batch > 1 && p.a.batch_stride != 0;
  config.b_batched = p.batch > 1 && p.b.batch_stride != 0;
  config.tma_store = tma_can_store(p) && tma_access(p.d, p.batch, p.m, p.n).cols_contiguous;
  return config;
}

}  // namespace

// The facts follow from the problem alone; the knobs stay at their defaults (the GEMV's and the
// fallback kernel's are fixed here too). The kind is fallback where K is 0 or a coordinate is too
// large for TMA.
KernelConfig problem_config(const Problem& p) {
  if (p.grouped()) return grouped_problem_config(p);
  if (p.dual()) return dual_problem_config(p);
  KernelConfig config = typed_config(p);

  // One row of A against B stored N x K: a matrix-vector product, bound by reading B once.
  if (p.m == 1 && p.k > 0 && (p.b.row_stride == 1 || p.k == 1) && !p.quantizes_d() && !config.widens()) {
    config.kind = KernelKind::gemv;
    config.tile_m = 1;
    // Output columns per block of 8 warps: one per warp, or where a row of B is shorter than a
    // warp's round of 16-byte loads (4 per lane, 2 KB), 2 or 4 columns per warp (gemv.cuh).
    const int64_t row_bytes = p.k * dtype_size(p.b.dtype);
    config.tile_n = 8 * (row_bytes >= 2048 ? 1 : row_bytes >= 1024 ? 2 : 4);
    config.stages = 0;
    config.tma_store = false;
    return config;
  }
  TmaAccess a = tma_access(p.a, p.batch, p.m, p.k);
  TmaAccess b = tma_access(p.b, p.batch, p.k, p.n);
  // An operand TMA cannot read as it is (wgmma reads 8-bit operands K-major only) is read
  // K-major if 8-bit, else along the dimension the source is contiguous in (so that it is never
  // transposed), and staged into a dense copy that TMA can read, or, 16-bit, contiguous there and
  // larger than L2, realigned by the kernel; unless its coordinates are too large for TMA at all.
  if (p.k > 0 && p.m < kCoordinateLimit && p.n < kCoordinateLimit && p.k < kCoordinateLimit) {
    if (is_4bit(p.b.dtype)) {
      // 4-bit weights as B: the kernel widens them only as A (normalize transposes their problems).
      return fallback_config(config);
    } else if (is_4bit(p.a.dtype)) {
      // 4-bit weights: their packed bytes read K-major by TMA, or staged so; B read by TMA or
      // staged (none realign), K-major where it is 8-bit (W4A8), as wgmma reads it.
      const TmaAccess packed = tma_access(packed_bytes(p.a, true), p.batch, p.m, ceil_div(p.k, 2));
      config.stage_a = !(packed.ok && packed.cols_contiguous);
      config.stage_b = is_fp8(p.b.dtype) ? !(b.ok && !b.cols_contiguous) : !b.ok;
      a = TmaAccess{true, true};
      if (is_fp8(p.b.dtype)) {
        b = TmaAccess{true, false};
      } else if (!b.ok) {
        b = TmaAccess{true, along_cols(p.b)};
      }
    } else if (is_fp8(p.a.dtype)) {
      config.stage_a = !(a.ok && a.cols_contiguous);
      config.stage_b = !(b.ok && !b.cols_contiguous);
      a = {true, true};
      b = {true, false};
    } else if (!p.quantizes_d() && row_classes_apply(p)) {
      config.row_classes = true;
      a = {true, true};
      b = {true, false};
    } else {
      const bool realign_a = !a.ok && contiguous_along(p.a, p.m, p.k, along_cols(p.a));
      const bool realign_b = !b.ok && contiguous_along(p.b, p.k, p.n, along_cols(p.b));
      const bool realign = (realign_a && larger_than_l2(p.a, p.batch, p.m, p.k)) ||
                           (realign_b && larger_than_l2(p.b, p.batch, p.k, p.n));
      config.realign_a = realign && realign_a;
      config.realign_b = realign && realign_b;
      config.stage_a = !a.ok && !config.realign_a;
      config.stage_b = !b.ok && !config.realign_b;
      if (!a.ok) a = {true, along_cols(p.a)};
      if (!b.ok) b = {true, along_cols(p.b)};
    }
  }
  if (p.k == 0 || !a.ok || !b.ok) return fallback_config(config);
  config.a_k_major = a.cols_contiguous;
  config.b_k_major = !b.cols_contiguous;
  config.a_batched = p.batch > 1 && p.a.batch_stride != 0;
  config.b_batched = p.batch > 1 && p.b.batch_stride != 0;
  // An e4m3 D's rows are quantised in blocks: stored by rows (directly where TMA cannot).
  const bool d_cols_contiguous = tma_access(p.d, p.batch, p.m, p.n).cols_contiguous;
  config.tma_store = tma_can_store(p) && (d_cols_contiguous || !p.quantizes_d());
  config.d_by_columns = config.tma_store && !d_cols_contiguous;
  return config;
}

}  // namespace gemmkit
