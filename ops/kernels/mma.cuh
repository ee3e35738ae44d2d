// Warp-level tensor-core and async-copy primitives (sm_80 and later): cp.async 16- and 4-byte copies
// into shared memory, ldmatrix fragment loads and the m16n8k16 MMA with f32 accumulators, for
// the kernels that stage tiles in shared memory (sdpa, the cp.async GEMMs).
#ifndef TEENY_MMA_CUH
#define TEENY_MMA_CUH

#include "prelude.cuh"

// This thread's lane, from the %laneid register (threadIdx.x % 32 for the 1-D blocks here) that
// the compiler treats as a constant of the thread and so hoists out of loops.
__device__ __forceinline__ int tn_lane() {
  int lane;
  asm("mov.u32 %0, %%laneid;\n" : "=r"(lane));
  return lane;
}
__device__ __forceinline__ unsigned tn_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void tn_cp_async16_to(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void tn_cp_async16(void* dst, const void* src) { tn_cp_async16_to(tn_smem_addr(dst), src); }
// 4 bytes from src, or zeros where !copy (src is then not read, but must be a valid address).
__device__ __forceinline__ void tn_cp_async4_zfill(unsigned dst, const void* src, bool copy) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(copy ? 4 : 0));
}
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

// The A-fragment of a warp's 16 x 16 tile: rows [0, 16) from `rows`, columns [k0, k0 + 16), of a
// row-major tile in shared memory.
template <typename T, int kLd>
__device__ __forceinline__ void tn_ldmatrix_a(unsigned (&a)[4], const T (*rows)[kLd], int k0) {
  const int lane = threadIdx.x % 32;
  tn_ldmatrix_x4(a, &rows[lane % 16][k0 + (lane / 16) * 8]);
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

// Warp-level products of a 16-row tile with a tile in shared memory (K-steps of 16, A [16 x kK],
// kK and kN multiples of 16), the building blocks of the attention kernels. Accumulators are in
// the m16n8 layout: acc[j] holds columns 8j..8j+7, lane (g, t) = (lane / 4, lane % 4) its
// elements (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).

// acc[16 x kN] += A · Bᵀ over columns 16kk..16kk+15 of A, `a` their A-fragment, B [kN][kLd]
// rows of at least 16kk + 16 elements (each row one column of Bᵀ).
template <typename T, int kN, int kLd>
__device__ __forceinline__ void tn_mma_abt_step(float (&acc)[kN / 8][4], const unsigned (&a)[4], const T (*b)[kLd],
                                                int kk) {
  static_assert(kN % 16 == 0, "two n-tiles per ldmatrix");
  const int lane = tn_lane(), mat = lane / 8;
#pragma unroll
  for (int j = 0; j < kN / 8; j += 2) {
    unsigned r[4];  // rows j*8.. (k 0-7, 8-15), rows j*8+8.. (k 0-7, 8-15)
    tn_ldmatrix_x4(r, &b[j * 8 + (mat / 2) * 8 + lane % 8][kk * 16 + (mat % 2) * 8]);
    tn_mma16816<T>(acc[j], a, r[0], r[1]);
    tn_mma16816<T>(acc[j + 1], a, r[2], r[3]);
  }
}

// acc[16 x kN] += A · Bᵀ, A [16 x kK] as A-fragments in registers.
template <typename T, int kK, int kN, int kLd>
__device__ __forceinline__ void tn_mma_abt(float (&acc)[kN / 8][4], const unsigned (&a)[kK / 16][4],
                                           const T (*b)[kLd]) {
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) tn_mma_abt_step<T, kN>(acc, a[kk], b, kk);
}

// acc[16 x kN] += A · Bᵀ, A [16][kLd] rows of kK elements in shared memory, its fragments loaded
// one k-step at a time (4 registers live, not kK / 4).
template <typename T, int kK, int kN, int kLd>
__device__ __forceinline__ void tn_mma_abt(float (&acc)[kN / 8][4], const T (*a_rows)[kLd], const T (*b)[kLd]) {
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    unsigned a[4];
    tn_ldmatrix_a(a, a_rows, kk * 16);
    tn_mma_abt_step<T, kN>(acc, a, b, kk);
  }
}

// Row g (h = 0) or g + 8 (h = 1) of a warp's 16 x kN accumulator times `mul`, as T pairs: lane
// (g, t)'s columns 2t, 2t + 1 of each n-tile to dst + 8j (dst: the row's column 2t; 4-byte aligned).
template <typename T, int kN>
__device__ __forceinline__ void tn_store_acc_row(T* dst, const float (&acc)[kN / 8][4], int h, float mul) {
#pragma unroll
  for (int j = 0; j < kN / 8; ++j)
    *reinterpret_cast<unsigned*>(dst + j * 8) = tn_pack2<T>(acc[j][2 * h] * mul, acc[j][2 * h + 1] * mul);
}

// P's A-fragment of columns 16kj..16kj+15 (accumulator n-tiles 2kj and 2kj + 1) rounded to T,
// or, with kLow, what that rounding left over, rounded again.
template <typename T, int kK, bool kLow>
__device__ __forceinline__ void tn_p_fragment(unsigned (&a)[4], const float (&p)[kK / 8][4], int kj) {
  auto part = [](float x) { return kLow ? x - tn_f32(tn_cast<T>(x)) : x; };
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float* tile = p[2 * kj + i / 2];
    a[i] = tn_pack2<T>(part(tile[(i % 2) * 2]), part(tile[(i % 2) * 2 + 1]));
  }
}

// acc[16 x kN] += P · B, P [16 x kK] f32 in the accumulator layout, B [kK][kLd] rows of kN
// elements, read transposed by ldmatrix. P is rounded to T for the MMAs; with kSplit it is
// multiplied as the sum of that rounding and of its rounded remainder, which keeps about twice
// T's mantissa bits of P at twice the MMAs.
template <typename T, int kK, int kN, bool kSplit = false, int kLd>
__device__ __forceinline__ void tn_mma_pb(float (&acc)[kN / 8][4], const float (&p)[kK / 8][4], const T (*b)[kLd]) {
  static_assert(kK % 16 == 0 && kN % 16 == 0, "whole m16n8k16 steps, two n-tiles per ldmatrix");
  const int lane = threadIdx.x % 32, mat = lane / 8;
#pragma unroll
  for (int kj = 0; kj < kK / 16; ++kj) {
    unsigned pa[4], pa_low[4];
    tn_p_fragment<T, kK, false>(pa, p, kj);
    if constexpr (kSplit) tn_p_fragment<T, kK, true>(pa_low, p, kj);
#pragma unroll
    for (int d = 0; d < kN / 8; d += 2) {
      unsigned r[4];  // columns d*8.. (k 0-7, 8-15), columns d*8+8.. (k 0-7, 8-15)
      tn_ldmatrix_x4_trans(r, &b[kj * 16 + (mat % 2) * 8 + lane % 8][d * 8 + (mat / 2) * 8]);
      tn_mma16816<T>(acc[d], pa, r[0], r[1]);
      tn_mma16816<T>(acc[d + 1], pa, r[2], r[3]);
      if constexpr (kSplit) {
        tn_mma16816<T>(acc[d], pa_low, r[0], r[1]);
        tn_mma16816<T>(acc[d + 1], pa_low, r[2], r[3]);
      }
    }
  }
}

#endif  // TEENY_MMA_CUH
