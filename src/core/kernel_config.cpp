#include "core/kernel_config.h"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <tuple>

#include "core/checked_math.h"
#include "kernels/sm90/smem_layout.h"

namespace gemmkit {
namespace {

constexpr int kRowBytes = int(sm90::kStageRowBytes);  // a ring stage's K depth in bytes, one swizzle row


// What the kernel's shared-memory layout depends on (kernels/sm90/smem_layout.h), whose scale
// codes follow ScaleMode.
static_assert(int(ScaleMode::rowwise) == GEMMKIT_SCALE_ROWWISE && int(ScaleMode::block) == GEMMKIT_SCALE_BLOCK &&
              int(ScaleMode::mx) == GEMMKIT_SCALE_MX);
// A 4-bit A's scales are applied as it is widened (widen.cuh), not by the promotion: its mode
// counts as none there, as codegen tells the kernel.
sm90::SmemShape smem_shape(const KernelConfig& c) {
  const bool widen_a = is_4bit(c.in);
  return {c.tile_m, c.tile_n, c.stages, c.b_k_major, c.tma_store ? c.store_buffers : c.row_store() ? 1 : 0,
          c.realign_a, c.realign_b, widen_a ? 0 : int(c.scale_a), int(c.scale_b), c.scale_a_mn, c.scale_b_mn,
          c.group_capacity, c.grouped() && c.group_along_n, c.dual, widen_a ? c.tile_m : 0,
          widen_a ? c.tile_k() / 2 : 0, c.in == DType::u4 ? 2 : 1, c.widen_groups(), c.zeros};
}

auto key(const KernelConfig& c) {
  return std::make_tuple(reinterpret_cast<uintptr_t>(c.epilogue), c.epilogue_transposed, c.kind, c.tile_m, c.tile_n,
                         c.stages, c.group_m, c.cluster_m, c.splits, c.a_k_major, c.b_k_major, c.a_batched,
                         c.b_batched, c.tma_store, c.d_by_columns, c.store_buffers, c.has_c, c.in, c.out, c.c, c.in_b,
                         c.scale_a, c.scale_b, c.scale_a_mn, c.scale_b_mn, c.stage_a, c.stage_b, c.realign_a,
                         c.realign_b, c.row_classes, c.group_layout, c.group_along_k, c.group_along_n, c.group_capacity, c.dual, c.zeros,
                         c.group_partials, c.group_scale, c.widen_granule);
}

// key() names every knob: one added to KernelKnobs changes its size and must join it (and the
// tuning database's fields, tuned_configs.h).
static_assert(sizeof(KernelKnobs) == 7 * sizeof(int));

}  // namespace

// 4-bit weights store directly: their widened fragments leave no registers for the row store
// (128 x 256 and 192 x 176 spilled).
bool KernelConfig::row_store() const {
  return kind == KernelKind::tma && !tma_store && tile_m >= 128 && !(tile_m > 128 && splits > 1) && out != DType::e4m3 && !widens();
}

int KernelConfig::ctas_per_sm() const {
  if (kind != KernelKind::tma || !widens() || tile_m != 64 || !is_narrow({tile_m, tile_n})) return 1;
  // A fused epilogue's registers do not fit beside a fourth CTA (grouped MXFP4 64x16 with a bias,
  // an auxiliary output and a router weight spilled 32 bytes): three give each 216, not 136. Nor
  // do grouped tiles' with B's mx exponents (u4 in groups of 32 with zero points, 64x32: 12 bytes).
  return epilogue || (grouped() && scale_b == ScaleMode::mx) ? 3 : 4;
}

// A TMA kernel: a producer warpgroup and one consumer warpgroup for each 64 rows of the tile;
// where several CTAs share an SM (one consumer warpgroup), a producer warp (gemm.cuh: kProducerWarp).
int KernelConfig::threads() const {
  if (kind != KernelKind::tma) return 256;
  return ctas_per_sm() > 1 ? 160 : 128 * (tile_m / 64 + 1);
}

int KernelConfig::smem_bytes() const { return kind == KernelKind::tma ? tma_smem_bytes(*this) : 0; }

int KernelConfig::tile_k() const { return kRowBytes / dtype_size(wide_a()); }

int KernelConfig::widen_groups() const { return widen_granule == 32 ? 4 : 2; }

int KernelConfig::stage_bytes() const { return int(sm90::smem_layout(smem_shape(*this)).stage); }

// 128 bytes, unless the tile's row is not a multiple of that and C is read (epilogue.cuh: the
// last group may not be shifted back over the one before), then the widest box that divides it.
int KernelConfig::store_box_bytes() const {
  const int row_bytes = tile_cols(tile_n) * dtype_size(out);
  if (d_by_columns) {
    int bytes = 128;
    while (row_bytes % bytes != 0) bytes /= 2;
    return bytes;
  }
  if (row_bytes % 128 == 0 || !has_c) return 128;
  return row_bytes % 64 == 0 ? 64 : 32;
}

std::string KernelConfig::name() const {
  const std::string fused = epilogue ? " fused" : "";
  if (kind == KernelKind::fallback) return "fallback simt 64x64" + fused;
  if (kind == KernelKind::gemv) return (tile_n > 8 ? "gemv simt " + std::to_string(tile_n / 8) + "/warp" : "gemv simt") + fused;
  std::ostringstream s;
  s << "tma " << tile_m << "x" << tile_n << " s" << stages << (group_m != KernelKnobs{}.group_m ? " g" + std::to_string(group_m) : "")
    << (cluster_m > 1 ? " c" + std::to_string(cluster_m) : "")
    << (splits > 1 ? " split" + std::to_string(splits) : "") << " " << (a_k_major ? 'K' : 'M') << (b_k_major ? 'K' : 'N')
    << (row_store() ? " row-store" : !tma_store ? " direct-store" : store_buffers != 2 ? " b" + std::to_string(store_buffers) : "")
    << (tma_store && d_by_columns ? " D-by-columns" : "")
    << (stage_a ? " staged-A" : "") << (stage_b ? " staged-B" : "") << (realign_a ? " realign-A" : "")
    << (realign_b ? " realign-B" : "") << (row_classes ? " row-classes" : "")
    << (!grouped()                              ? ""
        : group_along_k                         ? " grouped-k"
        : group_layout == GroupLayout::masked ? (group_along_n ? " grouped-masked-n" : " grouped-masked")
                                                : (group_along_n ? " grouped-n" : " grouped"))
    << (dual ? " dual" : "") << (widens() ? " widen" : "") << (group_partials ? " group-partials" : "") << fused;
  return s.str();
}

bool KernelConfig::operator<(const KernelConfig& other) const { return key(*this) < key(other); }
bool KernelConfig::operator==(const KernelConfig& other) const { return key(*this) == key(other); }

KernelConfig compiled(KernelConfig c) {
  c.splits = std::min(c.splits, 2);
  c.d_by_columns = c.d_by_columns && c.tma_store;
  if (!is_fp8(c.in) && !c.widens()) c.in_b = c.in;  // 16-bit inputs are of one type
  c.stage_a = c.stage_b = false;
  return c;
}

int tma_smem_bytes(const KernelConfig& c) { return int(sm90::smem_layout(smem_shape(c)).total); }

bool is_narrow(TileShape tile) { return tile.n <= kNarrowMaxN; }

bool realigns_on(TileShape tile) { return tile.m == 64 && tile.n <= 128; }

KernelConfig with_tile(KernelConfig c, TileShape tile) {
  c.tile_m = tile.m;
  c.tile_n = tile.n;
  if (is_narrow(tile) || c.row_classes) c.tma_store = c.d_by_columns = false;
  c.group_partials = c.group_partials && is_narrow(tile);
  return realigns_on(tile) ? c : staged_instead(c);
}

KernelConfig staged_instead(KernelConfig c) {
  c.stage_a = c.stage_a || c.realign_a;
  c.stage_b = c.stage_b || c.realign_b;
  c.realign_a = c.realign_b = false;
  return c;
}

int64_t tile_rows(const KernelConfig& c, int64_t m) {
  return c.row_classes ? ceil_div(m / 8, 64) * 8 : ceil_div(m, c.tile_m);
}

int64_t row_class_width(int64_t k) { return ceil_div(k + 7, 64) * 64; }

int max_ring_stages(const KernelConfig& c) { return c.widens() ? 16 : 8; }

int max_stages(KernelConfig c, int smem_limit) {
  // CTAs that share an SM share its shared memory; each also keeps 1 KB for the system.
  if (c.ctas_per_sm() > 1) smem_limit = (smem_limit + 1024) / c.ctas_per_sm() - 1024;
  c.stages = 0;
  while (c.stages < max_ring_stages(c)) {
    ++c.stages;
    if (tma_smem_bytes(c) > smem_limit) return c.stages - 1;
  }
  return c.stages;
}

}  // namespace gemmkit
