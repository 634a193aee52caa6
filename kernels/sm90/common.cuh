// Thin wrappers over the sm_90a instructions the GEMM kernel uses: mbarriers, TMA, wgmma,
// named barriers and register reallocation. Each is one PTX instruction (or a wait loop).
#pragma once

#include "utility.cuh"

namespace gemmkit::sm90 {

// The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned, passed as a __grid_constant__.
struct alignas(64) TensorMap {
  u64 opaque[16];
};

// The TMA kernel's tensor maps, one parameter (launch.cpp builds them): A, B, a dual GEMM's B2, D
// (TMA stores), and the inner scales of A, B and B2 (promote.cuh, load_stage_scales). Maps a
// configuration does not use are left unset.
struct KernelMaps {
  TensorMap a, b, b2, d, scale_a, scale_b, scale_b2;
  TensorMap zeros;  // a u4 operand's zero points (widen.cuh)
};

__device__ __forceinline__ u32 smem_u32(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// ---- mbarrier -------------------------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(u64* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
}

// Makes barrier initialisation visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}

// Arrives on the barrier at the same shared-memory offset in cluster CTA `cta` (maybe this one).
// CTA-scope release, as for a local arrive: a cluster-scope one costs a memory fence per call
// and is not needed, since what it guards is this warp's wgmma reads, already complete.
__device__ __forceinline__ void mbarrier_arrive_cluster(u64* bar, u32 cta) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}" ::"r"(smem_u32(bar)),
      "r"(cta)
      : "memory");
}

// Waits until the barrier's phase with the given parity has completed.
__device__ __forceinline__ void mbarrier_wait(u64* bar, u32 parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_loop:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_loop;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

// ---- cp.async and shared memory by address ------------------------------------------------

// Copies `bytes` (0 to 4) from global to shared memory asynchronously; the rest of the 4 are zeros.
__device__ __forceinline__ void cp_async_4(u32 dst, const void* src, u32 bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

// Copies 16 bytes from global to shared memory asynchronously, both 16-byte aligned, through L2 only.
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

// Waits until this thread's earlier cp.async copies have landed.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Arrives on `bar` once this thread's earlier cp.async copies have landed (the barrier's count
// includes the arrival).
__device__ __forceinline__ void cp_async_arrive(u64* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void st_shared_u32(u32 address, u32 v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(address), "r"(v) : "memory");
}
__device__ __forceinline__ u32 ld_shared_u32(u32 address) {
  u32 v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(address) : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_u16(u32 address, u16 v) {
  asm volatile("st.shared.u16 [%0], %1;" ::"r"(address), "h"(v) : "memory");
}
__device__ __forceinline__ u32 ld_shared_u16(u32 address) {
  u16 v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(address) : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_v4(u32 address, const u32 (&v)[4]) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(address), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
               : "memory");
}
__device__ __forceinline__ u32 ld_shared_u8(u32 address) {
  u32 v;
  asm volatile("ld.shared.u8 %0, [%1];" : "=r"(v) : "r"(address) : "memory");
  return v;
}
__device__ __forceinline__ float ld_shared_f32(u32 address) { return __uint_as_float(ld_shared_u32(address)); }
__device__ __forceinline__ float2 ld_shared_f32x2(u32 address) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(address) : "memory");
  return v;
}

// ---- TMA ------------------------------------------------------------------------------------

__device__ __forceinline__ void tma_prefetch_descriptor(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// Loads one box at (x, y, z) into shared memory; completion is counted on `bar` in bytes.
__device__ __forceinline__ void tma_load_3d(u32 dst, const TensorMap* map, u64* bar, int x, int y, int z) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
      "l"(map), "r"(smem_u32(bar)), "r"(x), "r"(y), "r"(z)
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap* map, u64* bar, int x, int y, int z) {
  tma_load_3d(smem_u32(dst), map, bar, x, y, z);
}

// Loads one box into the same shared-memory offset of every cluster CTA in `cta_mask`; each
// CTA's barrier at `bar`'s offset counts the bytes that land there.
__device__ __forceinline__ void tma_load_3d_multicast(void* dst, const TensorMap* map, u64* bar, int x, int y,
                                                      int z, u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(smem_u32(dst)),
      "l"(map), "r"(smem_u32(bar)), "r"(x), "r"(y), "r"(z), "h"(cta_mask)
      : "memory");
}

// Stores one box from shared memory at (x, y, z); parts outside the tensor are clipped.
__device__ __forceinline__ void tma_store_3d(const TensorMap* map, const void* src, int x, int y,
                                             int z) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::
                   "l"(map),
               "r"(smem_u32(src)), "r"(x), "r"(y), "r"(z)
               : "memory");
}

__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until at most N committed stores still read shared memory.
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Stores four 8x8 matrices of 16-bit values: lane l gives the shared address of row l % 8 of
// matrix l / 8, and its register i holds row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 of
// matrix i, the layout of a wgmma accumulator fragment. Transposed, each matrix is stored
// transposed: lane l's address takes column l % 8 of matrix l / 8.
template <bool kTransposed = false>
__device__ __forceinline__ void stmatrix_x4(u32 row_address, u32 m0, u32 m1, u32 m2, u32 m3) {
  if (kTransposed) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(row_address),
                 "r"(m0), "r"(m1), "r"(m2), "r"(m3)
                 : "memory");
  } else {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(row_address), "r"(m0),
                 "r"(m1), "r"(m2), "r"(m3)
                 : "memory");
  }
}

__device__ __forceinline__ void store_shared(u32 address, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(address), "f"(x), "f"(y) : "memory");
}

// Orders this thread's ordinary shared-memory writes before later TMA reads of them.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- warpgroups and clusters --------------------------------------------------------------

__device__ __forceinline__ u32 cluster_rank() {
  u32 rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

// The cluster barrier in two halves: every thread of every CTA in the cluster arrives, then
// waits for all the others to have arrived. The arrival is relaxed (orders no memory): what a
// release would publish, barrier initialisation, fence_barrier_init publishes already, and a
// release arrival costs ~0.55 us at the start of a kernel (H100).
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Counts this warp's threads as arrived at named barrier `id`, without waiting for the others.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Whether `value` holds in any of the `threads` threads meeting at named barrier `id`.
__device__ __forceinline__ bool named_barrier_any(int id, int threads, bool value) {
  u32 any;
  asm volatile(
      "{\n.reg .pred in, out;\n"
      "setp.ne.u32 in, %1, 0;\n"
      "bar.red.or.pred out, %2, %3, in;\n"
      "selp.u32 %0, 1, 0, out;\n}"
      : "=r"(any)
      : "r"(u32(value)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}

template <int Registers>
__device__ __forceinline__ void registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Registers));
}

template <int Registers>
__device__ __forceinline__ void registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Registers));
}

// ---- global memory shared between CTAs -----------------------------------------------------

// Adds to a counter other CTAs also use: releases this CTA's earlier writes (ordered before by a
// barrier) and acquires the writes of the CTAs that added before. Returns the old value.
__device__ __forceinline__ u32 atomic_add_acq_rel(u32* counter, u32 value) {
  u32 old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(counter), "r"(value) : "memory");
  return old;
}

__device__ __forceinline__ void store_relaxed(u32* address, u32 value) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(address), "r"(value) : "memory");
}

// Reads through L2, where other SMs' writes are, never from this SM's L1.
__device__ __forceinline__ float2 load_l2(const float2* address) {
  float2 v;
  asm volatile("ld.global.cg.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "l"(address) : "memory");
  return v;
}

// ---- wgmma ----------------------------------------------------------------------------------

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accesses of an accumulator register across a wgmma wait.
__device__ __forceinline__ void fence_register(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// Shared-memory matrix descriptor for a tile written by TMA with 128-byte swizzling, built from
// two words. `leading` and `stride` are the byte offsets the PTX ISA calls LBO and SBO. The low
// word holds the start address (14 bits of 16-byte units) and LBO; the high word SBO and the
// swizzle mode. Shared memory ends below 256 KB, so moving the start address inside it never
// carries out of its 14 bits: callers step a descriptor with 32-bit adds to its low word.
__device__ __forceinline__ u32 descriptor_low(const void* tile, u32 leading) {
  return ((smem_u32(tile) & 0x3ffff) >> 4) | (((leading >> 4) & 0x3fff) << 16);
}

__device__ __forceinline__ u64 smem_descriptor(u32 low, u32 stride) {
  return u64(low) | (u64((stride >> 4) & 0x3fff) << 32) | (u64(1) << 62);
}

}  // namespace gemmkit::sm90
