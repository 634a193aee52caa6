// Staging copies for 8-bit operands that the TMA kernel cannot read as they are: wgmma takes
// 8-bit operands K-major only, and TMA needs 16-byte-aligned rows. Such an operand, seen as
// [batch] rows x k (rows along M or N), is copied into a dense K-major buffer whose rows are
// `ld` bytes apart (K rounded up to 16) and batches rows * ld apart.
#pragma once

constexpr int kStageTile = 64;

// One 64 x 64 tile per block through shared memory, so that the reads run along whichever
// dimension the source is contiguous in (rows, for an MN-major operand) and the writes along K.
extern "C" __global__ void __launch_bounds__(256)
    gemmkit_stage_k_major(const u8* src, i64 batch_stride, i64 row_stride, i64 k_stride, i64 batch, i64 rows, i64 k,
                          u8* dst, i64 ld) {
  __shared__ u8 tile[kStageTile][kStageTile + 4];
  const i64 row_blocks = (rows + kStageTile - 1) / kStageTile, k_blocks = (k + kStageTile - 1) / kStageTile;
  const bool rows_contiguous = row_stride == 1;
  for (i64 block = blockIdx.x; block < batch * row_blocks * k_blocks; block += gridDim.x) {
    const i64 b = block / (row_blocks * k_blocks);
    const i64 r0 = (block / k_blocks) % row_blocks * kStageTile, k0 = block % k_blocks * kStageTile;
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
