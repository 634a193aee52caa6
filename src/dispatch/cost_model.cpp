#include "dispatch/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "core/checked_math.h"
#include "dispatch/operand_access.h"

namespace gemmkit {
namespace {

// Split-K in the cost model: at most kMaxSplits parts of at least kMinSplitBlocks K blocks
// each, partial tiles within kMaxPartialBytes, and each part costed as kSplitOverheadBlocks K
// blocks more than its share (filling the pipeline again, writing and summing the partial tile).
// Decode shapes are memory-bound: there, more and shorter parts run slower even where they fill
// more SMs. 24 and 10 make the model's picks match the tuned winners of dense-decode on an H100.
constexpr int kMinSplitBlocks = 24;
constexpr int64_t kMaxPartialBytes = int64_t(32) << 20;
constexpr double kSplitOverheadBlocks = 10.0;
constexpr int64_t kClusteredGroupRows = 1024;  // choose_grouped_config

// The fewest K blocks a split part takes. 4-bit weights' blocks take about four times a 16-bit
// block's time to widen and a quarter of its bytes to load: parts a quarter as deep still cover
// their start and their reduction.
int64_t min_split_blocks(bool widens) { return widens ? kMinSplitBlocks / 4 : kMinSplitBlocks; }

// The most parts K blocks may be split into: at least min_split_blocks each, at most kMaxSplits.
int64_t max_splits(int64_t k_blocks, bool widens = false) {
  return std::min<int64_t>(kMaxSplits, std::max<int64_t>(1, k_blocks / min_split_blocks(widens)));
}


// Relative throughput of a tile: each K block loads m rows of A and n of B (n / cluster per
// CTA when a cluster shares B) for m * n products, so load traffic per FLOP grows with
// 1/n + 1/(cluster * m); it costs ~30% of the traffic above 128x256's without a cluster.
// A rough model, to be replaced by measurements (the autotuner's job).
double tile_efficiency(TileShape t, int cluster) {
  const double traffic = (1.0 / t.n + 1.0 / (cluster * t.m)) / (1.0 / 128 + 1.0 / 256);
  return 1.0 / (1.0 + 0.3 * (traffic - 1.0));
}

// 8-bit inputs promote their partial sums every K block, and a warpgroup's tensor-core work
// stops while it waits for its last wgmma. Block scales cost every full-height tile about the
// same over per-tensor scales (fp8-large, H100: 1.05x the time for widths 128 to 176), so unsplit
// they are not charged. Half-height tiles with block scales are charged 1.35, although they keep
// two partials: with a single consumer warpgroup, 64x128 in clusters of two runs fp8-large's
// block shapes at 0.67x cuBLASLt. So are split tiles, which keep 64x128 clusters on
// fp8-decode's M = 128 block rows (128x128 tiles in two splits run 0.89-0.97x as fast), and tiles
// that read 128x1 B blocks late. Three consumers (8-bit 192 x 128) are charged 1.15, fitted on
// fp8-large's per-tensor shapes: at K = 1536 128 x 176 runs 1.01x cuBLASLt against their 0.89x,
// at K = 512 they run 1.12x against its 0.99x (short K, where their epilogue, split three ways,
// matters most).
double promotion_cost(const KernelConfig& c) {
  const bool block = c.scale_a == ScaleMode::block || c.scale_b == ScaleMode::block;
  const bool b_blocks_read_late = c.scale_b == ScaleMode::block && c.scale_b_mn == 1;  // promote.cuh
  if (block && (c.tile_m < 128 || c.splits > 1 || b_blocks_read_late)) return 1.35;
  return is_fp8(c.in) && c.tile_m > 128 ? 1.15 : 1.0;
}

// 8-bit tiles store their whole epilogue while the tensor cores idle (gemm.cuh leaves part of it
// to the next tile's first K block only for 16-bit inputs), much of a tile's time at short K.
// Each consumer warpgroup stores its 64 rows in about the time 10 K blocks of them take to
// multiply, so a tile's epilogue costs 10 * 64 / tile_m of its own K blocks. Fitted on an H100
// to fp8-large's K = 512 shapes, where 192 x 128 ran 1.22x faster than 128 x 176 per-tensor.
double epilogue_blocks(const KernelConfig& c) { return is_fp8(c.wide_a()) ? 10.0 * 64 / c.tile_m : 0.0; }

// A cluster's CTAs share B's loads but wait for each other's stages, and 8-bit consumers stall at
// every promotion: full-height 8-bit tiles run unclustered (fp8-large, H100, per-tensor 0.85x
// cuBLASLt against 0.84x in clusters); 128x128 runs faster in clusters of two (0.91x against
// 0.88x) but 3.4% behind the unclustered 128x176 and 192x128 picks. Half-height decode tiles,
// whose weights dominate the traffic, keep their clusters.
// Where the tiles fit in one wave, the cluster's synchronisation and its CTAs waiting for each
// other's stages cost more than B's shared loads save (H100, 1024^3 10.5 us unclustered against
// 11.9). Where K is 16 blocks or deeper, two exceptions keep their clusters:
// - At most 128 rows against B at least 8 times the size of A (decode: the weights), where the
//   pair's shared loads read each weight once (llama3-70b-tp8-m128 chain, H100, 390 us against
//   406 unclustered). More rows against weights run faster unclustered (H200, 129x4096x4096 on
//   64x128 18.4 us against 24.2).
// - B's rows lie off 32-byte sectors (rows_aligned), which TMA reads slowly, and sharing B halves
//   those reads (H200, 1000^3 NT 11.9 us against 14.3). Rows on sectors but off 128-byte lines run
//   faster unclustered (1000x1000x1008 NT 9.8 against 10.9). Where only A's rows lie off sectors,
//   the transposed problem's B does, and transposing_pays runs it so, in clusters.
bool one_wave_unclustered(const Problem& p, TileShape tile, int64_t k_blocks, bool b_rows_off_sectors,
                          const DeviceLimits& limits) {
  const int64_t tiles = ceil_div(p.m, tile.m) * ceil_div(p.n, tile.n) * p.batch;
  const bool weights = p.m <= 128 && p.n >= 8 * p.m;
  return tiles <= limits.sm_count && (k_blocks < 16 || !(weights || b_rows_off_sectors));
}

bool cluster_pays(const Problem& p, TileShape tile, int cluster, bool one_wave) {
  return cluster == 1 || (!one_wave && (!is_fp8(p.a.dtype) || tile.m < 128));
}

// Whether the kernel reads an operand's rows (or columns, where those are contiguous) whole
// multiples of `bytes` apart: staged copies are padded to 128 bytes, so are strides that are.
// TMA reads a box row that starts off a 32-byte sector at a fraction of its speed, where it does
// not mind rows off 128-byte lines (H200, 4096x4096xK NT bf16 on 128x256 tiles unclustered, us:
// K = 4096 171.7, 4112 178.6, 4128 177.7, 4160 174.5; K = 4104 and 4168, rows 16 bytes off a
// sector every other row, 286.8 and 291.2; in clusters of two, which halve B's reads, 193.5 and
// 196.0).
constexpr int kSectorBytes = 32, kLineBytes = 128;
bool rows_aligned(const MatrixRef& m, bool staged, int bytes) {
  const int64_t outer = m.col_stride == 1 ? m.row_stride : m.col_stride;
  return staged || outer * dtype_size(m.dtype) % bytes == 0;
}

// 64 x 64 tiles: more CTAs than 64 x 128 tiles, each with half the bytes in flight. 8-bit ones run
// faster above M = 16, and at M = 16 where 64 x 128 tiles with every split the model allows reach
// fewer than half the SMs (fp8-decode, H100, 16x2112x7168 1.14x; elsewhere at M = 16 down to
// 0.91x, 16x7168x16384). 16-bit ones pay where 64 x 128 tiles, split as far as the model allows,
// reach fewer than 40% of the SMs (H100, 512^3 6.8 us against 7.8) and lose where those reach half
// or more (1024^3 11.6 against 9.9). They run unsplit: the decode chain of 8x1280x8192 runs
// faster so (llama3-70b-tp8-m8, 1.4% on an H200).
bool half_width_tile_pays(const Problem& p, TileShape tile, int64_t k_blocks, const DeviceLimits& limits) {
  if (tile.n != 64) return true;
  const int64_t wide_units = ceil_div(p.m, 64) * ceil_div(p.n, 128) * max_splits(k_blocks) * p.batch;
  if (is_fp8(p.a.dtype)) return p.m > 16 || wide_units < limits.sm_count / 2;
  return wide_units * 5 < limits.sm_count * 2;
}

// Weight streaming: 16-bit problems whose time goes to reading one operand (the weights) once,
// past few rows or columns of the other, take 64-row tiles, unclustered:
// - at most kNarrowMaxN wide with B K-major (decode, transposed by normalize): a narrow tile, the
//   narrowest that covers N;
// - 33 to 128 rows against at least 8 times as many columns, B K-major, where 64x64 tiles fit in
//   one wave: 64x64 (64x128 at most 64 rows where B's rows lie off 32-byte sectors). Against
//   64x128 tiles in clusters of two, split as the cost model says (H100, NT): 128x4096x4096 18.7 us
//   against 23.4. They lose where they take more than a wave (77x5760x2880, 180 tiles: 26.8
//   against 20.5), where B's rows lie off 128-byte lines above 64 rows (two tile rows), which a
//   cluster's shared loads read half as often (128x4096x4104: 32.1 against 24.7), and above 64
//   rows at K deeper than 128 blocks, where two tiles read each weight tile without a cluster's
//   shared loads (H200: 128x4096x14336 42.2 against 40.6). At most 64 rows,
//   one tile row, a cluster has nothing to share, and rows off lines stream too (H200, against
//   transposed clustered tiles: 64x4096x4112 17.1 us against 29.6); on 64x128 where B's rows lie
//   off 32-byte sectors, since every tile re-reads the tokens' rows, which TMA then reads slowly
//   too (64x7168x2056 17.7 us against 18.6 on 64x64);
// - 33 to kRowClassesMaxN wide with row classes (unaligned weights, transposed by normalize):
//   64x64 or 64x128.
std::optional<TileShape> streaming_tile(const Problem& p, const KernelConfig& config, int64_t k_blocks,
                                        const DeviceLimits& limits) {
  if (is_fp8(config.in) || config.out == DType::e4m3) return std::nullopt;
  if (!config.b_k_major) return std::nullopt;
  if (p.n <= kNarrowMaxN) {  // at least 16 wide where B has mx exponents (tile_takes_scales)
    const int narrowest = tile_takes_scales({64, 8}, promoted_scale(config, true), promoted_scale(config, false)) ? 8 : 16;
    return TileShape{64, p.n <= narrowest ? narrowest : p.n <= 16 ? 16 : 32};
  }
  if (config.row_classes) return TileShape{64, p.n <= 64 ? 64 : 128};
  const bool one_wave = ceil_div(p.m, 64) * ceil_div(p.n, 64) * p.batch <= limits.sm_count;
  const bool shallow_or_one_row = p.m <= 64 || k_blocks <= 128;
  if (p.m > kNarrowMaxN && p.m <= 128 && p.n >= 8 * p.m && one_wave && shallow_or_one_row &&
      (p.m <= 64 || rows_aligned(p.b, config.stage_b, kLineBytes))) {
    return TileShape{64, p.m <= 64 && !rows_aligned(p.b, config.stage_b, kSectorBytes) ? 128 : 64};
  }
  return std::nullopt;
}

// One SM loads only ~36 bytes a clock: fewer than half the SMs cannot reach the memory's
// bandwidth. So streaming tiles run unsplit where they exceed half the SMs, else in as many parts
// as fill the SMs in one wave, each at least kMinSplitBlocks deep, or twice that where the tiles
// reach a third of the SMs. Measured on narrow tiles, H100 (NT bf16 decode shapes, transposed as
// normalize does; us):
// - 4096x8x4096, 64 tiles of 64 K blocks: 18.1 unsplit, 19.3 in two parts;
// - 4096x8x14336, 64 tiles of 224 K blocks: 49.0 unsplit, 46.6 in two parts (H200: 38.8
//   unsplit, against cuBLASLt's 34.2);
// - 2112x8x7168, 33 tiles: 20.6 unsplit, 18.8 in two parts, 17.7 in four;
// - 1280x8x8192, 20 tiles: 20.4 unsplit, 14.7 in four, 14.9 in six.
int64_t streaming_splits(int64_t tiles, int64_t k_blocks, bool widens, const DeviceLimits& limits) {
  if (tiles * 2 > limits.sm_count) return 1;
  const int64_t min_blocks = (tiles * 3 >= limits.sm_count ? 2 : 1) * min_split_blocks(widens);
  return std::max<int64_t>(1, std::min({limits.sm_count / tiles, k_blocks / min_blocks, int64_t(kMaxSplits)}));
}

// A streaming problem's candidates: its tile, unclustered, split as streaming_splits says (the
// pick), then the other part counts, nearest the pick first. Their cost is that distance: the
// model has no finer estimate for them.
std::vector<Candidate> streaming_candidates(const Problem& p, const KernelConfig& config, TileShape tile,
                                            int64_t k_blocks, const DeviceLimits& limits) {
  KernelConfig c = with_tile(config, tile);
  c.cluster_m = 1;
  c.group_m = raster_group_rows(p, tile.m, limits);
  c.store_buffers = store_buffers_for(c, limits.smem_per_block);
  c.stages = max_stages(c, limits.smem_per_block);
  const int64_t tiles = tile_rows(c, p.m) * ceil_div(p.n, tile.n) * p.batch;
  DeviceLimits slots = limits;  // CTAs that share an SM count as SMs of their own
  slots.sm_count *= c.ctas_per_sm();
  const int64_t pick = streaming_splits(tiles, k_blocks, c.widens(), slots);
  std::vector<Candidate> candidates;
  for (int64_t splits = 1; splits <= max_splits(k_blocks, c.widens()); ++splits) {
    c.splits = int(splits);
    candidates.push_back({c, 1.0 + std::abs(std::log2(double(splits) / double(pick)))});
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& x, const Candidate& y) { return x.cost < y.cost; });
  return candidates;
}

}  // namespace

const std::vector<TileShape>& tile_shapes(bool eight_bit) {
  // Every 16th width from 128 to 256 for full-height tiles, so that some width divides N (or
  // nearly) and fills the last wave: 2112 = 12 x 176, for one. 192 x 176, three consumer
  // warpgroups, loads less per multiply than 128 x 176 where N suits 176 (the widest its
  // registers allow). Half-height tiles for small M, every 16th width from 128 to 256 too (a
  // transposed problem's few columns, e.g. 257 as two of 144: transposing_pays). 8-bit inputs
  // multiply twice the K per byte of shared memory, so 128 x 128 already feeds the tensor cores
  // as 128 x 256 does for 16-bit ones; their partial accumulators stop the widths at 176 (128
  // with mx scales). 192 x 128 splits a tile's epilogue, which 8-bit tiles store while the
  // tensor cores idle, among three consumers (see epilogue_blocks); their 152 registers hold no
  // block or mx scales.
  static const std::vector<TileShape> shapes = [] {
    std::vector<TileShape> s;
    for (int n = 256; n >= 128; n -= 16) s.push_back({128, n});
    s.push_back({192, 176});
    for (int n = 256; n >= 128; n -= 16) s.push_back({64, n});
    s.push_back({64, 64});  // where wider tiles leave most SMs idle (half_width_tile_pays)
    for (int n : {32, 16, 8}) s.push_back({64, n});  // problems at most 32 wide (is_narrow)
    return s;
  }();
  static const std::vector<TileShape> eight_bit_shapes = [] {
    std::vector<TileShape> s;
    for (int n = 176; n >= 128; n -= 16) s.push_back({128, n});
    s.push_back({192, 128});
    s.push_back({64, 128});
    s.push_back({64, 64});  // decode shapes (half_width_tile_pays)
    return s;
  }();
  return eight_bit ? eight_bit_shapes : shapes;
}


bool tile_takes_c(TileShape tile) { return tile.m <= 128; }

bool tile_takes_groups(TileShape tile, const KernelConfig& facts) {
  if (tile.m > 128) return false;
  if (tile.m < 128 || tile.n <= 240) return true;
  return facts.group_along_k ? !facts.has_c
                             : facts.group_layout == GroupLayout::contiguous && facts.out != DType::f32;
}

bool tile_takes_epilogue(TileShape tile, const KernelConfig& facts) {
  if (facts.out == DType::e4m3 && facts.tile_cols(tile.n) % 128 != 0) return false;
  return !facts.epilogue || facts.dual || tile.n <= (facts.grouped() ? 208 : 224);
}

bool tile_takes_scales(TileShape tile, ScaleMode a, ScaleMode b) {
  const bool block_or_mx = a == ScaleMode::block || a == ScaleMode::mx || b == ScaleMode::block || b == ScaleMode::mx;
  if (tile.m > 128 && block_or_mx) return false;
  // B's mx exponents travel in boxes a byte per tile column, and a TMA box is at least 16 bytes wide.
  if (b == ScaleMode::mx && tile.n < 16) return false;
  return tile.n <= 128 || (a != ScaleMode::mx && b != ScaleMode::mx);
}

ScaleMode promoted_scale(const KernelConfig& c, bool a) {
  return is_4bit(a ? c.in : c.in_b) ? ScaleMode::none : a ? c.scale_a : c.scale_b;
}

bool tile_takes_widening(TileShape tile, const KernelConfig& c) {
  if (!c.widens()) return true;
  // Against 8-bit B (W4A8), the fragments beside a partial accumulator take tiles at most 128 x
  // 176, as 8-bit inputs' partials do (tile_shapes); 128 x 160 in groups under 128 (u4 in groups
  // of 32 with zero points spilled 48 bytes on 128 x 176).
  const int widest = c.widen_granule < 128 ? 160 : 176;
  const bool fits_partial = !is_fp8(c.in_b) || (tile.m <= 128 && tile.n <= widest);
  return is_4bit(c.in) && tile.m % 64 == 0 && fits_partial && (!c.grouped() || c.group_along_n) && !c.dual;
}

int store_buffers_for(KernelConfig c, int smem_limit) {
  // A ring of 4 stages matters more than a second buffer: 192 x 176 ran 4096x2112x7168 in
  // 166 us with 4 stages and one buffer, in 188 us with 3 and two. Three consumers take one
  // buffer each: 8-bit 192 x 128 ran fp8-large's shapes with K <= 2048 at 0.97x cuBLASLt with
  // 5 stages and one, at 0.96x with 4 and two.
  if (c.tile_m > 128) return 1;
  c.store_buffers = 2;
  return max_stages(c, smem_limit) >= 4 ? 2 : 1;
}

int raster_group_rows(const Problem& p, int tile_m, const DeviceLimits& limits) {
  // A group of tile rows walks every column of B while its rows of A stay in L2, so B comes
  // from memory once per group: the fewer groups the better, as long as a group's rows of A fit
  // in a third of L2 (the rest holds B's current columns and D on its way out). Powers of two
  // from 8 (where deep K keeps it) to 64, and no more than M needs, to keep the kernels few.
  const int64_t row_bytes = int64_t(tile_m) * p.k * dtype_size(p.a.dtype);
  const int64_t tiles_m = ceil_div(p.m, tile_m);
  int rows = 8;
  while (rows < 64 && rows < tiles_m && 2 * rows * row_bytes <= limits.l2_bytes / 3) rows *= 2;
  return rows;
}

// In one wave every tile runs at once, so a group cannot be about L2 capacity: it decides which
// tiles neighbouring CTAs take, and so how many of their L2 reads of a line are shared. Where K
// is 16 blocks or deeper, 4-row groups run faster (H100, 1024x1024x4096 NT 17.2 us against 20.2
// with the L2-sized group); at shallower K they lose up to 1.7% (1536x1536x512 NT). 8-bit inputs
// keep the L2-sized groups (not measured).
bool short_groups_pay(const Problem& p, TileShape tile, int64_t k_blocks, const DeviceLimits& limits) {
  const int64_t tiles_m = ceil_div(p.m, tile.m);
  return !is_fp8(p.a.dtype) && k_blocks >= 16 && tiles_m > kOneWaveGroupRows &&
         tiles_m * ceil_div(p.n, tile.n) * p.batch <= limits.sm_count;
}

namespace {

// A dual GEMM is costed as the GEMM of its accumulators, B and B2 side by side: 2N columns (and
// two rows at least: one would be the GEMV's). Its candidates are that problem's that the dual
// kernel takes: unsplit, 128 to 256 wide by 32 (a tile's D columns fill a 128-byte store group,
// in pairs of 8-column groups; 8-bit ones stop at 160), N-major B's halves whole 64-wide blocks
// (each block comes from one operand), at most 128 high (three 8-bit consumers' 152 registers
// leave the epilogue none); with the dual problem's facts. 8-bit ones without inner scales
// (tensor, rowwise) 128 wide, where two partial accumulators fit (gemm.cuh, kTwoPartials): H200,
// 8192x28672x4096 per-tensor SwiGLU 1758 us against 2052 at 128 x 160 (block-scaled ones, one
// partial either way, were faster at 160 on two of three shapes). Tiles as wide as 256 are tried although an
// epilogue runs: where one spills, the plan narrows it (dispatch/plan.cpp).
std::vector<Candidate> dual_candidates(const Problem& p, const DeviceLimits& limits) {
  const KernelConfig facts = problem_config(p);
  if (facts.kind != KernelKind::tma) return {};
  Problem side_by_side = p;
  side_by_side.b2 = {};
  side_by_side.scale_b2 = {};
  side_by_side.epilogue = {};
  side_by_side.n = 2 * p.n;
  side_by_side.m = std::max<int64_t>(p.m, 2);
  // B as one K x 2N operand TMA reads as B does (B and B2 each do), D dense.
  const int64_t n_major_stride = ceil_div(2 * p.n, 8) * 8;
  const int64_t b_matrix = facts.b_k_major ? 2 * p.n * p.b.col_stride : p.k * n_major_stride;
  side_by_side.b = facts.b_k_major ? MatrixRef{p.b.data, p.b.dtype, 0, 1, p.b.col_stride}
                                   : MatrixRef{p.b.data, p.b.dtype, 0, n_major_stride, 1};
  if (facts.b_batched) side_by_side.b.batch_stride = b_matrix;
  // D dense, 16-bit where the dual GEMM's is quantised (the pairs' 128 columns are one block).
  side_by_side.d = {p.d.data, p.quantizes_d() ? DType::bf16 : p.d.dtype, p.batch > 1 ? p.m * 2 * p.n : 0, 2 * p.n, 1};
  side_by_side.scale_d = {};
  const auto inner = [](ScaleMode m) { return m == ScaleMode::block || m == ScaleMode::mx; };
  const bool two_partials = is_fp8(p.a.dtype) && !inner(p.scale_a.mode) && !inner(p.scale_b.mode);
  std::vector<Candidate> candidates;
  for (const Candidate& c : rank_candidates(side_by_side, limits)) {
    const KernelConfig& knobs = c.config;
    if (knobs.splits != 1 || knobs.tile_m > 128 || knobs.tile_n < 128 || knobs.tile_n % 32 != 0 ||
        (two_partials && knobs.tile_n > 128) ||
        (!facts.b_k_major && knobs.tile_n % 128 != 0)) {
      continue;
    }
    KernelConfig config = with_tile(facts, {knobs.tile_m, knobs.tile_n});
    config.cluster_m = knobs.cluster_m;
    config.group_m = knobs.group_m;
    config.store_buffers = store_buffers_for(config, limits.smem_per_block);
    config.stages = max_stages(config, limits.smem_per_block);
    candidates.push_back({config, c.cost});
  }
  return candidates;
}

}  // namespace

std::vector<Candidate> rank_candidates(const Problem& p, const DeviceLimits& limits) {
  if (p.dual()) return dual_candidates(p, limits);
  const KernelConfig config = problem_config(p);
  if (config.kind != KernelKind::tma) return {};
  // Cost ~ waves of work units (a cluster tile, or one K part of it) over the SMs, each wave as
  // long as its unit's work at its tile's efficiency. Candidates come largest tile first,
  // clustered first, fewest parts first, and a later one must win by 2% to be the pick: the
  // model cannot tell closer calls apart, and fewer units means fewer epilogues. So a later one
  // that costs no more also wins where it takes fewer CTAs: the waves' count cannot see the rows
  // a larger tile wastes below M (H100, 257x4096x4096 NT: 128x128 in clusters of two, 128 CTAs, a
  // quarter of them wholly below M, 39.3 us; 64x256 in clusters of two, 96 CTAs, 29.0 us).
  const int64_t k_blocks = ceil_div(p.k, config.tile_k());
  if (const std::optional<TileShape> tile = streaming_tile(p, config, k_blocks, limits)) {
    return streaming_candidates(p, config, *tile, k_blocks, limits);
  }
  const bool b_rows_off_sectors = !rows_aligned(p.b, config.stage_b, kSectorBytes);
  std::vector<Candidate> candidates;
  size_t pick = 0;
  int64_t pick_ctas = 0;
  for (TileShape tile : tile_shapes(is_fp8(config.in))) {
    if (is_narrow(tile)) continue;  // streaming_candidates
    // No tile whose last consumer warpgroup would only multiply rows below M.
    if (tile.m > 64 && tile.m - 64 >= p.m) continue;
    const int64_t tiles_m = ceil_div(p.m, tile.m);
    if (config.has_c && !tile_takes_c(tile)) continue;
    if (!tile_takes_scales(tile, promoted_scale(config, true), promoted_scale(config, false))) continue;
    if (!tile_takes_widening(tile, config)) continue;
    if (!tile_takes_epilogue(tile, config)) continue;
    if (!half_width_tile_pays(p, tile, k_blocks, limits)) continue;
    const bool one_wave = one_wave_unclustered(p, tile, k_blocks, b_rows_off_sectors, limits);
    const bool realign = realigns_on(tile) && (config.realign_a || config.realign_b);
    for (int cluster : {2, 1}) {
      if (cluster > tiles_m || (cluster > 1 && (realign || config.widens()))) continue;
      if (!cluster_pays(p, tile, cluster, one_wave)) continue;
      KernelConfig candidate = with_tile(config, tile);
      candidate.cluster_m = cluster;
      candidate.store_buffers = store_buffers_for(candidate, limits.smem_per_block);
      candidate.stages = max_stages(candidate, limits.smem_per_block);
      candidate.group_m =
          short_groups_pay(p, tile, k_blocks, limits) ? kOneWaveGroupRows : raster_group_rows(p, tile.m, limits);
      if (candidate.stages < 2) continue;
      const int64_t cluster_tiles = ceil_div(tiles_m, cluster) * ceil_div(p.n, tile.n) * p.batch;
      // Saturated: past 2^63 bytes (a problem near the addressing limit) no split is allowed.
      const int64_t partial_bytes =
          checked_product({cluster_tiles, cluster, tile.m, tile.n, 4}).value_or(std::numeric_limits<int64_t>::max());
      const bool unsplit_only = tile.n == 64 && !is_fp8(config.in);  // half_width_tile_pays
      for (int splits = 1; splits <= kMaxSplits; ++splits) {
        if (splits > 1 && (tile.n > kMaxSplitTileN || splits > max_splits(k_blocks) ||
                           partial_bytes > kMaxPartialBytes / splits || unsplit_only)) {
          break;
        }
        candidate.splits = splits;
        const double waves = double(ceil_div(cluster_tiles * splits, limits.sm_count / cluster));
        const double blocks =
            double(ceil_div(k_blocks, splits)) + (splits > 1 ? kSplitOverheadBlocks : 0.0) + epilogue_blocks(candidate);
        const double cost = waves * blocks * tile.m * tile.n / tile_efficiency(tile, cluster) *
                            promotion_cost(candidate);
        const int64_t ctas = cluster_tiles * cluster * splits;
        if (candidates.empty() || cost < 0.98 * candidates[pick].cost ||
            (cost <= candidates[pick].cost && ctas < pick_ctas)) {
          pick = candidates.size();
          pick_ctas = ctas;
        }
        candidates.push_back({candidate, cost});
      }
    }
  }
  // The pick first, then the rest by cost (ties in enumeration order).
  std::rotate(candidates.begin(), candidates.begin() + pick, candidates.begin() + pick + 1);
  std::stable_sort(candidates.begin() + 1, candidates.end(),
                   [](const Candidate& x, const Candidate& y) { return x.cost < y.cost; });
  return candidates;
}

namespace {

// A problem the general candidates take: TMA reads both operands as they are and stores D, and
// no streaming tile (decode keeps the orientation normalize gives it).
bool plainly_tiled(const Problem& p, const KernelConfig& c, const DeviceLimits& limits) {
  const bool copied = c.stage_a || c.stage_b || c.realign_a || c.realign_b || c.row_classes;
  return c.kind == KernelKind::tma && c.tma_store && !copied && !streaming_tile(p, c, ceil_div(p.k, c.tile_k()), limits);
}

}  // namespace

bool transposing_pays(const Problem& p, const DeviceLimits& limits) {
  if (is_fp8(p.a.dtype) || is_4bit(p.a.dtype) || is_4bit(p.b.dtype) || p.dual() || p.quantizes_d()) return false;
  const KernelConfig c = problem_config(p);
  if (c.d_by_columns || !plainly_tiled(p, c, limits)) return false;
  const Problem t = transposed_problem(p);
  if (!plainly_tiled(t, problem_config(t), limits)) return false;
  const Candidate as_is = rank_candidates(p, limits).front(), transposed = rank_candidates(t, limits).front();
  if (transposed.cost < kTransposeGain * as_is.cost) return true;
  const bool half_height = as_is.config.tile_m == 64 && transposed.config.tile_m == 64;
  const int64_t width = transposed.config.tile_n, past_last_column = ceil_div(t.n, width) * width - t.n;
  return half_height && p.n > p.m && past_last_column <= width / 8 && transposed.cost <= as_is.cost;
}

KernelConfig choose_config(const Problem& p, const DeviceLimits& limits, int widest) {
  for (const Candidate& candidate : rank_candidates(p, limits)) {
    if (candidate.config.tile_n <= widest) return candidate.config;
  }
  return problem_config(p);
}

KernelConfig choose_grouped_config(const Problem& p, const DeviceLimits& limits, int widest) {
  // The stand-in: the groups as a dense batch of matrices of the mean size (masked: max_m; along
  // K, of the mean K).
  Problem dense = p;
  dense.groups = {};
  if (p.groups.along_k) {
    dense.k = std::max<int64_t>(1, ceil_div(p.k, p.batch));
  } else if (p.groups.along_n) {
    if (p.groups.layout == GroupLayout::contiguous) dense.n = std::max<int64_t>(1, ceil_div(p.n, p.batch));
    dense.b.batch_stride = dense.n * p.k;
    dense.d.batch_stride = dense.n * p.m;
  } else {
    if (p.groups.layout == GroupLayout::contiguous) dense.m = std::max<int64_t>(2, ceil_div(p.m, p.batch));
    dense.a.batch_stride = dense.m * p.k;
    dense.d.batch_stride = dense.m * p.n;
  }
  // The stand-in's cheapest candidate that takes groups. (Counting half a cluster row past each
  // contiguous group's rows, for sizes the host cannot see, picked 64x256 over 128x256 in clusters
  // of two for Qwen3's 128 x 256 rows: 1574 against 1327 us balanced, 2237 against 2011 zipf:1.2;
  // H100, forced in one call.)
  KernelConfig config = grouped_problem_config(p);
  for (const Candidate& candidate : rank_candidates(dense, limits)) {
    const KernelConfig& c = candidate.config;
    if (c.splits != 1 || c.tile_n > widest || !tile_takes_groups({c.tile_m, c.tile_n}, config) ||
        !tile_takes_epilogue({c.tile_m, c.tile_n}, config)) {
      continue;
    }
    static_cast<KernelKnobs&>(config) = c;
    break;
  }
  // Contiguous groups of fewer than kClusteredGroupRows rows on average run unclustered. A
  // cluster's CTAs take consecutive row tiles of one group, so a group that ends in a cluster
  // row's first tile leaves the second CTA idle, and a router's uneven counts end about half the
  // groups so. H200, moe.txt's 16-bit plans in clusters of two against the same unclustered
  // (bench --cluster 1; bench/results/grouped-clusters-h200-575d36d.txt): routed:1 rows 1.07-1.11x
  // faster unclustered at G = 128 (the training suite's 1.10-1.16x), 1.02-1.06x at 32 x 512;
  // zipf:1.2 0.99-1.22x; balanced rows 0.99-1.02x at G = 128 and 0.91-1.00x at 32 x 512, which a
  // router's counts never are. 8 x 4096 rows keep their clusters (0.92-1.01x unclustered).
  if (p.groups.layout == GroupLayout::contiguous && !p.groups.along_k && !p.groups.along_n &&
      dense.m < kClusteredGroupRows) {
    config.cluster_m = 1;
  }
  config = with_tile(config, {config.tile_m, config.tile_n});
  config.stages = std::min(config.stages, max_stages(config, limits.smem_per_block));
  return config;
}

bool fits(const KernelConfig& c, const DeviceLimits& limits) {
  if (c.kind != KernelKind::tma) return true;
  const std::vector<TileShape>& shapes = tile_shapes(is_fp8(c.in));
  const bool known_tile = std::find(shapes.begin(), shapes.end(), TileShape{c.tile_m, c.tile_n}) != shapes.end();
  return known_tile && (!c.has_c || tile_takes_c({c.tile_m, c.tile_n})) &&
         (!c.grouped() || tile_takes_groups({c.tile_m, c.tile_n}, c)) && tile_takes_epilogue({c.tile_m, c.tile_n}, c) &&
         tile_takes_scales({c.tile_m, c.tile_n}, promoted_scale(c, true), promoted_scale(c, false)) &&
         tile_takes_widening({c.tile_m, c.tile_n}, c) && (c.cluster_m == 1 || (c.cluster_m == 2 && !c.widens())) &&
         c.group_m >= c.cluster_m && c.group_m <= 64 &&
         c.splits >= 1 && c.splits <= kMaxSplits && (c.splits == 1 || c.tile_n <= kMaxSplitTileN) &&
         (!is_narrow({c.tile_m, c.tile_n}) || (c.b_k_major && !c.tma_store && c.cluster_m == 1)) &&
         (!(c.realign_a || c.realign_b) || (realigns_on({c.tile_m, c.tile_n}) && c.cluster_m == 1 && !is_fp8(c.in))) &&
         !(c.realign_a && c.stage_a) && !(c.realign_b && c.stage_b) &&
         (!c.row_classes || (c.tile_m == 64 && c.tile_n <= kRowClassesMaxN && !c.tma_store && c.cluster_m == 1 && c.a_k_major && !c.a_batched &&
                             !c.b_batched && !(c.stage_a || c.stage_b || c.realign_a || c.realign_b))) &&
         c.store_buffers >= 1 && c.store_buffers <= 8 && c.stages >= 2 && c.stages <= max_stages(c, limits.smem_per_block);
}

}  // namespace gemmkit

