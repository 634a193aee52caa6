// The kernel configuration: what follows from the problem (KernelFacts) and what tuning chooses
// (KernelKnobs), and the arithmetic on one (shared memory, store boxes, tile rows). Plain types
// below dispatch, codegen and runtime: dispatch chooses a config, codegen turns it into a
// kernel's source, runtime launches it.
#pragma once

#include <cstdint>
#include <string>

#include "gemmkit/gemm.h"
#include "gemmkit/grouped.h"

namespace gemmkit {

// tma: the TMA + WGMMA kernel; gemv: M = 1 with B's K contiguous (gemv.cuh); fallback: plain
// CUDA cores for K = 0 and coordinates beyond TMA's 2^31.
enum class KernelKind { tma, fallback, gemv };

struct TileShape {
  int m, n;
  bool operator==(const TileShape&) const = default;
};

// What follows from a (normalised, see plan.h) problem: operand types, scales, majorness,
// batching, how operands TMA cannot read are read, and the store path (problem_config,
// operand_access.h). with_tile adjusts the store path and loads to the tile.
struct KernelFacts {
  bool a_k_major = true;    // A's K dimension is contiguous (else M is)
  bool b_k_major = true;    // B's K dimension is contiguous (else N is)
  bool a_batched = false;   // A has a batch stride (else one A serves every batch)
  bool b_batched = false;
  bool tma_store = true;    // D is written by TMA through shared memory (else see row_store())
  bool d_by_columns = false;  // D's columns are contiguous, not its rows: TMA stores each tile
                              // transposed (a problem the plan transposed, plan.h)
  bool has_c = false;
  DType in = DType::bf16, out = DType::bf16, c = DType::bf16;
  DType in_b = DType::bf16;  // B's element type: `in` for 16-bit inputs, e4m3 or e5m2 with 8-bit A
  ScaleMode scale_a = ScaleMode::none, scale_b = ScaleMode::none;  // FP8 scales (gemmkit/gemm.h)
  int scale_a_mn = 1, scale_b_mn = 1;  // M (N) elements per block scale of A (B): 1 or 128
  // An operand TMA cannot read as it is (unaligned, or 8-bit but not K-major, wgmma's only
  // 8-bit layout) is either copied densely into per-stream scratch before the launch (stage.cuh),
  // along the dimension a_k_major / b_k_major say, for a kernel the same as for an aligned
  // operand; or, where it is 16-bit, contiguous along that dimension and larger than L2 (see
  // problem_config), realigned by the kernel's producer warps as it loads it (realign.cuh),
  // unclustered, on tiles realigns_on takes.
  bool stage_a = false, stage_b = false;
  bool realign_a = false, realign_b = false;
  // A 16-bit, K-major A whose rows TMA cannot address, against at most kRowClassesMaxN columns of
  // a K-major B (decode weights with odd K, as normalize turns them): A read by TMA in classes of
  // every 8th row, B staged as 8 copies shifted to line up with them (row_classes.cuh). Unbatched,
  // M a multiple of 8, 64-row tiles stored directly; see row_classes_apply.
  bool row_classes = false;
  // Grouped problems (core/problem.h, GroupRef): how the groups' rows lie, and how many groups
  // the kernel's table in shared memory holds (a power of two, at least the problem's groups);
  // 0 for dense problems.
  GroupLayout group_layout = GroupLayout::contiguous;
  bool group_along_k = false;  // the groups split K (the weight gradient), not the rows
  bool group_along_n = false;  // the groups split N (tokens as columns: 4-bit weights), not the rows
  int group_capacity = 0;
  // A fused epilogue's device code (core/problem.h, EpilogueRef: one pointer per code), null for
  // none; transposed: the kernel runs D^T's problem and hands the epilogue (col, row).
  const std::string* epilogue = nullptr;
  bool epilogue_transposed = false;
  // A dual GEMM (core/problem.h, Problem::dual): B's stage holds tile_n / 2 columns of B, then as
  // many of B2, and the epilogue pairs column c of the accumulators with c + tile_n / 2 into
  // column c of D's tile, which is tile_n / 2 wide.
  bool dual = false;
  // 4-bit weights (`in` u4 or e2m1, K-major; the plan runs their problems transposed): the TMA
  // kernel's consumers widen them into registers, to B's 16-bit type (kernels/sm90/widen.cuh);
  // `zeros`: u4 with zero points. `group_partials`: u4 on a narrow tile (decode) with groups of 64
  // K or more, whose group scales multiply a partial accumulator per K block after the wgmma
  // rather than each widened weight before it (with_tile clears it on other tiles).
  bool zeros = false;
  bool group_partials = false;
  DType group_scale = DType::bf16;  // u4's group scales and zero points: bf16 or f16
  // Against 8-bit B (W4A8), the K elements each partial accumulator covers (one group of the
  // weights' scales, promote.cuh): 128, a u4 group of 32 or 64, or e2m1's 32; 128 elsewhere.
  int widen_granule = 128;

  bool grouped() const { return group_capacity > 0; }
  bool widens() const { return is_4bit(in) || is_4bit(in_b); }
  // The type wgmma multiplies: the inputs', or beside 4-bit weights the other operand's.
  DType wide_a() const { return is_4bit(in) ? in_b : in; }
  DType wide_b() const { return is_4bit(in_b) ? in : in_b; }
  int tile_cols(int tile_n) const { return dual ? tile_n / 2 : tile_n; }  // D's columns a tile stores
};

// What tuning chooses for a problem (the tuning database stores these, tuned_configs.h).
struct KernelKnobs {
  int tile_m = 128, tile_n = 128;
  int stages = 4;
  int group_m = 8;          // row blocks per raster group of the persistent tile order
  int cluster_m = 1;        // CTAs per cluster, on vertically adjacent tiles sharing B (1 or 2)
  int splits = 1;           // parts each tile's K range is cut into (split-K); see compiled()
                            // and kMaxSplitTileN
  int store_buffers = 2;    // 8 KB staging buffers per consumer warpgroup for the TMA store
};

// Everything that changes the generated kernel. Two equal configs share one binary.
struct KernelConfig : KernelFacts, KernelKnobs {
  KernelKind kind = KernelKind::tma;

  int threads() const;
  // CTAs that share an SM: four on narrow tiles that widen 4-bit weights, whose single consumer
  // warpgroup is bound by the widening's latency (one warp a scheduler; widen.cuh), so the other
  // CTAs' warps fill its gaps; one elsewhere. Each gets a quarter of the registers and shared
  // memory, 96 registers a thread with a producer warp instead of a warpgroup (threads(); three
  // CTAs with a producer warpgroup ran 1-15 % slower on lowbit's decode rows, H200: see
  // docs/experiments.md). Three with a fused epilogue, or grouped with B's mx exponents, whose
  // registers do not fit beside a fourth.
  int ctas_per_sm() const;
  // Where TMA cannot store D: whether D is still written through shared memory, a row at a time
  // (epilogue.cuh, store_tile_rows), where its columns are contiguous. Tiles of 128 rows or more
  // only: 64-row tiles (narrow ones and row classes among them) store each element directly,
  // which runs as fast or faster on them (H100, 333x1237x568 NT 12.0 against 13.5 us). Nor split
  // tiles of three consumer warpgroups: summing the parts and storing rows, 8-bit 192 x 128 with
  // rowwise scales spills (16 bytes of stack); they store each element directly. Nor an e4m3 D,
  // whose 8-bit rows are stored directly too.
  bool row_store() const;
  int smem_bytes() const;  // dynamic shared memory the launch reserves
  int tile_k() const;      // K elements per ring stage: 128 bytes' worth (64 16-bit, 128 8-bit)
  // K groups of a 4-bit A's scales a stage holds (widen.cuh): a K block's first and the next, or
  // against 8-bit B the four of a 128-deep block in groups of 32.
  int widen_groups() const;
  // One ring stage: the A and B slices of one K block, and the block and mx scales staged with them.
  int stage_bytes() const;
  // Width in bytes of one TMA store box of D: 128, or 64 or 32 where the tile's row of D is
  // not a multiple of 128 bytes. The box's swizzle mode has the same width. With d_by_columns,
  // the bytes of a row the box's columns span: the most, up to 128, that divide the tile's row.
  int store_box_bytes() const;
  // e.g. "tma 128x256 s4 c2 KK", "tma 64x128 s8 split6 KK"; a raster group other than 8 shows as " g16"
  std::string name() const;
  // By every field, facts, knobs and kind.
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
// TMA store's boxes are 128 bytes wide) and run unclustered.
inline constexpr int kNarrowMaxN = 32;
// The most columns of B (tokens) that row classes take, on 64 x 64 or 64 x 128 tiles above
// kNarrowMaxN.
inline constexpr int kRowClassesMaxN = 128;
bool is_narrow(TileShape tile);

// Whether the kernel realigns operands on the tile: 64 rows (a single consumer warpgroup leaves
// the producer the registers and shared-memory bandwidth for it) and at most 128 wide (the
// landing rows of 64 x 256 leave a ring of two stages: 64x28672x4097 ran 246 us, 0.90x cuBLASLt).
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

// Shared memory a TMA config needs (the same as c.smem_bytes()).
int tma_smem_bytes(const KernelConfig& c);

// The most stages a ring takes: 8, or 16 for 4-bit weights, whose stages hold a quarter of the
// bytes (decode's streaming needs as many bytes in flight per SM as 16-bit weights do).
int max_ring_stages(const KernelConfig& c);

// The most stages (at most max_ring_stages) with which `c` fits in `smem_limit` bytes, or 0 if none does.
int max_stages(KernelConfig c, int smem_limit);

}  // namespace gemmkit
