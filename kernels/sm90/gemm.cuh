// The dense GEMM kernel for sm_90a: D = alpha * A * B + beta * C, bf16/f16 in, f32 accumulate.
//
// Warp-specialised and persistent. Warpgroup 0 is the producer: one thread walks the tiles and
// streams 64-wide K slices of A and B into a ring of kStages shared-memory stages with TMA.
// Warpgroups 1..kConsumers each own 64 rows of the kTileM x kTileN tile and multiply with wgmma,
// then run the epilogue while the producer already fetches the next tile. Each stage has a
// "full" barrier (TMA bytes landed) and an "empty" barrier (every consumer warp is done with it).
//
// The generated prelude defines kTileM, kTileN, kStages, kGroupM, kAKMajor, kBKMajor, kInType,
// kOutType, kCType, kHasC, kABatched, kBBatched, kTmaStore, kSmemBytes and wgmma_tile().
#pragma once

constexpr int kTileK = 64;  // one 128-byte swizzle row of 16-bit elements
constexpr int kConsumers = kTileM / 64;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr u32 kStageBytesA = kTileM * kTileK * 2;
constexpr u32 kStageBytesB = kTileN * kTileK * 2;
constexpr u32 kSwizzleAtom = 1024;      // 8 rows of 128 bytes
constexpr u32 kMajorBlock = 64 * kTileK * 2;  // one 64-wide MN block of an MN-major tile
constexpr u32 kEpilogueBytes = kTmaStore ? kConsumers * 2 * kEpilogueBufferBytes : 0;
static_assert(kSwizzleAtom + kStages * (kStageBytesA + kStageBytesB) + kEpilogueBytes +
                  2 * kStages * 8 <= kSmemBytes,
              "shared-memory plan exceeds the size the host reserves");

// Persistent tile order: tiles are numbered batch by batch; inside a batch, groups of kGroupM
// row blocks are walked column by column so that CTAs running at once share A and B in L2.
struct TileScheduler {
  i64 tiles_m, tiles_n, per_batch, total;

  __device__ explicit TileScheduler(const GemmParams& p)
      : tiles_m((p.m + kTileM - 1) / kTileM),
        tiles_n((p.n + kTileN - 1) / kTileN),
        per_batch(tiles_m * tiles_n),
        total(per_batch * p.batch) {}

  __device__ void locate(i64 tile, int& batch, i64& row, i64& col) const {
    batch = int(tile / per_batch);
    const i64 in_batch = tile % per_batch;
    const i64 group_tiles = kGroupM * tiles_n;
    const i64 first_m = (in_batch / group_tiles) * kGroupM;
    const i64 group_m = min(i64(kGroupM), tiles_m - first_m);
    const i64 in_group = in_batch % group_tiles;
    row = (first_m + in_group % group_m) * kTileM;
    col = (in_group / group_m) * kTileN;
  }
};

// Loads the K slice `k_block` of A and B for the tile at (batch, row, col) into one stage.
// K-major operands come in one box of rows x 64; MN-major ones in boxes of 64 x 64 (a swizzle
// row holds only 64 elements), one per 64-wide block of M or N.
__device__ __forceinline__ void load_stage(const TensorMap* map_a, const TensorMap* map_b, u8* a, u8* b,
                                           u64* full, int batch, i64 row, i64 col, int k_block) {
  const int k = k_block * kTileK;
  const int batch_a = kABatched ? batch : 0, batch_b = kBBatched ? batch : 0;  // else broadcast
  mbarrier_arrive_expect_tx(full, kStageBytesA + kStageBytesB);
  if (kAKMajor) {
    tma_load_3d(a, map_a, full, k, int(row), batch_a);
  } else {
    for (int i = 0; i < kTileM / 64; ++i) tma_load_3d(a + i * kMajorBlock, map_a, full, int(row) + 64 * i, k, batch_a);
  }
  if (kBKMajor) {
    tma_load_3d(b, map_b, full, k, int(col), batch_b);
  } else {
    for (int i = 0; i < kTileN / 64; ++i) tma_load_3d(b + i * kMajorBlock, map_b, full, int(col) + 64 * i, k, batch_b);
  }
}

// Descriptor of an operand tile. K-major: rows of 128 bytes, 8-row atoms 1 KB apart.
// MN-major: 64-wide MN blocks kMajorBlock apart, 8 K rows 1 KB apart.
__device__ __forceinline__ u64 operand_descriptor(const u8* tile, bool k_major) {
  return k_major ? smem_descriptor(tile, 16, kSwizzleAtom) : smem_descriptor(tile, kMajorBlock, kSwizzleAtom);
}

// How far one 16-deep K step moves a descriptor's start address (in its 16-byte units):
// 32 bytes along a K-major row, 16 rows (2 KB) down an MN-major block.
__device__ __forceinline__ u64 k_step(bool k_major) { return k_major ? 32 / 16 : 2 * kSwizzleAtom / 16; }

extern "C" __global__ void __launch_bounds__(kThreads, 1)
    gemmkit_gemm(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
                 const __grid_constant__ TensorMap map_d, const GemmParams p) {
  extern __shared__ u8 smem_raw[];
  u8* smem = reinterpret_cast<u8*>((reinterpret_cast<u64>(smem_raw) + kSwizzleAtom - 1) &
                                   ~u64(kSwizzleAtom - 1));
  u8* stages_a = smem;
  u8* stages_b = stages_a + kStages * kStageBytesA;
  u8* epilogue_buffers = stages_b + kStages * kStageBytesB;
  u64* full = reinterpret_cast<u64*>(epilogue_buffers + kEpilogueBytes);
  u64* empty = full + kStages;

  const int warpgroup = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], kConsumers * 4);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  const TileScheduler tiles(p);
  const int k_blocks = int((p.k + kTileK - 1) / kTileK);

  if (warpgroup == 0) {
    registers_decrease<56>();
    if (t != 0) return;
    tma_prefetch_descriptor(&map_a);
    tma_prefetch_descriptor(&map_b);
    u32 iteration = 0;
    for (i64 tile = blockIdx.x; tile < tiles.total; tile += gridDim.x) {
      int batch;
      i64 row, col;
      tiles.locate(tile, batch, row, col);
      for (int kb = 0; kb < k_blocks; ++kb, ++iteration) {
        const u32 s = iteration % kStages;
        mbarrier_wait(&empty[s], ((iteration / kStages) & 1) ^ 1);
        load_stage(&map_a, &map_b, stages_a + s * kStageBytesA, stages_b + s * kStageBytesB,
                   &full[s], batch, row, col, kb);
      }
    }
    return;
  }

  registers_increase<224>();
  const int slice = warpgroup - 1;  // this warpgroup's 64 rows of the tile
  const bool warp_leader = t % 32 == 0;
  float acc[kTileN / 2];
  u32 iteration = 0;
  for (i64 tile = blockIdx.x; tile < tiles.total; tile += gridDim.x) {
    int batch;
    i64 row, col;
    tiles.locate(tile, batch, row, col);
    // One wgmma group stays in flight: after committing K block kb, wait for kb - 1 and
    // hand its stage back to the producer.
    for (int kb = 0; kb < k_blocks; ++kb, ++iteration) {
      const u32 s = iteration % kStages;
      mbarrier_wait(&full[s], (iteration / kStages) & 1);
      const u8* a = stages_a + s * kStageBytesA + slice * (64 * kTileK * 2);
      const u8* b = stages_b + s * kStageBytesB;
      const u64 desc_a = operand_descriptor(a, kAKMajor), desc_b = operand_descriptor(b, kBKMajor);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        wgmma_tile(acc, desc_a + kk * k_step(kAKMajor), desc_b + kk * k_step(kBKMajor), (kb > 0 || kk > 0) ? 1u : 0u);
      }
      wgmma_commit();
      wgmma_wait<1>();
      if (kb > 0 && warp_leader) mbarrier_arrive(&empty[(iteration - 1) % kStages]);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < kTileN / 2; ++i) fence_register(acc[i]);
    if (warp_leader) mbarrier_arrive(&empty[(iteration - 1) % kStages]);

    const TileOrigin at{batch, row + slice * 64, col};
    if (at.row >= p.m) continue;  // this slice lies wholly below D
    if (kTmaStore) {
      store_tile_tma(acc, p, at, t, slice, epilogue_buffers + slice * 2 * kEpilogueBufferBytes, &map_d);
    } else {
      store_tile_direct(acc, p, at, t);
    }
  }
  if (kTmaStore && t == 0) tma_store_wait_all();
}
