// FP4 x FP4 (MXFP4 activations against 4-bit weights): the activations' e2m1 codes widened
// exactly to e4m3 bytes, into a copy that the W4A8 kernels read as their 8-bit operand with the
// activations' ue8m0 exponents as its mx scales (dispatch/plan.cpp, run_on_widened_activations).
// Every e2m1 value (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives) is exact in e4m3.
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

}  // namespace gemmkit::sm90
