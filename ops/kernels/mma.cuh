// Warp-level tensor-core and async-copy primitives (sm_80 and later): cp.async 16-byte copies
// into shared memory, ldmatrix fragment loads and the m16n8k16 MMA with f32 accumulators, for
// the kernels that stage tiles in shared memory (sdpa, the cp.async GEMMs).
#ifndef TEENY_MMA_CUH
#define TEENY_MMA_CUH

#include "prelude.cuh"

__device__ __forceinline__ unsigned tn_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void tn_cp_async16_to(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void tn_cp_async16(void* dst, const void* src) { tn_cp_async16_to(tn_smem_addr(dst), src); }
__device__ __forceinline__ void tn_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void tn_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}
__device__ __forceinline__ void tn_ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(tn_smem_addr(p)));
}
__device__ __forceinline__ void tn_ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(tn_smem_addr(p)));
}

// d += a * b for a 16 x 16 tile of T (__half or __nv_bfloat16) times a 16 x 8 one, per warp.
template <typename T>
__device__ __forceinline__ void tn_mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (tn_is_bf16<T>::kValue) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats as one 32-bit pair of T (__half or __nv_bfloat16); `lo` is the element with the
// lower index.
template <typename T>
__device__ __forceinline__ unsigned tn_pack2(float lo, float hi) {
  unsigned r;
  if constexpr (tn_is_bf16<T>::kValue) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

#endif  // TEENY_MMA_CUH
