#include "dispatch/config.h"

#include <cstdint>
#include <limits>
#include <sstream>
#include <tuple>

namespace gemmkit {
namespace {

constexpr int kTileK = 64;
constexpr int kAlignmentSlack = 1024;   // the kernel rounds its shared memory up to 1 KB
constexpr int kEpilogueBuffer = 64 * 128;  // one 64-row, 128-byte-wide staging buffer
constexpr int64_t kTmaStrideLimit = int64_t(1) << 40;
constexpr int64_t kCoordinateLimit = int64_t(1) << 31;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A stride TMA accepts for a dimension that is actually walked (extent > 1).
bool tma_stride_ok(int64_t stride_elements, int element_bytes, int64_t at_least) {
  int64_t bytes = stride_elements * element_bytes;
  return stride_elements >= at_least && bytes % 16 == 0 && bytes < kTmaStrideLimit;
}

auto key(const KernelConfig& c) {
  return std::tie(c.kind, c.tile_m, c.tile_n, c.stages, c.group_m, c.a_k_major, c.b_k_major, c.a_batched,
                  c.b_batched, c.tma_store, c.has_c, c.in, c.out, c.c);
}

// Relative wgmma throughput of a tile: larger tiles reuse each loaded byte more.
// Rough figures, to be replaced by measurements (the autotuner's job).
double tile_efficiency(TileShape t) {
  if (t.m == 128) return t.n == 256 ? 1.0 : t.n == 192 ? 0.95 : 0.85;
  return t.n == 256 ? 0.8 : 0.65;
}

}  // namespace

int KernelConfig::threads() const { return kind == KernelKind::tma ? 128 * (tile_m / 64 + 1) : 256; }

int KernelConfig::smem_bytes() const {
  return kind == KernelKind::tma ? tma_smem_bytes({tile_m, tile_n}, stages, tma_store) : 0;
}

std::string KernelConfig::name() const {
  if (kind == KernelKind::fallback) return "fallback simt 64x64";
  std::ostringstream s;
  s << "tma " << tile_m << "x" << tile_n << " s" << stages << " " << (a_k_major ? 'K' : 'M')
    << (b_k_major ? 'K' : 'N') << (tma_store ? "" : " direct-store");
  return s.str();
}

bool KernelConfig::operator<(const KernelConfig& other) const { return key(*this) < key(other); }
bool KernelConfig::operator==(const KernelConfig& other) const { return key(*this) == key(other); }

const std::vector<TileShape>& tile_shapes() {
  // 192 columns divide some common LLM widths exactly (2112 = 11 x 192, 24576 = 128 x 192).
  static const std::vector<TileShape> shapes = {{128, 256}, {128, 192}, {128, 128}, {64, 256}, {64, 128}};
  return shapes;
}

int tma_smem_bytes(TileShape tile, int stages, bool tma_store) {
  int stage_bytes = (tile.m + tile.n) * kTileK * 2;
  int epilogue = tma_store ? (tile.m / 64) * 2 * kEpilogueBuffer : 0;
  int barriers = stages * 2 * 8;
  return kAlignmentSlack + stages * stage_bytes + epilogue + barriers;
}

int max_stages(TileShape tile, bool tma_store, int smem_limit) {
  int stages = 0;
  while (stages < 8 && tma_smem_bytes(tile, stages + 1, tma_store) <= smem_limit) ++stages;
  return stages;
}

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
  return access.ok && access.cols_contiguous && (p.batch <= 1 || p.d.batch_stride != 0);
}

KernelConfig choose_config(const Problem& p, const DeviceLimits& limits) {
  KernelConfig config;
  config.in = p.a.dtype;
  config.out = p.d.dtype;
  config.has_c = p.has_c();
  config.c = p.has_c() ? p.c.dtype : p.d.dtype;

  const TmaAccess a = tma_access(p.a, p.batch, p.m, p.k);
  const TmaAccess b = tma_access(p.b, p.batch, p.k, p.n);
  if (p.k == 0 || !a.ok || !b.ok) {
    config.kind = KernelKind::fallback;
    config.tile_m = config.tile_n = 64;
    config.stages = 0;
    config.tma_store = false;
    return config;
  }
  config.a_k_major = a.cols_contiguous;
  config.b_k_major = !b.cols_contiguous;
  config.a_batched = p.batch > 1 && p.a.batch_stride != 0;
  config.b_batched = p.batch > 1 && p.b.batch_stride != 0;
  config.tma_store = tma_can_store(p);

  // Cost ~ waves of tiles over the SMs, each wave as long as its tile's work at its efficiency.
  double best = std::numeric_limits<double>::infinity();
  for (TileShape tile : tile_shapes()) {
    const int stages = max_stages(tile, config.tma_store, limits.smem_per_block);
    if (stages < 2) continue;
    const int64_t tiles = ceil_div(p.m, tile.m) * ceil_div(p.n, tile.n) * p.batch;
    const double waves = double(ceil_div(tiles, limits.sm_count));
    const double cost = waves * tile.m * tile.n / tile_efficiency(tile);
    if (cost < best) {
      best = cost;
      config.tile_m = tile.m;
      config.tile_n = tile.n;
      config.stages = stages;
    }
  }
  return config;
}

}  // namespace gemmkit
