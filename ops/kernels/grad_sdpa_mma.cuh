// sdpa's gradient on tensor cores (ops/grad_sdpa.cpp): head dims in steps of 16 up to 128, the
// same three kernels and the same arguments as grad_sdpa.cuh's (its comment has the formulas),
// FlashAttention-2's backward on MMAs with f32 accumulators: m16n8k16 for f16/bf16, 3xTF32
// m16n8k8 for f32 (mma.cuh's tn_mma_step: about f32 accuracy at a third of TF32's rate):
//   tn_sdpa_grad_stats_mma: per 64-query tile, S = Q·Kᵀ tile by tile and an online log-sum-exp;
//   tn_sdpa_grad_dq_mma:    per 64-query tile, S = Q·Kᵀ and dP = dO·Vᵀ per key tile, then
//                           dQ += dS·K;
//   tn_sdpa_grad_dkv_mma:   per 64-key tile, Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ per query tile (of each of
//                           the kv_groups query heads in order; 64 or 32 queries), then
//                           dV += Pᵀ·dO, dK += dSᵀ·Q.
// Heads are read and written in place in sdpa.h's layout (heads, kv_heads: 1 for sdpa, more for
// fused.sdpa_heads), dQ like q and [dK | dV] rows of 2 kv_heads kDH (the k/v heads' dK, then
// their dV).
// A warp owns 16 rows (queries, or keys in dK/dV); its operand fragments are read from shared
// memory per k-step, so registers hold only accumulators. 16-bit T: P and dS are rounded to T for
// their products, as FlashAttention does, but for dK and dV of the shapes where that rounding would
// show (many queries a key: tn_sdpa_grad_dkv_mma); every sum runs in a fixed order (no atomics),
// so the bits never vary. The streamed tiles are double-buffered: the next one's cp.async copies run
// while the current one is computed.
#ifndef TEENY_GRAD_SDPA_MMA_CUH
#define TEENY_GRAD_SDPA_MMA_CUH

#include "mma.cuh"
#include "sdpa.cuh"

constexpr float tn_grad_sdpa_mma_ln2 = 0.6931471805599453f;

// Rows padded by 16 bytes: ldmatrix's row reads hit distinct banks, and so do f32 B-fragment reads
// of rows 2t and 2t + 1 (tn_mma_pb_tf32).
template <typename T, int kB, int kDH>
using tn_sdpa_grad_tile_t = T[kB][kDH + tn_pack<T>::kN];

// lse (log2 units) and D of query row `row` of a head's stats (row stride ldst); rows past Sq get
// lse +inf, so that p = 2^(s·c - lse) is 0 there, and D 0.
__device__ __forceinline__ void tn_sdpa_grad_row(const float* stats, int ldst, int row, int Sq, float& lse2, float& D) {
  lse2 = row < Sq ? stats[(long long)row * ldst] * tn_log2e : __int_as_float(0x7f800000);
  D = row < Sq ? stats[(long long)row * ldst + 1] : 0.f;
}

// The causal mask, a window or the end of the keys can hide part of a tile of queries
// [q0, q0 + kB) and keys [j0, j0 + kB) only where it reaches past Skv, above the diagonal or
// below the window's start.
template <int kB, bool kCausal, int kWindow>
__device__ __forceinline__ bool tn_sdpa_grad_partial(int q0, int j0, int Skv) {
  return j0 + kB > Skv || (kCausal && j0 + kB - 1 > q0) || (kWindow > 0 && j0 <= q0 + kB - 1 - kWindow);
}

// D = Σ dO·O of query rows [q0, q0 + kB) of head n (its rows of o and dout from ob and db) into stats: a row's 16-byte
// chunks go to the lanes of a group of kLanes, so a warp's loads cover whole rows (a row a thread would make each load
// touch 32 rows).
template <typename T, int kDH, int kB, int kThreads>
__device__ __forceinline__ void tn_sdpa_grad_row_dots(const T* ob, const T* db, float* stats, int n, int q0, int Sq,
                                                      int ldo, int lddo) {
  constexpr int kVec = tn_pack<T>::kN, kChunks = kDH / kVec;
  constexpr int kLanes = kChunks <= 2 ? 2 : kChunks <= 4 ? 4 : kChunks <= 8 ? 8 : kChunks <= 16 ? 16 : 32;
  static_assert(kDH % kVec == 0 && kChunks <= 32 && kB % (kThreads / kLanes) == 0, "whole chunks, whole rounds");
  const int part = threadIdx.x % kLanes;
  const bool vec = ldo % kVec == 0 && lddo % kVec == 0 && tn_aligned16(ob) && tn_aligned16(db);
  for (int r = threadIdx.x / kLanes; r < kB; r += kThreads / kLanes) {
    const int row = q0 + r;
    float D = 0.f;
    if (row < Sq && part < kChunks) {
      const T* orow = ob + (long long)row * ldo + part * kVec;
      const T* drow = db + (long long)row * lddo + part * kVec;
      float ov[kVec], dv[kVec];
      if (vec) {
        tn_load16(orow, ov);
        tn_load16(drow, dv);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) ov[e] = tn_f32(orow[e]), dv[e] = tn_f32(drow[e]);
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) D = fmaf(dv[e], ov[e], D);
    }
#pragma unroll
    for (int x = 1; x < kLanes; x <<= 1) D += __shfl_xor_sync(0xffffffffu, D, x);
    if (part == 0 && row < Sq) stats[((long long)n * Sq + row) * 2 + 1] = D;
  }
}

template <typename T, int kDH, int kB, int kThreads, bool kCausal, int kWindow = 0>
__device__ __forceinline__ void tn_sdpa_grad_stats_mma(const T* q, const T* k, const T* o, const T* dout, float* stats,
                                                       int N, int Sq, int Skv, int ldq, int ldk, int ldo, int lddo,
                                                       int heads, int kv_heads, int kv_groups, float scale) {
  using Tile = tn_sdpa_grad_tile_t<T, kB, kDH>;
  static_assert(kThreads == kB / 16 * 32, "16 rows a warp");
  extern __shared__ __align__(16) unsigned char tn_grad_sdpa_mma_smem[];
  Tile& Qs = *reinterpret_cast<Tile*>(tn_grad_sdpa_mma_smem);
  Tile* Ks = &Qs + 1;  // [2]
  int qt, n;
  tn_sdpa_tile((Sq + kB - 1) / kB, N, qt, n);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int q0 = qt * kB, row_a = q0 + warp * 16 + g;
  const T* kn = k + tn_sdpa_head_offset<kDH>(n / kv_groups, kv_heads, Skv, ldk);
  auto load = [&](Tile& dst, const T* src, int ld, int row0, int rows) {
    tn_sdpa_copy_tile<kThreads, kB, kDH>(dst, src, ld, row0, rows, tn_cast<T>(0.f));
  };
  const int j_first = tn_sdpa_first_key<kB, kWindow>(q0);
  load(Qs, q + tn_sdpa_head_offset<kDH>(n, heads, Sq, ldq), ldq, q0, Sq);
  load(Ks[0], kn, ldk, j_first, Skv);
  tn_cp_async_commit();

  const float c = scale * tn_log2e;  // scores in log2 units
  float m_run[2] = {tn_sdpa_max_start<kWindow>(), tn_sdpa_max_start<kWindow>()}, l_run[2] = {0.f, 0.f};
  const int kv_end = kCausal ? min(Skv, min(Sq, q0 + kB)) : Skv;
  for (int j0 = j_first, buf = 0; j0 < kv_end; j0 += kB, buf ^= 1) {
    tn_cp_async_wait<0>();
    __syncthreads();  // this tile has landed everywhere; the other buffer is free
    if (j0 + kB < kv_end) load(Ks[buf ^ 1], kn, ldk, j0 + kB, Skv);
    tn_cp_async_commit();

    float s[kB / 8][4] = {};
    tn_mma_abt<T, kDH, kB>(s, &Qs[warp * 16], Ks[buf]);
    const bool partial = tn_sdpa_grad_partial<kB, kCausal, kWindow>(q0, j0, Skv);
    float tile_max[2] = {tn_neg_inf(), tn_neg_inf()};
#pragma unroll
    for (int j = 0; j < kB / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j0 + j * 8 + 2 * t + (e & 1), row = row_a + (e / 2) * 8;
        const bool hidden =
            partial && (key >= Skv || (kCausal && key > row) || tn_sdpa_before_window<kWindow>(key, row));
        s[j][e] = hidden ? tn_neg_inf() : s[j][e] * c;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[j][e]);
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
      // Without a window key 0 is visible to every row, so the max is finite from the first tile on (with one:
      // tn_sdpa_max_start).
      const float m_new = fmaxf(m_run[h], tile_max[h]);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kB / 8; ++j) sum += tn_exp2(s[j][2 * h] - m_new) + tn_exp2(s[j][2 * h + 1] - m_new);
      l_run[h] = l_run[h] * tn_exp2(m_run[h] - m_new) + sum;  // this lane's part; the quad's are summed below
      m_run[h] = m_new;
    }
  }
  tn_cp_async_wait<0>();  // a block that computed no tile leaves no copy in flight
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    const int row = row_a + h * 8;
    if (t == 0 && row < Sq) stats[((long long)n * Sq + row) * 2] = (m_run[h] + log2f(l_run[h])) * tn_grad_sdpa_mma_ln2;
  }
  tn_sdpa_grad_row_dots<T, kDH, kB, kThreads>(o + tn_sdpa_head_offset<kDH>(n, heads, Sq, ldo),
                                              dout + tn_sdpa_head_offset<kDH>(n, heads, Sq, lddo), stats, n, q0, Sq,
                                              ldo, lddo);
}

template <typename T, int kDH, int kB, int kThreads, bool kCausal, int kWindow = 0>
__device__ __forceinline__ void tn_sdpa_grad_dq_mma(const T* q, const T* k, const T* v, const T* dout,
                                                    const float* stats, T* dq, int N, int Sq, int Skv, int ldq, int ldk,
                                                    int ldv, int lddo, int ldst, int heads, int kv_heads, int kv_groups,
                                                    float scale) {
  using Tile = tn_sdpa_grad_tile_t<T, kB, kDH>;
  static_assert(kThreads == kB / 16 * 32, "16 rows a warp");
  extern __shared__ __align__(16) unsigned char tn_grad_sdpa_mma_smem[];
  Tile& Qs = *reinterpret_cast<Tile*>(tn_grad_sdpa_mma_smem);
  Tile& dOs = (&Qs)[1];
  Tile* Ks = &Qs + 2;  // [2]
  Tile* Vs = &Qs + 4;  // [2]
  int qt, n;
  tn_sdpa_tile((Sq + kB - 1) / kB, N, qt, n);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int q0 = qt * kB, row_a = q0 + warp * 16 + g;
  const T* kn = k + tn_sdpa_head_offset<kDH>(n / kv_groups, kv_heads, Skv, ldk);
  const T* vn = v + tn_sdpa_head_offset<kDH>(n / kv_groups, kv_heads, Skv, ldv);
  auto load = [&](Tile& dst, const T* src, int ld, int row0, int rows) {
    tn_sdpa_copy_tile<kThreads, kB, kDH>(dst, src, ld, row0, rows, tn_cast<T>(0.f));
  };
  const int j_first = tn_sdpa_first_key<kB, kWindow>(q0);
  load(Qs, q + tn_sdpa_head_offset<kDH>(n, heads, Sq, ldq), ldq, q0, Sq);
  load(dOs, dout + tn_sdpa_head_offset<kDH>(n, heads, Sq, lddo), lddo, q0, Sq);
  load(Ks[0], kn, ldk, j_first, Skv);
  load(Vs[0], vn, ldv, j_first, Skv);
  tn_cp_async_commit();
  float lse2[2], D[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    tn_sdpa_grad_row(stats + (long long)n * Sq * ldst, ldst, row_a + h * 8, Sq, lse2[h], D[h]);

  const float c = scale * tn_log2e;
  float acc[kDH / 8][4] = {};
  const int kv_end = kCausal ? min(Skv, min(Sq, q0 + kB)) : Skv;
  for (int j0 = j_first, buf = 0; j0 < kv_end; j0 += kB, buf ^= 1) {
    tn_cp_async_wait<0>();
    __syncthreads();  // this tile has landed everywhere; the other buffers are free
    if (j0 + kB < kv_end) {
      load(Ks[buf ^ 1], kn, ldk, j0 + kB, Skv);
      load(Vs[buf ^ 1], vn, ldv, j0 + kB, Skv);
    }
    tn_cp_async_commit();

    float s[kB / 8][4] = {}, dp[kB / 8][4] = {};
    tn_mma_abt<T, kDH, kB>(s, &Qs[warp * 16], Ks[buf]);
    tn_mma_abt<T, kDH, kB>(dp, &dOs[warp * 16], Vs[buf]);
    const bool partial = tn_sdpa_grad_partial<kB, kCausal, kWindow>(q0, j0, Skv);
#pragma unroll
    for (int j = 0; j < kB / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j0 + j * 8 + 2 * t + (e & 1), row = row_a + (e / 2) * 8, h = e / 2;
        const bool hidden =
            partial && (key >= Skv || (kCausal && key > row) || tn_sdpa_before_window<kWindow>(key, row));
        const float p = hidden ? 0.f : tn_exp2(fmaf(s[j][e], c, -lse2[h]));
        s[j][e] = p * (dp[j][e] - D[h]);  // dS
      }
    tn_mma_pb<T, kB, kDH>(acc, s, Ks[buf]);
  }
  tn_cp_async_wait<0>();  // a block that computed no tile leaves no copy in flight
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row_a + h * 8;
    if (row >= Sq) continue;
    const int lddq = heads * kDH;  // dq: q's shape, contiguous
    T* dst = dq + tn_sdpa_head_offset<kDH>(n, heads, Sq, lddq) + (long long)row * lddq + 2 * t;
    tn_store_acc_row<T, kDH>(dst, acc, h, scale);
  }
}

// kB keys a block, streamed query tiles of kBQ (fewer at large head dims, where the dK and dV
// accumulators fill the registers).
template <typename T, int kDH, int kB, int kBQ, int kThreads, bool kCausal, int kWindow = 0>
__device__ __forceinline__ void tn_sdpa_grad_dkv_mma(const T* q, const T* k, const T* v, const T* dout,
                                                     const float* stats, T* dkv, int N, int Sq, int Skv, int ldq,
                                                     int ldk, int ldv, int lddo, int ldst, int heads, int kv_heads,
                                                     int kv_groups, float scale) {
  using Tile = tn_sdpa_grad_tile_t<T, kB, kDH>;
  using QTile = tn_sdpa_grad_tile_t<T, kBQ, kDH>;
  static_assert(kThreads == kB / 16 * 32 && kThreads >= kBQ && kB % kBQ == 0,
                "16 keys a warp; a thread per query row's stats; query tiles within key tiles");
  extern __shared__ __align__(16) unsigned char tn_grad_sdpa_mma_smem[];
  Tile& Ks = *reinterpret_cast<Tile*>(tn_grad_sdpa_mma_smem);
  Tile& Vs = (&Ks)[1];
  QTile* Qs = reinterpret_cast<QTile*>(&Ks + 2);                 // [2]
  QTile* dOs = Qs + 2;                                           // [2]
  float(*lse2s)[kBQ] = reinterpret_cast<float(*)[kBQ]>(Qs + 4);  // [2][kBQ]
  float(*Ds)[kBQ] = lse2s + 2;                                   // [2][kBQ]
  const int k_tiles = (Skv + kB - 1) / kB;
  int kt, m;
  tn_sdpa_tile(k_tiles, N / kv_groups, kt, m);
  kt = k_tiles - 1 - kt;  // causal: the first key tiles see the most queries, so they go first
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int j0 = kt * kB, key_a = j0 + warp * 16 + g;
  auto load = [&](Tile& dst, const T* src, int ld, int row0, int rows) {
    tn_sdpa_copy_tile<kThreads, kB, kDH>(dst, src, ld, row0, rows, tn_cast<T>(0.f));
  };
  auto load_q = [&](QTile& dst, const T* src, int ld, int row0, int rows) {
    tn_sdpa_copy_tile<kThreads, kBQ, kDH>(dst, src, ld, row0, rows, tn_cast<T>(0.f));
  };
  // Query tile `it` of the flattened (query head of the group, query tile) sequence into buffer b.
  const int q_begin = kCausal ? j0 : 0;  // under the mask, queries before the tile's first key see none of it
  // Under a window only queries up to the tile's last key + kWindow - 1 see it.
  const int q_end = kWindow > 0 ? min(Sq, j0 + kB - 1 + kWindow) : Sq;
  const int per_head = q_begin < q_end ? (q_end - q_begin + kBQ - 1) / kBQ : 0;
  auto load_queries = [&](int it, int b) {
    const int n = m * kv_groups + it / per_head;
    const int q0 = q_begin + it % per_head * kBQ;
    load_q(Qs[b], q + tn_sdpa_head_offset<kDH>(n, heads, Sq, ldq), ldq, q0, Sq);
    load_q(dOs[b], dout + tn_sdpa_head_offset<kDH>(n, heads, Sq, lddo), lddo, q0, Sq);
    if (threadIdx.x < kBQ)
      tn_sdpa_grad_row(stats + (long long)n * Sq * ldst, ldst, q0 + threadIdx.x, Sq, lse2s[b][threadIdx.x],
                       Ds[b][threadIdx.x]);
  };
  load(Ks, k + tn_sdpa_head_offset<kDH>(m, kv_heads, Skv, ldk), ldk, j0, Skv);
  load(Vs, v + tn_sdpa_head_offset<kDH>(m, kv_heads, Skv, ldv), ldv, j0, Skv);
  const int tiles = kv_groups * per_head;
  if (tiles > 0) load_queries(0, 0);
  tn_cp_async_commit();

  const float c = scale * tn_log2e;
  // Rounding P and dS to 16 bits costs dV and dK about u·sqrt(Σ p²)·|dO| (u = 2^-8 for bf16,
  // 2^-11 for f16), a sum over the kv_groups·Sq queries with weights near 1/Skv. Past
  // kv_groups·Sq > 4·Skv² that outgrows a 16-bit output's own rounding (self-attention never
  // gets there), so such shapes multiply by P and dS split into two 16-bit parts (f32 needs none).
  const bool split = tn_pack<T>::kN == 8 && (long long)kv_groups * Sq > 4LL * Skv * Skv;
  float dk[kDH / 8][4] = {}, dv[kDH / 8][4] = {};
  for (int it = 0, buf = 0; it < tiles; ++it, buf ^= 1) {
    tn_cp_async_wait<0>();
    __syncthreads();  // this tile (and its stats) has landed everywhere; the other buffers are free
    if (it + 1 < tiles) load_queries(it + 1, buf ^ 1);
    tn_cp_async_commit();

    float s[kBQ / 8][4] = {}, dp[kBQ / 8][4] = {};  // [key][query]: Sᵀ and dPᵀ
    tn_mma_abt<T, kDH, kBQ>(s, &Ks[warp * 16], Qs[buf]);
    tn_mma_abt<T, kDH, kBQ>(dp, &Vs[warp * 16], dOs[buf]);
    const int q0 = q_begin + it % per_head * kBQ;
    // Keys past Skv are zero rows whose dK and dV are never stored; only the diagonal and the
    // window's edge are masked.
    const bool partial = (kCausal && j0 + kB - 1 > q0) || (kWindow > 0 && j0 <= q0 + kBQ - 1 - kWindow);
#pragma unroll
    for (int j = 0; j < kBQ / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = j * 8 + 2 * t + (e & 1), key = key_a + (e / 2) * 8;
        const bool hidden = partial && ((kCausal && key > q0 + col) || tn_sdpa_before_window<kWindow>(key, q0 + col));
        const float p = hidden ? 0.f : tn_exp2(fmaf(s[j][e], c, -lse2s[buf][col]));
        dp[j][e] = p * (dp[j][e] - Ds[buf][col]);  // dSᵀ
        s[j][e] = p;                               // Pᵀ
      }
    if (split) {
      tn_mma_pb<T, kBQ, kDH, true>(dv, s, dOs[buf]);
      tn_mma_pb<T, kBQ, kDH, true>(dk, dp, Qs[buf]);
    } else {
      tn_mma_pb<T, kBQ, kDH>(dv, s, dOs[buf]);
      tn_mma_pb<T, kBQ, kDH>(dk, dp, Qs[buf]);
    }
  }
  tn_cp_async_wait<0>();  // a block that computed no tile leaves no copy in flight
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = key_a + h * 8;
    if (key >= Skv) continue;
    const int lddkv = 2 * kv_heads * kDH;
    T* dst = dkv + tn_sdpa_head_offset<kDH>(m, kv_heads, Skv, lddkv) + (long long)key * lddkv + 2 * t;
    tn_store_acc_row<T, kDH>(dst, dk, h, scale);
    tn_store_acc_row<T, kDH>(dst + kv_heads * kDH, dv, h, 1.f);
  }
}

#endif  // TEENY_GRAD_SDPA_MMA_CUH
