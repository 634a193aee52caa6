// Zeros for the rows of a grouped GEMM's D that no group owns (GroupSizes::zero_unowned): rows
// past the last end (contiguous) or past each group's count (masked), which the GEMM never
// writes and a gradient must hold as 0. A kernel of its own before the GEMM on the same stream,
// reading the sizes as the GEMM does (clamped the same way); its blocks over owned rows return at
// once, so where every row is owned (a training step's routing) it costs about a launch.
#pragma once

#include "utility.cuh"

namespace gemmkit::sm90 {

constexpr int kUnownedRowsPerBlock = 16;

// Grid: (row blocks of kUnownedRowsPerBlock, each block taking every gridDim.x-th, batch); batch
// is 1 for contiguous groups (the last end bounds the owned rows), G for masked ones (each
// group's count). D is `batch` matrices of rows x cols elements of `element_bytes` (1, 2 or 4).
extern "C" __global__ void __launch_bounds__(256)
    gemmkit_zero_unowned_rows(void* d, i64 batch_stride, i64 row_stride, i64 col_stride, int element_bytes,
                              i64 rows, i64 cols, const void* sizes, int int64, int count, int ends) {
  const int g = ends ? count - 1 : blockIdx.y;
  const i64 size = int64 ? static_cast<const i64*>(sizes)[g] : i64(static_cast<const int*>(sizes)[g]);
  const i64 owned = size < 0 ? 0 : (size > rows ? rows : size);
  char* base = static_cast<char*>(d) + i64(blockIdx.y) * batch_stride * element_bytes;
  for (i64 first = i64(blockIdx.x) * kUnownedRowsPerBlock; first < rows;
       first += i64(gridDim.x) * kUnownedRowsPerBlock) {
    const i64 begin = first > owned ? first : owned;
    const i64 end = first + kUnownedRowsPerBlock < rows ? first + kUnownedRowsPerBlock : rows;
    for (i64 i = threadIdx.x; i < (end - begin) * cols; i += blockDim.x) {
      const i64 offset = ((begin + i / cols) * row_stride + (i % cols) * col_stride) * element_bytes;
      if (element_bytes == 4)
        *reinterpret_cast<u32*>(base + offset) = 0;
      else if (element_bytes == 2)
        *reinterpret_cast<u16*>(base + offset) = 0;
      else
        *reinterpret_cast<u8*>(base + offset) = 0;
    }
  }
}

}  // namespace gemmkit::sm90
