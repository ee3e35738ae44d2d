// f32 GEMM on CUDA cores: C[M, N] = A · B (+ bias, act, + residual), A as [M, K] or, with
// kATransposed, stored as [K, M] (a weight gradient's dyᵀ), B as [N, K] (kBTransposed) or [K, N].
// Each thread owns a kTM x kTN micro-tile, split into 4x4 sub-blocks spaced a warp-tile apart so
// the float4 shared-memory reads are conflict-free. Both operands sit in shared memory k-major
// ([k][m], [k][n]), so the inner loop reads float4 along m/n. Global tiles are prefetched into registers while the
// current shared tile is consumed (one __syncthreads per k-step).
#ifndef TEENY_GEMM_SIMT_CUH
#define TEENY_GEMM_SIMT_CUH

#include "gemm_common.cuh"
#include "prelude.cuh"

// Loads a [rows, kBK] slab (K contiguous) chunk: 4 consecutive k of one row, zero outside.
__device__ __forceinline__ float4 tn_load_k4(const float* __restrict__ P, int rows, int K, int ld, bool vec_ok, int r,
                                             int k) {
  if (r < rows && vec_ok && k + 3 < K) return __ldg(reinterpret_cast<const float4*>(P + (long long)r * ld + k));
  float v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = (r < rows && k + i < K) ? __ldg(P + (long long)r * ld + k + i) : 0.f;
  return make_float4(v[0], v[1], v[2], v[3]);
}

// Loads a [K, cols] slab (cols contiguous) chunk: 4 consecutive columns of row k, zero outside.
__device__ __forceinline__ float4 tn_load_cols4(const float* __restrict__ P, int K, int cols, int ld, bool vec_ok,
                                                int k, int c) {
  if (k < K && vec_ok && c + 3 < cols) return __ldg(reinterpret_cast<const float4*>(P + (long long)k * ld + c));
  float v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = (k < K && c + i < cols) ? __ldg(P + (long long)k * ld + c + i) : 0.f;
  return make_float4(v[0], v[1], v[2], v[3]);
}

// The kernel for one tile configuration: kBM x kBN output tiles of kThreads threads, K in steps
// of kBK, kTM x kTN outputs a thread.
template <int BM, int BN, int BK, int Threads, int kTM, int kTN, bool kBTransposed, class Epilogue,
          bool kATransposed = false>
struct tn_simt_gemm {
  static constexpr int kBM = BM, kBN = BN, kBK = BK, kThreads = Threads;
  static constexpr bool kHasBias = Epilogue::kHasBias, kHasResidual = Epilogue::kHasResidual;
  static constexpr bool kPersistent = false;
  static constexpr bool kAStoredKM = kATransposed, kBStoredNK = kBTransposed;
  static constexpr int kThreadsN = kBN / kTN, kThreadsM = kBM / kTM;
  static_assert(kThreadsN * kThreadsM == kThreads, "thread grid must match the block");
  static_assert(kTM % 4 == 0 && kTN % 4 == 0 && kBK % 4 == 0, "micro-tiles are float4 groups");
  static constexpr int kRowGroupStride = kThreadsM * 4, kColGroupStride = kThreadsN * 4;
  // float4 chunks per tile and per thread
  static constexpr int kAChunks = kBM * kBK / 4 / kThreads;
  static constexpr int kBChunks = kBN * kBK / 4 / kThreads;
  static_assert(kAChunks * kThreads * 4 == kBM * kBK && kBChunks * kThreads * 4 == kBN * kBK,
                "tile loads must divide evenly over the block");

  // Epilogue(acc + bias) + R into C with masked stores; columns in [N, ldc) are row padding and
  // get zeros. With `accumulate` the outputs are atomically added instead.
  static __device__ __forceinline__ void store_outputs(const float (&acc)[kTM][kTN], const float* __restrict__ bias,
                                                       float* __restrict__ C, int M, int N, int ldc, int m0, int n0,
                                                       int tx, int ty, const float* __restrict__ R, int ldr,
                                                       bool accumulate) {
    const bool c_vec = ldc % 4 == 0 && tn_aligned16(C);
    const bool add_bias = kHasBias && bias != nullptr;
    const bool add_residual = kHasResidual && R != nullptr;
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
      const int m = m0 + (i / 4) * kRowGroupStride + ty * 4 + (i % 4);
      if (m >= M) continue;
      float* row = C + (long long)m * ldc;
#pragma unroll
      for (int g = 0; g < kTN / 4; ++g) {
        const int n = n0 + g * kColGroupStride + tx * 4;
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float b = (add_bias && n + j < N) ? __ldg(bias + n + j) : 0.f;
          const float r = (add_residual && n + j < N) ? R[(long long)m * ldr + n + j] : 0.f;
          v[j] = n + j < N ? Epilogue::apply(acc[i][g * 4 + j] + b, r) : 0.f;
        }
        if (accumulate) {
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (n + j < N) atomicAdd(row + n + j, v[j]);
        } else if (c_vec) {
          if (n < ldc) *reinterpret_cast<float4*>(row + n) = make_float4(v[0], v[1], v[2], v[3]);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (n + j < ldc) row[n + j] = v[j];
        }
      }
    }
  }

  // Computes output tile `pid` (grouped order). With `accumulate` (split-K: the caller offsets A
  // and B to its K range) the tile is atomically added to C, which the caller zeroed; a null
  // `bias` or `R` (splits after the first) adds none. Split-K runs with no activation (it
  // applies to the whole sum). The next k-step's tiles load into registers (load_tiles) while
  // the current shared tiles are multiplied, and are stored into the other shared buffer after
  // (store_tiles). Those lambdas and the multiply stay in this function: as functions of their
  // own they changed the kernel's code.
  static __device__ __forceinline__ void block(const float* __restrict__ A, const float* __restrict__ B,
                                               const float* __restrict__ bias, float* __restrict__ C, int M, int N,
                                               int K, int lda, int ldb, int ldc, int pid,
                                               const float* __restrict__ R = nullptr, int ldr = 0,
                                               bool accumulate = false) {
    __shared__ __align__(16) float As[2][kBK][kBM];
    __shared__ __align__(16) float Bs[2][kBK][kBN];
    int tile_m, tile_n;
    tn_gemm_tile_coords<kBM, kBN>(pid, M, N, tile_m, tile_n);
    const int m0 = tile_m * kBM, n0 = tile_n * kBN;
    const int tid = threadIdx.x, tx = tid % kThreadsN, ty = tid / kThreadsN;
    const float* A0 = A + (long long)m0 * lda;
    const bool a_vec = lda % 4 == 0 && tn_aligned16(A);
    const bool b_vec = ldb % 4 == 0 && tn_aligned16(B);

    float4 a_next[kAChunks], b_next[kBChunks];
    auto load_tiles = [&](int k0) {
#pragma unroll
      for (int c = 0; c < kAChunks; ++c) {
        const int idx = tid + c * kThreads;
        if (kATransposed) {  // A is [K, M]: 4 consecutive m of one k
          const int k = idx / (kBM / 4), m = (idx % (kBM / 4)) * 4;
          a_next[c] = tn_load_cols4(A, K, M, lda, a_vec, k0 + k, m0 + m);
        } else {
          const int r = idx / (kBK / 4), k = (idx % (kBK / 4)) * 4;
          a_next[c] = tn_load_k4(A0, M - m0, K, lda, a_vec, r, k0 + k);
        }
      }
#pragma unroll
      for (int c = 0; c < kBChunks; ++c) {
        const int idx = tid + c * kThreads;
        if (kBTransposed) {  // B is [N, K]
          const int r = idx / (kBK / 4), k = (idx % (kBK / 4)) * 4;
          b_next[c] = tn_load_k4(B + (long long)n0 * ldb, N - n0, K, ldb, b_vec, r, k0 + k);
        } else {  // B is [K, N]: 4 consecutive n of one k
          const int k = idx / (kBN / 4), n = (idx % (kBN / 4)) * 4;
          b_next[c] = tn_load_cols4(B, K, N, ldb, b_vec, k0 + k, n0 + n);
        }
      }
    };
    auto store_tiles = [&](int buf) {
#pragma unroll
      for (int c = 0; c < kAChunks; ++c) {
        const int idx = tid + c * kThreads;
        if (kATransposed) {
          const int k = idx / (kBM / 4), m = (idx % (kBM / 4)) * 4;
          *reinterpret_cast<float4*>(&As[buf][k][m]) = a_next[c];
        } else {
          const int r = idx / (kBK / 4), k = (idx % (kBK / 4)) * 4;
          As[buf][k + 0][r] = a_next[c].x;
          As[buf][k + 1][r] = a_next[c].y;
          As[buf][k + 2][r] = a_next[c].z;
          As[buf][k + 3][r] = a_next[c].w;
        }
      }
#pragma unroll
      for (int c = 0; c < kBChunks; ++c) {
        const int idx = tid + c * kThreads;
        if (kBTransposed) {
          const int r = idx / (kBK / 4), k = (idx % (kBK / 4)) * 4;
          Bs[buf][k + 0][r] = b_next[c].x;
          Bs[buf][k + 1][r] = b_next[c].y;
          Bs[buf][k + 2][r] = b_next[c].z;
          Bs[buf][k + 3][r] = b_next[c].w;
        } else {
          const int k = idx / (kBN / 4), n = (idx % (kBN / 4)) * 4;
          *reinterpret_cast<float4*>(&Bs[buf][k][n]) = b_next[c];
        }
      }
    };

    float acc[kTM][kTN];
#pragma unroll
    for (int i = 0; i < kTM; ++i)
#pragma unroll
      for (int j = 0; j < kTN; ++j) acc[i][j] = 0.f;

    const int k_tiles = (K + kBK - 1) / kBK;
    load_tiles(0);
    store_tiles(0);
    __syncthreads();
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int buf = kt & 1;
      if (kt + 1 < k_tiles) load_tiles((kt + 1) * kBK);
#pragma unroll
      for (int kk = 0; kk < kBK; ++kk) {
        float a[kTM], b[kTN];
#pragma unroll
        for (int g = 0; g < kTM / 4; ++g) {
          const float4 v = *reinterpret_cast<const float4*>(&As[buf][kk][g * kRowGroupStride + ty * 4]);
          a[g * 4 + 0] = v.x;
          a[g * 4 + 1] = v.y;
          a[g * 4 + 2] = v.z;
          a[g * 4 + 3] = v.w;
        }
#pragma unroll
        for (int g = 0; g < kTN / 4; ++g) {
          const float4 v = *reinterpret_cast<const float4*>(&Bs[buf][kk][g * kColGroupStride + tx * 4]);
          b[g * 4 + 0] = v.x;
          b[g * 4 + 1] = v.y;
          b[g * 4 + 2] = v.z;
          b[g * 4 + 3] = v.w;
        }
#pragma unroll
        for (int i = 0; i < kTM; ++i)
#pragma unroll
          for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      }
      // The other buffer was last read in the previous step, before its closing barrier.
      if (kt + 1 < k_tiles) store_tiles(buf ^ 1);
      __syncthreads();
    }
    store_outputs(acc, bias, C, M, N, ldc, m0, n0, tx, ty, R, ldr, accumulate);
  }
};

#endif  // TEENY_GEMM_SIMT_CUH
