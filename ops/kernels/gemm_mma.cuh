// f16/bf16 GEMM on tensor cores (sm_80+): C[M, N] = A · B (+ bias, act, + residual), A as [M, K]
// or, with kATransposed, stored as [K, M] (a weight gradient's dyᵀ; its tiles are read by
// ldmatrix.trans), B as [N, K] (kBTransposed) or [K, N], f32 accumulation. kWarpsM x kWarpsN warps each compute a
// (kBM/kWarpsM) x (kBN/kWarpsN) warp tile from m16n8k16 MMAs. Shared tiles are padded by 8
// elements per row so ldmatrix's eight 16-byte row reads hit distinct banks. Tiles arrive by
// cp.async (16-byte chunks, double-buffered); ragged or misaligned chunks are filled with plain
// loads.
#ifndef TEENY_GEMM_MMA_CUH
#define TEENY_GEMM_MMA_CUH

#include "gemm_common.cuh"
#include "mma.cuh"
#include "prelude.cuh"

// The kernel for one tile configuration: kBM x kBN output tiles of kThreads threads, K in steps
// of kBK.
template <typename T, int BM, int BN, int BK, int Threads, int kWarpsM, int kWarpsN, bool kBTransposed, class Epilogue,
          bool kATransposed = false>
struct tn_mma_gemm {
  static constexpr int kBM = BM, kBN = BN, kBK = BK, kThreads = Threads;
  static constexpr bool kHasBias = Epilogue::kHasBias, kHasResidual = Epilogue::kHasResidual;
  static constexpr bool kPersistent = false;
  static constexpr bool kAStoredKM = kATransposed, kBStoredNK = kBTransposed;
  static constexpr int kWarpTileM = kBM / kWarpsM, kWarpTileN = kBN / kWarpsN;
  static constexpr int kMI = kWarpTileM / 16, kNI = kWarpTileN / 8;
  static_assert(kWarpsM * kWarpsN * 32 == kThreads, "warp grid must match the block");
  static_assert(kWarpTileM % 16 == 0 && kWarpTileN % 16 == 0 && kBK % 16 == 0, "MMA tile shape");
  static constexpr int kPad = 8;
  static constexpr int kARows = kATransposed ? kBK : kBM;  // As[m][k] or As[k][m]
  static constexpr int kALd = (kATransposed ? kBM : kBK) + kPad;
  static constexpr int kBRows = kBTransposed ? kBN : kBK;  // Bs[n][k] or Bs[k][n]
  static constexpr int kBLd = (kBTransposed ? kBK : kBN) + kPad;
  static constexpr int kAChunks = kBM * kBK / 8 / kThreads;
  static constexpr int kBChunks = kBN * kBK / 8 / kThreads;
  static_assert(kAChunks * kThreads * 8 == kBM * kBK && kBChunks * kThreads * 8 == kBN * kBK,
                "tile loads must divide evenly over the block");

  // Issues this thread's cp.async copies of the k-step at k0 into one buffer, as one group.
  static __device__ __forceinline__ void load_tiles(T (&As)[kARows][kALd], T (&Bs)[kBRows][kBLd],
                                                    const T* __restrict__ A, const T* __restrict__ B, int M, int N,
                                                    int K, int lda, int ldb, int m0, int n0, int tid, bool a_vec,
                                                    bool b_vec, int k0) {
#pragma unroll
    for (int c = 0; c < kAChunks; ++c) {
      const int idx = tid + c * kThreads;
      if (kATransposed) {  // A is [K, M]
        const int k = idx / (kBM / 8), m = (idx % (kBM / 8)) * 8;
        tn_load_chunk(&As[k][m], A + (long long)(k0 + k) * lda, k0 + k < K, m0 + m, M, a_vec);
      } else {
        const int r = idx / (kBK / 8), k = (idx % (kBK / 8)) * 8;
        tn_load_chunk(&As[r][k], A + (long long)(m0 + r) * lda, m0 + r < M, k0 + k, K, a_vec);
      }
    }
#pragma unroll
    for (int c = 0; c < kBChunks; ++c) {
      const int idx = tid + c * kThreads;
      if (kBTransposed) {  // B is [N, K]
        const int r = idx / (kBK / 8), k = (idx % (kBK / 8)) * 8;
        tn_load_chunk(&Bs[r][k], B + (long long)(n0 + r) * ldb, n0 + r < N, k0 + k, K, b_vec);
      } else {  // B is [K, N]
        const int k = idx / (kBN / 8), n = (idx % (kBN / 8)) * 8;
        tn_load_chunk(&Bs[k][n], B + (long long)(k0 + k) * ldb, k0 + k < K, n0 + n, N, b_vec);
      }
    }
    tn_cp_async_commit();
  }

  // Computes output tile `pid` (grouped order); R (with ldr) is read only with a residual. With
  // `partials` (a split of a gradient's sum), the tile's f32 sums go there instead of C. The MMAs
  // stay in this function: as a function of their own (accumulators by reference) they changed
  // the kernel's code.
  static __device__ __forceinline__ void block(const T* __restrict__ A, const T* __restrict__ B,
                                               const T* __restrict__ bias, T* __restrict__ C, int M, int N, int K,
                                               int lda, int ldb, int ldc, int pid, const T* __restrict__ R = nullptr,
                                               int ldr = 0, float* __restrict__ partials = nullptr) {
    __shared__ __align__(16) T As[2][kARows][kALd];
    __shared__ __align__(16) T Bs[2][kBRows][kBLd];
    int tile_m, tile_n;
    tn_gemm_tile_coords<kBM, kBN>(pid, M, N, tile_m, tile_n);
    const int m0 = tile_m * kBM, n0 = tile_n * kBN;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp / kWarpsN, wn = warp % kWarpsN;
    const bool a_vec = lda % 8 == 0 && tn_aligned16(A);
    const bool b_vec = ldb % 8 == 0 && tn_aligned16(B);

    float acc[kMI][kNI][4];
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int j = 0; j < kNI; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    const int k_tiles = (K + kBK - 1) / kBK;
    load_tiles(As[0], Bs[0], A, B, M, N, K, lda, ldb, m0, n0, tid, a_vec, b_vec, 0);
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int buf = kt & 1;
      // The other buffer was last read in the previous step, before its closing barrier.
      if (kt + 1 < k_tiles) {
        load_tiles(As[buf ^ 1], Bs[buf ^ 1], A, B, M, N, K, lda, ldb, m0, n0, tid, a_vec, b_vec, (kt + 1) * kBK);
        tn_cp_async_wait<1>();
      } else {
        tn_cp_async_wait<0>();
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kBK; kk += 16) {
        unsigned a[kMI][4], b[kNI][2];
        // Matrices: (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15); stored
        // k-major, each is read transposed.
#pragma unroll
        for (int i = 0; i < kMI; ++i) {
          const int m = wm * kWarpTileM + i * 16;
          if (kATransposed)
            tn_ldmatrix_x4_trans(a[i], &As[buf][kk + (lane / 16) * 8 + lane % 8][m + (lane / 8) % 2 * 8]);
          else
            tn_ldmatrix_x4(a[i], &As[buf][m + lane % 16][kk + (lane / 16) * 8]);
        }
#pragma unroll
        for (int j = 0; j < kNI; j += 2) {
          // Matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
          const int mat = lane / 8, n = wn * kWarpTileN + j * 8 + (mat / 2) * 8, k = kk + (mat % 2) * 8;
          unsigned r[4];
          if (kBTransposed)
            tn_ldmatrix_x4(r, &Bs[buf][n + lane % 8][k]);
          else
            tn_ldmatrix_x4_trans(r, &Bs[buf][k + lane % 8][n]);
          b[j][0] = r[0];
          b[j][1] = r[1];
          b[j + 1][0] = r[2];
          b[j + 1][1] = r[3];
        }
#pragma unroll
        for (int i = 0; i < kMI; ++i)
#pragma unroll
          for (int j = 0; j < kNI; ++j) tn_mma16816<T>(acc[i][j], a[i], b[j][0], b[j][1]);
      }
      __syncthreads();
    }

    // Accumulator element e of (i, j) is row g (+8 for e >= 2), columns 2t, 2t+1.
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < kNI; ++j) {
          const int m = m0 + wm * kWarpTileM + i * 16 + g + h * 8, n = n0 + wn * kWarpTileN + j * 8 + t * 2;
          if (partials != nullptr)
            tn_store_pair<Epilogue>(partials, bias, R, M, N, ldc, ldr, m, n, acc[i][j][h * 2], acc[i][j][h * 2 + 1]);
          else
            tn_store_pair<Epilogue>(C, bias, R, M, N, ldc, ldr, m, n, acc[i][j][h * 2], acc[i][j][h * 2 + 1]);
        }
  }
};

#endif  // TEENY_GEMM_MMA_CUH
