// The cold-start cost model: which tiles, clusters, split counts and raster groups the TMA
// kernel takes for a problem, and in which orientation it runs the problem.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kernel_config.h"
#include "core/problem.h"
#include "dispatch/device_limits.h"

namespace gemmkit {

// The widest tile's N.
inline constexpr int kWidestTile = 256;

// The tile shapes the TMA kernel is built for, with 16-bit or 8-bit inputs. 8-bit inputs keep a
// partial accumulator beside the f32 one (two-level accumulation), which leaves registers for
// tiles up to 176 wide.
const std::vector<TileShape>& tile_shapes(bool eight_bit = false);

// Whether the tile's kernel can read C: not 192 x 176, whose three consumer warpgroups have
// 152 registers each, too few for C's addressing beside the accumulators.
bool tile_takes_c(TileShape tile);

// Whether a grouped kernel with `facts`' groups (layout, along K), C and output type runs on the
// tile: not on 192-row tiles, whose three consumer warpgroups (152 registers each) spill with the
// groups' row ends; on 128 x 256 only contiguous groups of rows with a 16-bit D, or groups along
// K without C (masked groups' batched A, an f32 D's pairs, C's loads spilled 4-8 bytes beside the
// 128 accumulators).
bool tile_takes_groups(TileShape tile, const KernelConfig& facts);

// Whether a fused epilogue (`facts`') is tried beside the tile's accumulators (up to 128 a
// thread): on tiles up to 224 wide (grouped: 208). Wider, most epilogues spill (ptxas: a bias
// and a row scale with gelu, 12-40 bytes on 240 and 256); narrower, the heaviest still may (gelu
// with an M x N read in a grouped kernel at 208: 8 bytes), which the plan finds when it loads the
// kernel and then narrows the tile (dispatch/plan.cpp). A dual GEMM's epilogue works on half
// the accumulators' columns: every tile is tried, and the plan narrows those that spill. An
// e4m3 D takes tiles of whole 1x128 blocks of its scales (128 or 256 columns; a dual GEMM's 256).
bool tile_takes_epilogue(TileShape tile, const KernelConfig& facts);

// Whether the tile's kernel can take these scale modes: mx scales (promoted every 32 of K, with
// a scale per column, staged by loads rather than cp.async) spill registers on tiles wider
// than 128.
bool tile_takes_scales(TileShape tile, ScaleMode a, ScaleMode b);

// An operand's scale mode as the promotion sees it: none for 4-bit weights, whose scales are
// applied as they are widened (kernels/sm90/widen.cuh).
ScaleMode promoted_scale(const KernelConfig& c, bool a);

// Whether the tile's kernel can widen the config's 4-bit weights: A's (the problem transposed),
// on dense, single GEMMs (unclustered: see rank_candidates); against 8-bit B, at most 128 x 176.
bool tile_takes_widening(TileShape tile, const KernelConfig& c);

// Epilogue staging buffers per consumer warpgroup: two, or one where two would leave the ring
// fewer than 4 stages.
int store_buffers_for(KernelConfig c, int smem_limit);

// Tile rows per raster group of the persistent tile order (see TileScheduler in gemm.cuh),
// sized so that a group's rows of A stay in L2.
int raster_group_rows(const Problem& p, int tile_m, const DeviceLimits& limits);

// Tile rows per raster group where every tile runs at once and K is deep (short_groups_pay).
inline constexpr int kOneWaveGroupRows = 4;

// Whether a 16-bit problem whose tiles of `tile` all run in one wave, K at least 16 blocks
// deep, takes kOneWaveGroupRows-row groups instead of raster_group_rows'.
bool short_groups_pay(const Problem& p, TileShape tile, int64_t k_blocks, const DeviceLimits& limits);

struct Candidate {
  KernelConfig config;
  double cost;  // the cost model's estimate, in arbitrary units
};

// Every TMA config the cost model weighs for a normalised problem (tiles, clusters, split
// counts; the most stages that fit): the model's pick first, then the rest cheapest first.
// Empty where the problem needs the fallback kernel.
std::vector<Candidate> rank_candidates(const Problem& p, const DeviceLimits& limits);

// The cold-start choice for a normalised problem: rank_candidates' first, else the fallback;
// with `widest`, the first no wider (dispatch/plan.cpp: a fused epilogue that spills on a tile).
KernelConfig choose_config(const Problem& p, const DeviceLimits& limits, int widest = kWidestTile);

// The cold-start choice for a grouped problem (core/problem.h, GroupRef), whose group sizes the
// host does not know: the knobs of the cheapest unsplit candidate that takes groups for them as a
// dense batch of their mean size (masked: of max_m rows; along K: of the mean K), on the grouped
// problem's facts.
KernelConfig choose_grouped_config(const Problem& p, const DeviceLimits& limits, int widest = kWidestTile);

// Whether a normalised 16-bit problem runs as D^T = B^T A^T instead (the plan's choice, plan.h),
// D then stored by columns: where the cost model's pick for the transposed problem costs less
// than kTransposeGain times its pick for the problem. Tiles span 64 rows per consumer warpgroup
// but any multiple of 16 columns, so a dimension just past a multiple of a tile's rows (M = 513:
// five rows of 128-row tiles, or a second wave) fits closer as N (four tiles of 144). H100, NT,
// us, as it is against transposed: 1025x4096x4096 73.3 against 50.0; 513x4096x4096 33.2 against
// 30.6, which the model puts 8.5% apart: hence 0.95.
// Where both picks are 64-row tiles, N is larger than M and the transposed pick costs no more,
// it is taken too (the larger operand, e.g. the weights, on A, the tiles' rows), if its tiles'
// last column reaches at most an eighth of a tile past the transposed N (H200, NT, on unclustered
// 64x160 tiles: 320x4096x4096 27.1 us as it is against 19.5 transposed); a last column mostly
// past N gains nothing (H100, 129x4096x4096 20.4 against 20.2).
inline constexpr double kTransposeGain = 0.95;
bool transposing_pays(const Problem& p, const DeviceLimits& limits);

// Whether a config (e.g. one read from the tuning database) is one the TMA kernel is built for
// and fits the device's shared memory. Fallback configs always fit.
bool fits(const KernelConfig& c, const DeviceLimits& limits);


}  // namespace gemmkit
