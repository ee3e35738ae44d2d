// Warp-level tensor-core and async-copy primitives (sm_80 and later): cp.async 16- and 4-byte copies
// into shared memory, ldmatrix fragment loads, the m16n8k16 MMA with f32 accumulators and the
// m16n8k8 TF32 one that f32 operands use as 3xTF32, for the kernels that stage tiles in shared
// memory (sdpa and its gradient, the cp.async GEMMs).
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
// 16 bytes from src, or zeros where !copy (src is then not read, but must be a valid address).
__device__ __forceinline__ void tn_cp_async16_zfill(void* dst, const void* src, bool copy) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(tn_smem_addr(dst)), "l"(src),
               "r"(copy ? 16 : 0));
}
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

// d += a * b for a 16 x 8 tile of TF32 times an 8 x 8 one, per warp (operands as TF32 bits).
__device__ __forceinline__ void tn_mma1688_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x (as its bits) split for 3xTF32: hi = tf32(x) and lo = tf32(x - hi), 22 of f32's 24 bits.
__device__ __forceinline__ void tn_split_tf32(unsigned x, unsigned& hi, unsigned& lo) {
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(hi) : "f"(__uint_as_float(x)));
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(lo) : "f"(__uint_as_float(x) - __uint_as_float(hi)));
}

// The k-step of a warp's MMA over T: 16 for 16-bit T (m16n8k16), 8 for f32 (m16n8k8 on TF32), in
// either case 32 bytes of a row.
template <typename T>
constexpr int tn_mma_k = 2 * tn_pack<T>::kN;

// A warp's A-fragment of one k-step: 16-bit T as ldmatrix leaves it; f32 as the TF32 high and low
// parts of its elements.
template <typename T>
struct tn_afrag {
  unsigned r[4];
};
template <>
struct tn_afrag<float> {
  unsigned hi[4], lo[4];
};

// d += a * b over one k-step, b0 and b1 the B-fragment (T pairs; f32 elements as bits). f32 runs
// 3xTF32, hi·hi + hi·lo + lo·hi, the small products first: f32 accuracy from TF32 tensor cores.
template <typename T>
__device__ __forceinline__ void tn_mma_step(float (&d)[4], const tn_afrag<T>& a, unsigned b0, unsigned b1) {
  if constexpr (tn_pack<T>::kN == 4) {
    unsigned b_hi[2], b_lo[2];
    tn_split_tf32(b0, b_hi[0], b_lo[0]);
    tn_split_tf32(b1, b_hi[1], b_lo[1]);
    tn_mma1688_tf32(d, a.lo, b_hi[0], b_hi[1]);
    tn_mma1688_tf32(d, a.hi, b_lo[0], b_lo[1]);
    tn_mma1688_tf32(d, a.hi, b_hi[0], b_hi[1]);
  } else {
    tn_mma16816<T>(d, a.r, b0, b1);
  }
}

// The A-fragment of a warp's 16 x 16 tile: rows [0, 16) from `rows`, columns [k0, k0 + 16), of a
// row-major tile in shared memory.
template <typename T, int kLd>
__device__ __forceinline__ void tn_ldmatrix_a(unsigned (&a)[4], const T (*rows)[kLd], int k0) {
  const int lane = threadIdx.x % 32;
  tn_ldmatrix_x4(a, &rows[lane % 16][k0 + (lane / 16) * 8]);
}

// The A-fragment of one k-step, columns [k0, k0 + tn_mma_k<T>) of rows [0, 16) of a row-major tile
// in shared memory. On f32 rows ldmatrix's 16-bit pairs are whole elements, lane (g, t) getting
// (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4): the m16n8k8 A-fragment.
template <typename T, int kLd>
__device__ __forceinline__ void tn_load_afrag(tn_afrag<T>& a, const T (*rows)[kLd], int k0) {
  const int lane = threadIdx.x % 32;
  if constexpr (tn_pack<T>::kN == 4) {
    unsigned r[4];
    tn_ldmatrix_x4(r, &rows[lane % 16][k0 + (lane / 16) * 4]);
#pragma unroll
    for (int i = 0; i < 4; ++i) tn_split_tf32(r[i], a.hi[i], a.lo[i]);
  } else {
    tn_ldmatrix_a(a.r, rows, k0);
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

// Warp-level products of a 16-row tile with a tile in shared memory (k-steps of tn_mma_k<T>, A
// [16 x kK], kK and kN multiples of 16), the building blocks of the attention kernels. Tiles of
// f32 multiply as 3xTF32 (tn_mma_step). Accumulators are in the m16n8 layout: acc[j] holds columns
// 8j..8j+7, lane (g, t) = (lane / 4, lane % 4) its elements (g, 2t), (g, 2t + 1), (g + 8, 2t),
// (g + 8, 2t + 1).

// acc[16 x kN] += A · Bᵀ over k-step kk of A, `a` its A-fragment, B [kN][kLd] rows of at least
// (kk + 1) tn_mma_k<T> elements (each row one column of Bᵀ).
template <typename T, int kN, int kLd>
__device__ __forceinline__ void tn_mma_abt_step(float (&acc)[kN / 8][4], const tn_afrag<T>& a, const T (*b)[kLd],
                                                int kk) {
  static_assert(kN % 16 == 0, "two n-tiles per ldmatrix");
  constexpr int kHalf = tn_pack<T>::kN;  // half a k-step: one 8 x 16-byte matrix of ldmatrix
  const int lane = tn_lane(), mat = lane / 8;
#pragma unroll
  for (int j = 0; j < kN / 8; j += 2) {
    unsigned r[4];  // rows j*8.. (both k halves), rows j*8+8.. (both k halves)
    tn_ldmatrix_x4(r, &b[j * 8 + (mat / 2) * 8 + lane % 8][kk * 2 * kHalf + (mat % 2) * kHalf]);
    tn_mma_step<T>(acc[j], a, r[0], r[1]);
    tn_mma_step<T>(acc[j + 1], a, r[2], r[3]);
  }
}

// acc[16 x kN] += A · Bᵀ, A [16 x kK] as A-fragments in registers (16-bit T).
template <typename T, int kK, int kN, int kLd>
__device__ __forceinline__ void tn_mma_abt(float (&acc)[kN / 8][4], const unsigned (&a)[kK / 16][4],
                                           const T (*b)[kLd]) {
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk)
    tn_mma_abt_step<T, kN>(acc, tn_afrag<T>{{a[kk][0], a[kk][1], a[kk][2], a[kk][3]}}, b, kk);
}

// acc[16 x kN] += A · Bᵀ, A [16][kLd] rows of kK elements in shared memory, its fragments loaded
// one k-step at a time (one fragment live, not kK / 4 registers).
template <typename T, int kK, int kN, int kLd>
__device__ __forceinline__ void tn_mma_abt(float (&acc)[kN / 8][4], const T (*a_rows)[kLd], const T (*b)[kLd]) {
#pragma unroll
  for (int kk = 0; kk < kK / tn_mma_k<T>; ++kk) {
    tn_afrag<T> a;
    tn_load_afrag(a, a_rows, kk * tn_mma_k<T>);
    tn_mma_abt_step<T, kN>(acc, a, b, kk);
  }
}

// Row g (h = 0) or g + 8 (h = 1) of a warp's 16 x kN accumulator times `mul`, as T pairs: lane
// (g, t)'s columns 2t, 2t + 1 of each n-tile to dst + 8j (dst: the row's column 2t, aligned to a
// pair).
template <typename T, int kN>
__device__ __forceinline__ void tn_store_acc_row(T* dst, const float (&acc)[kN / 8][4], int h, float mul) {
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    if constexpr (tn_pack<T>::kN == 4)  // f32 pairs: dst 8-byte aligned
      *reinterpret_cast<float2*>(dst + j * 8) = make_float2(acc[j][2 * h] * mul, acc[j][2 * h + 1] * mul);
    else
      *reinterpret_cast<unsigned*>(dst + j * 8) = tn_pack2<T>(acc[j][2 * h] * mul, acc[j][2 * h + 1] * mul);
  }
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

// acc[16 x kN] += P · B on TF32 tensor cores (3xTF32), P [16 x kK] f32 in the accumulator layout,
// B [kK][kLd] f32 rows of kN elements. A k-step is one n-tile of P, whose columns 2t and 2t + 1
// lane (g, t) holds: they serve as the step's columns t and t + 4 (a sum's order of k is free), so
// P needs no shuffles, and B's rows 2t and 2t + 1 go with them, read element by element (rows
// padded by 16 bytes put the warp's 32 reads in distinct banks).
template <int kK, int kN, int kLd>
__device__ __forceinline__ void tn_mma_pb_tf32(float (&acc)[kN / 8][4], const float (&p)[kK / 8][4],
                                               const float (*b)[kLd]) {
  const int lane = tn_lane(), g = lane / 4, t = lane % 4;
#pragma unroll
  for (int kj = 0; kj < kK / 8; ++kj) {
    tn_afrag<float> a;
    const float* pk = p[kj];
    const float pa[4] = {pk[0], pk[2], pk[1], pk[3]};
#pragma unroll
    for (int i = 0; i < 4; ++i) tn_split_tf32(__float_as_uint(pa[i]), a.hi[i], a.lo[i]);
    const float* b0 = b[kj * 8 + 2 * t] + g;
#pragma unroll
    for (int d = 0; d < kN / 8; ++d)
      tn_mma_step<float>(acc[d], a, __float_as_uint(b0[d * 8]), __float_as_uint(b0[kLd + d * 8]));
  }
}

// acc[16 x kN] += P · B, P [16 x kK] f32 in the accumulator layout, B [kK][kLd] rows of kN
// elements, read transposed by ldmatrix. P is rounded to T for the MMAs; with kSplit it is
// multiplied as the sum of that rounding and of its rounded remainder, which keeps about twice
// T's mantissa bits of P at twice the MMAs. f32 T: tn_mma_pb_tf32.
template <typename T, int kK, int kN, bool kSplit = false, int kLd>
__device__ __forceinline__ void tn_mma_pb(float (&acc)[kN / 8][4], const float (&p)[kK / 8][4], const T (*b)[kLd]) {
  static_assert(kK % 16 == 0 && kN % 16 == 0, "whole m16n8k16 steps, two n-tiles per ldmatrix");
  if constexpr (tn_pack<T>::kN == 4) {
    tn_mma_pb_tf32<kK, kN>(acc, p, b);  // 3xTF32 already keeps P to about f32
  } else {
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
}

#endif  // TEENY_MMA_CUH
