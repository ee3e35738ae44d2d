// sdpa's gradient (ops/grad_sdpa.cpp), FlashAttention-2 style: nothing S x S is stored. With
// s = q·k · scale, the forward's p = exp(s - lse) per query row (lse its log-sum-exp over the
// visible keys) and D = Σ_d dO·O (which equals Σ_j p dP), the gradients are
//   dP = dO·vᵀ,  dS = p (dP - D),  dQ = dS·k · scale,  dK = dSᵀ·q · scale,  dV = pᵀ·dO.
// Three kernels, each recomputing scores tile by tile from q and k:
//   tn_sdpa_grad_stats: lse and D per query row (f32 [N, Sq, 2]), one pass over the keys;
//   tn_sdpa_grad_dq:    a block per (head, query tile), looping over key tiles;
//   tn_sdpa_grad_dkv:   a block per (k/v head, key tile), looping over its kv_groups query heads
//                       in order and their query tiles, writing [dK | dV] rows of 2 kDH.
// Every sum runs in one thread in a fixed order (no atomics), so the bits never vary.
//
// Layouts are sdpa.h's: query head n (of N) is row block n / heads of q, o and do, columns from
// (n % heads) kDH, and reads k/v head n / kv_groups, laid out alike with kv_heads (sdpa: heads =
// kv_heads = 1; fused.sdpa_heads: more); dQ has q's layout, contiguous, and [dK | dV] rows hold the
// k/v heads' dK, then their dV. The causal mask is key j visible to query i iff j <= i.
// Tiles of kB queries and kB keys are staged in shared memory as f32, rows padded to an odd
// length (conflict-free column reads); math in f32 whatever the storage dtype T. Scores are in
// log2 units (c = scale · log2 e) so that p is one exp2.
#ifndef TEENY_GRAD_SDPA_CUH
#define TEENY_GRAD_SDPA_CUH

#include "prelude.cuh"
#include "sdpa.cuh"

constexpr float tn_grad_sdpa_log2e = 1.4426950408889634f;
constexpr float tn_grad_sdpa_ln2 = 0.6931471805599453f;

// Padded row length of a staged [rows][kDH] tile: odd, so rows fall in distinct banks.
template <int kDH>
struct tn_sdpa_grad_ld {
  static constexpr int kValue = kDH % 2 == 0 ? kDH + 1 : kDH;
};

// Rows [row0, row0 + kRows) of a [rows, kDH] matrix (row stride ld) into dst as f32, 0 past
// `rows`.
template <typename T, int kThreads, int kRows, int kDH>
__device__ __forceinline__ void tn_sdpa_grad_load(float* dst, const T* src, int ld, int row0, int rows) {
  constexpr int kLd = tn_sdpa_grad_ld<kDH>::kValue;
  for (int e = threadIdx.x; e < kRows * kDH; e += kThreads) {
    const int r = e / kDH, d = e % kDH, row = row0 + r;
    dst[r * kLd + d] = row < rows ? tn_f32(src[(long long)row * ld + d]) : 0.f;
  }
}

// lse (in log2 units) and D of query rows [q0, q0 + kB) into lse2 and Dr; rows past Sq get
// lse +inf (so p = 0) and D 0.
template <int kB>
__device__ __forceinline__ void tn_sdpa_grad_row_stats(const float* stats, int ldst, int q0, int Sq, float* lse2,
                                                       float* Dr) {
  for (int i = threadIdx.x; i < kB; i += blockDim.x) {
    const int qi = q0 + i;
    lse2[i] = qi < Sq ? stats[(long long)qi * ldst] * tn_grad_sdpa_log2e : __int_as_float(0x7f800000);
    Dr[i] = qi < Sq ? stats[(long long)qi * ldst + 1] : 0.f;
  }
}

// P and dS of the (query tile q0, key tile j0) pair into [kB][kB + 1] tiles: p = 2^(s·c - lse2)
// for a visible key, else 0; dS = p (dO·v - D). Ps may be null (dQ needs only dS).
template <int kThreads, int kB, int kDH, bool kCausal, int kWindow>
__device__ __forceinline__ void tn_sdpa_grad_tile(const float* Qs, const float* dOs, const float* Ks, const float* Vs,
                                                  const float* lse2, const float* Dr, float* Ps, float* dSs, int q0,
                                                  int j0, int Sq, int Skv, float c) {
  constexpr int kLd = tn_sdpa_grad_ld<kDH>::kValue;
  for (int e = threadIdx.x; e < kB * kB; e += kThreads) {
    const int i = e / kB, j = e % kB, qi = q0 + i, kj = j0 + j;
    float p = 0.f, ds = 0.f;
    if (qi < Sq && kj < Skv && (!kCausal || kj <= qi) && !tn_sdpa_before_window<kWindow>(kj, qi)) {
      float s = 0.f, dp = 0.f;
#pragma unroll 8
      for (int d = 0; d < kDH; ++d) {
        s = fmaf(Qs[i * kLd + d], Ks[j * kLd + d], s);
        dp = fmaf(dOs[i * kLd + d], Vs[j * kLd + d], dp);
      }
      p = exp2f(fmaf(s, c, -lse2[i]));
      ds = p * (dp - Dr[i]);
    }
    if (Ps != nullptr) Ps[i * (kB + 1) + j] = p;
    dSs[i * (kB + 1) + j] = ds;
  }
}

// lse and D of query tile blockIdx.x % q_tiles of head blockIdx.x / q_tiles: scores of each key
// tile into shared memory, then one thread per row folds them into its running max and sum.
// Dynamic shared memory: Q and K tiles, the score tile.
template <typename T, int kDH, int kB, int kThreads, bool kCausal, int kWindow = 0>
__device__ __forceinline__ void tn_sdpa_grad_stats(const T* q, const T* k, const T* o, const T* dout, float* stats,
                                                   int N, int Sq, int Skv, int ldq, int ldk, int ldo, int lddo,
                                                   int heads, int kv_heads, int kv_groups, float scale) {
  constexpr int kLd = tn_sdpa_grad_ld<kDH>::kValue;
  extern __shared__ __align__(16) float tn_grad_sdpa_smem[];
  float* Qs = tn_grad_sdpa_smem;
  float* Ks = Qs + kB * kLd;
  float* Ss = Ks + kB * kLd;  // [kB][kB + 1]
  const int q_tiles = (Sq + kB - 1) / kB;
  const int n = blockIdx.x / q_tiles, q0 = blockIdx.x % q_tiles * kB;
  if (n >= N) return;
  const T* kn = k + tn_sdpa_head_offset<kDH>(n / kv_groups, kv_heads, Skv, ldk);
  tn_sdpa_grad_load<T, kThreads, kB, kDH>(Qs, q + tn_sdpa_head_offset<kDH>(n, heads, Sq, ldq), ldq, q0, Sq);
  const float c = scale * tn_grad_sdpa_log2e;
  const int kv_end = kCausal ? min(Skv, min(Sq, q0 + kB)) : Skv;
  float m = tn_sdpa_max_start<kWindow>(), l = 0.f;  // row threadIdx.x's, in log2 units
  for (int j0 = tn_sdpa_first_key<kB, kWindow>(q0); j0 < kv_end; j0 += kB) {
    __syncthreads();  // the previous tile's scores are consumed
    tn_sdpa_grad_load<T, kThreads, kB, kDH>(Ks, kn, ldk, j0, Skv);
    __syncthreads();
    for (int e = threadIdx.x; e < kB * kB; e += kThreads) {
      const int i = e / kB, j = e % kB, kj = j0 + j;
      float s = tn_neg_inf();
      if (kj < Skv && (!kCausal || kj <= q0 + i) && !tn_sdpa_before_window<kWindow>(kj, q0 + i)) {
        s = 0.f;
#pragma unroll 8
        for (int d = 0; d < kDH; ++d) s = fmaf(Qs[i * kLd + d], Ks[j * kLd + d], s);
        s *= c;
      }
      Ss[i * (kB + 1) + j] = s;
    }
    __syncthreads();
    if (threadIdx.x < kB && q0 + (int)threadIdx.x < Sq) {
      const float* row = Ss + threadIdx.x * (kB + 1);
      float tile_max = tn_neg_inf();
      for (int j = 0; j < kB; ++j) tile_max = fmaxf(tile_max, row[j]);
      // Without a window key 0 is visible to every row, so m is finite from the first tile on (with one:
      // tn_sdpa_max_start).
      const float m_new = fmaxf(m, tile_max);
      float sum = 0.f;
      for (int j = 0; j < kB; ++j) sum += exp2f(row[j] - m_new);
      l = l * exp2f(m - m_new) + sum;
      m = m_new;
    }
  }
  const int qi = q0 + threadIdx.x;
  if (threadIdx.x < kB && qi < Sq) {
    const T* orow = o + tn_sdpa_head_offset<kDH>(n, heads, Sq, ldo) + (long long)qi * ldo;
    const T* drow = dout + tn_sdpa_head_offset<kDH>(n, heads, Sq, lddo) + (long long)qi * lddo;
    float D = 0.f;
    for (int d = 0; d < kDH; ++d) D = fmaf(tn_f32(drow[d]), tn_f32(orow[d]), D);
    float* dst = stats + ((long long)n * Sq + qi) * 2;
    dst[0] = (m + log2f(l)) * tn_grad_sdpa_ln2;
    dst[1] = D;
  }
}

// dQ of query tile blockIdx.x % q_tiles of head blockIdx.x / q_tiles, dq contiguous in q's layout.
// Thread t accumulates elements t, t + kThreads, ... of the [kB][kDH] tile in registers.
// Dynamic shared memory: Q, dO, K, V tiles, the dS tile, lse and D of the rows.
template <typename T, int kDH, int kB, int kThreads, bool kCausal, int kWindow = 0>
__device__ __forceinline__ void tn_sdpa_grad_dq(const T* q, const T* k, const T* v, const T* dout, const float* stats,
                                                T* dq, int N, int Sq, int Skv, int ldq, int ldk, int ldv, int lddo,
                                                int ldst, int heads, int kv_heads, int kv_groups, float scale) {
  constexpr int kLd = tn_sdpa_grad_ld<kDH>::kValue;
  constexpr int kAcc = (kB * kDH + kThreads - 1) / kThreads;
  extern __shared__ __align__(16) float tn_grad_sdpa_smem[];
  float* Qs = tn_grad_sdpa_smem;
  float* dOs = Qs + kB * kLd;
  float* Ks = dOs + kB * kLd;
  float* Vs = Ks + kB * kLd;
  float* dSs = Vs + kB * kLd;  // [kB][kB + 1]
  float* lse2 = dSs + kB * (kB + 1);
  float* Dr = lse2 + kB;
  const int q_tiles = (Sq + kB - 1) / kB;
  const int n = blockIdx.x / q_tiles, q0 = blockIdx.x % q_tiles * kB;
  if (n >= N) return;
  const T* kn = k + tn_sdpa_head_offset<kDH>(n / kv_groups, kv_heads, Skv, ldk);
  const T* vn = v + tn_sdpa_head_offset<kDH>(n / kv_groups, kv_heads, Skv, ldv);
  tn_sdpa_grad_load<T, kThreads, kB, kDH>(Qs, q + tn_sdpa_head_offset<kDH>(n, heads, Sq, ldq), ldq, q0, Sq);
  tn_sdpa_grad_load<T, kThreads, kB, kDH>(dOs, dout + tn_sdpa_head_offset<kDH>(n, heads, Sq, lddo), lddo, q0, Sq);
  tn_sdpa_grad_row_stats<kB>(stats + (long long)n * Sq * ldst, ldst, q0, Sq, lse2, Dr);
  const float c = scale * tn_grad_sdpa_log2e;
  const int kv_end = kCausal ? min(Skv, min(Sq, q0 + kB)) : Skv;
  float acc[kAcc];
#pragma unroll
  for (int r = 0; r < kAcc; ++r) acc[r] = 0.f;
  for (int j0 = tn_sdpa_first_key<kB, kWindow>(q0); j0 < kv_end; j0 += kB) {
    __syncthreads();  // the previous tile is consumed (and, first, Q, dO and the row stats staged)
    tn_sdpa_grad_load<T, kThreads, kB, kDH>(Ks, kn, ldk, j0, Skv);
    tn_sdpa_grad_load<T, kThreads, kB, kDH>(Vs, vn, ldv, j0, Skv);
    __syncthreads();
    tn_sdpa_grad_tile<kThreads, kB, kDH, kCausal, kWindow>(Qs, dOs, Ks, Vs, lse2, Dr, nullptr, dSs, q0, j0, Sq, Skv, c);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kAcc; ++r) {
      const int e = threadIdx.x + r * kThreads;
      if (e >= kB * kDH) break;
      const int i = e / kDH, d = e % kDH;
      float a = acc[r];
#pragma unroll 4
      for (int j = 0; j < kB; ++j) a = fmaf(dSs[i * (kB + 1) + j], Ks[j * kLd + d], a);
      acc[r] = a;
    }
  }
#pragma unroll
  for (int r = 0; r < kAcc; ++r) {
    const int e = threadIdx.x + r * kThreads;
    const int i = e / kDH, d = e % kDH;
    if (e < kB * kDH && q0 + i < Sq)
      dq[tn_sdpa_head_offset<kDH>(n, heads, Sq, heads * kDH) + (long long)(q0 + i) * heads * kDH + d] =
          tn_cast<T>(acc[r] * scale);
  }
}

// dK and dV of key tile blockIdx.x % k_tiles of k/v head blockIdx.x / k_tiles, into dkv
// contiguous [N / kv_groups / kv_heads, Skv, 2 kv_heads kDH] (the head's dK in its kDH columns of
// the first half, dV in the second): the
// kv_groups query heads sharing the k/v head add up in head order. Under the causal mask only
// query tiles from the key tile's first key on contribute.
template <typename T, int kDH, int kB, int kThreads, bool kCausal, int kWindow = 0>
__device__ __forceinline__ void tn_sdpa_grad_dkv(const T* q, const T* k, const T* v, const T* dout, const float* stats,
                                                 T* dkv, int N, int Sq, int Skv, int ldq, int ldk, int ldv, int lddo,
                                                 int ldst, int heads, int kv_heads, int kv_groups, float scale) {
  constexpr int kLd = tn_sdpa_grad_ld<kDH>::kValue;
  constexpr int kAcc = (kB * kDH + kThreads - 1) / kThreads;
  extern __shared__ __align__(16) float tn_grad_sdpa_smem[];
  float* Qs = tn_grad_sdpa_smem;
  float* dOs = Qs + kB * kLd;
  float* Ks = dOs + kB * kLd;
  float* Vs = Ks + kB * kLd;
  float* Ps = Vs + kB * kLd;        // [kB][kB + 1]
  float* dSs = Ps + kB * (kB + 1);  // [kB][kB + 1]
  float* lse2 = dSs + kB * (kB + 1);
  float* Dr = lse2 + kB;
  const int k_tiles = (Skv + kB - 1) / kB;
  const int m = blockIdx.x / k_tiles, j0 = blockIdx.x % k_tiles * kB;
  if (m >= N / kv_groups) return;
  tn_sdpa_grad_load<T, kThreads, kB, kDH>(Ks, k + tn_sdpa_head_offset<kDH>(m, kv_heads, Skv, ldk), ldk, j0, Skv);
  tn_sdpa_grad_load<T, kThreads, kB, kDH>(Vs, v + tn_sdpa_head_offset<kDH>(m, kv_heads, Skv, ldv), ldv, j0, Skv);
  const float c = scale * tn_grad_sdpa_log2e;
  float acc_k[kAcc], acc_v[kAcc];
#pragma unroll
  for (int r = 0; r < kAcc; ++r) acc_k[r] = acc_v[r] = 0.f;
  const int q_begin = kCausal ? j0 / kB * kB : 0;
  // Under a window only queries up to the tile's last key + kWindow - 1 see it.
  const int q_end = kWindow > 0 ? min(Sq, j0 + kB - 1 + kWindow) : Sq;
  for (int g = 0; g < kv_groups; ++g) {
    const int n = m * kv_groups + g;
    for (int q0 = q_begin; q0 < q_end; q0 += kB) {
      __syncthreads();  // the previous query tile is consumed
      tn_sdpa_grad_load<T, kThreads, kB, kDH>(Qs, q + tn_sdpa_head_offset<kDH>(n, heads, Sq, ldq), ldq, q0, Sq);
      tn_sdpa_grad_load<T, kThreads, kB, kDH>(dOs, dout + tn_sdpa_head_offset<kDH>(n, heads, Sq, lddo), lddo, q0, Sq);
      tn_sdpa_grad_row_stats<kB>(stats + (long long)n * Sq * ldst, ldst, q0, Sq, lse2, Dr);
      __syncthreads();
      tn_sdpa_grad_tile<kThreads, kB, kDH, kCausal, kWindow>(Qs, dOs, Ks, Vs, lse2, Dr, Ps, dSs, q0, j0, Sq, Skv, c);
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kAcc; ++r) {
        const int e = threadIdx.x + r * kThreads;
        if (e >= kB * kDH) break;
        const int j = e / kDH, d = e % kDH;
        float ak = acc_k[r], av = acc_v[r];
        for (int i = 0; i < kB; ++i) {
          ak = fmaf(dSs[i * (kB + 1) + j], Qs[i * kLd + d], ak);
          av = fmaf(Ps[i * (kB + 1) + j], dOs[i * kLd + d], av);
        }
        acc_k[r] = ak;
        acc_v[r] = av;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kAcc; ++r) {
    const int e = threadIdx.x + r * kThreads;
    const int j = e / kDH, d = e % kDH;
    if (e < kB * kDH && j0 + j < Skv) {
      const int lddkv = 2 * kv_heads * kDH;
      T* row = dkv + tn_sdpa_head_offset<kDH>(m, kv_heads, Skv, lddkv) + (long long)(j0 + j) * lddkv;
      row[d] = tn_cast<T>(acc_k[r] * scale);
      row[kv_heads * kDH + d] = tn_cast<T>(acc_v[r]);
    }
  }
}

#endif  // TEENY_GRAD_SDPA_CUH
