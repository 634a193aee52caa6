// Kernel parameters, shared by the host code (C++) and the device code (NVRTC): plain types only,
// so both compilers lay the struct out identically.
#pragma once

// One operand: element (b, i, j) lives at data + b*batch_stride + i*row_stride + j*col_stride.
struct GemmMatrix {
  void* data;
  long long batch_stride;
  long long row_stride;
  long long col_stride;
};

// The scales of an FP8 or 4-bit operand of rows x cols: element (r, c) is multiplied by the scale
// at data + b*batch_stride + (r / block_rows)*row_stride + (c / block_cols)*col_stride. The mode
// (none, tensor, rowwise, block, mx, group) and the scales' dtype are compile-time constants. A u4
// operand's zero points (group mode) lie in `zeros` as the scales lie in data (null: 8 each).
struct GemmScale {
  const void* data;
  long long batch_stride;
  long long row_stride;
  long long col_stride;
  long long block_rows;
  long long block_cols;
  GemmMatrix zeros;
};

// Division by a fixed divisor d below 2^31, of numbers below 2^31, as a multiply and a shift:
// n / d = (n * mul) >> shift (runtime/launch.h, fast_divisor; scheduler.cuh, quotient).
struct FastDivisor {
  unsigned mul, shift;
};

// The TMA kernel's tile order (scheduler.cuh, TileScheduler), worked out by the host: `rows` cluster
// rows of tiles and `tiles_n` tile columns per batch, and the divisors of the unit numbers it
// divides (below 2^31: the host runs larger problems on the fallback kernel).
struct TileOrder {
  long long rows, tiles_n;
  FastDivisor per_batch;    // rows * tiles_n
  FastDivisor group_tiles;  // a whole raster group's tiles
  FastDivisor last_group;   // the last raster group's rows where it is short (else 1)
  FastDivisor splits;       // split-K parts
  int shift_from, shift_to;  // the first row of the tile row reaching past M, and where it moves up to
  int col_shift_from, col_shift_to;  // the first column of the tile column reaching past N, and where it moves left to
};

// The tensors a fused epilogue reads and writes (codegen/epilogue_source.h), inputs first, then
// the auxiliary outputs: element (b, m, n) of one at data + b*batch_stride + m*row_stride +
// n*col_stride, in elements of its type (a compile-time constant of the generated code). Vectors
// have the stride along their dimension only; b is the batch, or a grouped kernel's group.
struct EpilogueTensor {
  void* data;
  long long batch_stride;
  long long row_stride;
  long long col_stride;
};
#define GEMMKIT_MAX_EPILOGUE_TENSORS 8
struct EpilogueParams {
  EpilogueTensor tensors[GEMMKIT_MAX_EPILOGUE_TENSORS];
};

// D = alpha * A * B + beta * C; A is m x k, B is k x n, C and D are m x n, all [batch].
// With split-K, each tile's K range is cut into `splits` parts whose f32 partial tiles meet in
// `partials`; `counters` (one per tile slice, zero between launches) count the arrivals.
struct GemmParams {
  long long m, n, k, batch;
  float alpha, beta;
  GemmMatrix a, b, c, d;
  GemmScale scale_a, scale_b;
  float* partials;
  unsigned* counters;
  int splits;
  TileOrder order;  // the TMA kernel's
  // Grouped kernels (grouped_scheduler.cuh): `batch` groups' sizes in device memory, as ends
  // (contiguous) or counts (masked), int64 where group_sizes_64, else int32.
  const void* group_sizes;
  int group_sizes_64;
  EpilogueParams epilogue;  // a fused epilogue's tensors (fuse.cuh)
  GemmMatrix b2;  // a dual GEMM's second B, k x n (kDual; the TMA kernel reads it through its tensor map)
  // An e4m3 D's f32 scales, one per 128 columns of a row: the scale of D's (b, r, c) at
  // data + b*batch_stride + r*row_stride + (c / 128)*col_stride (epilogue.cuh, quantize_tile).
  GemmMatrix scale_d;
  GemmScale scale_b2;  // a dual GEMM's B2's, where it is FP8 (scale_b's mode and blocks)
};

// One staging copy (stage.cuh): the matrix at `src`, element (b, r, c) at src + b*batch_stride +
// r*row_stride + c*col_stride, [batch] rows x cols, copied densely into `dst`: rows `ld`
// elements apart, batches rows * ld apart. `blocks` of the launch's blocks do it.
// A source with unit col_stride may also be copied shifted: the first `width` elements of each
// row of copy b (b < 8) take the source's columns s_b to the left, zeros where there are none,
// where s_b < 16 is bits 4b to 4b + 3 of `shifts` (B's copies for row classes, row_classes.cuh;
// packed, as indexing an array among the parameters put them in local memory); else width =
// cols and shifts = 0.
// Where group_count > 0 (an FP8 weight gradient's operands, whose cols are tokens in contiguous
// groups), the source's cols are the groups' tokens, group_ends their G cumulative ends (int64
// where group_ends_64, else int32), and group g's tokens go to dst's cols from a multiple of 128
// on, zero-filled to a whole number of 128 (one 128 at least, for an empty group); dst's cols are
// at least the source's plus 128 a group. The copy with padded_ends writes there the groups' ends
// in dst (G int32).
struct StageCopy {
  const void* src;
  long long batch_stride;
  long long row_stride;
  long long col_stride;
  long long batch;
  long long rows;
  long long cols;
  void* dst;
  long long ld;
  long long blocks;
  long long width;
  unsigned long long shifts;
  const void* group_ends;
  long long group_count;
  int group_ends_64;
  int* padded_ends;
};
