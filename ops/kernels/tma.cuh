// Hopper's asynchronous copies (sm_90): the tensor-map parameter type, mbarriers, and TMA tile
// loads and stores between global and shared memory.
#ifndef TEENY_TMA_CUH
#define TEENY_TMA_CUH

// The device type of a tensor-map kernel parameter (ArgKind::kTensorMap, which the runtime
// encodes with cuTensorMapEncodeTiled): CUtensorMap's size and alignment, without cuda.h.
// Entries take it as `const __grid_constant__ tn_tensor_map`, whose address TMA copies name.
struct __align__(64) tn_tensor_map {
  unsigned long long opaque[16];
};

__device__ __forceinline__ void tn_mbar_init(unsigned bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void tn_mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// The barrier's pending count is raised now and lowered once this thread's earlier cp.async
// copies land, so the phase cannot complete before them.
__device__ __forceinline__ void tn_mbar_track_cp_async(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void tn_mbar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
}
// The barrier's phase expects `bytes` more from the copies issued after this arrive.
__device__ __forceinline__ void tn_mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// One TMA copy of the box at (col, row) of the tensor map into shared memory at `dst`, in the
// map's swizzle; it completes `bytes` of the barrier's transaction count. Out-of-bounds parts
// of the box are zero-filled (and still counted), which masks the M, N and K tails.
__device__ __forceinline__ void tn_tma_load(unsigned dst, const void* map, int col, int row, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(dst),
      "l"(map), "r"(col), "r"(row), "r"(bar)
      : "memory");
}

// The TMA store of the box at (col, row) of the tensor map from shared memory at `src` (in the
// map's swizzle), as one bulk group of this thread; rows and columns outside the map are not
// written.
__device__ __forceinline__ void tn_tma_store(const void* map, int col, int row, unsigned src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(map), "r"(col),
               "r"(row), "r"(src)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Until at most kPending of this thread's bulk groups are still reading shared memory.
template <int kPending>
__device__ __forceinline__ void tn_bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}

#endif  // TEENY_TMA_CUH
