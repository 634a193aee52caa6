// Staging copies for operands that the TMA kernel cannot read as they are: TMA needs a
// 16-byte-aligned base and strides, and wgmma takes 8-bit operands K-major only. Block scales
// laid out otherwise than the kernel reads them are staged the same way. Such an
// operand, seen as [batch] rows x cols, is copied into a dense buffer whose rows are `ld`
// elements apart (cols rounded up to 128 bytes) and batches rows * ld apart. The launch picks
// which dimension is cols: K for 8-bit operands, else the one the source is contiguous in, so
// that 16-bit copies never transpose.
#pragma once

#include "group_ends.cuh"
#include "params.h"
#include "utility.cuh"

namespace gemmkit::sm90 {

constexpr int kStageTile = 64;

// Groups along cols (StageCopy's group_ends): where each group's columns end in the source and
// in the copy.
constexpr int kMaxStagedGroups = 1024;  // gemmkit::kMaxGroups
constexpr int kGroupColBlock = 128;  // each group's copy starts at a multiple: the GEMM's K block (Problem::kGroupKBlock)
struct PaddedGroups {
  u32 source_end[kMaxStagedGroups];
  u32 copy_end[kMaxStagedGroups];
};

// By every thread of the block: fills `groups` (the first warp) from the copy's group ends, clamped
// as the GEMM clamps them; the first block also writes the copy's ends to padded_ends.
__device__ __forceinline__ void pad_groups(const StageCopy& copy, PaddedGroups& groups, bool first_block) {
  constexpr int kPerLane = kMaxStagedGroups / 32;
  const int count = int(copy.group_count);
  if (threadIdx.x < 32) {
    const int lane = int(threadIdx.x);
    i64 end[kPerLane];
    const i64 end_before = clamped_group_sizes<kPerLane>(copy.group_ends, copy.group_ends_64 != 0, count, copy.cols,
                                                         true, lane, end);
    u32 padded[kPerLane], sum = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const u32 size = u32(end[i] - (i == 0 ? end_before : end[i - 1]));
      padded[i] = lane * kPerLane + i < count ? max(1u, (size + kGroupColBlock - 1) / kGroupColBlock) * kGroupColBlock : 0;
      sum += padded[i];
    }
    u32 before = sum;  // inclusive scan of the lanes' sums, then exclusive
    for (int d = 1; d < 32; d *= 2) {
      const u32 x = __shfl_up_sync(0xffffffffu, before, d);
      if (lane >= d) before += x;
    }
    before -= sum;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int g = lane * kPerLane + i;
      before += padded[i];
      groups.source_end[g] = u32(end[i]);
      groups.copy_end[g] = before;
      if (first_block && copy.padded_ends != nullptr && g < count) copy.padded_ends[g] = int(before);
    }
  }
  __syncthreads();
}

// A source contiguous along cols is copied row by row. Otherwise one 64 x 64 tile per block
// goes through shared memory, so that the reads run along whichever dimension the source is
// contiguous in (rows, for an MN-major 8-bit operand) and the writes along cols. Whole tiles of
// a rows-contiguous source whose columns are 16-byte aligned move 16 bytes per thread each way
// (a load along the rows, a store along cols).
// `block` numbers this block among the copy's `blocks`.
template <class T>
__device__ void stage_copy(const StageCopy& copy, i64 block, i64 blocks) {
  const T* src = static_cast<const T*>(copy.src);
  T* dst = static_cast<T*>(copy.dst);
  const i64 batch_stride = copy.batch_stride, row_stride = copy.row_stride, col_stride = copy.col_stride;
  const i64 batch = copy.batch, rows = copy.rows, cols = copy.cols, ld = copy.ld;
  constexpr int kVector = 16 / sizeof(T);  // elements in 16 bytes
  if (col_stride == 1 && copy.group_count == 0) {
    // A warp copies kSegment elements of a row at a time, lane + 32 j, so that its loads and
    // stores each cover one contiguous run whatever the source row's alignment.
    constexpr int kSegment = 32 * kVector;
    const i64 width = copy.width;
    const i64 segments = (width + kSegment - 1) / kSegment;
    const int lane = threadIdx.x % 32;
    const i64 warps = blocks * (blockDim.x / 32);
    for (i64 w = (block * blockDim.x + threadIdx.x) / 32; w < batch * rows * segments; w += warps) {
      const i64 row = w / segments, b = row / rows, d0 = w % segments * kSegment + lane;
      const i64 c0 = d0 - i64(b < 8 ? (copy.shifts >> (4 * b)) & 15 : 0);  // the source column of destination column d0
      const T* from = src + b * batch_stride + row % rows * row_stride;
      T* to = dst + row * ld + d0;
      T v[kVector];
#pragma unroll
      for (int j = 0; j < kVector; ++j) {
        const i64 c = c0 + 32 * j;
        v[j] = c >= 0 && c < cols ? from[c] : T(0);
      }
#pragma unroll
      for (int j = 0; j < kVector; ++j)
        if (d0 + 32 * j < width) to[32 * j] = v[j];
    }
    return;
  }
  __shared__ __align__(16) T tile[kStageTile][kStageTile + 4 / sizeof(T)];  // rows 4 bytes longer: fewer bank conflicts, still word-aligned
  __shared__ PaddedGroups groups;
  const int group_count = int(copy.group_count);
  if (group_count > 0) pad_groups(copy, groups, block == 0);
  const i64 copy_cols = cols + i64(kGroupColBlock) * group_count;
  const i64 row_blocks = (rows + kStageTile - 1) / kStageTile, col_blocks = (copy_cols + kStageTile - 1) / kStageTile;
  const bool rows_contiguous = row_stride == 1;
  const bool vectors = rows_contiguous && (reinterpret_cast<u64>(src) | u64(col_stride * sizeof(T)) |
                                           u64(batch_stride * sizeof(T))) % 16 == 0;
  for (i64 tile_index = block; tile_index < batch * row_blocks * col_blocks; tile_index += blocks) {
    const i64 b = tile_index / (row_blocks * col_blocks);
    const i64 r0 = (tile_index / col_blocks) % row_blocks * kStageTile, c0 = tile_index % col_blocks * kStageTile;
    // The tile's columns in the source, which end at source_cols: the same, or with groups, the
    // group's whose copy holds them (a 64-wide tile lies inside one, the groups starting at
    // multiples of 128); none past the last group.
    i64 source_c0 = c0, source_cols = cols;
    if (group_count > 0) {
      int g = 0;  // the groups whose copies end by c0
      for (int step = kMaxStagedGroups; step > 0; step /= 2) {
        if (g + step <= group_count && groups.copy_end[g + step - 1] <= c0) g += step;
      }
      if (g == group_count) continue;
      source_c0 = c0 - (g > 0 ? i64(groups.copy_end[g - 1]) - groups.source_end[g - 1] : 0);
      source_cols = groups.source_end[g];
    }
    if (vectors && r0 + kStageTile <= rows && source_c0 + kStageTile <= source_cols && c0 + kStageTile <= copy_cols) {
      // Each load takes kVector rows of one column into the tile; each store kVector columns of one row.
      constexpr int kPerColumn = kStageTile / kVector;
      for (int i = threadIdx.x; i < kStageTile * kPerColumn; i += blockDim.x) {
        const int q = i % kPerColumn, c = i / kPerColumn;
        const uint4 x =
            *reinterpret_cast<const uint4*>(src + b * batch_stride + (source_c0 + c) * col_stride + r0 + kVector * q);
        const u32 words[4] = {x.x, x.y, x.z, x.w};
        constexpr int kPerWord = 4 / sizeof(T);
#pragma unroll
        for (int j = 0; j < kVector; ++j) tile[kVector * q + j][c] = T(words[j / kPerWord] >> (8 * sizeof(T) * (j % kPerWord)));
      }
      __syncthreads();
      for (int i = threadIdx.x; i < kStageTile * kPerColumn; i += blockDim.x) {
        const int r = i / kPerColumn, q = i % kPerColumn;
        const u32* words = reinterpret_cast<const u32*>(&tile[r][kVector * q]);
        *reinterpret_cast<uint4*>(dst + (b * rows + r0 + r) * ld + c0 + kVector * q) =
            make_uint4(words[0], words[1], words[2], words[3]);
      }
      __syncthreads();
      continue;
    }
    for (int i = threadIdx.x; i < kStageTile * kStageTile; i += blockDim.x) {
      // Consecutive threads take consecutive rows where those are contiguous, else consecutive columns.
      const int r = rows_contiguous ? i % kStageTile : i / kStageTile, c = rows_contiguous ? i / kStageTile : i % kStageTile;
      const bool inside = r0 + r < rows && source_c0 + c < source_cols;
      tile[r][c] = inside ? src[b * batch_stride + (r0 + r) * row_stride + (source_c0 + c) * col_stride] : T(0);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kStageTile * kStageTile; i += blockDim.x) {
      const int r = i / kStageTile, c = i % kStageTile;
      if (r0 + r < rows && c0 + c < copy_cols) dst[(b * rows + r0 + r) * ld + c0 + c] = tile[r][c];
    }
    __syncthreads();
  }
}

// One launch stages one operand or two (A's and B's, of one element size), its blocks shared
// out between them. It waits for the kernels before it in the stream, which may write the
// sources or still read the scratch it overwrites, and lets the GEMM after it launch meanwhile
// (programmatic dependent launch), so that the GEMM's setup overlaps the copies.
template <class T>
__device__ void stage_copies(const StageCopy& first, const StageCopy& second) {
  launch_dependent_grids();
  wait_for_prerequisite_grids();
  if (blockIdx.x < first.blocks) {
    stage_copy<T>(first, blockIdx.x, first.blocks);
  } else {
    stage_copy<T>(second, blockIdx.x - first.blocks, second.blocks);
  }
}

extern "C" __global__ void __launch_bounds__(256) gemmkit_stage_8bit(const StageCopy first, const StageCopy second) {
  stage_copies<u8>(first, second);
}

extern "C" __global__ void __launch_bounds__(256) gemmkit_stage_16bit(const StageCopy first, const StageCopy second) {
  stage_copies<u16>(first, second);
}

// f32 block scales, into the layout the TMA kernel reads them in (launch.cpp, block_scales).
extern "C" __global__ void __launch_bounds__(256) gemmkit_stage_32bit(const StageCopy first, const StageCopy second) {
  stage_copies<u32>(first, second);
}

}  // namespace gemmkit::sm90
