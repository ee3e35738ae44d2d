// What the GEMM kernels (gemm_simt.cuh, gemm_mma.cuh, gemm_wgmma.cuh) share: the grouped tile
// order, the epilogue, and the tensor-core kernels' 16-byte chunk loads and pair stores.
#ifndef TEENY_GEMM_COMMON_CUH
#define TEENY_GEMM_COMMON_CUH

#include "activation.cuh"
#include "grad_elementwise.cuh"
#include "mma.cuh"
#include "prelude.cuh"

// Output tile `pid`'s coordinates in grouped order: kGroupM consecutive tile ids walk down M
// under one N tile, so that B panel stays in L2 while A streams.
template <int kBM, int kBN, int kGroupM = 8>
__device__ __forceinline__ void tn_gemm_tile_coords(int pid, int M, int N, int& tile_m, int& tile_n) {
  const int tiles_m = (M + kBM - 1) / kBM, tiles_n = (N + kBN - 1) / kBN;
  const int per_group = kGroupM * tiles_n;
  const int first_m = (pid / per_group) * kGroupM;
  const int group_rows = min(tiles_m - first_m, kGroupM);
  tile_m = first_m + (pid % per_group) % group_rows;
  tile_n = (pid % per_group) / group_rows;
}

// What every output goes through after the product: C = Act(acc + bias) + R, for outputs
// stored as T. Without a bias it adds zeros; without a residual R is never read.
template <typename T, template <typename> class Act, bool kBias, bool kResidual>
struct tn_gemm_epilogue {
  static constexpr bool kHasBias = kBias, kHasResidual = kResidual;
  // No `+ 0.f` without a residual: it is not an identity (-0 + 0 = +0), so the compiler would
  // keep one add per output.
  static __device__ __forceinline__ float apply(float v, float r) {
    return kHasResidual ? Act<T>{}(v) + r : Act<T>{}(v);
  }
};

// An input gradient's epilogue (ops/grad_gemm.h): C = Grad(acc, R), Grad an activation's
// derivative (grad_elementwise.cuh's tn_act_grad_*) and R the tensor it reads; no bias.
template <typename T, template <typename> class Grad>
struct tn_gemm_grad_epilogue {
  static constexpr bool kHasBias = false, kHasResidual = true;
  static __device__ __forceinline__ float apply(float v, float r) { return Grad<T>{}(v, r); }
};

// One 16-byte chunk of a tile row (tn_pack<T>::kN elements from column `col`): by cp.async when
// whole and aligned, else element-wise, with zeros outside [rows, cols).
template <typename T>
__device__ __forceinline__ void tn_load_chunk(T* dst, const T* __restrict__ src_row, bool row_ok, int col, int cols,
                                              bool vec_ok) {
  constexpr int kChunkElems = tn_pack<T>::kN;
  if (row_ok && vec_ok && col + kChunkElems - 1 < cols) {
    tn_cp_async16(dst, src_row + col);
  } else {
#pragma unroll
    for (int i = 0; i < kChunkElems; ++i) dst[i] = (row_ok && col + i < cols) ? src_row[col + i] : tn_cast<T>(0.f);
  }
}

// A 16-bit pair (lo: the lower address) as floats.
template <typename T>
__device__ __forceinline__ void tn_unpack2(unsigned v, float& lo, float& hi) {
  lo = tn_f32(tn_from_raw<T>((unsigned short)(v & 0xffffu)));
  hi = tn_f32(tn_from_raw<T>((unsigned short)(v >> 16)));
}

// lo, hi = p[0], p[1] as one load; `p` is aligned to two elements.
template <typename T>
__device__ __forceinline__ void tn_load2(const T* p, float& lo, float& hi) {
  if constexpr (sizeof(T) == 4) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    lo = v.x;
    hi = v.y;
  } else {
    tn_unpack2<T>(*reinterpret_cast<const unsigned*>(p), lo, hi);
  }
}

// out[0], out[1] = lo, hi as one store; `out` is aligned to two elements.
template <typename T>
__device__ __forceinline__ void tn_store2(T* out, float lo, float hi) {
  if constexpr (sizeof(T) == 4)
    *reinterpret_cast<float2*>(out) = make_float2(lo, hi);
  else
    *reinterpret_cast<unsigned*>(out) = tn_pack2<T>(lo, hi);
}

// Transposes the 4x4 matrix [quad lane][slot] of 32-bit words across the 4 lanes of a quad
// (quad_lane = lane % 4): slot p of lane t trades places with slot t of lane p. Two butterfly
// rounds, each swapping one bit of the slot with that bit of the lane.
__device__ __forceinline__ void tn_quad_transpose(unsigned (&u)[4], int quad_lane) {
#pragma unroll
  for (int bit = 1; bit <= 2; bit <<= 1) {
    const bool upper = quad_lane & bit;
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      if (p & bit) continue;  // the pair (p, p | bit)
      const unsigned got = __shfl_xor_sync(0xffffffffu, upper ? u[p] : u[p | bit], bit);
      if (upper)
        u[p] = got;
      else
        u[p | bit] = got;
    }
  }
}

// C[m][n..n+1] = Epilogue(v + bias) + R[m][n..n+1], as one store where aligned: rows >= M are
// skipped, columns in [N, ldc) are row padding and get zeros. C is T, or f32 partial sums (TC).
template <class Epilogue, typename T, typename TC>
__device__ __forceinline__ void tn_store_pair(TC* __restrict__ C, const T* __restrict__ bias, const T* __restrict__ R,
                                              int M, int N, int ldc, int ldr, int m, int n, float v0, float v1) {
  if (m >= M) return;
  float v[2] = {v0, v1};
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const float b = (Epilogue::kHasBias && n + e < N) ? tn_f32(bias[n + e]) : 0.f;
    const float r = (Epilogue::kHasResidual && n + e < N) ? tn_f32(R[(long long)m * ldr + n + e]) : 0.f;
    v[e] = n + e < N ? Epilogue::apply(v[e] + b, r) : 0.f;
  }
  TC* out = C + (long long)m * ldc + n;
  if (ldc % 2 == 0 && n + 1 < ldc && (reinterpret_cast<unsigned long long>(out) & (2 * sizeof(TC) - 1)) == 0) {
    tn_store2(out, v[0], v[1]);
  } else {
#pragma unroll
    for (int e = 0; e < 2; ++e)
      if (n + e < ldc) out[e] = tn_cast<TC>(v[e]);
  }
}

#endif  // TEENY_GEMM_COMMON_CUH
