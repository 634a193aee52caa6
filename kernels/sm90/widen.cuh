// 4-bit weights in the TMA kernel (gemm.cuh): u4 codes with group scales (and zero points), or
// e2m1 values with ue8m0 scales, widened to the other operand's type in the consumers' registers
// and multiplied from there (wgmma takes A from registers): bf16 or f16 (W4A16), or e4m3 (W4A8).
//
// The weights are A, K-major (the plan runs every problem with 4-bit weights transposed: D^T =
// W X^T, the weights' rows along M). Per stage, the TMA thread loads their packed rows (64 K
// elements, 32 bytes a row, as the checkpoint lays them out) into the stage's A slice and the
// scales of two K groups (the K block's first and the next, which 32-deep groups need) into its
// scales, on the full barrier. Each consumer thread then reads its fragment's bytes: for each of
// the block's four 16-deep steps, the byte of each of its two rows (r and r + 8) that holds the
// two K elements its registers take (a byte holds a pair of neighbours, the even one in the low
// nibble), and the byte 4 further along (K elements 8 on). A weight is rounded once, to the
// 16-bit type.
//
// With kGroupPartials (u4 on narrow tiles, groups of 64 K or more: one group a K block), the
// weights are widened to the exact integers q - zero, and each K block multiplies into a partial
// accumulator of its own, added to the accumulator times the rows' group scales once its wgmma is
// done (promote.cuh, promote): a multiply a weight pair fewer in the decode loop, for one an
// accumulator a K block, and no rounding of the weights.
//
// Against e4m3 B (W4A8), a K block is 128 deep and a row's packed bytes 64. u4 weights widen to
// the exact e4m3 integers q - zero, e2m1 ones to their exact e4m3 values, and each group's partial
// accumulator (kWidenGranuleK: 32, 64 or 128 K) is promoted as an 8-bit granule is (promote.cuh,
// multiply_8bit), its rows' group scales as A's scales. A zero point with q - zero not exact in
// e4m3 (other than an integer from -1 to 16) widens to NaN, which reaches D.
//
// kernel_config.cuh (generated) defines kAType, kBType, kGroupScaleType, kZeros (u4 with zero
// points), kGroupPartials and kWidenGranuleK.
#pragma once

#include "common.cuh"
#include "kernel_config.cuh"
#include "params.h"
#include "promote.cuh"
#include "scales.cuh"
#include "smem_layout.h"

namespace gemmkit::sm90 {

constexpr bool kWidenA = is_4bit_type(kAType);
constexpr bool kWidenTo8Bit = kWidenA && kBType == GEMMKIT_E4M3;  // W4A8
constexpr int kWidenRows = kWidenA ? kTileM : 0;  // the weights' rows a stage holds
constexpr int kWidenScaleBytes = kAType == GEMMKIT_U4 ? 2 : 1;
constexpr u32 kPackedRowBytes = u32(kTileK) / 2;  // a row's K block, two codes a byte
constexpr u32 kPackedBytes = u32(kWidenRows) * kPackedRowBytes;
constexpr int kWidenGroups = kWidenGranuleK == 32 ? 4 : 2;  // K groups of scales a stage holds (smem_layout.h)
constexpr u32 kWidenScalePart = widen_scale_part_bytes(kWidenRows, kWidenScaleBytes, kWidenGroups);
// TMA's bytes per stage: the packed rows and every scale (and zero point) of its groups.
constexpr u32 kWidenTmaBytes = kPackedBytes + u32(kWidenGroups * kWidenRows * kWidenScaleBytes) * (kZeros ? 2 : 1);
static_assert(!is_4bit_type(kBType), "4-bit weights are A (the plan transposes their problems)");
static_assert(!kGroupPartials || (kAType == GEMMKIT_U4 && kTileN <= 32), "group partials: u4 weights on narrow tiles");
static_assert(!kWidenA || kStageWordsA == 0, "a 4-bit A's scales are its group scales alone");
static_assert(!kWidenTo8Bit || !kMxB || kWidenGranuleK == 32, "W4A8 under B's mx exponents: weights in groups of 32");
static_assert(!kWidenA || (kTileK == (kWidenTo8Bit ? 128 : 64) && kAKMajor && !kRealignA && !kRowClasses && kClusterM == 1 && !kDual &&
                           (!kGrouped || kGroupedN) && kWidenRows * kWidenScaleBytes % 16 == 0),
              "4-bit weights: K blocks of 128 bytes of B, K-major, read by TMA, unclustered, dense or grouped along N, "
              "whole 16-byte scale boxes");

// log2 of the weights' K elements per scale: a power of two, 32 at least (validate.cpp).
__device__ __forceinline__ int widen_group_shift(const GemmParams& p) { return __ffsll(p.scale_a.block_cols) - 1; }

// By the TMA thread: K block `k` (its first K element) of the weights' rows from `row` (their
// matrix's batch `batch`) into the stage's A slice `a` and its scales `scales` (their group
// scales kWidenScaleOffset on), on `full`. The maps
// (launch.cpp) take the packed bytes as rows of ceil(K / 2) bytes, and the scales and zero points
// with the rows contiguous, by K group.
__device__ __forceinline__ void load_packed_stage(const GemmParams& p, const KernelMaps& maps, u8* a, u32 scales,
                                                  u64* full, int batch, i64 row, int k) {
  const int group = k >> widen_group_shift(p);
  tma_load_3d(a, &maps.a, full, k / 2, int(row), batch);
  tma_load_3d(scales + kWidenScaleOffset, &maps.scale_a, full, int(row), group, batch);
  if (kZeros) tma_load_3d(scales + kWidenScaleOffset + kWidenScalePart, &maps.zeros, full, int(row), group, batch);
}

// The pair of codes in byte `q` (0-3) of `word`: the low nibble in bits 0-3, the high one in
// bits 16-19 (PRMT takes byte q of the word, and byte q of the word shifted right by 4, whose low
// nibble is the high one), the other bits zero but `magic`'s.
__device__ __forceinline__ u32 code_pair(u32 word, u32 selector, u32 magic) {
  u32 spread, pair;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(spread) : "r"(word), "r"(word >> 4), "r"(selector));
  // (spread & 0x000f000f) | magic in one LOP3 (ptxas made two of the C++).
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(pair) : "r"(spread), "r"(0x000f000fu), "r"(magic));
  return pair;
}

// The 16-bit magic number whose mantissa takes a u4 code exactly: 128 (bf16) or 1024 (f16), each
// with a unit in the last place of 1.
constexpr float kU4Magic = kBType == GEMMKIT_BF16 ? 128.0f : 1024.0f;
constexpr u32 kU4MagicPair = kBType == GEMMKIT_BF16 ? 0x43004300u : 0x64006400u;

// A 16-bit pair (both halves) of magic + zero, the bias widen_u4_pair subtracts; `exact` where it
// holds magic + zero exactly (an integer zero point from 0 to 127: AWQ's are 0 to 15).
__device__ __forceinline__ u32 u4_bias(float zero, bool& exact) {
  const u32 pair = pack_pair(kBType, kU4Magic + zero, kU4Magic + zero);
  const u16 half = u16(pair & 0xffffu);
  exact = (kBType == GEMMKIT_BF16 ? bf16_to_float(half) : f16_to_float(half)) - kU4Magic == zero;
  return pair;
}

// Two u4 codes (a code_pair) as a 16-bit pair (q - zero) * scale, rounded once: the codes go
// into the mantissa of the magic number, from which subtracting `bias2` (magic + zero) is exact,
// and one multiply by the pair `scale2` rounds. kExactBias false: a zero point the bias cannot
// hold exactly, through f32 arithmetic instead. With kGroupPartials, q - zero alone (exact with
// an exact bias).
template <bool kExactBias>
__device__ __forceinline__ u32 widen_u4_pair(u32 word, u32 selector, u32 scale2, u32 bias2, float scale, float zero) {
  if constexpr (!kExactBias) {
    const u32 codes = code_pair(word, selector, 0);
    const float s = kGroupPartials ? 1.0f : scale;
    return pack_pair(kBType, (float(codes & 15u) - zero) * s, (float(codes >> 16) - zero) * s);
  }
  const u32 biased = code_pair(word, selector, kU4MagicPair);  // magic + q
  u32 out;
  if (kGroupPartials) {
    if (kBType == GEMMKIT_BF16) {
      asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(out) : "r"(biased), "r"(bias2));
    } else {
      asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(out) : "r"(biased), "r"(bias2));
    }
  } else if (kBType == GEMMKIT_BF16) {
    asm("{\n.reg .b32 q;\nsub.rn.bf16x2 q, %1, %2;\nmul.rn.bf16x2 %0, q, %3;\n}"
        : "=r"(out) : "r"(biased), "r"(bias2), "r"(scale2));
  } else {
    asm("{\n.reg .b32 q;\nsub.rn.f16x2 q, %1, %2;\nmul.rn.f16x2 %0, q, %3;\n}"
        : "=r"(out) : "r"(biased), "r"(bias2), "r"(scale2));
  }
  return out;
}

// Two e2m1 codes as a 16-bit pair times `scale` (2^(e - 127)), exact. bf16 (f32's exponent range,
// so the power of two multiplies exactly): each magnitude's two bytes from tables by PRMT (the
// low bytes of 0, 0.5, 1, 1.5, 2, 3, 4, 6 in bf16, then the high ones; entry 0 is zero in both,
// which fills the other bytes), the sign bits moved to bits 15 and 31, one HMUL2 by the scale as a
// bf16 pair (scale2). f16, whose range the scales overrun: through f32.
__device__ __forceinline__ u32 widen_e2m1_pair(u32 word, u32 selector, float scale, u32 scale2) {
  const u32 codes = code_pair(word, selector, 0);  // magnitude and sign of the low code in bits 0-3, the high one's 16-19
  if (kBType != GEMMKIT_BF16) {
    return pack_pair(kBType, e2m1_to_float(codes) * scale, e2m1_to_float(codes >> 16) * scale);
  }
  const u32 low_bytes = (codes & 7u) | ((codes >> 8) & 0x700u);  // PRMT selectors: bytes 0 and 2 from the tables
  u32 low, high, pair;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(low) : "r"(0xc0800000u), "r"(0xc0804000u), "r"(low_bytes));
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(high) : "r"(0x3f3f3f00u), "r"(0x40404040u), "r"(low_bytes << 4));
  // low | high | the signs (codes' bits 3 and 19, shifted to 15 and 31).
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(pair) : "r"(codes << 12), "r"(0x80008000u), "r"(low | high));
  u32 out;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(out) : "r"(pair), "r"(scale2));
  return out;
}

// W4A8: the f16 pair whose halves take a u4 code in their mantissas' ones: 1024 (low half: the
// code in bits 0-3) and 64 (high half: the code in bits 20-23, mantissa bits 4-7), so that one
// PRMT puts a byte in both halves and one LOP3 keeps a code of each.
constexpr u32 kU4QuadMagic = 0x54006400u;
constexpr u32 kU4QuadBias8 = 0x54806408u;  // (1024 + 8, 64 + 8): the symmetric zero point

// The f16 pair (1024 + zero, 64 + zero) that widen_u4_quad subtracts; NaN where some q - zero is
// not exact in e4m3 (a zero point other than an integer from -1 to 16).
__device__ __forceinline__ u32 u4_quad_bias(float zero) {
  const bool exact = zero == rintf(zero) && zero >= -1.0f && zero <= 16.0f;
  return exact ? pack_pair(GEMMKIT_F16, 1024.0f + zero, 64.0f + zero) : 0x7e007e00u;
}

// W4A8: four u4 codes as a register of wgmma's 8-bit A fragment, e4m3 values q - zero, exact.
// The thread's two bytes lie among the eight of (lo, hi): `first` and `second` are PRMT selectors
// that copy one of them into bytes 0 and 2. Each byte's two codes go into an f16 pair's mantissas
// (kU4QuadMagic), the bias (u4_quad_bias) is subtracted exactly, and the pair converts to two
// e4m3 bytes, the even K element's first.
__device__ __forceinline__ u32 widen_u4_quad(u32 lo, u32 hi, u32 first, u32 second, u32 bias) {
  u32 e4m3[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    u32 spread, pair, value;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(spread) : "r"(lo), "r"(hi), "r"(half == 0 ? first : second));
    asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(pair) : "r"(spread), "r"(0x00f0000fu), "r"(kU4QuadMagic));
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(value) : "r"(pair), "r"(bias));
    u16 bytes;
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(bytes) : "r"(value));
    e4m3[half] = bytes;
  }
  return e4m3[0] | e4m3[1] << 16;
}

// W4A8 with e2m1 weights (MXFP4 under FP8): four e2m1 codes as a register of wgmma's 8-bit A
// fragment, e4m3 values, exact (0.5 to 6 and their negatives; the ue8m0 scales are applied as the
// granules are promoted). The thread's two bytes of the eight in (lo, hi), chosen by `selector`
// into bytes 0 and 1: their magnitudes' e4m3 bytes from a table by PRMT (the codes' low three bits
// select), and each code's sign bit (bit 3 of its nibble) replicated by PRMT's sign mode into a
// byte mask, of which the sign bits are kept.
__device__ __forceinline__ u32 widen_e2m1_quad(u32 lo, u32 hi, u32 selector) {
  u32 codes, magnitudes, signs, out;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(codes) : "r"(lo), "r"(hi), "r"(selector));
  // e4m3 of 0, 0.5, 1, 1.5 (bytes 0-3) and 2, 3, 4, 6 (bytes 4-7).
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(magnitudes) : "r"(0x3c383000u), "r"(0x4c484440u), "r"(codes & 0x7777u));
  // Byte i replicates the top bit of the byte holding code i's sign: codes << 4 byte 0 (code 0),
  // codes byte 0 (code 1), codes << 4 byte 1 (code 2), codes byte 1 (code 3).
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(signs) : "r"(codes), "r"(codes << 4), "r"(0x9d8cu));
  asm("lop3.b32 %0, %1, %2, %3, 0xf8;" : "=r"(out) : "r"(magnitudes), "r"(signs), "r"(0x80808080u));
  return out;
}

// A 16-bit scale or zero point's bits as float.
__device__ __forceinline__ float wide_value(u32 bits) {
  return kGroupScaleType == GEMMKIT_BF16 ? bf16_to_float(u16(bits)) : f16_to_float(u16(bits));
}

// The scales (and zero points) of a thread's two rows, r and r + 8, in one K group: as floats
// for the f32 path, as 16-bit pairs for the 16-bit one (W4A8: the biases alone).
struct GroupScales {
  float scale[2], zero[2];
  u32 scale2[2], bias2[2];
  bool exact;  // every zero point exact in the 16-bit bias
};

// Row r's scale at `at` in a group's scales (its zero point kWidenScalePart further on), row
// r + 8's 8 scales on.
__device__ __forceinline__ GroupScales group_scales(u32 at) {
  GroupScales g;
  g.exact = true;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const u32 row = at + u32(8 * h * kWidenScaleBytes);
    if constexpr (kAType == GEMMKIT_U4) {
      const u32 bits = ld_shared_u16(row);
      g.scale[h] = wide_value(bits);
      g.scale2[h] = bits | bits << 16;
      g.zero[h] = kZeros ? wide_value(ld_shared_u16(row + kWidenScalePart)) : 8.0f;
      bool exact = true;  // the bias of 8 (magic + 8's bits: the code 8 in the mantissa)
      if (kWidenTo8Bit) {
        g.bias2[h] = kZeros ? u4_quad_bias(g.zero[h]) : kU4QuadBias8;
      } else {
        g.bias2[h] = kZeros ? u4_bias(g.zero[h], exact) : kU4MagicPair + 0x00080008u;
      }
      g.exact = g.exact && exact;
    } else {
      g.scale[h] = ue8m0_to_float(ld_shared_u8(row));
      g.zero[h] = 0.0f;
      const u32 bits = __float_as_uint(g.scale[h]) >> 16;  // a power of two (or NaN): exact in bf16
      g.scale2[h] = bits | bits << 16;
      g.bias2[h] = 0;
    }
  }
  return g;
}

// The four 16-deep steps of a K block's fragments from the rows' packed words, with the scales
// (and zero points) of the block's two groups (widen_fragments).
template <bool kExactBias>
__device__ __forceinline__ void widen_steps(u32 (&frag)[16], const uint4 (&rows)[2][2], u32 selector,
                                            const GroupScales (&groups)[2]) {
#pragma unroll
  for (int step = 0; step < 4; ++step) {
    const GroupScales& g = groups[step / 2];
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const int h = reg % 2, far = reg / 2;  // row r + 8h; K elements 8 further where far
      const int word = 2 * step + far;
      const uint4& v = rows[h][word / 4];
      const u32 w = word % 4 == 0 ? v.x : word % 4 == 1 ? v.y : word % 4 == 2 ? v.z : v.w;
      frag[4 * step + reg] = kAType == GEMMKIT_U4
                                 ? widen_u4_pair<kExactBias>(w, selector, g.scale2[h], g.bias2[h], g.scale[h], g.zero[h])
                                 : widen_e2m1_pair(w, selector, g.scale[h], g.scale2[h]);
    }
  }
}

// Where a consumer thread's fragments lie in every stage, worked out once before the main loop
// (inside it, ptxas recomputed them for each K block). wgmma's register layout for A: warp w
// takes rows 16w to 16w + 15; a thread (lane l) rows r = 16w + l / 4 and r + 8, K elements
// 2 (l % 4) + {0, 1} (registers 0: row r, 1: row r + 8) and those plus 8 (registers 2 and 3);
// 8-bit (k32 steps), K elements 4 (l % 4) + {0, ..., 3}, and those plus 16.
struct WidenLanes {
  u32 row;           // byte offset of row r's packed bytes in a stage's A slice (r + 8: 8 rows on)
  u32 scale;         // byte offset of row r's scale in a group's scales (r + 8: 8 scales on)
  u32 selector;      // the PRMT selector of the thread's byte in each word (code_pair; W4A8: its first
                     // byte's, or for e2m1 both bytes')
  u32 selector2;     // W4A8: its second byte's (widen_u4_quad)
  bool two_groups;   // groups of 32: a K block's steps 2 and 3 take its second group
};

// This warpgroup's `slice` (64 rows) of the stage, for thread t.
__device__ __forceinline__ WidenLanes widen_lanes(int slice, int t, const GemmParams& p) {
  const int r = slice * 64 + (t / 32) * 16 + (t % 32) / 4, lane_byte = t % 4;
  const u32 first = 2 * lane_byte, second = first + 1;  // W4A8: the thread's bytes among a step's eight
  const u32 selector = !kWidenTo8Bit           ? u32(lane_byte) | u32(lane_byte + 4) << 8
                       : kAType == GEMMKIT_U4 ? first | first << 8
                                              : first | second << 4;
  return {u32(r) * kPackedRowBytes, u32(r) * u32(kWidenScaleBytes), selector, second | second << 8,
          widen_group_shift(p) == 5};
}

// W4A8: a consumer thread's A fragments of one K block, four 32-deep steps of four registers,
// from the stage's packed slice at `a` with its scales (`scales`: the stage's; shared-memory
// addresses). Each row's 64 bytes as four 16-byte loads, one a step: bytes 0-7 its K elements
// 0-15 (registers 0 and 1: rows r and r + 8), bytes 8-15 the next 16 (registers 2 and 3). Each
// group of the block (one of 128 K or more, two of 64, four of 32: e2m1's, or u4's) is a granule
// of the promotion, with its rows' scales (row_scales[g]) and, u4, its zero points' biases.
__device__ __forceinline__ void widen_fragments_8bit(u32 (&frag)[16], RowScales (&row_scales)[kGranules], u32 a,
                                                     u32 scales, const WidenLanes& lanes) {
  constexpr int kStepsPerGranule = 4 / kGranules;
  scales += kWidenScaleOffset + lanes.scale;
  GroupScales groups[kGranules];
#pragma unroll
  for (int granule = 0; granule < kGranules; ++granule) {
    groups[granule] = group_scales(scales + u32(granule * kWidenRows * kWidenScaleBytes));
    row_scales[granule] = {{groups[granule].scale[0], groups[granule].scale[1]}};
  }
#pragma unroll
  for (int step = 0; step < 4; ++step) {
    const GroupScales& g = groups[step / kStepsPerGranule];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint4 v;
      const u32 at = a + lanes.row + u32(8 * h) * kPackedRowBytes + u32(16 * step);
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(at));
      if constexpr (kAType == GEMMKIT_U4) {
        frag[4 * step + h] = widen_u4_quad(v.x, v.y, lanes.selector, lanes.selector2, g.bias2[h]);
        frag[4 * step + 2 + h] = widen_u4_quad(v.z, v.w, lanes.selector, lanes.selector2, g.bias2[h]);
      } else {
        frag[4 * step + h] = widen_e2m1_quad(v.x, v.y, lanes.selector);
        frag[4 * step + 2 + h] = widen_e2m1_quad(v.z, v.w, lanes.selector);
      }
    }
  }
}

// W4A16: a consumer thread's A fragments of one K block, four 16-deep steps of four registers,
// widened from the stage's packed slice at `a` with its scales (`scales`: the stage's;
// shared-memory addresses). row_scales: the scales of the thread's rows r and r + 8 in the block's
// first group.
__device__ __forceinline__ void widen_fragments(u32 (&frag)[16], RowScales& row_scales, u32 a, u32 scales,
                                                const WidenLanes& lanes) {
  scales += kWidenScaleOffset;
  // Each row's 32 bytes as two 16-byte loads: word w holds step w / 2's bytes (K elements 8 on
  // where w is odd); the thread's byte in each is byte lane_byte.
  uint4 rows[2][2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      const u32 at = a + lanes.row + u32(8 * h) * kPackedRowBytes + u32(16 * part);
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(rows[h][part].x), "=r"(rows[h][part].y), "=r"(rows[h][part].z), "=r"(rows[h][part].w)
                   : "r"(at));
    }
  }
  // The scales of the block's first group, and of its second where groups are 32 deep (steps 2
  // and 3 take it); else the first again, read once.
  GroupScales groups[2];
  groups[0] = group_scales(scales + lanes.scale);
  if (lanes.two_groups) {
    groups[1] = group_scales(scales + lanes.scale + u32(kWidenRows * kWidenScaleBytes));
  } else {
    groups[1] = groups[0];
  }
  row_scales = {{groups[0].scale[0], groups[0].scale[1]}};
  // A warp whose zero points are all exact in the 16-bit bias (integers, as AWQ's) widens the
  // block in 16-bit arithmetic; one with any other widens it through f32.
  if (!kZeros || __all_sync(0xffffffffu, groups[0].exact && groups[1].exact)) {
    widen_steps<true>(frag, rows, lanes.selector, groups);
  } else {
    widen_steps<false>(frag, rows, lanes.selector, groups);
  }
}



}  // namespace gemmkit::sm90
