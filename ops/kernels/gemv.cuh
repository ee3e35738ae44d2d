// Small-M linear (decode, small-batch serving): y[M, N] = x[M, K] · W[N, K]ᵀ for a few rows of x.
// The weight is read once, so these kernels are bound by its stream from memory: each block owns
// a few rows of W, its warps split K between them (enough loads in flight to cover HBM latency at
// any N), and x, small and re-read by every block, stays in L1/L2. The weight loads skip L1 so
// they do not evict x. Both classes plug into the linear entries of gemm.cuh through block().
#ifndef TEENY_GEMV_CUH
#define TEENY_GEMV_CUH

#include "gemm_common.cuh"
#include "mma.cuh"
#include "prelude.cuh"

// 16 bytes of a streamed operand, without allocating in L1.
__device__ __forceinline__ uint4 tn_load_stream16(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// Elements [k, k + kN) of `row` as the raw 16 bytes of T: one load where whole and aligned, else
// element by element with zeros outside [0, K) (and all zeros where !row_ok).
template <typename T, bool kStream>
__device__ __forceinline__ uint4 tn_gemv_chunk(const T* __restrict__ row, bool row_ok, int k, int K, bool vec_ok) {
  constexpr int kN = tn_pack<T>::kN;
  if (row_ok && vec_ok && k + kN <= K) {
    if constexpr (kStream) return tn_load_stream16(row + k);
    return __ldg(reinterpret_cast<const uint4*>(row + k));
  }
  unsigned w[4] = {0u, 0u, 0u, 0u};
  if (row_ok) {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      if (k + i >= K) break;
      if constexpr (sizeof(T) == 4) {
        w[i] = __float_as_uint(row[k + i]);
      } else {
        w[i / 2] |= (unsigned)tn_raw(row[k + i]) << (16 * (i % 2));
      }
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// y[m][n] = Epilogue(v + bias[n]) + R[m][n]; columns [N, ldc) of the row are padding and get 0.
template <class Epilogue, typename T>
__device__ __forceinline__ void tn_gemv_store(T* __restrict__ C, const T* __restrict__ bias, const T* __restrict__ R,
                                              int N, int ldc, int ldr, int m, int n, float v) {
  if (n >= ldc) return;
  float out = 0.f;
  if (n < N) {
    const float b = Epilogue::kHasBias ? tn_f32(bias[n]) : 0.f;
    const float r = Epilogue::kHasResidual ? tn_f32(R[(long long)m * ldr + n]) : 0.f;
    out = Epilogue::apply(v + b, r);
  }
  C[(long long)m * ldc + n] = tn_cast<T>(out);
}

// 16-bit, tensor cores: block b computes y[:, 16b, 16b + 16) for M <= 8 * kGroups with
// mma.sync m16n8k16, W as the 16-row operand and x's rows as the 8 columns. The sum over k does
// not depend on which k each MMA slot holds, so every lane loads 16 contiguous bytes of W (rows
// lane / 4 and lane / 4 + 8) and of x (row lane / 4) at k = 32c + 8 (lane % 4), and two MMAs
// take the low and high halves: the fragments line up without shuffles or shared memory.
// Warp w takes K chunks c = w, w + kWarps, ..., kUnroll of them a step, and issues the next
// step's weight loads before this step's MMAs, so its loads stay in flight back to back. Many
// warps a block, each with a short K range, keep more loads in flight per SM than more blocks
// would (the registers of the double buffer allow few blocks an SM). The warps' partial tiles
// are summed at the end.
template <typename T, int kWarps, int kGroups, int kUnroll, class Epilogue>
struct tn_gemv_mma {
  static constexpr bool kHasBias = Epilogue::kHasBias, kHasResidual = Epilogue::kHasResidual;
  static constexpr bool kPersistent = false;
  static constexpr int kRowsN = 16, kChunk = 32, kStep = kWarps * kUnroll;

  // The weight chunks of one step: kUnroll chunks of 32 columns, rows r and r + 8.
  struct Step {
    uint4 lo[kUnroll], hi[kUnroll];
  };

  static __device__ __forceinline__ void load_step(Step& s, const T* w_lo, const T* w_hi, bool lo_ok, bool hi_ok,
                                                   int c0, int K, bool vec_ok) {
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = (c0 + u * kWarps) * kChunk + 8 * t;
      s.lo[u] = tn_gemv_chunk<T, true>(w_lo, lo_ok, k, K, vec_ok);
      s.hi[u] = tn_gemv_chunk<T, true>(w_hi, hi_ok, k, K, vec_ok);
    }
  }

  static __device__ __forceinline__ void compute_step(const Step& s, float (&acc)[kGroups][4], const T* x, int M,
                                                      int c0, int K, int ldx, bool vec_ok) {
    const int lane = threadIdx.x % 32, r = lane / 4, t = lane % 4;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = (c0 + u * kWarps) * kChunk + 8 * t;
      if (k - 8 * t >= K) break;
      const unsigned first[4] = {s.lo[u].x, s.hi[u].x, s.lo[u].y, s.hi[u].y};
      const unsigned second[4] = {s.lo[u].z, s.hi[u].z, s.lo[u].w, s.hi[u].w};
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const int m = g * 8 + r;
        const uint4 b = tn_gemv_chunk<T, false>(x + (long long)m * ldx, m < M, k, K, vec_ok);
        tn_mma16816<T>(acc[g], first, b.x, b.y);
        tn_mma16816<T>(acc[g], second, b.z, b.w);
      }
    }
  }

  static __device__ __forceinline__ void block(const T* __restrict__ x, const T* __restrict__ W,
                                               const T* __restrict__ bias, T* __restrict__ C, int M, int N, int K,
                                               int ldx, int ldw, int ldc, int pid, const T* __restrict__ R = nullptr,
                                               int ldr = 0) {
    __shared__ float partial[kWarps][kGroups][4][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 4;
    const int n0 = pid * kRowsN;
    const bool vec_ok = K % 8 == 0 && ldx % 8 == 0 && ldw % 8 == 0 && tn_aligned16(x) && tn_aligned16(W);
    const T* w_lo = W + (long long)(n0 + r) * ldw;
    const T* w_hi = W + (long long)(n0 + r + 8) * ldw;
    const bool lo_ok = n0 + r < N, hi_ok = n0 + r + 8 < N;
    float acc[kGroups][4] = {};
    const int chunks = (K + kChunk - 1) / kChunk;
    Step current{};
    load_step(current, w_lo, w_hi, lo_ok, hi_ok, warp, K, vec_ok);
    for (int c0 = warp; c0 < chunks; c0 += kStep) {
      Step next{};
      if (c0 + kStep < chunks) load_step(next, w_lo, w_hi, lo_ok, hi_ok, c0 + kStep, K, vec_ok);
      compute_step(current, acc, x, M, c0, K, ldx, vec_ok);
      current = next;
    }
#pragma unroll
    for (int g = 0; g < kGroups; ++g)
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp][g][i][lane] = acc[g][i];
    __syncthreads();
    // acc[g][i]: W row n0 + r (+ 8 for i >= 2), x row 8g + 2t (+ 1 for odd i).
    for (int idx = threadIdx.x; idx < kGroups * 4 * 32; idx += kWarps * 32) {
      const int g = idx / 128, i = (idx / 32) % 4, l = idx % 32;
      float v = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += partial[w][g][i][l];
      const int m = g * 8 + 2 * (l % 4) + (i % 2);
      const int n = n0 + l / 4 + (i >= 2 ? 8 : 0);
      if (m < M) tn_gemv_store<Epilogue>(C, bias, R, N, ldc, ldr, m, n, v);
    }
  }
};

// f32 on CUDA cores (f32 accuracy; the weight stream, not the FMAs, bounds it): block b computes
// y[:, kRowsN b, kRowsN (b + 1)) for M <= kM, its threads striding over K in 16-byte chunks that
// each feed kRowsN x M FMAs per x chunk, then a block reduction per output.
template <int kThreads, int kRowsN, int kM, class Epilogue>
struct tn_gemv_simt {
  static constexpr bool kHasBias = Epilogue::kHasBias, kHasResidual = Epilogue::kHasResidual;
  static constexpr bool kPersistent = false;
  static constexpr int kWarps = kThreads / 32, kUnroll = 2;

  static __device__ __forceinline__ void block(const float* __restrict__ x, const float* __restrict__ W,
                                               const float* __restrict__ bias, float* __restrict__ C, int M, int N,
                                               int K, int ldx, int ldw, int ldc, int pid,
                                               const float* __restrict__ R = nullptr, int ldr = 0) {
    __shared__ float partial[kWarps][kRowsN * kM];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n0 = pid * kRowsN;
    const bool vec_ok = K % 4 == 0 && ldx % 4 == 0 && ldw % 4 == 0 && tn_aligned16(x) && tn_aligned16(W);
    float acc[kRowsN][kM] = {};
    for (int k0 = 4 * threadIdx.x; k0 < K; k0 += 4 * kThreads * kUnroll) {
      float w[kUnroll][kRowsN][4];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int j = 0; j < kRowsN; ++j) {
          const uint4 v =
              tn_gemv_chunk<float, true>(W + (long long)(n0 + j) * ldw, n0 + j < N, k0 + u * 4 * kThreads, K, vec_ok);
          tn_unpack16(v, w[u][j]);
        }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          if (m >= M) break;
          float xv[4];
          tn_unpack16(tn_gemv_chunk<float, false>(x + (long long)m * ldx, true, k0 + u * 4 * kThreads, K, vec_ok), xv);
#pragma unroll
          for (int j = 0; j < kRowsN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[j][m] = fmaf(w[u][j][e], xv[e], acc[j][m]);
        }
    }
#pragma unroll
    for (int j = 0; j < kRowsN; ++j)
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        const float v = tn_warp_sum(acc[j][m]);
        if (lane == 0) partial[warp][j * kM + m] = v;
      }
    __syncthreads();
    for (int idx = threadIdx.x; idx < kRowsN * kM; idx += kThreads) {
      const int j = idx / kM, m = idx % kM;
      float v = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += partial[w][idx];
      if (m < M) tn_gemv_store<Epilogue>(C, bias, R, N, ldc, ldr, m, n0 + j, v);
    }
  }
};

#endif  // TEENY_GEMV_CUH
