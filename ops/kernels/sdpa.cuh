// sdpa and fused.sdpa_heads (ops/sdpa.cpp, ops/sdpa_heads.cpp): softmax(q kᵀ · scale [+ causal
// mask]) v, flash-attention style: a block takes a tile of kBQ queries of one head; K and V
// stream through shared memory in tiles of kBKV keys with an online softmax, so nothing S x S is
// ever stored. Math in f32 whatever the storage dtype T. The causal mask is PyTorch's
// `is_causal` (key j is visible to query i iff j <= i); tiles wholly above the diagonal are
// never loaded.
//
// Every kernel takes the same arguments: q [X, Sq, *], k and v [X_kv, Skv, *] with row strides
// ldq, ldk, ldv. Query head n (of N = X * heads) is row block n / heads, columns
// [(n % heads) * kDH, (n % heads + 1) * kDH); it attends to k/v head n / kv_groups, laid out
// alike with kv_heads (grouped-query attention: kv_groups query heads share a k/v head, a
// run-time argument so one kernel serves every ratio). The output is written in q's layout
// with row stride ldo. sdpa has heads = kv_heads = 1; fused.sdpa_heads reads and writes heads
// in place.
#ifndef TEENY_SDPA_CUH
#define TEENY_SDPA_CUH

#include "mma.cuh"
#include "prelude.cuh"

constexpr float tn_log2e = 1.4426950408889634f;

// 2^x in one MUFU op: exp2f adds denormal handling, and a p below 2^-126 is as good as 0.
__device__ __forceinline__ float tn_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Sliding windows (kWindow > 0: query i sees keys i - kWindow + 1 .. i, with causal; 0: none,
// and then these fold away). The first tile of kTile keys a block of queries from q0 reaches:
template <int kTile, int kWindow>
__device__ __forceinline__ int tn_sdpa_first_key(int q0) {
  return kWindow > 0 ? max(0, q0 - kWindow + 1) / kTile * kTile : 0;
}
// Whether the window ending at query `row` has passed `key`.
template <int kWindow>
__device__ __forceinline__ bool tn_sdpa_before_window(int key, int row) {
  return kWindow > 0 && key <= row - kWindow;
}
// Where a running max starts: -inf, but -FLT_MAX under a window, which can hide a whole tile from
// a row (the max of -inf scores), where 2^(-inf - -inf) would be NaN.
template <int kWindow>
__device__ __forceinline__ float tn_sdpa_max_start() {
  return kWindow > 0 ? -3.402823466e38f : tn_neg_inf();
}
// 1 / l for a row's softmax sum, and 0 for a row whose window saw no key (it lies past the last
// one), whose output is then 0.
template <int kWindow>
__device__ __forceinline__ float tn_sdpa_inverse_sum(float l) {
  return kWindow > 0 && l == 0.f ? 0.f : 1.f / l;
}

// The (query tile qt, head n) of work item `index` (tn_sdpa_tile: of this block): heads in groups of kHeadGroup, each
// group's query tiles heaviest first (causal), so a group's K and V stay in L2 while all of its query tiles read them
// (query-tile-major order over all heads reads them from DRAM again for every query tile once they outgrow L2).
__device__ __forceinline__ void tn_sdpa_tile_of(int index, int q_tiles, int N, int& qt, int& n) {
  constexpr int kHeadGroup = 32;
  const int per_group = kHeadGroup * q_tiles;
  const int group = index / per_group, r = index % per_group;
  const int group_heads = min(kHeadGroup, N - group * kHeadGroup);
  qt = q_tiles - 1 - r / group_heads;
  n = group * kHeadGroup + r % group_heads;
}
__device__ __forceinline__ void tn_sdpa_tile(int q_tiles, int N, int& qt, int& n) {
  tn_sdpa_tile_of((int)blockIdx.x, q_tiles, N, qt, n);
}

// Where head n's rows start in a [X, S, heads * kDH] tensor with row stride ld: row block
// n / heads, columns from (n % heads) * kDH.
template <int kDH>
__device__ __forceinline__ long long tn_sdpa_head_offset(int n, int heads, int S, int ld) {
  return (long long)(n / heads) * S * ld + (n % heads) * kDH;
}

// Rows [row0, row0 + kRows) of a [rows, kCols] matrix into dst by a block of kThreads, `zero`
// past `rows`: 16-byte chunks by cp.async where rows are 16-byte aligned (the caller commits
// and waits), else element by element.
template <int kThreads, int kRows, int kCols, typename E, int kLd>
__device__ __forceinline__ void tn_sdpa_copy_tile(E (*dst)[kLd], const E* src, int ld, int row0, int rows, E zero) {
  constexpr int kVecN = 16 / sizeof(E), kRowChunks = kCols / kVecN;
  const bool vec = ld % kVecN == 0 && tn_aligned16(src);
  // Whole tiles of aligned rows (all but a sequence's last): each thread copies one column
  // chunk of every kRowStep-th row, unrolled, one address add a chunk and no per-chunk tests.
  constexpr int kRowStep = kThreads / kRowChunks;
  constexpr bool kWholeRounds = kThreads % kRowChunks == 0 && kRows % kRowStep == 0;
  if (kWholeRounds && vec && row0 + kRows <= rows) {
    const int r = threadIdx.x / kRowChunks, col = threadIdx.x % kRowChunks * kVecN;
    const E* from = src + (long long)(row0 + r) * ld + col;
    const long long step = (long long)kRowStep * ld;
#pragma unroll
    for (int i = 0; i < kRows / kRowStep; ++i) tn_cp_async16(&dst[r + i * kRowStep][col], from + i * step);
    return;
  }
#pragma unroll 1
  for (int c = threadIdx.x; c < kRows * kRowChunks; c += kThreads) {
    const int r = c / kRowChunks, col = (c % kRowChunks) * kVecN, row = row0 + r;
    if (vec && row < rows) {
      tn_cp_async16(&dst[r][col], src + (long long)row * ld + col);
    } else {
#pragma unroll
      for (int e = 0; e < kVecN; ++e) dst[r][col + e] = row < rows ? src[(long long)row * ld + col + e] : zero;
    }
  }
}

// v[0] op v[1] op ... op v[kN - 1] as a tree (kN a power of two; v is overwritten).
template <int kN, typename Op>
__device__ __forceinline__ float tn_tree_reduce(float (&v)[kN], Op op) {
  static_assert((kN & (kN - 1)) == 0, "a power of two");
#pragma unroll
  for (int w = kN / 2; w > 0; w /= 2)
#pragma unroll
    for (int i = 0; i < w; ++i) v[i] = op(v[i], v[i + w]);
  return v[0];
}

// The online-softmax step of the tensor-core kernels over one tile of kKeys scores of a warp's 16
// rows, in the MMA accumulator layout flattened: s[4j + 2h + e] is row g + 8h (h = 0, 1), key
// 8j + 2t + e of lane (g, t) = (lane / 4, lane % 4), its quad of lanes sharing the rows. In log2
// units: the running maxima m_run (kept scaled) take the tile's, each score becomes its weight
// p = 2^(s·c − m_run) (one FFMA and one MUFU op), alpha is how much each row's running output and
// sum shrink, and l_run, this lane's partial row sums (the quad's are added at the end), gain the
// tile's weights. c = qk_scale > 0 keeps the order of the raw scores and -inf at -inf. Maxima and
// sums reduce as trees over 8 partials (a row's values folded 8 n-tiles apart first: a tree over
// 16 spills its array to local memory), not as chains of dependent FMNMX / FADD ops.
template <int kKeys>
__device__ __forceinline__ void tn_sdpa_softmax_step(float (&s)[kKeys / 2], float qk_scale, float (&m_run)[2],
                                                     float (&l_run)[2], float (&alpha)[2]) {
  static_assert(kKeys % 16 == 0 && kKeys >= 64, "n-tiles in pairs, at least 8 of them");
  float part[2][8];  // [row h][partial]
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      part[h][j] = fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]);
#pragma unroll
      for (int jj = j + 8; jj < kKeys / 8; jj += 8)
        part[h][j] = fmaxf(part[h][j], fmaxf(s[4 * jj + 2 * h], s[4 * jj + 2 * h + 1]));
    }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float tile_max = tn_tree_reduce(part[h], [](float a, float b) { return fmaxf(a, b); });
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    // Without a window key 0 is visible to every row, so the max is finite from the first tile on
    // (with one: tn_sdpa_max_start); a row that a later tile hides wholly keeps it, and that
    // tile's weights are 2^-inf = 0.
    const float m_new = fmaxf(m_run[h], tile_max * qk_scale);
    alpha[h] = tn_exp2(m_run[h] - m_new);
    m_run[h] = m_new;
  }
#pragma unroll
  for (int j = 0; j < kKeys / 2; ++j) s[j] = tn_exp2(fmaf(s[j], qk_scale, -m_run[j % 4 / 2]));
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      part[h][j] = s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
#pragma unroll
      for (int jj = j + 8; jj < kKeys / 8; jj += 8) part[h][j] += s[4 * jj + 2 * h] + s[4 * jj + 2 * h + 1];
    }
#pragma unroll
  for (int h = 0; h < 2; ++h)
    l_run[h] = fmaf(l_run[h], alpha[h], tn_tree_reduce(part[h], [](float a, float b) { return a + b; }));
}

// Any dtype and head dim kDH (up to 256, a multiple of kTPQ): kTPQ threads share one query row
// (each owns kDH / kTPQ of its dims, partial dot products are combined with shuffles), which
// keeps q and the output accumulator in registers; scores of a tile of kBKV keys too.
template <typename T, int kDH, int kTPQ, int kBQ, int kBKV, bool kCausal, int kWindow = 0>
__device__ __forceinline__ void tn_sdpa_per_query(const T* q, const T* k, const T* v, T* out, int N, int Sq, int Skv,
                                                  int ldq, int ldk, int ldv, int heads, int kv_heads, int kv_groups,
                                                  int ldo, float scale) {
  constexpr int kThreads = kBQ * kTPQ;
  constexpr int kDHT = kDH / kTPQ;      // dims owned by one thread
  constexpr int kVec = tn_pack<T>::kN;  // elements per 16-byte load
  __shared__ __align__(16) float Ks[kBKV][kDH];
  __shared__ __align__(16) float Vs[kBKV][kDH];
  int qt, n;
  tn_sdpa_tile((Sq + kBQ - 1) / kBQ, N, qt, n);
  const int tid = threadIdx.x, part = tid % kTPQ;
  const int qi = qt * kBQ + tid / kTPQ;
  // Head n: row block n / heads, columns from (n % heads) * kDH; its k/v head n / kv_groups alike.
  const long long batch = n / heads;
  const int hcol = (n % heads) * kDH;
  const T* qn = q + batch * Sq * ldq + hcol;
  const T* kn = k + tn_sdpa_head_offset<kDH>(n / kv_groups, kv_heads, Skv, ldk);
  const T* vn = v + tn_sdpa_head_offset<kDH>(n / kv_groups, kv_heads, Skv, ldv);

  // q pre-scaled so scores are in log2 units: softmax via exp2.
  float qr[kDHT], acc[kDHT];
  const float qscale = scale * tn_log2e;
#pragma unroll
  for (int d = 0; d < kDHT; ++d) {
    qr[d] = qi < Sq ? tn_f32(qn[(long long)qi * ldq + part * kDHT + d]) * qscale : 0.f;
    acc[d] = 0.f;
  }
  float m_run = tn_sdpa_max_start<kWindow>(), l_run = 0.f;
  const int q_last = min(Sq, (qt + 1) * kBQ) - 1;
  const int kv_end = kCausal ? min(Skv, q_last + 1) : Skv;
  // kn/vn include the head's column offset, so a head that starts mid-vector reads scalars.
  const bool kv_vec = kDH % kVec == 0 && ldk % kVec == 0 && ldv % kVec == 0 && tn_aligned16(kn) && tn_aligned16(vn);

  for (int j0 = tn_sdpa_first_key<kBKV, kWindow>(qt * kBQ); j0 < kv_end; j0 += kBKV) {
    __syncthreads();  // the previous tile is consumed
    if (kv_vec) {
      for (int idx = tid; idx < kBKV * kDH / kVec; idx += kThreads) {
        const int r = idx / (kDH / kVec), c = (idx % (kDH / kVec)) * kVec, j = j0 + r;
        float kv[kVec], vv[kVec];
        if (j < Skv) {
          tn_load16(kn + (long long)j * ldk + c, kv);
          tn_load16(vn + (long long)j * ldv + c, vv);
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) kv[e] = vv[e] = 0.f;
        }
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          Ks[r][c + e] = kv[e];
          Vs[r][c + e] = vv[e];
        }
      }
    } else {
      for (int idx = tid; idx < kBKV * kDH; idx += kThreads) {
        const int r = idx / kDH, c = idx % kDH, j = j0 + r;
        Ks[r][c] = j < Skv ? tn_f32(kn[(long long)j * ldk + c]) : 0.f;
        Vs[r][c] = j < Skv ? tn_f32(vn[(long long)j * ldv + c]) : 0.f;
      }
    }
    __syncthreads();

    float s[kBKV];
    float tile_max = tn_neg_inf();
#pragma unroll
    for (int j = 0; j < kBKV; ++j) {
      float dot = 0.f;
#pragma unroll
      for (int d = 0; d < kDHT; ++d) dot = fmaf(qr[d], Ks[j][part * kDHT + d], dot);
#pragma unroll
      for (int o = 1; o < kTPQ; o <<= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      const int kj = j0 + j;
      s[j] = (kj < Skv && (!kCausal || kj <= qi) && !tn_sdpa_before_window<kWindow>(kj, qi)) ? dot : tn_neg_inf();
      tile_max = fmaxf(tile_max, s[j]);
    }
    // Without a window key 0 is visible to every row, so m_run is finite from the first tile on (with one:
    // tn_sdpa_max_start).
    const float m_new = fmaxf(m_run, tile_max);
    const float alpha = tn_exp2(m_run - m_new);
    l_run *= alpha;
#pragma unroll
    for (int d = 0; d < kDHT; ++d) acc[d] *= alpha;
#pragma unroll
    for (int j = 0; j < kBKV; ++j) {
      const float p = tn_exp2(s[j] - m_new);
      l_run += p;
#pragma unroll
      for (int d = 0; d < kDHT; ++d) acc[d] = fmaf(p, Vs[j][part * kDHT + d], acc[d]);
    }
    m_run = m_new;
  }

  if (qi < Sq) {
    const float inv = tn_sdpa_inverse_sum<kWindow>(l_run);
    T* dst = out + (batch * Sq + qi) * ldo + hcol + part * kDHT;
#pragma unroll
    for (int d = 0; d < kDHT; ++d) dst[d] = tn_cast<T>(acc[d] * inv);
  }
}

// The tensor-core kernels' output rows row_a and row_a + 8 of a head (those below Sq): O in the
// m16n8 accumulator layout over the row sums (l_run, this lane's part: the quad's are added
// here), as T pairs from `head_out`, the head's row 0 at this lane's first column (ldo and the
// head's column even: 4-byte stores).
template <typename T, int kDH, int kWindow>
__device__ __forceinline__ void tn_sdpa_store_rows(T* head_out, const float (&o)[kDH / 8][4], float (&l_run)[2],
                                                   int row_a, int Sq, int ldo) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    const int row = row_a + h * 8;
    if (row >= Sq) continue;
    tn_store_acc_row<T, kDH>(head_out + (long long)row * ldo, o, h, tn_sdpa_inverse_sum<kWindow>(l_run[h]));
  }
}

// f16/bf16 with head dims that are multiples of 16 (<= 128): FlashAttention-2 on tensor cores.
// kThreads / 32 warps, each owning 16 query rows; S = Q·Kᵀ and O += P·V are m16n8k16 MMAs (f32
// accumulators). The S accumulators map onto P's A-fragments directly, so P never leaves
// registers; the row max/sum live in the quad of lanes that shares a row. Q is staged through
// the K buffer once, then kept as fragments. K and V tiles are double-buffered in dynamic
// shared memory ([2][kBKV][kDH + 8] each): the next tile's cp.async copies run while the
// current one is computed.
template <typename T, int kDH, int kBQ, int kBKV, int kThreads, bool kCausal, int kWindow = 0>
__device__ __forceinline__ void tn_sdpa_mma(const T* q, const T* k, const T* v, T* out, int N, int Sq, int Skv, int ldq,
                                            int ldk, int ldv, int heads, int kv_heads, int kv_groups, int ldo,
                                            float scale) {
  constexpr int kLd = kDH + 8;  // padded rows: ldmatrix's 8 row reads hit distinct banks
  static_assert(kBKV == kBQ && kThreads == kBQ / 16 * 32, "Q is staged through the K tile; 16 rows per warp");
  extern __shared__ __align__(16) unsigned char tn_sdpa_smem[];
  T(*Ks)[kBKV][kLd] = reinterpret_cast<T(*)[kBKV][kLd]>(tn_sdpa_smem);  // [2][kBKV][kLd]
  T(*Vs)[kBKV][kLd] = Ks + 2;
  int qt, n;
  tn_sdpa_tile((Sq + kBQ - 1) / kBQ, N, qt, n);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int q0 = qt * kBQ;
  // Head n: row block n / heads, columns from (n % heads) * kDH (kDH % 16 == 0: 16-byte aligned);
  // its k/v head n / kv_groups alike.
  const long long batch = n / heads;
  const int hcol = (n % heads) * kDH;
  const T* qn = q + batch * Sq * ldq + hcol;
  const T* kn = k + tn_sdpa_head_offset<kDH>(n / kv_groups, kv_heads, Skv, ldk);
  const T* vn = v + tn_sdpa_head_offset<kDH>(n / kv_groups, kv_heads, Skv, ldv);
  auto load_tile = [&](T(*dst)[kLd], const T* src, int ld, int row0, int rows) {
    tn_sdpa_copy_tile<kThreads, kBKV, kDH>(dst, src, ld, row0, rows, tn_from_raw<T>(0));
  };

  // Q (staged in buffer 1) and the first K/V tile (buffer 0) load together, as two copy groups.
  unsigned qf[kDH / 16][4];
  const int j_first = tn_sdpa_first_key<kBKV, kWindow>(q0);
  load_tile(Ks[1], qn, ldq, q0, Sq);
  tn_cp_async_commit();
  load_tile(Ks[0], kn, ldk, j_first, Skv);
  load_tile(Vs[0], vn, ldv, j_first, Skv);
  tn_cp_async_commit();
  tn_cp_async_wait<1>();  // Q's group
  __syncthreads();
#pragma unroll
  for (int kk = 0; kk < kDH / 16; ++kk) tn_ldmatrix_a(qf[kk], &Ks[1][warp * 16], kk * 16);
  if (scale < 0.f)  // scores of -q, so the softmax scale below is positive (negation is exact)
#pragma unroll
    for (int kk = 0; kk < kDH / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) qf[kk][i] ^= 0x80008000u;

  float o[kDH / 8][4];
#pragma unroll
  for (int d = 0; d < kDH / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  float m_run[2] = {tn_sdpa_max_start<kWindow>(), tn_sdpa_max_start<kWindow>()},
        l_run[2] = {0.f, 0.f};  // rows g, g + 8
  const int row_a = q0 + warp * 16 + g;
  // |scale| in log2 units, at least FLT_MIN so that a masked -inf stays -inf (at scale 0 every
  // weight is then 2^(tiny) = 1, as softmax of zeros gives).
  const float qk_scale = fmaxf(fabsf(scale) * tn_log2e, 1.17549435e-38f);
  const int q_last = min(Sq, q0 + kBQ) - 1;
  const int kv_end = kCausal ? min(Skv, q_last + 1) : Skv;

  // The loop's first barrier fences the Q reads of buffer 1 before tile 1 overwrites it.
  for (int j0 = j_first, buf = 0; j0 < kv_end; j0 += kBKV, buf ^= 1) {
    tn_cp_async_wait<0>();  // this tile's copies (the only group in flight)
    // Everyone's copies of this tile have landed, and everyone is done with the other buffer.
    __syncthreads();
    if (j0 + kBKV < kv_end) {
      load_tile(Ks[buf ^ 1], kn, ldk, j0 + kBKV, Skv);
      load_tile(Vs[buf ^ 1], vn, ldv, j0 + kBKV, Skv);
    }
    tn_cp_async_commit();

    float s[kBKV / 8][4];
#pragma unroll
    for (int j = 0; j < kBKV / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
    tn_mma_abt<T, kDH, kBKV>(s, qf, Ks[buf]);

    // Mask: only tiles past Skv or reaching the block's first query under causality hold
    // hidden keys, and the branch is the same for the whole block, so other tiles skip the tests.
    if (j0 + kBKV > Skv || (kCausal && j0 + kBKV - 1 > q0) || (kWindow > 0 && j0 <= q_last - kWindow)) {
#pragma unroll
      for (int j = 0; j < kBKV / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = j0 + j * 8 + 2 * t + (e & 1), row = row_a + (e / 2) * 8;
          if (key >= Skv || (kCausal && key > row) || tn_sdpa_before_window<kWindow>(key, row)) s[j][e] = tn_neg_inf();
        }
    }
    float alpha[2];
    tn_sdpa_softmax_step<kBKV>(reinterpret_cast<float(&)[kBKV / 2]>(s), qk_scale, m_run, l_run, alpha);
#pragma unroll
    for (int d = 0; d < kDH / 8; ++d) {
      o[d][0] *= alpha[0];
      o[d][1] *= alpha[0];
      o[d][2] *= alpha[1];
      o[d][3] *= alpha[1];
    }

    tn_mma_pb<T, kBKV, kDH>(o, s, Vs[buf]);  // O += P·V, P straight from the score registers
  }

  tn_sdpa_store_rows<T, kDH, kWindow>(out + batch * Sq * ldo + hcol + 2 * t, o, l_run, row_a, Sq, ldo);
}

// f32, head dim 64: register-tiled on CUDA cores. A block of 256 threads takes 64 queries; per
// tile of 64 keys, thread (qg, kg) = (tid / 16, tid % 16) computes the scores of queries
// 4qg..4qg+3 against keys kg, kg+16, kg+32, kg+48 (float4 reads along the head dim: 16 FMAs per
// two 16-byte shared loads), the 16 threads of a query group reduce its rows by shuffles, P goes
// through shared memory, and the same thread accumulates O for its 4 queries and dims
// 4kg..4kg+3. Rows of Q, K and P are padded to 68 floats: the 8 threads of a 16-byte-load phase
// read keys kg.. 16 rows apart, which then fall in distinct banks. Dynamic shared memory holds
// Q, P and double-buffered K and V (six 64 x 68 tiles); K and V arrive by cp.async (rows of
// 16-byte-aligned heads; others are copied element by element).
template <int kDH, int kBQ, int kBKV, int kThreads, bool kCausal, int kWindow = 0>
__device__ __forceinline__ void tn_sdpa_f32_tiled(const float* q, const float* k, const float* v, float* out, int N,
                                                  int Sq, int Skv, int ldq, int ldk, int ldv, int heads, int kv_heads,
                                                  int kv_groups, int ldo, float scale) {
  constexpr int kLd = 68;  // padded rows (above)
  static_assert(kDH == 64 && kBQ == 64 && kBKV == 64 && kThreads == 256, "64 x 64 tiles over 16 x 16 threads");
  extern __shared__ __align__(16) float tn_sdpa_f32_smem[];
  float(*Qs)[kLd] = reinterpret_cast<float(*)[kLd]>(tn_sdpa_f32_smem);       // [query][dim]
  float(*Ps)[kLd] = Qs + kBQ;                                                // [key][query]
  float(*Ks)[kBKV][kLd] = reinterpret_cast<float(*)[kBKV][kLd]>(Ps + kBKV);  // [2][key][dim]
  float(*Vs)[kBKV][kLd] = Ks + 2;                                            // [2][key][dim]
  int qt, n;
  tn_sdpa_tile((Sq + kBQ - 1) / kBQ, N, qt, n);
  const int tid = threadIdx.x, qg = tid / 16, kg = tid % 16;
  const int q0 = qt * kBQ;
  const long long batch = n / heads;
  const int hcol = (n % heads) * kDH;
  const float* qn = q + batch * Sq * ldq + hcol;
  const float* kn = k + tn_sdpa_head_offset<kDH>(n / kv_groups, kv_heads, Skv, ldk);
  const float* vn = v + tn_sdpa_head_offset<kDH>(n / kv_groups, kv_heads, Skv, ldv);

  auto load_tile = [&](float(*dst)[kLd], const float* src, int ld, int row0, int rows) {
    tn_sdpa_copy_tile<kThreads, kBKV, kDH>(dst, src, ld, row0, rows, 0.f);
  };

  const int j_first = tn_sdpa_first_key<kBKV, kWindow>(q0);
  load_tile(Qs, qn, ldq, q0, Sq);
  load_tile(Ks[0], kn, ldk, j_first, Skv);
  load_tile(Vs[0], vn, ldv, j_first, Skv);
  tn_cp_async_commit();

  const float qk_scale = scale * tn_log2e;  // scores in log2 units: softmax via exp2
  float o[4][4];                            // [query 4qg + i][dim 4kg + e]
  float m_run[4], l_run[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m_run[i] = tn_sdpa_max_start<kWindow>();
    l_run[i] = 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e) o[i][e] = 0.f;
  }
  const int q_last = min(Sq, q0 + kBQ) - 1;
  const int kv_end = kCausal ? min(Skv, q_last + 1) : Skv;

  for (int j0 = j_first, buf = 0; j0 < kv_end; j0 += kBKV, buf ^= 1) {
    tn_cp_async_wait<0>();
    __syncthreads();  // this tile has landed everywhere; the other buffer and Ps are free
    if (j0 + kBKV < kv_end) {
      load_tile(Ks[buf ^ 1], kn, ldk, j0 + kBKV, Skv);
      load_tile(Vs[buf ^ 1], vn, ldv, j0 + kBKV, Skv);
    }
    tn_cp_async_commit();

    float s[4][4];  // [query 4qg + i][key kg + 16c]
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[i][c] = 0.f;
#pragma unroll 4
    for (int d = 0; d < kDH; d += 4) {
      float4 qv[4], kv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) qv[i] = *reinterpret_cast<const float4*>(&Qs[4 * qg + i][d]);
#pragma unroll
      for (int c = 0; c < 4; ++c) kv[c] = *reinterpret_cast<const float4*>(&Ks[buf][kg + 16 * c][d]);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          s[i][c] =
              fmaf(qv[i].x, kv[c].x, fmaf(qv[i].y, kv[c].y, fmaf(qv[i].z, kv[c].z, fmaf(qv[i].w, kv[c].w, s[i][c]))));
    }

    const bool masked = j0 + kBKV > Skv || (kCausal && j0 + kBKV - 1 > q0) || (kWindow > 0 && j0 <= q_last - kWindow);
    float alpha[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = q0 + 4 * qg + i;
      float tile_max = tn_neg_inf();
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int key = j0 + kg + 16 * c;
        const bool visible =
            !masked || (key < Skv && (!kCausal || key <= row) && !tn_sdpa_before_window<kWindow>(key, row));
        s[i][c] = visible ? s[i][c] * qk_scale : tn_neg_inf();
        tile_max = fmaxf(tile_max, s[i][c]);
      }
#pragma unroll
      for (int x = 1; x < 16; x <<= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, x));
      // Without a window key 0 is visible to every row, so the max is finite from the first tile on (with one:
      // tn_sdpa_max_start).
      const float m_new = fmaxf(m_run[i], tile_max);
      alpha[i] = tn_exp2(m_run[i] - m_new);
      m_run[i] = m_new;
      l_run[i] *= alpha[i];  // this thread's partial row sum; the 16 are summed at the end
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        s[i][c] = tn_exp2(s[i][c] - m_new);
        l_run[i] += s[i][c];
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][e] *= alpha[i];
    }
#pragma unroll
    for (int c = 0; c < 4; ++c)
      *reinterpret_cast<float4*>(&Ps[kg + 16 * c][4 * qg]) = make_float4(s[0][c], s[1][c], s[2][c], s[3][c]);
    __syncthreads();  // P of the whole tile

#pragma unroll 4
    for (int key = 0; key < kBKV; ++key) {
      const float4 p = *reinterpret_cast<const float4*>(&Ps[key][4 * qg]);
      const float4 vv = *reinterpret_cast<const float4*>(&Vs[buf][key][4 * kg]);
      const float pi[4] = {p.x, p.y, p.z, p.w}, ve[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[i][e] = fmaf(pi[i], ve[e], o[i][e]);
    }
  }

  if constexpr (kWindow > 0) tn_cp_async_wait<0>();  // a window may leave a block no tile
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int x = 1; x < 16; x <<= 1) l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], x);
    const int row = q0 + 4 * qg + i;
    if (row >= Sq) continue;
    const float inv = tn_sdpa_inverse_sum<kWindow>(l_run[i]);
    float* dst = out + (batch * Sq + row) * ldo + hcol + 4 * kg;
    const float4 r = make_float4(o[i][0] * inv, o[i][1] * inv, o[i][2] * inv, o[i][3] * inv);
    if (ldo % 4 == 0 && tn_aligned16(out)) {
      *reinterpret_cast<float4*>(dst) = r;
    } else {
      dst[0] = r.x, dst[1] = r.y, dst[2] = r.z, dst[3] = r.w;
    }
  }
}

#endif  // TEENY_SDPA_CUH
