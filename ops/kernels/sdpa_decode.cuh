// sdpa's decode path (ops/sdpa.cpp): a few query rows (Sq <= kMaxRows) against many keys, as a
// decoder step attends with one query (or a few) to its whole cache. The 64-query tiles of the
// other kernels would leave most of the GPU idle and walk the keys one tile at a time, so here the
// keys are split across blocks (flash-decoding): block (split s, head n) computes its queries'
// softmax over one range of keys, and with more than one split writes the partial result (the
// unnormalised output, the running max and sum) for tn_sdpa_decode_combine to merge in split
// order. Same arguments and layouts as sdpa.cuh's kernels, then the partials and the split count.
// f32 math on CUDA cores for every dtype and head dim: with so few rows the work is reading K and
// V, which streams through shared memory a tile at a time.
#ifndef TEENY_SDPA_DECODE_CUH
#define TEENY_SDPA_DECODE_CUH

#include "sdpa.cuh"

// Keys a tile: 64 up to head dim 64, then fewer, which keeps shared memory near 50 KiB.
template <int kDH>
struct tn_sdpa_decode_tile {
  static constexpr int kKeys = kDH <= 64 ? 64 : kDH <= 128 ? 32 : 16;
};

// The key range [begin, end) of split s of `splits` over [0, kv_end): whole tiles, in order.
template <int kTile>
__device__ __forceinline__ void tn_sdpa_split_range(int kv_end, int splits, int s, int& begin, int& end) {
  const int per = ((kv_end + splits - 1) / splits + kTile - 1) / kTile * kTile;
  begin = min(kv_end, s * per);
  end = min(kv_end, begin + per);
}

// Where split s's partial result of query row r of head n starts: kDH floats of output, and after
// all of those the row's (max, sum) pair.
__device__ __forceinline__ long long tn_sdpa_partial_row(int s, int n, int r, int N, int Sq) {
  return ((long long)s * N + n) * Sq + r;
}

// Rows [row0, row0 + kRows) of a [rows, kDH] matrix (row stride ld) into dst ([kRows][kLd] f32)
// times `mul`, 0 past `end`; 16-byte loads where the rows allow.
template <typename T, int kThreads, int kRows, int kDH, int kLd>
__device__ __forceinline__ void tn_sdpa_decode_load(float (*dst)[kLd], const T* src, int ld, int row0, int end,
                                                    float mul) {
  constexpr int kVec = tn_pack<T>::kN;
  const bool vec = kDH % kVec == 0 && ld % kVec == 0 && tn_aligned16(src);
  if (vec) {
    for (int c = threadIdx.x; c < kRows * (kDH / kVec); c += kThreads) {
      const int r = c / (kDH / kVec), col = c % (kDH / kVec) * kVec, row = row0 + r;
      float x[kVec];
      if (row < end) {
        tn_load16(src + (long long)row * ld + col, x);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) x[e] = 0.f;
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) dst[r][col + e] = x[e] * mul;
    }
  } else {
    for (int c = threadIdx.x; c < kRows * kDH; c += kThreads) {
      const int r = c / kDH, col = c % kDH, row = row0 + r;
      dst[r][col] = row < end ? tn_f32(src[(long long)row * ld + col]) * mul : 0.f;
    }
  }
}

// One key tile of K and V held in registers as 16-byte chunks, so that the next tile's loads are in
// flight while this one's scores and sums are computed (a block streams its keys one tile at a
// time: loads issued only as a tile is needed would leave each tile's memory latency exposed).
// Where rows are not 16-byte aligned, `store` reads the tile from global memory itself.
template <typename T, int kThreads, int kKeys, int kDH>
struct tn_sdpa_decode_kv {
  static constexpr int kVec = tn_pack<T>::kN;
  static constexpr int kRowChunks = kDH / kVec > 0 ? kDH / kVec : 1;  // a head dim under 16 bytes is never `vec`
  static constexpr int kChunks = kKeys * kRowChunks;
  static constexpr int kPer = (kChunks + kThreads - 1) / kThreads;
  uint4 k[kPer], v[kPer];
  const T *kn, *vn;
  int ldk, ldv, end;
  bool vec;

  __device__ __forceinline__ void load(int j0) {
    if (!vec) return;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = threadIdx.x + i * kThreads, row = j0 + c / kRowChunks, col = c % kRowChunks * kVec;
      k[i] = v[i] = make_uint4(0u, 0u, 0u, 0u);
      if (c < kChunks && row < end) {
        k[i] = __ldg(reinterpret_cast<const uint4*>(kn + (long long)row * ldk + col));
        v[i] = __ldg(reinterpret_cast<const uint4*>(vn + (long long)row * ldv + col));
      }
    }
  }

  // The tile from j0 (the one `load` last fetched, where aligned) into shared memory as f32.
  template <int kLdK, int kLdV>
  __device__ __forceinline__ void store(float (*Ks)[kLdK], float (*Vs)[kLdV], int j0) const {
    if (!vec) {
      tn_sdpa_decode_load<T, kThreads, kKeys, kDH>(Ks, kn, ldk, j0, end, 1.f);
      tn_sdpa_decode_load<T, kThreads, kKeys, kDH>(Vs, vn, ldv, j0, end, 1.f);
      return;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = threadIdx.x + i * kThreads, r = c / kRowChunks, col = c % kRowChunks * kVec;
      if (c >= kChunks) break;
      float x[kVec], y[kVec];
      if constexpr (sizeof(T) == 4) {
        tn_unpack16(k[i], x);
        tn_unpack16(v[i], y);
      } else {
        tn_unpack16<T>(k[i], x);
        tn_unpack16<T>(v[i], y);
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        Ks[r][col + e] = x[e];
        Vs[r][col + e] = y[e];
      }
    }
  }
};

// Dynamic shared memory: Q [kMaxRows][kDH], K [kKeys][kDH + 1], V [kKeys][kDH], P [kMaxRows][kKeys]
// and the rows' max, sum and rescale factor, all f32 (ops/sdpa.cpp sizes it alike).
template <typename T, int kDH, int kMaxRows, int kThreads, bool kCausal, int kWindow = 0>
__device__ __forceinline__ void tn_sdpa_decode(const T* q, const T* k, const T* v, T* out, int N, int Sq, int Skv,
                                               int ldq, int ldk, int ldv, int heads, int kv_heads, int kv_groups,
                                               int ldo, float scale, float* partials, int splits) {
  constexpr int kKeys = tn_sdpa_decode_tile<kDH>::kKeys;
  constexpr int kGroups = kThreads / kKeys;  // threads a key of the tile, each for every kGroups-th row
  constexpr int kRowsPerThread = kMaxRows / kGroups;
  constexpr int kAcc = (kMaxRows * kDH + kThreads - 1) / kThreads;
  static_assert(kThreads % kKeys == 0 && kThreads % 32 == 0 && kMaxRows % kGroups == 0,
                "whole groups of keys, whole warps, the same rows for every group");
  extern __shared__ __align__(16) float tn_sdpa_decode_smem[];
  float(*Qs)[kDH] = reinterpret_cast<float(*)[kDH]>(tn_sdpa_decode_smem);
  float(*Ks)[kDH + 1] = reinterpret_cast<float(*)[kDH + 1]>(Qs + kMaxRows);
  float(*Vs)[kDH] = reinterpret_cast<float(*)[kDH]>(Ks + kKeys);
  float(*Ps)[kKeys] = reinterpret_cast<float(*)[kKeys]>(Vs + kKeys);
  float* m_run = &Ps[kMaxRows][0];  // [kMaxRows]: max in log2 units
  float* l_run = m_run + kMaxRows;  // [kMaxRows]
  float* alpha = l_run + kMaxRows;  // [kMaxRows]: this tile's rescale of the row's output

  const int n = (int)blockIdx.x % N, s = (int)blockIdx.x / N;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const long long batch = n / heads;
  const int hcol = (n % heads) * kDH;
  const T* kn = k + tn_sdpa_head_offset<kDH>(n / kv_groups, kv_heads, Skv, ldk);
  const T* vn = v + tn_sdpa_head_offset<kDH>(n / kv_groups, kv_heads, Skv, ldv);
  int begin, end;
  tn_sdpa_split_range<kKeys>(kCausal ? min(Skv, Sq) : Skv, splits, s, begin, end);

  // q pre-scaled so scores are in log2 units.
  tn_sdpa_decode_load<T, kThreads, kMaxRows, kDH>(Qs, q + batch * Sq * ldq + hcol, ldq, 0, Sq, scale * tn_log2e);
  for (int r = tid; r < kMaxRows; r += kThreads) {
    // Start below every score but not at -inf: a split or a window can hide all of a row's keys.
    m_run[r] = -3.402823466e38f;
    l_run[r] = 0.f;
  }
  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;

  tn_sdpa_decode_kv<T, kThreads, kKeys, kDH> tile;
  tile.kn = kn, tile.vn = vn, tile.ldk = ldk, tile.ldv = ldv, tile.end = end;
  tile.vec =
      kDH % tile.kVec == 0 && ldk % tile.kVec == 0 && ldv % tile.kVec == 0 && tn_aligned16(kn) && tn_aligned16(vn);
  tile.load(begin);
  for (int j0 = begin; j0 < end; j0 += kKeys) {
    __syncthreads();  // the previous tile (and, first, Q and the row stats) is consumed or staged
    tile.store(Ks, Vs, j0);
    __syncthreads();
    if (j0 + kKeys < end) tile.load(j0 + kKeys);

    // Scores: thread (group, key) = (tid / kKeys, tid % kKeys) for rows group, group + kGroups, ...
    {
      const int j = tid % kKeys, group = tid / kKeys, key = j0 + j;
      float dot[kRowsPerThread];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) dot[i] = 0.f;
#pragma unroll 4
      for (int d = 0; d < kDH; ++d) {
        const float kv = Ks[j][d];
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) dot[i] = fmaf(Qs[group + i * kGroups][d], kv, dot[i]);
      }
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        const int r = group + i * kGroups;
        const bool hidden = key >= end || (kCausal && key > r) || tn_sdpa_before_window<kWindow>(key, r);
        Ps[r][j] = hidden ? tn_neg_inf() : dot[i];
      }
    }
    __syncthreads();

    // Softmax update, a row a warp at a time: the tile's max, the new running max, P and the sum.
    for (int r = warp; r < Sq; r += kThreads / 32) {
      float tile_max = tn_neg_inf();
      for (int j = lane; j < kKeys; j += 32) tile_max = fmaxf(tile_max, Ps[r][j]);
#pragma unroll
      for (int x = 16; x > 0; x >>= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, x));
      const float m_new = fmaxf(m_run[r], tile_max);
      float sum = 0.f;
      for (int j = lane; j < kKeys; j += 32) {
        const float p = tn_exp2(Ps[r][j] - m_new);
        Ps[r][j] = p;
        sum += p;
      }
#pragma unroll
      for (int x = 16; x > 0; x >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, x);
      __syncwarp();
      if (lane == 0) {
        alpha[r] = tn_exp2(m_run[r] - m_new);
        l_run[r] = l_run[r] * alpha[r] + sum;
        m_run[r] = m_new;
      }
    }
    __syncthreads();

    // O = O·alpha + P·V: thread tid for elements tid, tid + kThreads, ... of [Sq][kDH].
#pragma unroll
    for (int i = 0; i < kAcc; ++i) {
      const int e = tid + i * kThreads, r = e / kDH, d = e % kDH;
      if (r >= Sq) break;
      float o = acc[i] * alpha[r];
#pragma unroll 8
      for (int j = 0; j < kKeys; ++j) o = fmaf(Ps[r][j], Vs[j][d], o);
      acc[i] = o;
    }
  }
  __syncthreads();  // the last tile's row stats are final

#pragma unroll
  for (int i = 0; i < kAcc; ++i) {
    const int e = tid + i * kThreads, r = e / kDH, d = e % kDH;
    if (r >= Sq) break;
    if (splits == 1) {
      out[(batch * Sq + r) * ldo + hcol + d] = tn_cast<T>(acc[i] * (l_run[r] > 0.f ? 1.f / l_run[r] : 0.f));
    } else {
      partials[tn_sdpa_partial_row(s, n, r, N, Sq) * kDH + d] = acc[i];
    }
  }
  if (splits > 1)
    for (int r = tid; r < Sq; r += kThreads) {
      float* ml = partials + (long long)splits * N * Sq * kDH + tn_sdpa_partial_row(s, n, r, N, Sq) * 2;
      ml[0] = m_run[r];
      ml[1] = l_run[r];
    }
}

// The decode path on tensor cores, for f16/bf16 and head dims of whole 16-column MMA steps. A
// block takes up to 16 query rows that share a k/v head (that head's kv_groups query heads times
// Sq rows, packed, in chunks of 16) and one split of the keys, so each k/v head is read once per
// chunk rather than once per query head. Its kWarps warps take turns over the split's 16-key
// tiles, each warp with its own kStages-deep cp.async ring, online softmax and O accumulator, so no
// block barrier stalls the stream of loads; the warps merge their rows at the end. A chunk's rows
// past the packed count are zero queries whose results are dropped: next to reading K and V the
// MMAs' unused rows cost nothing. Partial results as tn_sdpa_decode's (the same combine).
// Dynamic shared memory: Q [16][kDH + 8], then the rings [kWarps][kStages][K, V][16][kDH + 8] of T,
// which the merge reuses as f32.
template <int kDH, int kWarps, int kStages>
struct tn_sdpa_decode_mma_smem {
  static constexpr int kRows = 16, kKeys = 16, kLd = kDH + 8;  // padded rows: ldmatrix hits distinct banks
  static constexpr int kRingBytes = kWarps * kStages * 2 * kKeys * kLd * 2;
  static_assert(kRingBytes >= kWarps * kRows * (kDH + 2) * 4, "the merge's O and (max, sum) fit the rings");
};

template <typename T, int kDH, int kWarps, int kStages, bool kCausal, int kWindow = 0>
__device__ __forceinline__ void tn_sdpa_decode_mma(const T* q, const T* k, const T* v, T* out, int N, int Sq, int Skv,
                                                   int ldq, int ldk, int ldv, int heads, int kv_heads, int kv_groups,
                                                   int ldo, float scale, float* partials, int splits) {
  using Smem = tn_sdpa_decode_mma_smem<kDH, kWarps, kStages>;
  constexpr int kRows = Smem::kRows, kKeys = Smem::kKeys, kLd = Smem::kLd;
  constexpr int kRowChunks = kDH / 8;              // 16-byte chunks of a row
  constexpr int kTileChunks = kKeys * kRowChunks;  // of a K (or V) tile
  static_assert(kDH % 16 == 0 && kTileChunks % 32 == 0, "whole MMA k-steps; whole rounds of a warp's copies");
  extern __shared__ __align__(16) unsigned char tn_sdpa_decode_mma_smem_raw[];
  T(*Qs)[kLd] = reinterpret_cast<T(*)[kLd]>(tn_sdpa_decode_mma_smem_raw);
  T(*ring)[2][kKeys][kLd] = reinterpret_cast<T(*)[2][kKeys][kLd]>(Qs + kRows);  // [kWarps * kStages]

  // Block (chunk, k/v head, split), chunks fastest so a head's chunks read its K and V together.
  const int packed = kv_groups * Sq, chunks = (packed + kRows - 1) / kRows;
  const int chunk = (int)blockIdx.x % chunks, rest = (int)blockIdx.x / chunks;
  const int n_kv = N / kv_groups, head_kv = rest % n_kv, s = rest / n_kv;
  const int lane = tn_lane(), warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const T* kn = k + tn_sdpa_head_offset<kDH>(head_kv, kv_heads, Skv, ldk);
  const T* vn = v + tn_sdpa_head_offset<kDH>(head_kv, kv_heads, Skv, ldv);
  // Packed row i of the chunk: query head head_kv * kv_groups + p / Sq, its row p % Sq (p = 16 chunk + i).
  auto row_of = [&](int i, int& n, int& r) {
    const int p = chunk * kRows + i;
    n = head_kv * kv_groups + p / Sq;
    r = p % Sq;
    return p < packed;
  };
  auto head_row = [&](auto* base, int ld, int n, int r) {
    return base + ((long long)(n / heads) * Sq + r) * ld + (n % heads) * kDH;
  };

  // Q's rows (zeros past the packed count), as they are: the scale is applied to the scores in f32.
  for (int c = threadIdx.x; c < kRows * kRowChunks; c += kWarps * 32) {
    const int i = c / kRowChunks, col = c % kRowChunks * 8;
    int n, r;
    const bool in = row_of(i, n, r);
    for (int e = 0; e < 8; ++e) Qs[i][col + e] = in ? head_row(q, ldq, n, r)[col + e] : tn_from_raw<T>(0);
  }

  int begin, end;
  tn_sdpa_split_range<kKeys>(kCausal ? min(Skv, Sq) : Skv, splits, s, begin, end);
  const int tiles = (end - begin + kKeys - 1) / kKeys;
  const bool vec = ldk % 8 == 0 && ldv % 8 == 0 && tn_aligned16(kn) && tn_aligned16(vn);
  // Tile `tile` of the split (keys from begin + 16 tile) into ring slot `slot` of this warp, zeros
  // past the split's end: cp.async where rows are 16-byte aligned, else element by element.
  auto load = [&](int tile, int slot) {
    if (tile >= tiles) return;
    T(*dst)[kKeys][kLd] = ring[warp * kStages + slot];
    const int j0 = begin + tile * kKeys;
#pragma unroll
    for (int c = lane; c < kTileChunks; c += 32) {
      const int r = c / kRowChunks, col = c % kRowChunks * 8, row = j0 + r;
      const bool in = row < end;
      const long long ko = in ? (long long)row * ldk + col : 0, vo = in ? (long long)row * ldv + col : 0;
      if (vec) {
        tn_cp_async16_zfill(&dst[0][r][col], kn + ko, in);
        tn_cp_async16_zfill(&dst[1][r][col], vn + vo, in);
      } else {
        for (int e = 0; e < 8; ++e) {
          dst[0][r][col + e] = in ? kn[ko + e] : tn_from_raw<T>(0);
          dst[1][r][col + e] = in ? vn[vo + e] : tn_from_raw<T>(0);
        }
      }
    }
  };

  // This lane's rows g and g + 8: their query positions, for the masks.
  int r_of[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int n;
    row_of(g + 8 * h, n, r_of[h]);
  }
  const float qk_scale = scale * tn_log2e;  // scores in log2 units: softmax via exp2
  // Start below every score but not at -inf: a split or a window can hide all of a row's keys.
  float m_run[2] = {-3.402823466e38f, -3.402823466e38f}, l_run[2] = {0.f, 0.f};
  float o[kDH / 8][4];
#pragma unroll
  for (int j = 0; j < kDH / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

  // Warp w takes tiles w, w + kWarps, ...: its i-th is tile w + i kWarps, in slot i % kStages.
  for (int i = 0; i < kStages - 1; ++i) {
    load(warp + i * kWarps, i);
    tn_cp_async_commit();
  }
  __syncthreads();  // Q is staged
  for (int i = 0, tile = warp; tile < tiles; ++i, tile += kWarps) {
    tn_cp_async_wait<kStages - 2>();
    __syncwarp();  // every lane's copies of this tile have landed; the slot loaded next is consumed
    load(tile + (kStages - 1) * kWarps, (i + kStages - 1) % kStages);
    tn_cp_async_commit();
    T(*kv)[kKeys][kLd] = ring[warp * kStages + i % kStages];

    float sc[kKeys / 8][4];
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.f;
    tn_mma_abt<T, kDH, kKeys>(sc, Qs, kv[0]);
    const int j0 = begin + tile * kKeys;
    const bool masked = kCausal || kWindow > 0 || j0 + kKeys > end;
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tile_max = tn_neg_inf();
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = j0 + 8 * j + 2 * t + e;
          float& x = sc[j][2 * h + e];
          x *= qk_scale;
          if (masked && (key >= end || (kCausal && key > r_of[h]) || tn_sdpa_before_window<kWindow>(key, r_of[h])))
            x = tn_neg_inf();
          tile_max = fmaxf(tile_max, x);
        }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float m_new = fmaxf(m_run[h], tile_max);
      alpha[h] = tn_exp2(m_run[h] - m_new);
      m_run[h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = sc[j][2 * h + e];
          x = tn_exp2(x - m_new);
          sum += x;
        }
      l_run[h] = fmaf(l_run[h], alpha[h], sum);
    }
#pragma unroll
    for (int j = 0; j < kDH / 8; ++j) {
      o[j][0] *= alpha[0], o[j][1] *= alpha[0];
      o[j][2] *= alpha[1], o[j][3] *= alpha[1];
    }
    tn_mma_pb<T, kKeys, kDH>(o, sc, kv[1]);
  }
  tn_cp_async_wait<0>();
  __syncthreads();  // every warp is done with its ring: the merge reuses it

  // Merge the warps' rows: each warp's (max, sum) per row, then its O rescaled to the rows' common
  // max, summed in warp order.
  float(*Os)[kRows][kDH] = reinterpret_cast<float(*)[kRows][kDH]>(ring);     // [kWarps]
  float(*ml)[kRows][2] = reinterpret_cast<float(*)[kRows][2]>(Os + kWarps);  // [kWarps]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    if (t == 0) ml[warp][g + 8 * h][0] = m_run[h], ml[warp][g + 8 * h][1] = l_run[h];
  }
  __syncthreads();
  auto row_max = [&](int row) {
    float m = ml[0][row][0];
    for (int w = 1; w < kWarps; ++w) m = fmaxf(m, ml[w][row][0]);
    return m;
  };
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = g + 8 * h;
    const float f = tn_exp2(m_run[h] - row_max(row));
#pragma unroll
    for (int j = 0; j < kDH / 8; ++j) {
      Os[warp][row][8 * j + 2 * t] = o[j][2 * h] * f;
      Os[warp][row][8 * j + 2 * t + 1] = o[j][2 * h + 1] * f;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kRows * kDH; e += kWarps * 32) {
    const int row = e / kDH, d = e % kDH;
    int n, r;
    if (!row_of(row, n, r)) break;  // rows are in order: the rest are past the packed count too
    const float m = row_max(row);
    float l = 0.f, sum = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      l = fmaf(ml[w][row][1], tn_exp2(ml[w][row][0] - m), l);
      sum += Os[w][row][d];
    }
    if (splits == 1) {
      head_row(out, ldo, n, r)[d] = tn_cast<T>(sum * (l > 0.f ? 1.f / l : 0.f));
    } else {
      partials[tn_sdpa_partial_row(s, n, r, N, Sq) * kDH + d] = sum;
      if (d == 0) {
        float* pml = partials + (long long)splits * N * Sq * kDH + tn_sdpa_partial_row(s, n, r, N, Sq) * 2;
        pml[0] = m;
        pml[1] = l;
      }
    }
  }
}

// Query row blockIdx.x % Sq of head blockIdx.x / Sq from the splits' partials: the largest max M,
// each split's weight 2^(m_s - M) (in dynamic shared memory, [splits] f32), then
// out = Σ o_s w_s / Σ l_s w_s, every sum in split order or a fixed tree of it (0 where no split saw
// a key). The splits' maxima and sums are read by all threads at once and each thread's column
// sum keeps several loads in flight: a chain of dependent loads per split would make the combine
// as slow as the splits are many.
template <typename T, int kDH, int kThreads>
__device__ __forceinline__ void tn_sdpa_decode_combine(const float* partials, T* out, int N, int Sq, int heads, int ldo,
                                                       int splits) {
  extern __shared__ float tn_sdpa_combine_weights[];
  __shared__ float reduce[32];
  const int n = (int)blockIdx.x / Sq, r = (int)blockIdx.x % Sq;
  const float* ml = partials + (long long)splits * N * Sq * kDH;
  auto pair = [&](int s) { return ml + tn_sdpa_partial_row(s, n, r, N, Sq) * 2; };
  float m = -3.402823466e38f;
  for (int s = threadIdx.x; s < splits; s += kThreads) m = fmaxf(m, pair(s)[0]);
  m = tn_block_max<kThreads>(m, reduce);
  float l = 0.f;
  for (int s = threadIdx.x; s < splits; s += kThreads) {
    const float w = tn_exp2(pair(s)[0] - m);
    tn_sdpa_combine_weights[s] = w;
    l = fmaf(pair(s)[1], w, l);
  }
  l = tn_block_sum<kThreads>(l, reduce);  // its barriers also publish the weights
  const float inv = l > 0.f ? 1.f / l : 0.f;
  T* dst = out + ((long long)(n / heads) * Sq + r) * ldo + (n % heads) * kDH;
  const long long split_stride = (long long)N * Sq * kDH;
  for (int d = threadIdx.x; d < kDH; d += kThreads) {
    const float* col = partials + tn_sdpa_partial_row(0, n, r, N, Sq) * kDH + d;
    float o = 0.f;
#pragma unroll 8
    for (int s = 0; s < splits; ++s) o = fmaf(col[s * split_stride], tn_sdpa_combine_weights[s], o);
    dst[d] = tn_cast<T>(o * inv);
  }
}

#endif  // TEENY_SDPA_DECODE_CUH
