// 4-bit operands widened exactly into copies that a GEMM of wider types then reads
// (dispatch/plan.cpp):
// - FP4 x FP4 (MXFP4 activations against 4-bit weights): the activations' e2m1 codes as e4m3
//   bytes, the W4A8 kernels' 8-bit operand with the activations' ue8m0 exponents as its mx
//   scales (run_on_widened_activations). Every e2m1 value (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
//   negatives) is exact in e4m3.
// - Many tokens against 4-bit weights (run_on_widened_weights): W4A8's u4 weights in groups of
//   128 or more as e4m3 q - z with f32 scales per 128 of K, the block FP8 GEMM's 1x128 A; MXFP4
//   weights under bf16 activations as bf16 values, a 16-bit GEMM's A. Widened once, rather than
//   by every tile of tokens the kernel runs.
#pragma once

#include "params.h"
#include "utility.cuh"

namespace gemmkit::sm90 {

// e4m3 bytes of the e2m1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (e4m3's exponent bias is 7),
// four a word; the sign is bit 3 of the code and bit 7 of the byte.
constexpr u32 kE4m3Low = 0x3c383000u, kE4m3High = 0x4c484440u;

__device__ __forceinline__ u32 e2m1_to_e4m3(u32 code) {
  const u32 magnitude = code & 7, table = magnitude < 4 ? kE4m3Low : kE4m3High;
  return (table >> (8 * (magnitude & 3)) & 0xff) | (code & 8) << 4;
}

// [batch] lines of k codes at `src` (a line's bytes contiguous, two codes a byte, the even one in
// the low nibble; lines src_ld bytes apart, batches src_batch) into e4m3 lines at `dst` (dst_ld
// bytes apart, batches dst_batch), a source byte a thread at a time.
extern "C" __global__ void gemmkit_widen_e2m1(const u8* src, i64 src_batch, i64 src_ld, u8* dst, i64 dst_batch,
                                              i64 dst_ld, i64 batch, i64 lines, i64 k) {
  const i64 line_bytes = (k + 1) / 2, count = batch * lines * line_bytes;
  for (i64 i = blockIdx.x * i64(blockDim.x) + threadIdx.x; i < count; i += i64(gridDim.x) * blockDim.x) {
    const i64 byte = i % line_bytes, line = i / line_bytes % lines, b = i / line_bytes / lines;
    const u32 codes = src[b * src_batch + line * src_ld + byte];
    u8* out = dst + b * dst_batch + line * dst_ld + 2 * byte;
    out[0] = u8(e2m1_to_e4m3(codes & 15));
    if (2 * byte + 1 < k) out[1] = u8(e2m1_to_e4m3(codes >> 4));
  }
}

// A thread's chunk of a weight line: 16 codes (8 bytes) from code 16 * chunk, lines `ld` bytes
// apart; bytes past the line's read as zero. What the copy holds past k codes is never read: the
// GEMM's maps end at K.
__device__ __forceinline__ u64 weight_chunk(const u8* codes, i64 ld, i64 k, i64 line, i64 chunk) {
  const u8* at = codes + line * ld + 8 * chunk;
  const i64 bytes = (k + 1) / 2 - 8 * chunk;
  if (bytes >= 8 && (reinterpret_cast<u64>(at) & 7) == 0) return *reinterpret_cast<const u64*>(at);
  u64 chunk_bytes = 0;
  for (int i = 0; i < 8 && i < bytes; ++i) chunk_bytes |= u64(at[i]) << (8 * i);
  return chunk_bytes;
}

// W4A8 weights, u4 in groups of `group` (a multiple of 128) along K: [batch] lines (the weights'
// rows) of k codes into e4m3 bytes q - z at `dst` (dst_ld apart, a multiple of 16; batches
// dst_batch), z the line's zero point of the group (`zeros`, the scales' type; null: 8), exact for
// integer z from -1 to 16, NaN bytes otherwise (as the W4A8 kernel makes them). The group scales
// (`scale_type`, element (line, group) at line * s_line + group * s_group; the zero points' by
// their own strides) go to `dst_scales` as f32 per 128 of K, lines contiguous:
// [batch][ceil(k / 128)][scales_ld]. A thread a chunk of 16 codes.
extern "C" __global__ void gemmkit_widen_u4_e4m3(const u8* src, i64 src_batch, i64 src_ld, const void* scales,
                                                 i64 s_batch, i64 s_line, i64 s_group, const void* zeros,
                                                 i64 z_batch, i64 z_line, i64 z_group, int scale_type, i64 group,
                                                 u8* dst, i64 dst_batch, i64 dst_ld, float* dst_scales,
                                                 i64 scales_ld, i64 batch, i64 lines, i64 k) {
  const i64 chunks = (k + 15) / 16, count = batch * lines * chunks;
  for (i64 i = blockIdx.x * i64(blockDim.x) + threadIdx.x; i < count; i += i64(gridDim.x) * blockDim.x) {
    const i64 chunk = i % chunks, line = i / chunks % lines, b = i / chunks / lines;
    const u64 codes = weight_chunk(src + b * src_batch, src_ld, k, line, chunk);
    const i64 g = 16 * chunk / group;
    const float z = zeros ? load_as_float(zeros, scale_type, b * z_batch + line * z_line + g * z_group) : 8.0f;
    const bool exact = z == floorf(z) && z >= -1.0f && z <= 16.0f;
    u32 out[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const u32 four = u32(codes >> (16 * w)) & 0xffff;  // four codes, the first in the low nibble
      const u32 word = fp8_pair(GEMMKIT_E4M3, float(four & 15) - z, float(four >> 4 & 15) - z) |
                       fp8_pair(GEMMKIT_E4M3, float(four >> 8 & 15) - z, float(four >> 12) - z) << 16;
      out[w] = exact ? word : 0x7f7f7f7fu;
    }
    *reinterpret_cast<uint4*>(dst + b * dst_batch + line * dst_ld + 16 * chunk) = make_uint4(out[0], out[1], out[2], out[3]);
    if (16 * chunk % 128 == 0) {
      dst_scales[(b * ((k + 127) / 128) + 16 * chunk / 128) * scales_ld + line] =
          load_as_float(scales, scale_type, b * s_batch + line * s_line + g * s_group);
    }
  }
}

// MXFP4 weights under bf16 activations: [batch] lines of k e2m1 codes, their ue8m0 exponents per
// 32 of K at `exponents` (element (line, granule) at line * e_line + granule * e_granule), into
// bf16 values at `dst` (dst_ld elements apart, a multiple of 16: a thread writes 16; batches
// dst_batch), each the code's value times 2^(e - 127): exact where bf16 holds it (every exponent
// below 253). A thread a chunk of 16 codes.
extern "C" __global__ void gemmkit_widen_mxfp4_bf16(const u8* src, i64 src_batch, i64 src_ld, const u8* exponents,
                                                    i64 e_batch, i64 e_line, i64 e_granule, u16* dst, i64 dst_batch,
                                                    i64 dst_ld, i64 batch, i64 lines, i64 k) {
  const i64 chunks = (k + 15) / 16, count = batch * lines * chunks;
  for (i64 i = blockIdx.x * i64(blockDim.x) + threadIdx.x; i < count; i += i64(gridDim.x) * blockDim.x) {
    const i64 chunk = i % chunks, line = i / chunks % lines, b = i / chunks / lines;
    const u64 codes = weight_chunk(src + b * src_batch, src_ld, k, line, chunk);
    const float scale = ue8m0_to_float(exponents[b * e_batch + line * e_line + (chunk / 2) * e_granule]);
    u32 out[8];
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      const u32 two = u32(codes >> (8 * w)) & 0xff;
      out[w] = pack_pair(GEMMKIT_BF16, e2m1_to_float(two & 15) * scale, e2m1_to_float(two >> 4) * scale);
    }
    uint4* to = reinterpret_cast<uint4*>(dst + b * dst_batch + line * dst_ld + 16 * chunk);
    to[0] = make_uint4(out[0], out[1], out[2], out[3]);
    to[1] = make_uint4(out[4], out[5], out[6], out[7]);
  }
}

}  // namespace gemmkit::sm90
