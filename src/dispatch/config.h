// Kernel configurations and the cold-start heuristic that picks one for a problem.
#pragma once

#include <string>
#include <vector>

#include "dispatch/problem.h"

namespace gemmkit {

// tma: the TMA + WGMMA kernel; gemv: M = 1 with B's K contiguous (gemv.cuh); fallback: plain
// CUDA cores for K = 0 and coordinates beyond TMA's 2^31.
enum class KernelKind { tma, fallback, gemv };

struct TileShape {
  int m, n;
  bool operator==(const TileShape&) const = default;
};

// Everything that changes the generated kernel. Two equal configs share one binary.
struct KernelConfig {
  KernelKind kind = KernelKind::tma;
  int tile_m = 128, tile_n = 128;
  int stages = 4;
  int group_m = 8;          // row blocks per raster group of the persistent tile order
  int cluster_m = 1;        // CTAs per cluster, on vertically adjacent tiles sharing B (1 or 2)
  int splits = 1;           // parts each tile's K range is cut into (split-K); see compiled()
                            // and kMaxSplitTileN
  bool a_k_major = true;    // A's K dimension is contiguous (else M is)
  bool b_k_major = true;    // B's K dimension is contiguous (else N is)
  bool a_batched = false;   // A has a batch stride (else one A serves every batch)
  bool b_batched = false;
  bool tma_store = true;    // D is written by TMA through shared memory (else see row_store())
  bool d_by_columns = false;  // D's columns are contiguous, not its rows: TMA stores each tile
                              // transposed (a problem the plan transposed, plan.h)
  int store_buffers = 2;    // 8 KB staging buffers per consumer warpgroup for the TMA store
  bool has_c = false;
  DType in = DType::bf16, out = DType::bf16, c = DType::bf16;
  DType in_b = DType::bf16;  // B's element type: `in` for 16-bit inputs, e4m3 or e5m2 with 8-bit A
  ScaleMode scale_a = ScaleMode::none, scale_b = ScaleMode::none;  // FP8 scales (gemmkit/gemm.h)
  int scale_a_mn = 1, scale_b_mn = 1;  // M (N) elements per block scale of A (B): 1 or 128
  // An operand TMA cannot read as it is (unaligned, or 8-bit but not K-major, wgmma's only
  // 8-bit layout) is either copied densely into per-stream scratch before the launch (stage.cuh),
  // along the dimension a_k_major / b_k_major say, for a kernel the same as for an aligned
  // operand; or, where it is 16-bit, contiguous along that dimension and larger than L2 (see
  // larger_than_l2 in config.cpp), realigned by the kernel's producer warps as it loads it
  // (realign.cuh), unclustered, on tiles realigns_on takes.
  bool stage_a = false, stage_b = false;
  bool realign_a = false, realign_b = false;
  // A 16-bit, K-major A whose rows TMA cannot address, against at most kRowClassesMaxN columns of
  // a K-major B (decode weights with odd K, as normalize turns them): A read by TMA in classes of
  // every 8th row, B staged as 8 copies shifted to line up with them (row_classes.cuh). Unbatched,
  // M a multiple of 8, 64-row tiles stored directly; see row_classes_apply.
  bool row_classes = false;

  int threads() const;
  // Where TMA cannot store D: whether D is still written through shared memory, a row at a time
  // (epilogue.cuh, store_tile_rows), where its columns are contiguous. Tiles of 128 rows or more
  // only: 64-row tiles (narrow ones and row classes among them) store each element directly,
  // which ran as fast or faster on them (H100, 333x1237x568 NT 12.0 against 13.5 us). Nor split
  // tiles of three consumer warpgroups: summing the parts and storing rows, 8-bit 192 x 128 with
  // rowwise scales spilled (16 bytes of stack); they store each element directly.
  bool row_store() const;
  int smem_bytes() const;  // dynamic shared memory the launch reserves
  int tile_k() const;      // K elements per ring stage: 128 bytes' worth (64 16-bit, 128 8-bit)
  // One ring stage: the A and B slices of one K block, and the block and mx scales staged with them.
  int stage_bytes() const;
  // Width in bytes of one TMA store box of D: 128, or 64 or 32 where the tile's row of D is
  // not a multiple of 128 bytes. The box's swizzle mode has the same width. With d_by_columns,
  // the bytes of a row the box's columns span: the most, up to 128, that divide the tile's row.
  int store_box_bytes() const;
  // e.g. "tma 128x256 s4 c2 KK", "tma 64x128 s8 split6 KK"; a raster group other than 8 shows as " g16"
  std::string name() const;
  bool operator<(const KernelConfig& other) const;
  bool operator==(const KernelConfig& other) const;
};

// The config as compiled: the split count is a launch parameter, so every count above 1
// shares one binary (with the split-K reduction) and 1 another (without); 16-bit inputs take
// B's type from A's; staging happens before the launch (realigning, in the kernel).
KernelConfig compiled(KernelConfig c);

// Split-K is built for tiles up to this wide: its reduction holds a second tile row's worth of
// registers, which wider tiles do not have to spare.
inline constexpr int kMaxSplitTileN = 128;
// The most parts a tile's K range is cut into.
inline constexpr int kMaxSplits = 16;

// Narrow tiles, 64 x 8, 16 or 32, for 16-bit problems at most kNarrowMaxN wide with B K-major:
// decode, as normalize (plan.h) turns it (a few tokens against a weight matrix), where the
// weights fill wgmma's 64 rows and the tokens its narrow N. Their kernels store D directly (the
// TMA store's boxes are 128 bytes wide) and run unclustered. (16 stages instead of 8 ran some
// unsplit shapes up to 8% faster one at a time, but the decode chains 1-4% slower on an H100.)
inline constexpr int kNarrowMaxN = 32;
// The most columns of B (tokens) that row classes take, on 64 x 64 or 64 x 128 tiles above
// kNarrowMaxN.
inline constexpr int kRowClassesMaxN = 128;
bool is_narrow(TileShape tile);

// Whether the kernel realigns operands on the tile: 64 rows (a single consumer warpgroup leaves
// the producer the registers and shared-memory bandwidth for it) and at most 128 wide (the
// landing rows of 64 x 256 left a ring of two stages: 64x28672x4097 ran 246 us, 0.90x cuBLASLt).
bool realigns_on(TileShape tile);

// `c` with the tile `tile`, and the store path and loads it allows (narrow tiles store directly;
// operands realigned are staged on tiles realigns_on does not take).
KernelConfig with_tile(KernelConfig c, TileShape tile);

// `c` with its realigned operands staged instead.
KernelConfig staged_instead(KernelConfig c);

// Tile rows the kernel walks for an M-row problem: with row classes, 8 for every 512 rows (64
// groups of 8), else one per tile_m rows.
int64_t tile_rows(const KernelConfig& c, int64_t m);

// The K elements row classes shift B's copies across: K and up to 7 more, in whole K blocks.
int64_t row_class_width(int64_t k);

// Whether the problem's A is read as row classes (KernelConfig::row_classes).
bool row_classes_apply(const Problem& p);

// A row-classes config turned into the realigning kernel's for the same problem: for a launch
// that cannot have B's copies (a graph capture, which cannot grow the scratch).
KernelConfig realigned_instead(const Problem& p, KernelConfig c);

// The tile shapes the TMA kernel is built for, with 16-bit or 8-bit inputs. 8-bit inputs keep a
// partial accumulator beside the f32 one (two-level accumulation), which leaves registers for
// tiles up to 176 wide.
const std::vector<TileShape>& tile_shapes(bool eight_bit = false);

// Whether the tile's kernel can read C: not 192 x 176, whose three consumer warpgroups have
// 152 registers each, too few for C's addressing beside the accumulators.
bool tile_takes_c(TileShape tile);

// Whether the tile's kernel can take these scale modes: mx scales (promoted every 32 of K, with
// a scale per column, staged by loads rather than cp.async) spill registers on tiles wider
// than 128.
bool tile_takes_scales(TileShape tile, ScaleMode a, ScaleMode b);

// Epilogue staging buffers per consumer warpgroup: two, or one where two would leave the ring
// fewer than 4 stages.
int store_buffers_for(KernelConfig c, int smem_limit);

// Shared memory a TMA config needs (the same as c.smem_bytes()).
int tma_smem_bytes(const KernelConfig& c);

// The most stages (at most 8) with which `c` fits in `smem_limit` bytes, or 0 if none does.
int max_stages(KernelConfig c, int smem_limit);

struct DeviceLimits {
  int sm_count = 132;
  int smem_per_block = 232448;
  int64_t l2_bytes = 50 << 20;
};

// Tile rows per raster group of the persistent tile order (see TileScheduler in gemm.cuh),
// sized so that a group's rows of A stay in L2.
int raster_group_rows(const Problem& p, int tile_m, const DeviceLimits& limits);

// Tile rows per raster group where every tile runs at once and K is deep (short_groups_pay).
inline constexpr int kOneWaveGroupRows = 4;

// Whether a 16-bit problem whose tiles of `tile` all run in one wave, K at least 16 blocks
// deep, takes kOneWaveGroupRows-row groups instead of raster_group_rows'.
bool short_groups_pay(const Problem& p, TileShape tile, int64_t k_blocks, const DeviceLimits& limits);

// Whether TMA can read an operand of rows x cols, and along which dimension it is contiguous.
struct TmaAccess {
  bool ok = false;
  bool cols_contiguous = false;  // else rows are
};
TmaAccess tma_access(const MatrixRef& m, int64_t batch, int64_t rows, int64_t cols);

// Whether TMA can write D: aligned, rows (or, where those are contiguous, columns) a whole number
// of 16-byte pieces.
bool tma_can_store(const Problem& p);

// The fields of a config that follow from a (normalised, see plan.h) problem alone: types,
// scales, majorness, batching, staging and the store path. Its kind is gemv for M = 1 with B's
// K contiguous, fallback where the TMA kernel cannot run (even after staging), else tma.
KernelConfig problem_config(const Problem& p);

// The fallback kernel's config for a problem whose TMA config is `c`: its types, scales and C.
KernelConfig fallback_config(const KernelConfig& c);

struct Candidate {
  KernelConfig config;
  double cost;  // the cost model's estimate, in arbitrary units
};

// Every TMA config the cost model weighs for a normalised problem (tiles, clusters, split
// counts; the most stages that fit): the model's pick first, then the rest cheapest first.
// Empty where the problem needs the fallback kernel.
std::vector<Candidate> rank_candidates(const Problem& p, const DeviceLimits& limits);

// The cold-start choice for a normalised problem: rank_candidates' first, else the fallback.
KernelConfig choose_config(const Problem& p, const DeviceLimits& limits);

// Whether a normalised 16-bit problem runs as D^T = B^T A^T instead (the plan's choice, plan.h),
// D then stored by columns: where the cost model's pick for the transposed problem costs less
// than kTransposeGain times its pick for the problem. Tiles span 64 rows per consumer warpgroup
// but any multiple of 16 columns, so a dimension just past a multiple of a tile's rows (M = 513:
// five rows of 128-row tiles, or a second wave) fits closer as N (four tiles of 144). H100, NT,
// us, as it is (last tile rows moved up, epilogue.cuh) against transposed: 1025x4096x4096 73.3
// against 50.0, 513x8192x2048 33.0 against 30.7, 769x8192x2048 48.0 against 44.6; 513x4096x4096
// 33.2 against 30.6 and 257x4096x4096 28.3 against 26.1 (both measured as their transposes with
// D stored by rows), which the model puts 8.5% and 7% apart: hence 0.95.
// Where both picks are 64-row tiles, N is larger than M and the transposed pick costs no more,
// it is taken too (the larger operand, e.g. the weights, on A, the tiles' rows), if its tiles'
// last column reaches at most an eighth of a tile past the transposed N: H200, NT, us,
// as it is against transposed, both on unclustered 64x160 tiles, 300x4096x14336 84.0-91.8 against
// 62.5-65.9, 320x4096x4096 27.1-29.9 against 19.5-20.1; 256x4096x4096 on 64x128 18.3 against
// 17.7-18.2. Why the orientation matters this much was not found. A last column mostly
// past N gained nothing, even moved left to end within 15 columns of N (epilogue.cuh; H100,
// us): 129x4096x4096 20.4 against 20.2 (two 128-wide columns for 129), 300x2048x1024 NN f16
// 10.3 against 10.1, 333x1240x568 9.9 against 9.4.
inline constexpr double kTransposeGain = 0.95;
bool transposing_pays(const Problem& p, const DeviceLimits& limits);

// Whether a config (e.g. one read from the tuning database) is one the TMA kernel is built for
// and fits the device's shared memory. Fallback configs always fit.
bool fits(const KernelConfig& c, const DeviceLimits& limits);

}  // namespace gemmkit
