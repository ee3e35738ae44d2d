// softmax and log_softmax over one axis (ops/softmax.cpp), numerically stable, any length.
// Math in f32 whatever the storage dtype T; the output is contiguous.
#ifndef TEENY_SOFTMAX_CUH
#define TEENY_SOFTMAX_CUH

#include "prelude.cuh"

// Element v of a row with max m and sum of exponentials s (inv_s = 1 / s, log_s = log s).
template <bool kLog>
__device__ __forceinline__ float tn_softmax_finish(float v, float m, float s, float inv_s, float log_s) {
  return kLog ? (v - m) - log_s : expf(v - m) * inv_s;
}

// Online (max, sum of exp) update with one more value.
__device__ __forceinline__ void tn_softmax_online(float v, float& m, float& s) {
  if (v > m) {
    s = s * expf(m - v) + 1.f;
    m = v;
  } else if (v != tn_neg_inf()) {
    s += expf(v - m);
  }
}

// Last axis: a group of kThreads (a warp or the block; kRowsPerBlock groups a block) owns a
// row of `cols` elements (row stride x_stride). Rows that fit kItems packs a thread are read
// once (max, sum of exp, write); longer rows stream twice: an online max/sum pass, then the
// write pass.
template <typename T, bool kLog, int kThreads, int kRowsPerBlock, int kItems>
__device__ __forceinline__ void tn_softmax_rows(const T* x, T* y, long long rows, int cols, int x_stride) {
  __shared__ float smem32[32];
  constexpr int kN = tn_pack<T>::kN;
  const int group = threadIdx.x / kThreads;
  const int t = threadIdx.x % kThreads;
  const long long r = (long long)blockIdx.x * kRowsPerBlock + group;
  if (r >= rows) return;  // whole groups only: a block-wide group has kRowsPerBlock == 1
  const T* xr = x + r * x_stride;
  T* yr = y + r * cols;
  const bool vec = tn_aligned16(xr) && tn_aligned16(yr);
  if (cols <= kThreads * kItems * kN) {
    float v[kItems][kN];
    tn_row_load<T, kThreads, kItems>(xr, cols, vec, t, tn_neg_inf(), v);
    float m = tn_neg_inf();
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kN; ++k) m = fmaxf(m, v[i][k]);
    m = tn_group_max<kThreads>(m, smem32);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kN; ++k) s += expf(v[i][k] - m);
    s = tn_group_sum<kThreads>(s, smem32);
    const float inv_s = 1.f / s, log_s = logf(s);
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kN; ++k) v[i][k] = tn_softmax_finish<kLog>(v[i][k], m, s, inv_s, log_s);
    tn_row_store<T, kThreads, kItems>(yr, cols, vec, t, v);
    return;
  }
  constexpr int kChunk = kThreads * kN;
  float m = tn_neg_inf(), s = 0.f;
  for (int c0 = 0; c0 < cols; c0 += kChunk) {
    float v[1][kN];
    tn_row_load<T, kThreads, 1>(xr + c0, cols - c0, vec, t, tn_neg_inf(), v);
#pragma unroll
    for (int k = 0; k < kN; ++k) tn_softmax_online(v[0][k], m, s);
  }
  const float row_m = tn_group_max<kThreads>(m, smem32);
  s = m == tn_neg_inf() ? 0.f : s * expf(m - row_m);
  s = tn_group_sum<kThreads>(s, smem32);
  const float inv_s = 1.f / s, log_s = logf(s);
  for (int c0 = 0; c0 < cols; c0 += kChunk) {
    float v[1][kN];
    tn_row_load<T, kThreads, 1>(xr + c0, cols - c0, vec, t, tn_neg_inf(), v);
#pragma unroll
    for (int k = 0; k < kN; ++k) v[0][k] = tn_softmax_finish<kLog>(v[0][k], row_m, s, inv_s, log_s);
    tn_row_store<T, kThreads, 1>(yr + c0, cols - c0, vec, t, v);
  }
}

// Any other axis: x viewed as [outer, axis_len, inner] (natural layout), one thread per
// (outer, inner) column, coalesced across inner, online max/sum then the write. Element
// offsets honour the input's padded rows via (f / last) * x_stride + f % last.
template <typename T, bool kLog, int kBlock>
__device__ __forceinline__ void tn_softmax_columns(const T* x, T* y, long long outer, int axis_len, long long inner,
                                                   int last, int x_stride) {
  const long long column = (long long)blockIdx.x * kBlock + threadIdx.x;
  if (column >= outer * inner) return;
  const long long o = column / inner, i = column - o * inner;
  const long long base = o * axis_len * inner + i;
  float m = tn_neg_inf(), s = 0.f;
  for (int d = 0; d < axis_len; ++d) {
    const long long f = base + (long long)d * inner;
    tn_softmax_online(tn_f32(x[(f / last) * x_stride + f % last]), m, s);
  }
  const float inv_s = 1.f / s, log_s = logf(s);
  for (int d = 0; d < axis_len; ++d) {
    const long long f = base + (long long)d * inner;
    y[f] = tn_cast<T>(tn_softmax_finish<kLog>(tn_f32(x[(f / last) * x_stride + f % last]), m, s, inv_s, log_s));
  }
}

#endif  // TEENY_SOFTMAX_CUH
