#include "ops/dense_gemm.h"

#include <fmt/format.h>

#include "ops/activation.h"
#include "ops/kernel_util.h"

namespace teeny::ops {
namespace {

// The longest K for which the wgmma GEMM takes the pingpong schedule.
constexpr int kPingpongMaxK = 1024;
// Columns of one TMA store of the 16-bit wgmma epilogue (c_map's box; 64 bytes of 16-bit
// elements, a 64-byte swizzle row); the kernel gets it as kStoreGroupCols.
constexpr int kTmaStoreBox = 32;
// Shared memory one block may take on sm_90 (227 KiB opt-in), which sizes the pipeline. The
// stage count is a constant of the kernel's source, so it is chosen per arch, not per device:
// every sm_90 part has this limit, and binding checks each launch against the device's
// SMEM_PER_BLOCK.
constexpr int64_t kMaxBlockSmem = 227 * 1024;

// Shared by both paths: output tile coordinates in grouped order — kGroupM consecutive tile
// ids walk down M under one N tile, so that B panel stays in L2 while A streams.
const char* kTileOrder = R"CUDA(
__device__ __forceinline__ void tn_gemm_tile_coords(int pid, int M, int N, int& tile_m, int& tile_n) {
  const int tiles_m = (M + kBM - 1) / kBM, tiles_n = (N + kBN - 1) / kBN;
  const int per_group = kGroupM * tiles_n;
  const int first_m = (pid / per_group) * kGroupM;
  const int group_rows = min(tiles_m - first_m, kGroupM);
  tile_m = first_m + (pid % per_group) % group_rows;
  tile_n = (pid % per_group) / group_rows;
}
)CUDA";

// f32 on CUDA cores: each thread owns a kTM x kTN micro-tile, split into 4x4 sub-blocks
// spaced a warp-tile apart so the float4 shared-memory reads are conflict-free. A (and B in
// [N, K] layout) are stored transposed in shared memory ([k][m]) so the inner loop reads
// float4 along m/n. Global tiles are prefetched into registers while the current shared tile
// is consumed (one __syncthreads per k-step).
const char* kGemmF32 = R"CUDA(
constexpr int kThreadsN = kBN / kTN, kThreadsM = kBM / kTM;
static_assert(kThreadsN * kThreadsM == kThreads, "thread grid must match the block");
static_assert(kTM % 4 == 0 && kTN % 4 == 0 && kBK % 4 == 0, "micro-tiles are float4 groups");
constexpr int kRowGroupStride = kThreadsM * 4, kColGroupStride = kThreadsN * 4;
// float4 chunks per tile and per thread
constexpr int kAChunks = kBM * kBK / 4 / kThreads;
constexpr int kBChunks = kBN * kBK / 4 / kThreads;
static_assert(kAChunks * kThreads * 4 == kBM * kBK && kBChunks * kThreads * 4 == kBN * kBK,
              "tile loads must divide evenly over the block");

// Loads a [rows, kBK] slab (K contiguous) chunk: 4 consecutive k of one row, zero outside.
__device__ __forceinline__ float4 tn_load_k4(const float* __restrict__ P, int rows, int K, int ld,
                                             bool vec_ok, int r, int k) {
  if (r < rows && vec_ok && k + 3 < K) return __ldg(reinterpret_cast<const float4*>(P + (long long)r * ld + k));
  float v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = (r < rows && k + i < K) ? __ldg(P + (long long)r * ld + k + i) : 0.f;
  return make_float4(v[0], v[1], v[2], v[3]);
}

// With `accumulate` (split-K: the caller offsets A and B to its K range) the tile is atomically
// added to C, which the caller zeroed; a null `bias` or `R` (splits after the first) adds none.
// Split-K runs with no activation (it applies to the whole sum).
__device__ __forceinline__ void tn_gemm_block(const float* __restrict__ A, const float* __restrict__ B,
                                              const float* __restrict__ bias, float* __restrict__ C,
                                              int M, int N, int K, int lda, int ldb, int ldc, int pid,
                                              const float* __restrict__ R = nullptr, int ldr = 0,
                                              bool accumulate = false) {
  __shared__ __align__(16) float As[2][kBK][kBM];
  __shared__ __align__(16) float Bs[2][kBK][kBN];
  int tile_m, tile_n;
  tn_gemm_tile_coords(pid, M, N, tile_m, tile_n);
  const int m0 = tile_m * kBM, n0 = tile_n * kBN;
  const int tid = threadIdx.x, tx = tid % kThreadsN, ty = tid / kThreadsN;
  const float* A0 = A + (long long)m0 * lda;
  const bool a_vec = lda % 4 == 0 && tn_aligned16(A);
  const bool b_vec = ldb % 4 == 0 && tn_aligned16(B);

  float4 a_next[kAChunks], b_next[kBChunks];
  auto load_tiles = [&](int k0) {
#pragma unroll
    for (int c = 0; c < kAChunks; ++c) {
      const int idx = tid + c * kThreads, r = idx / (kBK / 4), k = (idx % (kBK / 4)) * 4;
      a_next[c] = tn_load_k4(A0, M - m0, K, lda, a_vec, r, k0 + k);
    }
#pragma unroll
    for (int c = 0; c < kBChunks; ++c) {
      const int idx = tid + c * kThreads;
      if (kBTransposed) {  // B is [N, K]
        const int r = idx / (kBK / 4), k = (idx % (kBK / 4)) * 4;
        b_next[c] = tn_load_k4(B + (long long)n0 * ldb, N - n0, K, ldb, b_vec, r, k0 + k);
      } else {  // B is [K, N]: 4 consecutive n of one k
        const int k = idx / (kBN / 4), n = (idx % (kBN / 4)) * 4;
        const int gk = k0 + k, gn = n0 + n;
        if (gk < K && b_vec && gn + 3 < N) {
          b_next[c] = __ldg(reinterpret_cast<const float4*>(B + (long long)gk * ldb + gn));
        } else {
          float v[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) v[i] = (gk < K && gn + i < N) ? __ldg(B + (long long)gk * ldb + gn + i) : 0.f;
          b_next[c] = make_float4(v[0], v[1], v[2], v[3]);
        }
      }
    }
  };
  auto store_tiles = [&](int buf) {
#pragma unroll
    for (int c = 0; c < kAChunks; ++c) {
      const int idx = tid + c * kThreads, r = idx / (kBK / 4), k = (idx % (kBK / 4)) * 4;
      As[buf][k + 0][r] = a_next[c].x; As[buf][k + 1][r] = a_next[c].y;
      As[buf][k + 2][r] = a_next[c].z; As[buf][k + 3][r] = a_next[c].w;
    }
#pragma unroll
    for (int c = 0; c < kBChunks; ++c) {
      const int idx = tid + c * kThreads;
      if (kBTransposed) {
        const int r = idx / (kBK / 4), k = (idx % (kBK / 4)) * 4;
        Bs[buf][k + 0][r] = b_next[c].x; Bs[buf][k + 1][r] = b_next[c].y;
        Bs[buf][k + 2][r] = b_next[c].z; Bs[buf][k + 3][r] = b_next[c].w;
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
        a[g * 4 + 0] = v.x; a[g * 4 + 1] = v.y; a[g * 4 + 2] = v.z; a[g * 4 + 3] = v.w;
      }
#pragma unroll
      for (int g = 0; g < kTN / 4; ++g) {
        const float4 v = *reinterpret_cast<const float4*>(&Bs[buf][kk][g * kColGroupStride + tx * 4]);
        b[g * 4 + 0] = v.x; b[g * 4 + 1] = v.y; b[g * 4 + 2] = v.z; b[g * 4 + 3] = v.w;
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

  // Epilogue: act(+ bias) + R, masked stores; columns in [N, ldc) are row padding and get zeros.
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
        v[j] = n + j < N ? tn_epilogue(acc[i][g * 4 + j] + b, r) : 0.f;
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
)CUDA";

// f16/bf16 on tensor cores: kWarpsM x kWarpsN warps, each computing a (kBM/kWarpsM) x
// (kBN/kWarpsN) warp tile from m16n8k16 MMAs. Shared tiles are padded by 8 elements per row
// so ldmatrix's eight 16-byte row reads hit distinct banks. Tiles arrive by cp.async (16-byte
// chunks, double-buffered); ragged or misaligned chunks are filled with plain loads.
const char* kGemmMma = R"CUDA(
constexpr int kWarpTileM = kBM / kWarpsM, kWarpTileN = kBN / kWarpsN;
constexpr int kMI = kWarpTileM / 16, kNI = kWarpTileN / 8;
static_assert(kWarpsM * kWarpsN * 32 == kThreads, "warp grid must match the block");
static_assert(kWarpTileM % 16 == 0 && kWarpTileN % 16 == 0 && kBK % 16 == 0, "MMA tile shape");
constexpr int kPad = 8;
constexpr int kALd = kBK + kPad;                          // As[m][k]
constexpr int kBRows = kBTransposed ? kBN : kBK;          // Bs[n][k] or Bs[k][n]
constexpr int kBLd = (kBTransposed ? kBK : kBN) + kPad;
constexpr int kAChunks = kBM * kBK / 8 / kThreads;
constexpr int kBChunks = kBN * kBK / 8 / kThreads;
static_assert(kAChunks * kThreads * 8 == kBM * kBK && kBChunks * kThreads * 8 == kBN * kBK,
              "tile loads must divide evenly over the block");


__device__ __forceinline__ void tn_gemm_block(const T* __restrict__ A, const T* __restrict__ B,
                                              const T* __restrict__ bias, T* __restrict__ C,
                                              int M, int N, int K, int lda, int ldb, int ldc, int pid,
                                              const T* __restrict__ R = nullptr, int ldr = 0) {
  __shared__ __align__(16) T As[2][kBM][kALd];
  __shared__ __align__(16) T Bs[2][kBRows][kBLd];
  int tile_m, tile_n;
  tn_gemm_tile_coords(pid, M, N, tile_m, tile_n);
  const int m0 = tile_m * kBM, n0 = tile_n * kBN;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const bool a_vec = lda % 8 == 0 && tn_aligned16(A);
  const bool b_vec = ldb % 8 == 0 && tn_aligned16(B);

  auto load_tiles = [&](int buf, int k0) {
#pragma unroll
    for (int c = 0; c < kAChunks; ++c) {
      const int idx = tid + c * kThreads, r = idx / (kBK / 8), k = (idx % (kBK / 8)) * 8;
      tn_load_chunk(&As[buf][r][k], A + (long long)(m0 + r) * lda, m0 + r < M, k0 + k, K, a_vec);
    }
#pragma unroll
    for (int c = 0; c < kBChunks; ++c) {
      const int idx = tid + c * kThreads;
      if (kBTransposed) {  // B is [N, K]
        const int r = idx / (kBK / 8), k = (idx % (kBK / 8)) * 8;
        tn_load_chunk(&Bs[buf][r][k], B + (long long)(n0 + r) * ldb, n0 + r < N, k0 + k, K, b_vec);
      } else {  // B is [K, N]
        const int k = idx / (kBN / 8), n = (idx % (kBN / 8)) * 8;
        tn_load_chunk(&Bs[buf][k][n], B + (long long)(k0 + k) * ldb, k0 + k < K, n0 + n, N, b_vec);
      }
    }
    tn_cp_async_commit();
  };

  float acc[kMI][kNI][4];
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

  const int k_tiles = (K + kBK - 1) / kBK;
  load_tiles(0, 0);
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int buf = kt & 1;
    // The other buffer was last read in the previous step, before its closing barrier.
    if (kt + 1 < k_tiles) {
      load_tiles(buf ^ 1, (kt + 1) * kBK);
      tn_cp_async_wait<1>();
    } else {
      tn_cp_async_wait<0>();
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      unsigned a[kMI][4], b[kNI][2];
#pragma unroll
      for (int i = 0; i < kMI; ++i)
        tn_ldmatrix_x4(a[i], &As[buf][wm * kWarpTileM + i * 16 + lane % 16][kk + (lane / 16) * 8]);
#pragma unroll
      for (int j = 0; j < kNI; j += 2) {
        // Matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
        const int mat = lane / 8, n = wn * kWarpTileN + j * 8 + (mat / 2) * 8, k = kk + (mat % 2) * 8;
        unsigned r[4];
        if (kBTransposed) tn_ldmatrix_x4(r, &Bs[buf][n + lane % 8][k]);
        else tn_ldmatrix_x4_trans(r, &Bs[buf][k + lane % 8][n]);
        b[j][0] = r[0]; b[j][1] = r[1]; b[j + 1][0] = r[2]; b[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < kMI; ++i)
#pragma unroll
        for (int j = 0; j < kNI; ++j) tn_mma16816(acc[i][j], a[i], b[j][0], b[j][1]);
    }
    __syncthreads();
  }

  // Epilogue: accumulator element e of (i, j) is row g (+8 for e >= 2), columns 2t, 2t+1.
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < kNI; ++j)
        tn_store_pair(C, bias, R, M, N, ldc, ldr, m0 + wm * kWarpTileM + i * 16 + g + h * 8,
                      n0 + wn * kWarpTileN + j * 8 + t * 2, acc[i][j][h * 2], acc[i][j][h * 2 + 1]);
}
)CUDA";

// Shared by the 16-bit paths. Loading: one 8-element chunk of a tile, by cp.async when whole
// and aligned, else element-wise (zeros outside [rows, cols)). The epilogue: C[m][n..n+1] =
// act(v + bias) + R[m][n..n+1] as one 32-bit store where aligned; rows >= M are skipped,
// columns in [N, ldc) are row padding and get zeros.
const char* kTensorCoreShared = R"CUDA(
constexpr int kChunkElems = 16 / (int)sizeof(T);  // elements per 16-byte chunk

__device__ __forceinline__ void tn_load_chunk(T* dst, const T* __restrict__ src_row, bool row_ok,
                                              int col, int cols, bool vec_ok) {
  if (row_ok && vec_ok && col + kChunkElems - 1 < cols) {
    tn_cp_async16(dst, src_row + col);
  } else {
#pragma unroll
    for (int i = 0; i < kChunkElems; ++i) dst[i] = (row_ok && col + i < cols) ? src_row[col + i] : tn_cast<T>(0.f);
  }
}

// A 16-bit pair (lo: the lower address) as floats.
__device__ __forceinline__ void tn_unpack2(unsigned v, float& lo, float& hi) {
  lo = tn_f32(tn_from_raw<T>((unsigned short)(v & 0xffffu)));
  hi = tn_f32(tn_from_raw<T>((unsigned short)(v >> 16)));
}

// lo, hi = p[0], p[1] as one load; `p` is aligned to two elements.
__device__ __forceinline__ void tn_load2(const T* p, float& lo, float& hi) {
  if constexpr (sizeof(T) == 4) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    lo = v.x;
    hi = v.y;
  } else {
    tn_unpack2(*reinterpret_cast<const unsigned*>(p), lo, hi);
  }
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
      if (upper) u[p] = got;
      else u[p | bit] = got;
    }
  }
}

// C[0], C[1] = lo, hi as one store; `out` is aligned to two elements.
__device__ __forceinline__ void tn_store2(T* out, float lo, float hi) {
  if constexpr (sizeof(T) == 4) *reinterpret_cast<float2*>(out) = make_float2(lo, hi);
  else *reinterpret_cast<unsigned*>(out) = tn_pack2(lo, hi);
}

__device__ __forceinline__ void tn_store_pair(T* __restrict__ C, const T* __restrict__ bias,
                                              const T* __restrict__ R, int M, int N, int ldc, int ldr, int m,
                                              int n, float v0, float v1) {
  if (m >= M) return;
  float v[2] = {v0, v1};
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const float b = (kHasBias && n + e < N) ? tn_f32(bias[n + e]) : 0.f;
    const float r = (kHasResidual && n + e < N) ? tn_f32(R[(long long)m * ldr + n + e]) : 0.f;
    v[e] = n + e < N ? tn_epilogue(v[e] + b, r) : 0.f;
  }
  T* out = C + (long long)m * ldc + n;
  if (ldc % 2 == 0 && n + 1 < ldc && (reinterpret_cast<unsigned long long>(out) & (2 * sizeof(T) - 1)) == 0) {
    tn_store2(out, v[0], v[1]);
  } else {
#pragma unroll
    for (int e = 0; e < 2; ++e)
      if (n + e < ldc) out[e] = tn_cast<T>(v[e]);
  }
}
)CUDA";

// f16/bf16 on Hopper tensor cores (sm_90a), warp-specialised and persistent: warpgroup 0
// loads, the other kConsumers warpgroups compute with wgmma m64nBNk16 from shared memory. Each
// block walks output tiles first_tile, first_tile + gridDim.x, ... (its tiles t = 0, 1, ...;
// grid = at most one block per SM), so the loads of a block's next tile run during an epilogue.
// Two schedules: cooperative, the consumers split every tile's rows (64 each); pingpong
// (kPingpong), consumer c computes whole tiles t = c, c + kConsumers, ... (kBM / 64 row blocks),
// so one consumer's epilogue overlaps the other's MMAs.
// Loader and consumers share a ring of kStages shared-memory stages guarded by mbarriers: a
// stage's `full` barrier completes when its copies (and any zero-fill stores) have landed, its
// `empty` barrier when every warp computing on it has retired the MMAs reading it. The loader is
// either one thread issuing a TMA copy per operand tile (kTma: the tensor maps a_map, b_map
// swizzle and zero-fill the tails; the barrier counts the bytes) or the whole warpgroup issuing
// cp.async copies of 16-byte chunks. TMA kernels also store by TMA (c_map) through store
// buffers past the ring, and load a residual into them by TMA (r_map) at each tile's start.
// The loader fills the ring with the tiles' k-steps in order, so k-step kt of tile t is ring
// step t * k_tiles + kt. Consumers keep one MMA group in flight (wgmma.wait_group 1) and release
// a stage one step late. Tiles are [rows][64] of 128-byte rows in wgmma's 128-byte swizzle
// (16-byte chunk c of row r sits at chunk c ^ (r % 8); the swizzle is a function of the
// address, so every tile starts on a 1024-byte boundary).
//
// f32 (3xTF32): each operand x is split into TF32 parts hi = tf32(x) and lo = tf32(x - hi),
// and D += A_lo B_hi + A_hi B_lo + A_hi B_hi (A_lo B_lo, ~2^-22 relative, is dropped), which
// keeps f32 accuracy on TF32 tensor cores. The loader splits the chunks it copied once they
// land: hi in place, lo in a mirror of the stage, kOperandBytes further on.
const char* kGemmWgmma = R"CUDA(
constexpr int kConsumers = kThreads / 128 - 1;
static_assert(kBM % (kPingpong ? 64 : 64 * kConsumers) == 0,
              "consumers compute row blocks of 64 (the wgmma M); cooperative ones kBM / kConsumers rows each");
constexpr int kRowBlocks = kPingpong ? kBM / 64 : kBM / (64 * kConsumers);  // per consumer and tile
constexpr int kTileStep = kPingpong ? kConsumers : 1;        // between a consumer's tiles
constexpr int kStageWarps = kPingpong ? 4 : 4 * kConsumers;  // computing on one stage
static_assert(kBK * (int)sizeof(T) == 128, "a K tile row is one 128-byte swizzle row");
static_assert(kBN % 16 == 0 && kBN <= 256, "wgmma N");
static_assert(kStages >= 2, "one stage computing while the next loads");
constexpr int kAcc = kBN / 2;  // f32 accumulators per thread and row block: 64 x kBN over 128 threads
// The residual epilogue's prefetch into L2, for the cp.async kernels (TMA kernels load the
// residual by TMA): 16-bit only (3xTF32 has no registers to spare), and only for short
// mainloops, where the epilogue is not hidden under the other consumer's. Measured on the TMA
// kernel before it loaded the residual so, over GPT-2's bf16 layers at M = 32768 (H200): proj
// + residual (K = 768, 12 k-steps) took 98 us with it at the tile's start against 105 without
// (one run), then 94 with it 6 k-steps before the end against 125 for the earlier
// one-row-at-a-time loads (another run); fc_proj + residual (K = 3072) took 4 and 11 us longer.
constexpr int kResidualPrefetchSteps = 6, kResidualPrefetchMaxKTiles = 16;
static_assert(kRowBlocks * kAcc <= 128, "accumulators must leave registers for addresses (168 per thread)");
static_assert(kSplitTf32 == (sizeof(T) == 4), "f32 runs as 3xTF32; 16-bit types directly");
static_assert(!(kTma && kSplitTf32), "3xTF32 splits its chunks in the loader threads, so it copies by cp.async");
constexpr int kATileBytes = kBM * 128, kBTileBytes = kBN * 128;
constexpr int kOperandBytes = kATileBytes + kBTileBytes;
constexpr int kStageBytes = kOperandBytes * (kSplitTf32 ? 2 : 1);
constexpr int kAChunks = kBM * 8 / 128, kBChunks = kBN * 8 / 128;  // 16-byte chunks per loader thread
// TMA kernels store whole tiles through shared memory, a 32-column group (kBM rows of 64
// bytes, in TMA's 64-byte swizzle) a buffer. Without a residual each consumer has two buffers,
// filled in turns, so one group's TMA store runs while the next is written; with one, a whole
// tile's, into which the tile's residual arrives by TMA during the mainloop.
static_assert(!kTma || kPingpong, "the TMA store boxes are whole pingpong tiles (kBM rows)");
static_assert(!kTma || kStoreGroupCols * sizeof(T) == 64, "a store group row is one 64-byte swizzle row");
constexpr int kStoreGroups = kBN / kStoreGroupCols, kStoreBufs = kHasResidual ? kStoreGroups : 2;
constexpr int kStoreBufBytes = kBM * kStoreGroupCols * (int)sizeof(T);
constexpr int kStoreBytes = kTma ? kConsumers * kStoreBufs * kStoreBufBytes : 0;

__device__ __forceinline__ unsigned tn_swizzled(int row, int chunk) {
  return (unsigned)(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// Shared-memory matrix descriptor: start address, leading byte offset 16 (unused by swizzled
// K-major layouts), stride byte offset 1024 (between 8-row groups), 128-byte swizzle.
__device__ __forceinline__ unsigned long long tn_wgmma_desc(unsigned addr) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

__device__ __forceinline__ void tn_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void tn_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending> __device__ __forceinline__ void tn_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(kPending) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the asynchronous MMAs.
__device__ __forceinline__ void tn_fence_acc(float (&d)[kAcc]) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

__device__ __forceinline__ void tn_mbar_init(unsigned bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void tn_mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
// The barrier's pending count is raised now and lowered once this thread's earlier cp.async
// copies land, so the phase cannot complete before them.
__device__ __forceinline__ void tn_mbar_track_cp_async(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void tn_mbar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}

// The stage's `full` barrier expects `bytes` more from the copies issued after this arrive.
__device__ __forceinline__ void tn_mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}
// One TMA copy of the box at (col, row) of the tensor map into shared memory at `dst`, in the
// map's swizzle; it completes `bytes` of the barrier's transaction count. Out-of-bounds parts
// of the box are zero-filled (and still counted), which masks the M, N and K tails.
__device__ __forceinline__ void tn_tma_load(unsigned dst, const void* map, int col, int row, unsigned bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               :: "r"(dst), "l"(map), "r"(col), "r"(row), "r"(bar) : "memory");
}

// The TMA store of the box at (col, row) of the tensor map from shared memory at `src` (in the
// map's swizzle), as one bulk group of this thread; rows and columns outside the map are not
// written.
__device__ __forceinline__ void tn_tma_store(const void* map, int col, int row, unsigned src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
               :: "l"(map), "r"(col), "r"(row), "r"(src) : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Until at most kPending of this thread's bulk groups are still reading shared memory.
template <int kPending> __device__ __forceinline__ void tn_bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(kPending) : "memory");
}
// The 128 threads of consumer warpgroup c (barrier 0 is __syncthreads'), by immediate barrier
// ids (a register id costs a register and reserves all 16 barriers).
__device__ __forceinline__ void tn_consumer_sync(int c) {
  static_assert(kConsumers <= 2, "barriers 1 and 2");
  if (c == 0) asm volatile("bar.sync 1, 128;\n" ::: "memory");
  else asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

// The 16-bit epilogue's bias pairs for column group q (32 columns): columns col + 8 (4q + p),
// packed, as registers are short there; zeros without a bias.
__device__ __forceinline__ void tn_bias_pairs(const T* __restrict__ bias, int col, int q, unsigned (&b)[4]) {
#pragma unroll
  for (int p = 0; p < 4; ++p) b[p] = kHasBias ? *reinterpret_cast<const unsigned*>(bias + col + (4 * q + p) * 8) : 0u;
}
// One output pair of the 16-bit epilogue, packed: act(a + bias) + residual from packed pairs.
__device__ __forceinline__ unsigned tn_epilogue_pair(float a0, float a1, unsigned bias_pair, unsigned residual_pair) {
  float r0 = 0.f, r1 = 0.f, b0, b1;
  if (kHasResidual) tn_unpack2(residual_pair, r0, r1);
  tn_unpack2(bias_pair, b0, b1);
  return tn_pack2(tn_epilogue(a0 + b0, r0), tn_epilogue(a1 + b1, r1));
}

// x -> (tf32(x), tf32(x - tf32(x))) for the 4 floats of the chunk at `p`: the high parts in
// place, the low parts kOperandBytes on. Both are exact TF32 values, so the MMA reads them
// whole whether it rounds or truncates its operands.
__device__ __forceinline__ void tn_split_tf32_chunk(unsigned char* p) {
  float4 v = *reinterpret_cast<float4*>(p);
  float* e = reinterpret_cast<float*>(&v);
  float lo[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    unsigned hi, lo_bits;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(hi) : "f"(e[i]));
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(lo_bits) : "f"(e[i] - __uint_as_float(hi)));
    e[i] = __uint_as_float(hi);
    lo[i] = __uint_as_float(lo_bits);
  }
  *reinterpret_cast<float4*>(p) = v;
  *reinterpret_cast<float4*>(p + kOperandBytes) = make_float4(lo[0], lo[1], lo[2], lo[3]);
}

// The loader's share of one operand tile (rows r0.. of P, K columns k0..k0 + kBK - 1): chunk column
// `chunk` of rows row + 16c. Rows share their swizzle (row % 8) for every c, so chunk c lands
// 2048 bytes past chunk 0. Whole tiles (`whole`: aligned rows, all inside) take one cp.async
// per chunk and no checks; others check every element and zero-fill.
template <int kChunks>
__device__ __forceinline__ void tn_load_operand(unsigned char* tile, const T* __restrict__ P, int r0, int rows,
                                                int ld, bool vec, bool whole, int k0, int K, int row, int chunk) {
  if (whole && k0 + kBK <= K) {
    const unsigned dst = tn_smem_addr(tile + tn_swizzled(row, chunk));
    const T* src = P + (long long)(r0 + row) * ld + chunk * kChunkElems + k0;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) tn_cp_async16_to(dst + c * 2048, src + (long long)c * 16 * ld);
  } else {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int r = row + 16 * c;
      tn_load_chunk(reinterpret_cast<T*>(tile + tn_swizzled(r, chunk)), P + (long long)(r0 + r) * ld, r0 + r < rows,
                    k0 + chunk * kChunkElems, K, vec);
    }
  }
}

// Computes work units first_tile, first_tile + gridDim.x, ...: unit u is output tile u % tiles
// (grouped tile order) over K split u / tiles of `splits`. Every unit takes the same number of
// k-steps (the ring arithmetic relies on it); steps past K load zeros. With splits > 1 (f32
// only) units add into C, which the caller zeroed, and split 0 adds the bias and residual.
__device__ __forceinline__ void tn_gemm_block(const T* __restrict__ A, const T* __restrict__ B,
                                              const T* __restrict__ bias, T* __restrict__ C,
                                              int M, int N, int K, int lda, int ldb, int ldc, int first_tile,
                                              const T* __restrict__ R = nullptr, int ldr = 0, int splits = 1,
                                              const void* a_map = nullptr, const void* b_map = nullptr,
                                              const void* c_map = nullptr, const void* r_map = nullptr) {
  extern __shared__ unsigned char tn_dynamic_smem[];
  unsigned char* smem = tn_dynamic_smem + ((1024 - (tn_smem_addr(tn_dynamic_smem) & 1023)) & 1023);
  unsigned char* store_bufs = smem + kStages * kStageBytes;  // TMA: [consumer][kStoreBufs][kStoreBufBytes]
  const unsigned full_bar = tn_smem_addr(store_bufs + kStoreBytes), empty_bar = full_bar + kStages * 8;
  const unsigned turn_bar = empty_bar + kStages * 8;  // pingpong: one per consumer
  const unsigned residual_bar = turn_bar + kConsumers * 8;  // TMA with a residual: one per consumer
  const int tid = threadIdx.x, warpgroup = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      tn_mbar_init(full_bar + s * 8, kTma ? 1 : 4);  // TMA: the issuing thread's; else one per loader warp
      tn_mbar_init(empty_bar + s * 8, kStageWarps);  // one per warp computing on the stage
    }
    if (kPingpong)
      for (int c = 0; c < kConsumers; ++c) tn_mbar_init(turn_bar + c * 8, 4);  // one per warp of the previous consumer
    if (kTma && kHasResidual)
      for (int c = 0; c < kConsumers; ++c) tn_mbar_init(residual_bar + c * 8, 1);  // the consumer's leader's
  }
  __syncthreads();
  const int tiles = ((M + kBM - 1) / kBM) * ((N + kBN - 1) / kBN), units = tiles * splits;
  const int k_tiles = ((K + kBK - 1) / kBK + splits - 1) / splits;  // k-steps per unit
  int stage = 0;
  unsigned phase = 0;  // parity of the ring's current pass
  auto advance = [&] {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  };

  if (warpgroup == 0) {
    if (kTma && tid != 0) return;  // one thread issues both operand tiles of a stage as two TMA copies
    const int row = tid / 8, chunk = tid % 8;  // this loader thread's rows row + 16c, chunk column
    const bool a_vec = lda % kChunkElems == 0 && tn_aligned16(A);
    const bool b_vec = ldb % kChunkElems == 0 && tn_aligned16(B);
    // Lane 0's arrive, after the warp's convergence point, also releases the lanes' stores.
    auto arrive_full = [&](int s) {
      __syncwarp();
      if (tid % 32 == 0) tn_mbar_arrive(full_bar + s * 8);
    };
    // 3xTF32: this thread's chunks of the stage filled one step earlier, split once they land.
    auto split_stage = [&](int s) {
      unsigned char* a_tile = smem + s * kStageBytes;
#pragma unroll
      for (int c = 0; c < kAChunks; ++c) tn_split_tf32_chunk(a_tile + tn_swizzled(row + 16 * c, chunk));
#pragma unroll
      for (int c = 0; c < kBChunks; ++c) tn_split_tf32_chunk(a_tile + kATileBytes + tn_swizzled(row + 16 * c, chunk));
      arrive_full(s);
    };
    int pending = -1;  // 3xTF32: the stage copied last step, not yet split
    for (int unit = first_tile; unit < units; unit += gridDim.x) {
      int tile_m, tile_n;
      tn_gemm_tile_coords(unit % tiles, M, N, tile_m, tile_n);
      const int m0 = tile_m * kBM, n0 = tile_n * kBN, k_base = unit / tiles * k_tiles * kBK;
      const bool a_whole = a_vec && m0 + kBM <= M, b_whole = b_vec && n0 + kBN <= N;
      for (int kt = 0; kt < k_tiles; ++kt, advance()) {
        tn_mbar_wait(empty_bar + stage * 8, phase ^ 1);  // a fresh barrier's previous phase counts as done
        unsigned char* a_tile = smem + stage * kStageBytes;
        const int k0 = k_base + kt * kBK;
        if (kTma) {
          const unsigned a_addr = tn_smem_addr(a_tile), bar = full_bar + stage * 8;
          tn_mbar_arrive_expect_tx(bar, kStageBytes);
          tn_tma_load(a_addr, a_map, k0, m0, bar);
          tn_tma_load(a_addr + kATileBytes, b_map, k0, n0, bar);
          continue;
        }
        tn_load_operand<kAChunks>(a_tile, A, m0, M, lda, a_vec, a_whole, k0, K, row, chunk);
        tn_load_operand<kBChunks>(a_tile + kATileBytes, B, n0, N, ldb, b_vec, b_whole, k0, K, row, chunk);
        if (kSplitTf32) {
          // This step's copies stay in flight while the previous step's are split.
          tn_cp_async_commit();
          if (pending >= 0) {
            tn_cp_async_wait<1>();
            split_stage(pending);
          }
          pending = stage;
        } else {
          // The phase waits for every lane's copies (and the zero-fill stores, by the arrive).
          tn_mbar_track_cp_async(full_bar + stage * 8);
          arrive_full(stage);
        }
      }
    }
    if (kSplitTf32 && pending >= 0) {
      tn_cp_async_wait<0>();
      split_stage(pending);
    }
    return;
  }

  const int consumer = warpgroup - 1, lane = tid % 32;
  unsigned residual_phase = 0;  // TMA with a residual: parity of the consumer's residual barrier
  // Cooperative consumers all compute each of the block's tiles t; pingpong consumer c computes
  // t = c, c + kConsumers, ...
  for (int t = kPingpong ? consumer : 0, unit = first_tile + t * (int)gridDim.x; unit < units;
       t += kTileStep, unit += kTileStep * (int)gridDim.x) {
    int tile_m, tile_n;
    tn_gemm_tile_coords(unit % tiles, M, N, tile_m, tile_n);
    const int m0 = tile_m * kBM, n0 = tile_n * kBN;
    // Inside M and N, with no row padding to zero and 4-byte aligned pairs, the stores and
    // bias loads need no checks, so they issue back to back instead of behind branches.
    const bool whole = m0 + kBM <= M && (n0 + kBN < N || (n0 + kBN == N && ldc == N)) && ldc % 2 == 0 &&
                       (reinterpret_cast<unsigned long long>(C) & (2 * sizeof(T) - 1)) == 0 &&
                       (!kHasResidual || (ldr % 2 == 0 && (reinterpret_cast<unsigned long long>(R) & (2 * sizeof(T) - 1)) == 0));
    // 16-bit, rows 16-byte aligned: each quad of lanes (one row, 32 columns) trades its pairs
    // in a 4x4 transpose, so a lane stores 8 consecutive columns as one 16-byte store, and
    // loads its residual so (the transpose maps those back to the accumulator layout); a warp
    // then writes whole 32-byte sectors instead of halves.
    const bool whole16 = sizeof(T) == 2 && whole && ldc % 8 == 0 && tn_aligned16(C) &&
                         (reinterpret_cast<unsigned long long>(bias) & 3) == 0 &&
                         (!kHasResidual || (ldr % 8 == 0 && tn_aligned16(R)));
    const bool leader = tid % 128 == 0;  // of this consumer
    if (kTma && kHasResidual && whole16 && leader) {
      // The tile's residual into the store buffers, under the mainloop, once the previous
      // tile's stores have read them.
      tn_bulk_wait_read<0>();
      const unsigned bufs = tn_smem_addr(store_bufs + consumer * kStoreBufs * kStoreBufBytes);
      tn_mbar_arrive_expect_tx(residual_bar + consumer * 8, kStoreGroups * kStoreBufBytes);
#pragma unroll
      for (int g = 0; g < kStoreGroups; ++g)
        tn_tma_load(bufs + g * kStoreBufBytes, r_map, n0 + kStoreGroupCols * g, m0, residual_bar + consumer * 8);
    }
    stage = t * k_tiles % kStages;  // the ring position of the tile's first k-step
    phase = t * k_tiles / kStages & 1;
    // Pingpong: tile t's consumer waits until tile t - 1's consumer has passed all its `full`
    // waits. The parity waits need that order: waiting for pass n of a stage returns at once
    // while pass n - 1 is incomplete, i.e. before the copies of pass n have even started. It
    // also makes the consumers take turns on the tensor cores, one's epilogue under the other's
    // MMAs. Consumer c's turn barrier completes once per tile of the previous consumer: tile t - 1
    // completes pass (t - 1) / kConsumers.
    if (kPingpong && t > 0) tn_mbar_wait(turn_bar + consumer * 8, (t - 1) / kConsumers & 1);
    float acc[kRowBlocks][kAcc];
#pragma unroll
    for (int i = 0; i < kRowBlocks; ++i)
#pragma unroll
      for (int j = 0; j < kAcc; ++j) acc[i][j] = 0.f;
    // Accumulator 4j + 2h + e of row block i is row 64i + (warp % 4) * 16 + lane / 4 + 8h,
    // column 8j + 2 (lane % 4) + e.
    const int row = m0 + (kPingpong ? 0 : consumer * kRowBlocks * 64) + (tid % 128) / 32 * 16 + lane / 4;
    const int col = n0 + (lane % 4) * 2;
    int previous = -1;  // the stage whose MMAs are still in flight
    for (int kt = 0; kt < k_tiles; ++kt, advance()) {
      if (kHasResidual && !kTma && sizeof(T) == 2 && k_tiles <= kResidualPrefetchMaxKTiles &&
          kt == max(k_tiles - kResidualPrefetchSteps, 0)) {
        // The epilogue's residual lines into L2 under the last k-steps, so its loads hit L2. Each
        // quad of lanes owns 2 rows of a row block; lane q takes row q / 2 and every other line.
        constexpr int kLineElems = 128 / sizeof(T), kLines = kBN / kLineElems;
#pragma unroll
        for (int i = 0; i < kRowBlocks; ++i) {
          const int m = row + 64 * i + 8 * (lane % 4 / 2);
#pragma unroll
          for (int l = lane % 2; l < kLines; l += 2)
            if (m < M && n0 + l * kLineElems < N)
              asm volatile("prefetch.global.L2 [%0];\n" :: "l"(R + (long long)m * ldr + n0 + l * kLineElems));
        }
      }
      tn_mbar_wait(full_bar + stage * 8, phase);
      // cp.async copies are generic-proxy writes, and wgmma reads shared memory through the
      // async proxy (as TMA writes it).
      if (!kTma) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      const unsigned a_addr = tn_smem_addr(smem + stage * kStageBytes) + (kPingpong ? 0 : consumer * kRowBlocks * 64 * 128);
      const unsigned b_addr = tn_smem_addr(smem + stage * kStageBytes + kATileBytes);
#pragma unroll
      for (int i = 0; i < kRowBlocks; ++i) tn_fence_acc(acc[i]);
      tn_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)  // one MMA's K (16 16-bit or 8 TF32 elements) is 32 bytes of the row
#pragma unroll
        for (int i = 0; i < kRowBlocks; ++i) {
          const unsigned a = a_addr + i * 64 * 128 + kk * 32, b = b_addr + kk * 32;
          if (kSplitTf32) {  // the small terms first, into the still-small accumulator
            tn_wgmma(acc[i], tn_wgmma_desc(a + kOperandBytes), tn_wgmma_desc(b));
            tn_wgmma(acc[i], tn_wgmma_desc(a), tn_wgmma_desc(b + kOperandBytes));
          }
          tn_wgmma(acc[i], tn_wgmma_desc(a), tn_wgmma_desc(b));
        }
      tn_wgmma_commit();
      tn_wgmma_wait<1>();
#pragma unroll
      for (int i = 0; i < kRowBlocks; ++i) tn_fence_acc(acc[i]);
      if (previous >= 0 && lane == 0) tn_mbar_arrive(empty_bar + previous * 8);
      previous = stage;
    }
    if (kPingpong && lane == 0) tn_mbar_arrive(turn_bar + (consumer + 1) % kConsumers * 8);  // this warp's waits are done
    tn_wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < kRowBlocks; ++i) tn_fence_acc(acc[i]);
    if (previous >= 0 && lane == 0) tn_mbar_arrive(empty_bar + previous * 8);

    if (kSplitTf32 && splits > 1) {  // (T is float: 16-bit kernels never split)
      const bool first_split = unit < tiles;
#pragma unroll
      for (int i = 0; i < kRowBlocks; ++i)
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int m = row + 64 * i + (e / 2) * 8, n = col + j * 8 + e % 2;
            if (m >= M || n >= N) continue;
            float v = acc[i][4 * j + e];
            if (first_split)
              v += (kHasBias ? tn_f32(bias[n]) : 0.f) + (kHasResidual ? tn_f32(R[(long long)m * ldr + n]) : 0.f);
            atomicAdd(reinterpret_cast<float*>(C + (long long)m * ldc + n), v);
          }
      continue;
    }
    if (kTma && whole16) {
      // Through shared memory, 32 columns at a time: the consumer's threads write their pairs
      // into a buffer (over the group's residual, which they read first), and one thread
      // stores it by TMA, which runs on while the next group is written (a warp's 16-byte
      // global stores, after a quad transpose each, kept the epilogue longer than the other
      // consumer's MMAs). Pair p of a lane's row rr sits in 16-byte chunk p ^ (rr / 2 % 4) of
      // the row (the 64-byte swizzle), so a warp's 8 rows of a chunk hit distinct banks.
      const int tile_row = (tid % 128) / 32 * 16 + lane / 4;
      if (kHasResidual) {
        tn_mbar_wait(residual_bar + consumer * 8, residual_phase);
        residual_phase ^= 1;
      }
#pragma unroll
      for (int q = 0; q < kStoreGroups; ++q) {
        unsigned b[4];
        tn_bias_pairs(bias, col, q, b);
        unsigned char* buf = store_bufs + (consumer * kStoreBufs + q % kStoreBufs) * kStoreBufBytes;
        if (!kHasResidual) {
          if (leader) tn_bulk_wait_read<1>();  // the buffer's last store (two groups back) has read it
          tn_consumer_sync(consumer);
        }
#pragma unroll
        for (int i = 0; i < kRowBlocks; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int rr = tile_row + 64 * i + 8 * h;
            unsigned char* line = buf + rr * 64 + 4 * (lane % 4);
            unsigned* pairs[4];
            unsigned res[4] = {0u, 0u, 0u, 0u};  // the row's residual pairs, all read before its writes
#pragma unroll
            for (int p = 0; p < 4; ++p) {
              pairs[p] = reinterpret_cast<unsigned*>(line + ((p ^ (rr >> 1 & 3)) << 4));
              if (kHasResidual) res[p] = *pairs[p];
            }
#pragma unroll
            for (int p = 0; p < 4; ++p) {
              const int j = 4 * q + p;
              *pairs[p] = tn_epilogue_pair(acc[i][4 * j + 2 * h], acc[i][4 * j + 2 * h + 1], b[p], res[p]);
            }
          }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // these writes, before TMA reads them
        tn_consumer_sync(consumer);
        if (leader) tn_tma_store(c_map, n0 + kStoreGroupCols * q, m0, tn_smem_addr(buf));
      }
    } else if (whole16) {
      const int quad_lane = lane % 4;
      // Column group q (32 columns) at a time: its bias loads once for the group's rows, all
      // issued before the first store (reloaded for every store, each load waited out an L1
      // latency alone), and its rows' residual loads likewise (C may be R, so loads after a
      // store to C wait for it).
#pragma unroll
      for (int q = 0; q < kBN / 32; ++q) {
        const int n = n0 + 32 * q + 8 * quad_lane;  // this lane's 8 columns after the transpose
        unsigned b[4];
        tn_bias_pairs(bias, col, q, b);
#pragma unroll
        for (int i = 0; i < kRowBlocks; ++i) {
          uint4 res[2];
          if (kHasResidual)
#pragma unroll
            for (int h = 0; h < 2; ++h) res[h] = *reinterpret_cast<const uint4*>(R + (long long)(row + 64 * i + 8 * h) * ldr + n);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            unsigned r[4] = {0u, 0u, 0u, 0u};
            if (kHasResidual) {
              const uint4 v = res[h];
              r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
              tn_quad_transpose(r, quad_lane);
            }
            unsigned u[4];
#pragma unroll
            for (int p = 0; p < 4; ++p) {
              const int j = 4 * q + p;
              u[p] = tn_epilogue_pair(acc[i][4 * j + 2 * h], acc[i][4 * j + 2 * h + 1], b[p], r[p]);
            }
            tn_quad_transpose(u, quad_lane);
            *reinterpret_cast<uint4*>(C + (long long)(row + 64 * i + 8 * h) * ldc + n) = make_uint4(u[0], u[1], u[2], u[3]);
          }
        }
      }
    } else if (whole) {
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const float b0 = kHasBias ? tn_f32(bias[col + j * 8]) : 0.f;
        const float b1 = kHasBias ? tn_f32(bias[col + j * 8 + 1]) : 0.f;
#pragma unroll
        for (int i = 0; i < kRowBlocks; ++i) {
          T* out = C + (long long)(row + 64 * i) * ldc + col + j * 8;
          float r[4] = {0.f, 0.f, 0.f, 0.f};
          if (kHasResidual) {  // pairs as one load each (`whole` checked their alignment)
            const T* res = R + (long long)(row + 64 * i) * ldr + col + j * 8;
            tn_load2(res, r[0], r[1]);
            tn_load2(res + 8LL * ldr, r[2], r[3]);
          }
          tn_store2(out, tn_epilogue(acc[i][4 * j] + b0, r[0]), tn_epilogue(acc[i][4 * j + 1] + b1, r[1]));
          tn_store2(out + 8LL * ldc, tn_epilogue(acc[i][4 * j + 2] + b0, r[2]),
                    tn_epilogue(acc[i][4 * j + 3] + b1, r[3]));
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kRowBlocks; ++i)
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            tn_store_pair(C, bias, R, M, N, ldc, ldr, row + 64 * i + h * 8, col + j * 8, acc[i][4 * j + 2 * h],
                          acc[i][4 * j + 2 * h + 1]);
    }
  }
  // Shared memory must outlast the TMA stores reading it.
  if (kTma && tid % 128 == 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
)CUDA";

// Tensor-core building blocks (sm_80+), shared with sdpa: shared-memory addresses, cp.async,
// ldmatrix (plain and transposed) and the m16n8k16 MMA with f32 accumulators. TN_MMA_TYPE
// ("bf16" or "f16") must be defined first.
const char* kMmaPrimitives = R"CUDA(
__device__ __forceinline__ unsigned tn_smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void tn_cp_async16_to(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src));
}
__device__ __forceinline__ void tn_cp_async16(void* dst, const void* src) { tn_cp_async16_to(tn_smem_addr(dst), src); }
__device__ __forceinline__ void tn_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending> __device__ __forceinline__ void tn_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(kPending));
}
__device__ __forceinline__ void tn_ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tn_smem_addr(p)));
}
__device__ __forceinline__ void tn_ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tn_smem_addr(p)));
}
__device__ __forceinline__ void tn_mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TN_MMA_TYPE "." TN_MMA_TYPE ".f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two floats as one 32-bit pair of the 16-bit type; `lo` is the element with the lower index.
__device__ __forceinline__ unsigned tn_pack2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn." TN_MMA_TYPE "x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
)CUDA";

const char* layout_name(GemmBLayout layout) { return layout == GemmBLayout::kNK ? "nk" : "kn"; }

// `tn_wgmma(d, a_desc, b_desc)`: D[64 x n] += A * B, both from shared memory, K-major. The
// instruction names every accumulator register, so its operand list is generated.
std::string wgmma_instruction(DType dtype, int n) {
  const int regs = n / 2;
  std::string registers, operands;
  for (int i = 0; i < regs; ++i) {
    registers += fmt::format("{}%{}", i == 0 ? "" : ", ", i);
    operands += fmt::format("{}\"+f\"(d[{}])", i == 0 ? "" : ", ", i);
  }
  // TF32 takes 8 elements of K and no transpose operands (both operands K-major).
  const bool tf32 = dtype == DType::kF32;
  const char* type = tf32 ? "tf32" : dtype == DType::kBF16 ? "bf16" : "f16";
  return fmt::format(R"CUDA(
__device__ __forceinline__ void tn_wgmma(float (&d)[{regs}], unsigned long long a, unsigned long long b) {{
  asm volatile(
      "{{\n.reg .pred p;\nsetp.ne.b32 p, %{scale}, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{type}.{type} {{{registers}}}, %{a}, %{b}, p, 1, 1{trans};\n}}\n"
      : {operands}
      : "l"(a), "l"(b), "r"(1));
}}
)CUDA",
                     fmt::arg("regs", regs), fmt::arg("n", n), fmt::arg("type", type), fmt::arg("k", tf32 ? 8 : 16),
                     fmt::arg("trans", tf32 ? "" : ", 0, 0"),
                     fmt::arg("registers", registers), fmt::arg("operands", operands), fmt::arg("a", regs),
                     fmt::arg("b", regs + 1), fmt::arg("scale", regs + 2));
}

}  // namespace

std::string mma_primitives(DType dtype) {
  return fmt::format("#define TN_MMA_TYPE \"{}\"\n", dtype == DType::kBF16 ? "bf16" : "f16") + kMmaPrimitives;
}

std::string bounded_kernel_entry(const std::vector<KernelArg>& args, int threads, int min_blocks) {
  std::string entry = kernel_entry(args);
  const std::string plain = std::string("void ") + kEntryPlaceholder;
  entry.replace(entry.find(plain), plain.size(),
                fmt::format("void __launch_bounds__({}, {}) {}", threads, min_blocks, kEntryPlaceholder));
  return entry;
}

GemmTile choose_gemm_tile(DType dtype, GemmBLayout layout, const Expr& n, const Expr& k, int target_sm,
                          bool tma_ok) {
  const bool narrow = n.is_const() && *n.const_value() < 512;
  if (dtype == DType::kF32) {
    // 3xTF32 stages are 64 KiB (f32 high and low parts of both 128-row tiles): three fit. Its
    // split-K units fill the GPU even at N = 128 (tiny_lm's 256-wide layers: 2x the CUDA-core
    // kernel's 26 TFLOP/s), so only outputs under one tile wide stay on CUDA cores.
    const bool under_one_tile = !n.is_const() || *n.const_value() < 128;
    if (target_sm == 90 && layout == GemmBLayout::kNK && !under_one_tile) return GemmTile{128, 128, 32, 384, 1, 3, true, true};
    return narrow ? GemmTile{64, 64, 16, 256, 2} : GemmTile{128, 128, 8, 256, 2};
  }
  if (narrow) return GemmTile{64, 64, 32, 128, 1};
  // wgmma reads B from shared memory K-major, i.e. in the [N, K] layout. Stages fill ~192 KiB.
  // Loading by TMA (rows of A and B 16-byte multiples), measured on the H200 over GPT-2's
  // layers at M = 32768 (K = 768, N = 768 / 3072 with GELU; K = 3072, N = 768; us): pingpong
  // 128x128 73 / 336 / 241, cooperative 256x128 76 / 339 / 256, cooperative 128x256 77 / 349
  // / 252; the cp.async kernels (next) took 94 / 383 / 335. One loader thread frees the
  // loader warpgroup's issue slots and L1 for the consumers. Tried on the pingpong kernel and
  // dropped: 2-CTA clusters sharing each B tile by TMA multicast (76 against 75 us at K = N =
  // 768: L2-to-SM traffic is not the limit), and prefetching a tile's residual rows into L2 as
  // its loads start (the 768-wide proj + residual: 140 against 125 us).
  if (target_sm == 90 && layout == GemmBLayout::kNK && tma_ok) {
    GemmTile tile{128, 128, 64, 384, 1, 6, true};
    tile.tma = true;
    return tile;
  }
  // Loading by cp.async, measured on the H200 (bf16, M = 8192 unless noted; TFLOP/s):
  // cooperative 128x256 / 128x192 / 128x128, then pingpong 128x128: K = 768, N = 2304 332 /
  // 330 / 315, 428; N = 3072 373 / 329 / 320, 429; N = 768 272 / 309 / 307, 398; K = 3072,
  // N = 768 475 / 502 / 461; 4096^3 612 (128x256). With a short K a tile is a few k-steps,
  // and the cooperative kernel idles the tensor cores through each tile's drain and epilogue,
  // which pingpong overlaps. M (the batch) is unknown when compiling, so N and K pick: short K
  // takes pingpong, else wide outputs take 128x256 and the rest 128x192 (GPT-2's 768 is four
  // such tiles).
  if (target_sm == 90 && layout == GemmBLayout::kNK) {
    if (k.is_const() && *k.const_value() <= kPingpongMaxK) return GemmTile{128, 128, 64, 384, 1, 6, true};
    const bool wide = n.is_const() && *n.const_value() >= 2048;
    return wide ? GemmTile{128, 256, 64, 384, 1, 4} : GemmTile{128, 192, 64, 384, 1, 5};
  }
  return GemmTile{128, 128, 32, 256, 1};
}

int64_t gemm_dynamic_smem(const GemmTile& tile, const GemmEpilogue& epilogue) {
  // A and B tiles of 128-byte rows per stage (twice for 3xTF32), + 1024 to align the swizzled
  // tiles inside the allocation, + a full and an empty mbarrier (8 bytes each) per stage, +
  // pingpong's two turn mbarriers.
  if (!tile.wgmma()) return 0;
  const int64_t stage_bytes = int64_t{tile.bm + tile.bn} * 128 * (tile.split_tf32 ? 2 : 1);
  const int64_t consumers = tile.threads / 128 - 1;
  // TMA: store buffers of 32 columns (16-bit), two a consumer, or a whole tile's and an
  // 8-byte residual mbarrier with a residual.
  const int64_t buffers = epilogue.residual ? tile.bn / kTmaStoreBox : 2;
  const int64_t store_bytes = tile.tma ? consumers * (buffers * tile.bm * kTmaStoreBox * 2 + (epilogue.residual ? 8 : 0)) : 0;
  return int64_t{tile.stages} * (stage_bytes + 16) + (tile.pingpong ? 16 : 0) + store_bytes + 1024;
}

Expr gemm_tiles(const GemmTile& tile, const Expr& m, const Expr& n) {
  return ceil_div(m, Expr(tile.bm)) * ceil_div(n, Expr(tile.bn));
}

Expr gemm_grid(const GemmTile& tile, const Expr& units) {
  return tile.wgmma() ? min(units, device_sms()) : units;
}

GemmTile fit_gemm_epilogue(GemmTile tile, const GemmEpilogue& epilogue) {
  while (tile.stages > 2 && gemm_dynamic_smem(tile, epilogue) > kMaxBlockSmem) --tile.stages;
  return tile;
}

std::vector<KernelArg> gemm_tensor_maps(const GemmTile& tile, const GemmOperands& ops) {
  // A K box of 128 bytes: one swizzle row (the tile's row of a k-step). C's and R's boxes: a
  // 32-column group of the tile's rows, 64 bytes wide (kStoreGroupCols in kGemmWgmma).
  std::vector<KernelArg> maps = {tensor_map("a_map", {ops.a, ops.k, ops.m, ops.lda, tile.bk, tile.bm, 128}),
                                 tensor_map("b_map", {ops.b, ops.k, ops.n, ops.ldb, tile.bk, tile.bn, 128}),
                                 tensor_map("c_map", {ops.c, ops.n, ops.m, ops.ldc, kTmaStoreBox, tile.bm, 64})};
  if (!ops.r.empty()) maps.push_back(tensor_map("r_map", {ops.r, ops.n, ops.m, ops.ldr, kTmaStoreBox, tile.bm, 64}));
  return maps;
}

std::string gemm_kernel_name(const std::string& op, DType dtype, GemmBLayout layout, bool has_bias,
                             const GemmTile& tile) {
  return fmt::format("{}_{}_{}{}_{}x{}x{}{}{}", op, dtype_name(dtype), layout_name(layout),
                     has_bias ? "_bias" : "", tile.bm, tile.bn, tile.bk,
                     tile.wgmma() ? (tile.pingpong ? "_wgmma_pp" : "_wgmma") : "", tile.tma ? "_tma" : "");
}

std::string GemmEpilogue::suffix() const {
  return (activation.empty() ? "" : "_" + activation) + (residual ? "_res" : "");
}

std::string gemm_device_source(DType dtype, GemmBLayout layout, bool has_bias, const GemmTile& tile,
                               const GemmEpilogue& epilogue) {
  std::string src = kernel_prelude();
  src += kernel_typedef("T", dtype);
  src += kernel_constant("kBM", tile.bm) + kernel_constant("kBN", tile.bn) +
         kernel_constant("kBK", tile.bk) + kernel_constant("kThreads", tile.threads) +
         kernel_constant("kGroupM", 8);
  src += fmt::format("constexpr bool kBTransposed = {};\nconstexpr bool kHasBias = {};\n"
                     "constexpr bool kHasResidual = {};\n"
                     "__device__ __forceinline__ float tn_act(float v) {{ return {}; }}\n"
                     // No `+ 0.f` without a residual: it is not an identity (-0 + 0 = +0), so
                     // the compiler would keep one add per output.
                     "__device__ __forceinline__ float tn_epilogue(float v, float r) {{\n"
                     "  return kHasResidual ? tn_act(v) + r : tn_act(v);\n}}\n",
                     layout == GemmBLayout::kNK, has_bias, epilogue.residual,
                     epilogue.activation.empty() ? "v" : activation(epilogue.activation).cuda);
  src += kTileOrder;
  if (tile.wgmma()) {
    src += kernel_constant("kStages", tile.stages) + kernel_constant("kStoreGroupCols", kTmaStoreBox);
    src += fmt::format("constexpr bool kPingpong = {};\nconstexpr bool kSplitTf32 = {};\nconstexpr bool kTma = {};\n",
                       tile.pingpong, tile.split_tf32, tile.tma);
    if (tile.tma) src += tensor_map_c_type_definition();
    src += mma_primitives(dtype) + kTensorCoreShared + wgmma_instruction(dtype, tile.bn) + kGemmWgmma;
  } else if (dtype == DType::kF32) {
    // 128x128 tiles: 8x8 per thread; 64x64 tiles: 4x4 per thread (256 threads either way).
    const int micro = tile.bm == 128 ? 8 : 4;
    src += kernel_constant("kTM", micro) + kernel_constant("kTN", micro);
    src += kGemmF32;
  } else {
    const int warps = tile.threads / 32;
    const int warps_m = 2;
    src += kernel_constant("kWarpsM", warps_m) + kernel_constant("kWarpsN", warps / warps_m);
    src += mma_primitives(dtype) + kTensorCoreShared + kGemmMma;
  }
  return src;
}

}  // namespace teeny::ops
