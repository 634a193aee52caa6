// Quantisation of bf16 / f16 / f32 tensors into e4m3 or e5m2 with one scale per block:
// scale = amax(|x| over the block) / max finite of q's type (power-of-two variants round it up),
// q = round-to-nearest-even-satfinite(x / scale).
//
// The tensor is seen as [batch] slow x fast, where fast is x's contiguous dimension (the host
// swaps rows and columns when x is column-major). Each CTA (128 threads) walks tiles of
// slow x fast elements; a warp reads 32 lanes x V consecutive elements of one row per load
// (a "strip"), V = 1, 4 or 8 when the strides and pointers allow vector accesses, and keeps a
// batch of loads in flight. Lanes share a block in aligned groups (blocks narrower than a
// strip), hold several blocks each (blocks narrower than V: "sub-lane"), or a warp's unit is
// confined to one block column (wider or uneven blocks). Every tile keeps the running amax of
// each block it touches in shared memory (atomicMax on the bits of |x|, which order like the
// values, NaN above Inf above every finite value). Phases:
//   fused: each tile holds whole blocks: zero the shared amax, walk the tile for amax, write
//          the tile's scales, then write q. "Resident" tiles (each warp's share one batch of
//          loads: blocks of up to 32 rows and 8 strips) keep x in registers in between; other
//          fused tiles read it again (from L1/L2). One launch, no scratch.
//   amax:  (two-pass, for blocks too large for one tile) walk for amax, then push each block's
//          amax into the global scratch `amax` (zeroed beforehand) with one atomicMax per block.
//   apply: read the tile's blocks' amax from the scratch, write the scales of the blocks whose
//          first element lies in the tile, walk the tile writing q.
//
// The first part (the parameter block) is plain C++, shared with the host; the device code
// reads from kernel_config.cuh (generated: src/api/quantize.cpp) kQuantXType, kQuantQType,
// kQuantScaleType (GEMMKIT_* codes), kQuantPow2 (power-of-two scales), kQuantVec (V) and
// kQuantSubLane (blocks narrower than V along fast: several to a lane).
#pragma once

#define GEMMKIT_QUANTIZE_FUSED 0
#define GEMMKIT_QUANTIZE_AMAX 1
#define GEMMKIT_QUANTIZE_APPLY 2
#define GEMMKIT_QUANTIZE_THREADS 128

// Element (b, s, f) lives at data + b*batch_stride + s*slow_stride + f*fast_stride (elements).
// For the scales, s and f count blocks.
struct QuantizeOperand {
  void* data;
  long long batch_stride;
  long long slow_stride;
  long long fast_stride;
};

// How one dimension is cut into tiles. Tile i covers [g*group + j*len, min(+len, (g+1)*group,
// size)) with g = i / per, j = i % per: either whole blocks (group = len = k blocks, per = 1)
// or pieces of one block (group = one block, per = pieces per block).
struct QuantizeSplit {
  long long group;
  long long per;
  long long len;
  long long count;
  long long blocks;  // blocks per group: k, or 1 for pieces of one block
};

struct QuantizeParams {
  QuantizeOperand x, q, scales;
  unsigned* amax;                 // two-pass scratch: [batch][blocks_slow][blocks_fast] f32 bits
  long long batch, slow, fast;    // sizes, all > 0
  long long block_slow, block_fast;    // block extents, clipped to slow and fast
  long long blocks_slow, blocks_fast;  // ceil(slow / block_slow), ceil(fast / block_fast)
  QuantizeSplit tile_slow, tile_fast;
  long long tiles_per_batch;      // tile_slow.count * tile_fast.count
  long long tiles;                // batch * tiles_per_batch, below 2^31
  int phase;                      // GEMMKIT_QUANTIZE_*
  int vec;                        // V (kQuantVec): consecutive elements per lane along fast (1, 4 or 8)
  int unit_strips;                // strips per fast unit: a power of two, 1 unless unit_per > 0
  int unit_per;                   // > 0: units confined to one block column (blocks of 32 V or more,
                                  //   or of an uneven number of lanes): units per block column
  int lane_width;                 // aligned lanes that share a block: 32, 16, 8, 4, 2 or 1
  int warps_fast;                 // warps side by side along fast (1, 2, 4); the rest split the rows
  int smem_pitch;                 // blocks along fast per tile, as laid out in shared memory
  int block_fast_log2;            // log2(block_fast) where unit_per == 0 (block_fast is a power of two)
  int resident;                   // fused tiles where each warp holds its share in registers: one unit
                                  //   and one batch of 8 loads (see quant_resident); not sub-lane
};

#ifdef __CUDACC_RTC__

#include "kernel_config.cuh"
#include "quant_rule.cuh"
#include "utility.cuh"

namespace gemmkit::sm90 {

constexpr int kQuantXBytes = kQuantXType == GEMMKIT_F32 ? 4 : 2;

extern __shared__ u32 gemmkit_quant_smem[];

__device__ __forceinline__ i64 quant_min(i64 a, i64 b) { return a < b ? a : b; }
__device__ __forceinline__ i64 quant_max(i64 a, i64 b) { return a > b ? a : b; }

// One tile's extent along a dimension: elements [begin, end), blocks [blk0, blk0 + blocks),
// and `offset`, how far begin lies past blk0's first element (0 unless the tile is a piece of a
// block).
struct QuantRange {
  i64 begin, end;
  i64 blk0, offset;
  int blocks;
  bool first;  // the tile holds the first element of each of its blocks
};

__device__ __forceinline__ QuantRange quant_piece(const QuantizeSplit& s, u32 i, i64 limit, i64 total_blocks) {
  QuantRange r;
  u32 g = i, j = 0;
  if (s.per > 1) {
    g = i / u32(s.per);
    j = i - g * u32(s.per);
  }
  r.offset = i64(j) * s.len;
  r.begin = i64(g) * s.group + r.offset;
  r.end = quant_min(quant_min(r.begin + s.len, i64(g + 1) * s.group), limit);
  r.blk0 = i64(g) * s.blocks;
  r.blocks = int(quant_min(s.blocks, total_blocks - r.blk0));
  r.first = j == 0;
  return r;
}

// ---- scales ---------------------------------------------------------------------------------

__device__ __forceinline__ void quant_store_scale(const QuantizeParams& p, i64 b, i64 bs, i64 bf, u32 amax_bits) {
  const i64 index = b * p.scales.batch_stride + bs * p.scales.slow_stride + bf * p.scales.fast_stride;
  if (kQuantScaleType == GEMMKIT_UE8M0) {
    const u32 code = amax_bits >= kQuantInfBits ? 0xffu
                     : amax_bits == 0u          ? 127u
                                                : u32(quant_exponent<kQuantQType>(__uint_as_float(amax_bits)) + 127);
    static_cast<u8*>(p.scales.data)[index] = u8(code);
  } else {
    static_cast<float*>(p.scales.data)[index] = quant_scale<kQuantQType, kQuantPow2>(amax_bits);
  }
}

// ---- element access -------------------------------------------------------------------------

// Raw words of V consecutive elements of x (one element when V = 1) from element offset
// `offset` (aligned to V when V > 1); quant_value decodes element i.
constexpr int kQuantWords = kQuantVec == 1 ? 1 : kQuantVec * kQuantXBytes / 4;

template <int V>
__device__ __forceinline__ void quant_load(const QuantizeParams& p, i64 offset, u32* w) {
  const char* base = static_cast<const char*>(p.x.data) + offset * kQuantXBytes;
  if constexpr (V == 1) {
    w[0] = kQuantXBytes == 4 ? *reinterpret_cast<const u32*>(base) : u32(*reinterpret_cast<const u16*>(base));
  } else if constexpr (kQuantWords == 2) {
    const uint2 t = *reinterpret_cast<const uint2*>(base);
    w[0] = t.x;
    w[1] = t.y;
  } else {
#pragma unroll
    for (int i = 0; i < kQuantWords; i += 4) {
      const uint4 t = reinterpret_cast<const uint4*>(base)[i / 4];
      w[i] = t.x;
      w[i + 1] = t.y;
      w[i + 2] = t.z;
      w[i + 3] = t.w;
    }
  }
}

__device__ __forceinline__ float quant_value(const u32* w, int i) {
  if (kQuantXBytes == 4) return __uint_as_float(w[i]);
  const u16 h = u16(w[i / 2] >> (16 * (i % 2)));
  return kQuantXType == GEMMKIT_BF16 ? bf16_to_float(h) : f16_to_float(h);
}

// The bits of |x| for element i: they order like the magnitudes (NaN above Inf above the rest).
__device__ __forceinline__ u32 quant_abs_bits(const u32* w, int i) {
  if (kQuantXType == GEMMKIT_BF16) return (w[i / 2] << (16 * (1 - i % 2))) & 0x7fff0000u;
  return __float_as_uint(quant_value(w, i)) & 0x7fffffffu;
}

// Two fp8 codes of q's type, `lo` in the low byte.
__device__ __forceinline__ u32 quant_pair(float lo, float hi) { return fp8_pair(kQuantQType, lo, hi); }

// Writes V quantised values (already divided by their scales) at element offset `offset`.
template <int V>
__device__ __forceinline__ void quant_store(const QuantizeParams& p, i64 offset, const float* v) {
  u8* base = static_cast<u8*>(p.q.data) + offset;
  if constexpr (V == 1) {
    *base = u8(quant_pair(v[0], 0.0f) & 0xffu);
  } else if constexpr (V == 4) {
    *reinterpret_cast<u32*>(base) = quant_pair(v[0], v[1]) | (quant_pair(v[2], v[3]) << 16);
  } else {
    uint2 t;
    t.x = quant_pair(v[0], v[1]) | (quant_pair(v[2], v[3]) << 16);
    t.y = quant_pair(v[4], v[5]) | (quant_pair(v[6], v[7]) << 16);
    *reinterpret_cast<uint2*>(base) = t;
  }
}

// ---- tiles ----------------------------------------------------------------------------------

struct QuantTile {
  i64 b;            // batch
  QuantRange s, f;  // along slow and fast
};

// The shared amax slot of the block at (block row, block column) relative to the tile's first.
__device__ __forceinline__ u32* quant_slot(const QuantizeParams& p, int bs, int bf) {
  return gemmkit_quant_smem + bs * p.smem_pitch + bf;
}

// One warp's unit: fast elements [fa, fe) of some rows, relative to the tile's first; the lane
// holds elements f_lane + k * 32V + [0, V) for k < unit_strips, those below fe. Tiles are
// shorter than 2^28 along each dimension, so 32-bit offsets do.
struct QuantUnit {
  int fa, fe, f_lane;
  int col;  // confined units (unit_per > 0): the unit's block column, relative to the tile's first
};

// The block column (relative) of the lane's element f_lane + v. Unconfined tiles start on a
// block boundary and their blocks are powers of two.
__device__ __forceinline__ int quant_column(const QuantizeParams& p, const QuantUnit& u, int v) {
  return p.unit_per > 0 ? u.col : (u.f_lane + v) >> p.block_fast_log2;
}

// Folds the lane's per-position maxima into the shared amax of their blocks in (relative)
// block row `bs`, and clears them.
template <int V>
__device__ __forceinline__ void quant_flush(const QuantizeParams& p, const QuantUnit& u, u32* acc, int bs) {
  const bool active = u.f_lane < u.fe;
  if (kQuantSubLane) {
    // The lane's V elements hold V / block_fast whole blocks.
    const int group = (1 << p.block_fast_log2) - 1;
    u32 m = 0;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      m = max(m, acc[v]);
      acc[v] = 0;
      if (((v + 1) & group) == 0) {
        if (active && m != 0u) atomicMax(quant_slot(p, bs, quant_column(p, u, v)), m);
        m = 0;
      }
    }
    return;
  }
  u32 m = 0;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    m = max(m, acc[v]);
    acc[v] = 0;
  }
  // Groups of lane_width aligned lanes share a block (lanes past fe hold zeros).
  for (int d = 1; d < p.lane_width; d <<= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, d));
  const int lane = threadIdx.x & 31;
  if ((lane & (p.lane_width - 1)) == 0 && active && m != 0u) atomicMax(quant_slot(p, bs, quant_column(p, u, 0)), m);
}

// The divisors of the lane's elements in (relative) block row `bs`: one per position with
// sub-lane blocks, else one for all.
constexpr int kQuantDivisors = kQuantSubLane ? kQuantVec : 1;

__device__ __forceinline__ void quant_divisors(const QuantizeParams& p, const QuantUnit& u, int bs, QuantDivisor* d) {
  if (u.f_lane >= u.fe) return;
#pragma unroll
  for (int v = 0; v < kQuantDivisors; ++v) d[v] = quant_divisor<kQuantQType, kQuantPow2>(*quant_slot(p, bs, quant_column(p, u, v)));
}

// A warp's share of a tile: rows [r_begin, r_end) (relative to the tile's first) of each of
// its units, units n = wf, wf + warps_fast, ...
struct QuantShare {
  int r_begin, r_end;
  int wf;
  int strips_log2, units;
  int first_bs, first_left;  // the first row's block row (relative) and the rows left in it
  int block_rows;            // block_slow, capped (tiles are shorter than 2^28)
};

__device__ __forceinline__ QuantShare quant_share(const QuantizeParams& p, const QuantTile& t) {
  QuantShare h;
  const int warp = threadIdx.x >> 5;
  h.wf = warp % p.warps_fast;
  const int ws = warp / p.warps_fast, warps_slow = (GEMMKIT_QUANTIZE_THREADS / 32) / p.warps_fast;
  const int rows = int(t.s.end - t.s.begin), cols = int(t.f.end - t.f.begin);
  const int per_warp = (rows + warps_slow - 1) / warps_slow;
  h.r_begin = ws * per_warp;
  h.r_end = min(h.r_begin + per_warp, rows);
  h.strips_log2 = __ffs(p.unit_strips) - 1;
  const int strip_len = 32 * kQuantVec;
  h.units = p.unit_per > 0 ? t.f.blocks * p.unit_per : (cols + strip_len - 1) / strip_len;
  h.block_rows = int(quant_min(p.block_slow, i64(1) << 30));
  if (p.tile_slow.per == 1) {  // whole blocks, shorter than the tile
    h.first_bs = h.r_begin / h.block_rows;
    h.first_left = h.block_rows - (h.r_begin - h.first_bs * h.block_rows);
  } else {  // a piece of one block
    h.first_bs = 0;
    h.first_left = int(quant_min(p.block_slow - t.s.offset - h.r_begin, i64(1) << 30));
  }
  return h;
}

// Unit n of the tile; false when it is empty.
__device__ __forceinline__ bool quant_unit(const QuantizeParams& p, const QuantTile& t, int n, QuantUnit& u) {
  const int cols = int(t.f.end - t.f.begin);
  const int strip_len = 32 * kQuantVec, unit_len = strip_len * p.unit_strips;
  if (p.unit_per > 0) {
    u.col = n / p.unit_per;
    const i64 col_begin = u.col * p.block_fast - t.f.offset;  // may be before the tile
    u.fa = int(quant_max(col_begin, 0)) + (n % p.unit_per) * unit_len;
    u.fe = int(quant_min(quant_min(i64(u.fa) + unit_len, col_begin + p.block_fast), cols));
  } else {
    u.col = 0;
    u.fa = n * strip_len;
    u.fe = min(u.fa + strip_len, cols);
  }
  u.f_lane = u.fa + (threadIdx.x & 31) * kQuantVec;
  return u.fa < u.fe;
}

// Where the lane's elements of a unit lie: offsets of its first strip in the share's first
// row, and the steps to the next strip.
struct QuantLanes {
  i64 x, q, x_strip, q_strip;
};

__device__ __forceinline__ QuantLanes quant_lanes(const QuantizeParams& p, const QuantTile& t, const QuantShare& h,
                                                  const QuantUnit& u) {
  const i64 s = t.s.begin + h.r_begin, f = t.f.begin + u.f_lane, strip_len = 32 * kQuantVec;
  return {t.b * p.x.batch_stride + s * p.x.slow_stride + f * p.x.fast_stride,
          t.b * p.q.batch_stride + s * p.q.slow_stride + f * p.q.fast_stride, strip_len * p.x.fast_stride,
          strip_len * p.q.fast_stride};
}

// Loads the batch of rows [row, row + kLoads / unit_strips) of the unit (zeros past its end).
template <int V, int kLoads>
__device__ __forceinline__ void quant_load_batch(const QuantizeParams& p, const QuantShare& h, const QuantUnit& u,
                                                 const QuantLanes& a, int row, u32 (&w)[kLoads][kQuantWords]) {
  const int rel = row - h.r_begin;
#pragma unroll
  for (int l = 0; l < kLoads; ++l) {
    const int r = l >> h.strips_log2, k = l & (p.unit_strips - 1);
    if (row + r < h.r_end && u.f_lane + k * 32 * V < u.fe) {
      quant_load<V>(p, a.x + i64(rel + r) * p.x.slow_stride + k * a.x_strip, w[l]);
    } else {
#pragma unroll
      for (int i = 0; i < kQuantWords; ++i) w[l][i] = 0u;
    }
  }
}

// Folds a loaded batch into the running maxima, flushing each block row as it ends.
template <int V, int kLoads>
__device__ __forceinline__ void quant_amax_batch(const QuantizeParams& p, const QuantShare& h, const QuantUnit& u,
                                                 int row, const u32 (&w)[kLoads][kQuantWords], u32* acc, int& bs,
                                                 int& left) {
#pragma unroll
  for (int l = 0; l < kLoads; ++l) {
    const int r = l >> h.strips_log2, k = l & (p.unit_strips - 1);
    if (row + r >= h.r_end) break;  // uniform across the warp
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = max(acc[v], quant_abs_bits(w[l], v));
    if (k == p.unit_strips - 1 && --left == 0) {  // the row ends its block row
      quant_flush<V>(p, u, acc, bs);
      ++bs;
      left = h.block_rows;
    }
  }
}

// Quantises and stores a loaded batch with the divisors of its block rows.
template <int V, int kLoads>
__device__ __forceinline__ void quant_apply_batch(const QuantizeParams& p, const QuantShare& h, const QuantUnit& u,
                                                  const QuantLanes& a, int row, const u32 (&w)[kLoads][kQuantWords],
                                                  QuantDivisor* div, int& bs, int& left) {
  const int rel = row - h.r_begin;
#pragma unroll
  for (int l = 0; l < kLoads; ++l) {
    const int r = l >> h.strips_log2, k = l & (p.unit_strips - 1);
    if (row + r >= h.r_end) break;  // uniform across the warp
    if (k == 0 && left == 0) {
      ++bs;
      left = h.block_rows;
      quant_divisors(p, u, bs, div);
    }
    if (u.f_lane + k * 32 * V < u.fe) {
      float out[V];
#pragma unroll
      for (int v = 0; v < V; ++v) out[v] = quant_divide<kQuantPow2>(quant_value(w[l], v), div[kQuantSubLane ? v : 0]);
      quant_store<V>(p, a.q + i64(rel + r) * p.q.slow_stride + k * a.q_strip, out);
    }
    if (k == p.unit_strips - 1) --left;
  }
}

// Walks this warp's share of the tile: kApply = false accumulates the blocks' amax in shared
// memory, kApply = true writes q with the scales from it (reading x again). Rows go in batches
// of kLoads / unit_strips, whose loads are all in flight together; a block row may end anywhere
// in a batch.
template <int V, bool kApply>
__device__ __forceinline__ void quant_walk(const QuantizeParams& p, const QuantTile& t) {
  constexpr int kLoads = V == 1 ? 8 : 4;  // loads in flight per lane
  const QuantShare h = quant_share(p, t);
  if (h.r_begin >= h.r_end) return;
  const int rows_per_batch = kLoads >> h.strips_log2;
  for (int n = h.wf; n < h.units; n += p.warps_fast) {
    QuantUnit u;
    if (!quant_unit(p, t, n, u)) continue;
    const QuantLanes a = quant_lanes(p, t, h, u);
    u32 acc[V];
    QuantDivisor div[kQuantDivisors];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = 0;
    int bs = h.first_bs, left = h.first_left;  // block row, and its rows not yet walked
    if (kApply) quant_divisors(p, u, bs, div);
    for (int row = h.r_begin; row < h.r_end; row += rows_per_batch) {
      u32 w[kLoads][kQuantWords];
      quant_load_batch<V, kLoads>(p, h, u, a, row, w);
      if (kApply) {
        quant_apply_batch<V, kLoads>(p, h, u, a, row, w, div, bs, left);
      } else {
        quant_amax_batch<V, kLoads>(p, h, u, row, w, acc, bs, left);
      }
    }
    if (!kApply && left != h.block_rows) quant_flush<V>(p, u, acc, bs);
  }
}

// Loads for a register-resident tile (QuantizeParams::resident): every warp has at most one
// unit and one batch, held in registers from the amax to the stores.
constexpr int kQuantResidentLoads = 8;

__device__ __forceinline__ void quant_write_scales(const QuantizeParams& p, const QuantTile& t);

template <int V>
__device__ __forceinline__ void quant_resident(const QuantizeParams& p, const QuantTile& t) {
  constexpr int kLoads = kQuantResidentLoads;
  const QuantShare h = quant_share(p, t);
  QuantUnit u;
  const bool busy = h.r_begin < h.r_end && h.wf < h.units && quant_unit(p, t, h.wf, u);
  u32 w[kLoads][kQuantWords];
  QuantLanes a;
  if (busy) {
    a = quant_lanes(p, t, h, u);
    quant_load_batch<V, kLoads>(p, h, u, a, h.r_begin, w);
    u32 acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = 0;
    int bs = h.first_bs, left = h.first_left;
    quant_amax_batch<V, kLoads>(p, h, u, h.r_begin, w, acc, bs, left);
    if (left != h.block_rows) quant_flush<V>(p, u, acc, bs);
  }
  __syncthreads();
  quant_write_scales(p, t);
  if (busy) {
    QuantDivisor div[kQuantDivisors];
    int bs = h.first_bs, left = h.first_left;
    quant_divisors(p, u, bs, div);
    quant_apply_batch<V, kLoads>(p, h, u, a, h.r_begin, w, div, bs, left);
  }
}

// Writes the scales of the blocks whose first element lies in the tile.
__device__ __forceinline__ void quant_write_scales(const QuantizeParams& p, const QuantTile& t) {
  const int rows = t.s.first ? t.s.blocks : 0, cols = t.f.first ? t.f.blocks : 0, count = rows * cols;
  for (int i = threadIdx.x; i < count; i += GEMMKIT_QUANTIZE_THREADS) {
    const int r = i / cols, c = i - r * cols;
    quant_store_scale(p, t.b, t.s.blk0 + r, t.f.blk0 + c, *quant_slot(p, r, c));
  }
}

template <int V>
__device__ __forceinline__ void quant_tiles(const QuantizeParams& p) {
  for (u32 tile = blockIdx.x; tile < u32(p.tiles); tile += gridDim.x) {
    QuantTile t;
    const u32 b = tile / u32(p.tiles_per_batch), rest = tile - b * u32(p.tiles_per_batch);
    const u32 ts = rest / u32(p.tile_fast.count), tf = rest - ts * u32(p.tile_fast.count);
    t.b = b;
    t.s = quant_piece(p.tile_slow, ts, p.slow, p.blocks_slow);
    t.f = quant_piece(p.tile_fast, tf, p.fast, p.blocks_fast);
    if (t.s.begin >= t.s.end || t.f.begin >= t.f.end) continue;  // a piece past a clipped block
    const int rows = t.s.blocks, cols = t.f.blocks;

    if (p.phase == GEMMKIT_QUANTIZE_APPLY) {
      for (int i = threadIdx.x; i < rows * cols; i += GEMMKIT_QUANTIZE_THREADS) {
        const i64 bs = t.s.blk0 + i / cols, bf = t.f.blk0 + i % cols;
        *quant_slot(p, i / cols, i % cols) = p.amax[(t.b * p.blocks_slow + bs) * p.blocks_fast + bf];
      }
      __syncthreads();
    } else {
      for (int i = threadIdx.x; i < rows * cols; i += GEMMKIT_QUANTIZE_THREADS) {
        gemmkit_quant_smem[(i / cols) * p.smem_pitch + i % cols] = 0u;
      }
      __syncthreads();
      if constexpr (!kQuantSubLane) {  // (sub-lane blocks are never resident: too many registers)
        if (p.resident) {
          quant_resident<V>(p, t);
          __syncthreads();  // the shared amax is reused by the next tile
          continue;
        }
      }
      quant_walk<V, false>(p, t);
      __syncthreads();
    }

    if (p.phase == GEMMKIT_QUANTIZE_AMAX) {
      for (int i = threadIdx.x; i < rows * cols; i += GEMMKIT_QUANTIZE_THREADS) {
        const i64 bs = t.s.blk0 + i / cols, bf = t.f.blk0 + i % cols;
        const u32 m = *quant_slot(p, i / cols, i % cols);
        if (m != 0u) atomicMax(p.amax + (t.b * p.blocks_slow + bs) * p.blocks_fast + bf, m);
      }
    } else {
      quant_write_scales(p, t);
      quant_walk<V, true>(p, t);
    }
    __syncthreads();  // the shared amax is reused by the next tile
  }
}

// At most 128 registers: four CTAs (16 warps) or more per SM.
extern "C" __global__ void __launch_bounds__(GEMMKIT_QUANTIZE_THREADS, 4) gemmkit_quantize(const QuantizeParams p) {
  quant_tiles<kQuantVec>(p);
}

}  // namespace gemmkit::sm90

#endif  // __CUDACC_RTC__
