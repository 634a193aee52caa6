// Staging copies for 8-bit operands that the TMA kernel cannot read as they are: wgmma takes
// 8-bit operands K-major only, and TMA needs 16-byte-aligned rows. Such an operand, seen as
// [batch] rows x k (rows along M or N), is copied into a dense K-major buffer whose rows are
// `ld` bytes apart (K rounded up to 128) and batches rows * ld apart.
#pragma once

constexpr int kStageTile = 64;

// One 64 x 64 tile per block through shared memory, so that the reads run along whichever
// dimension the source is contiguous in (rows, for an MN-major operand) and the writes along K.
// Whole tiles of an MN-major source whose columns are 16-byte aligned move 16 bytes per thread
// each way (a load along the rows, a store along K); other tiles move byte by byte.
extern "C" __global__ void __launch_bounds__(256)
    gemmkit_stage_k_major(const u8* src, i64 batch_stride, i64 row_stride, i64 k_stride, i64 batch, i64 rows, i64 k,
                          u8* dst, i64 ld) {
  __shared__ __align__(16) u8 tile[kStageTile][kStageTile + 4];
  const i64 row_blocks = (rows + kStageTile - 1) / kStageTile, k_blocks = (k + kStageTile - 1) / kStageTile;
  const bool rows_contiguous = row_stride == 1;
  const bool vectors = rows_contiguous && (reinterpret_cast<u64>(src) | u64(k_stride) | u64(batch_stride)) % 16 == 0;
  for (i64 block = blockIdx.x; block < batch * row_blocks * k_blocks; block += gridDim.x) {
    const i64 b = block / (row_blocks * k_blocks);
    const i64 r0 = (block / k_blocks) % row_blocks * kStageTile, k0 = block % k_blocks * kStageTile;
    if (vectors && r0 + kStageTile <= rows && k0 + kStageTile <= k) {
      // Thread i loads rows 16c .. 16c + 15 of column kk (c = i % 4, kk = i / 4) and transposes
      // them into the tile; then it stores 16 bytes of K of tile row i / 4.
      const int c = threadIdx.x % 4, kk = threadIdx.x / 4;
      const uint4 v = *reinterpret_cast<const uint4*>(src + b * batch_stride + (k0 + kk) * k_stride + r0 + 16 * c);
      const u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 16; ++j) tile[16 * c + j][kk] = u8(words[j / 4] >> (8 * (j % 4)));
      __syncthreads();
      const int r = threadIdx.x / 4, q = threadIdx.x % 4;
      const u32* row = reinterpret_cast<const u32*>(&tile[r][16 * q]);  // rows are 68 bytes: 4-byte aligned
      *reinterpret_cast<uint4*>(dst + (b * rows + r0 + r) * ld + k0 + 16 * q) = make_uint4(row[0], row[1], row[2], row[3]);
      __syncthreads();
      continue;
    }
    for (int i = threadIdx.x; i < kStageTile * kStageTile; i += 256) {
      // Consecutive threads take consecutive rows where those are contiguous, else consecutive K.
      const int r = rows_contiguous ? i % kStageTile : i / kStageTile, kk = rows_contiguous ? i / kStageTile : i % kStageTile;
      const bool inside = r0 + r < rows && k0 + kk < k;
      tile[r][kk] = inside ? src[b * batch_stride + (r0 + r) * row_stride + (k0 + kk) * k_stride] : u8(0);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kStageTile * kStageTile; i += 256) {
      const int r = i / kStageTile, kk = i % kStageTile;
      if (r0 + r < rows && k0 + kk < k) dst[(b * rows + r0 + r) * ld + k0 + kk] = tile[r][kk];
    }
    __syncthreads();
  }
}
