// The gradient ops that work along one axis: grad.softmax (softmax's and log_softmax's backward,
// ops/grad_softmax.cpp) and grad.reduce_max (ops/grad_reduce_max.cpp). Math in f32 whatever the
// storage dtype T; outputs contiguous. Element f of a tensor viewed flat is stored at
// (f / last) * stride + f % last, so inputs with padded rows are read in place.
#ifndef TEENY_GRAD_ROWS_CUH
#define TEENY_GRAD_ROWS_CUH

#include "prelude.cuh"

__device__ __forceinline__ long long tn_padded(long long f, int last, int stride) {
  return last == stride ? f : (f / last) * stride + f % last;
}

// softmax: dx = y (dy - s) with s = sum(dy y); log_softmax: dx = dy - exp(y) s with s = sum(dy).
template <bool kLog>
__device__ __forceinline__ float tn_softmax_grad_term(float dy, float y) {
  return kLog ? dy : dy * y;
}
template <bool kLog>
__device__ __forceinline__ float tn_softmax_grad_finish(float dy, float y, float s) {
  return kLog ? dy - expf(y) * s : y * (dy - s);
}

// Last axis: a group of kThreads (a warp or the block; kRowsPerBlock groups a block) owns a row.
// Rows that fit kItems packs a thread are read once (the sum, then the write); longer rows
// stream twice.
template <typename T, bool kLog, int kThreads, int kRowsPerBlock, int kItems>
__device__ __forceinline__ void tn_softmax_grad_rows(const T* dy, const T* y, T* dx, long long rows, int cols,
                                                     int dy_stride, int y_stride) {
  __shared__ float smem32[32];
  constexpr int kN = tn_pack<T>::kN;
  const int group = threadIdx.x / kThreads;
  const int t = threadIdx.x % kThreads;
  const long long r = (long long)blockIdx.x * kRowsPerBlock + group;
  if (r >= rows) return;  // whole groups only: a block-wide group has kRowsPerBlock == 1
  const T* gr = dy + r * dy_stride;
  const T* yr = y + r * y_stride;
  T* xr = dx + r * cols;
  const bool vg = tn_aligned16(gr), vy = tn_aligned16(yr), vx = tn_aligned16(xr);
  if (cols <= kThreads * kItems * kN) {
    float g[kItems][kN], v[kItems][kN];
    tn_row_load<T, kThreads, kItems>(gr, cols, vg, t, 0.f, g);
    tn_row_load<T, kThreads, kItems>(yr, cols, vy, t, 0.f, v);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kN; ++k) s += tn_softmax_grad_term<kLog>(g[i][k], v[i][k]);
    s = tn_group_sum<kThreads>(s, smem32);
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kN; ++k) g[i][k] = tn_softmax_grad_finish<kLog>(g[i][k], v[i][k], s);
    tn_row_store<T, kThreads, kItems>(xr, cols, vx, t, g);
    return;
  }
  constexpr int kChunk = kThreads * kN;
  float s = 0.f;
  for (int c0 = 0; c0 < cols; c0 += kChunk) {
    float g[1][kN], v[1][kN];
    tn_row_load<T, kThreads, 1>(gr + c0, cols - c0, vg, t, 0.f, g);
    tn_row_load<T, kThreads, 1>(yr + c0, cols - c0, vy, t, 0.f, v);
#pragma unroll
    for (int k = 0; k < kN; ++k) s += tn_softmax_grad_term<kLog>(g[0][k], v[0][k]);
  }
  s = tn_group_sum<kThreads>(s, smem32);
  for (int c0 = 0; c0 < cols; c0 += kChunk) {
    float g[1][kN], v[1][kN];
    tn_row_load<T, kThreads, 1>(gr + c0, cols - c0, vg, t, 0.f, g);
    tn_row_load<T, kThreads, 1>(yr + c0, cols - c0, vy, t, 0.f, v);
#pragma unroll
    for (int k = 0; k < kN; ++k) g[0][k] = tn_softmax_grad_finish<kLog>(g[0][k], v[0][k], s);
    tn_row_store<T, kThreads, 1>(xr + c0, cols - c0, vx, t, g);
  }
}

// Any other axis: the tensors viewed as [outer, axis_len, inner], one thread per (outer, inner)
// column, coalesced across inner: the sum, then the write. inner spans the last dim, so a step
// along the axis is inner / last whole rows: the padded offsets advance by a constant, with no
// division per element.
template <typename T, bool kLog, int kBlock>
__device__ __forceinline__ void tn_softmax_grad_columns(const T* dy, const T* y, T* dx, long long outer, int axis_len,
                                                        long long inner, int last, int dy_stride, int y_stride) {
  const long long column = (long long)blockIdx.x * kBlock + threadIdx.x;
  if (column >= outer * inner) return;
  const long long o = column / inner, i = column - o * inner;
  const long long base = o * axis_len * inner + i;
  const long long rows_per_step = inner / last;
  const T* g = dy + tn_padded(base, last, dy_stride);
  const T* v = y + tn_padded(base, last, y_stride);
  const long long g_step = rows_per_step * dy_stride, v_step = rows_per_step * y_stride;
  tn_kahan_sum acc;  // one thread sums the whole axis: compensated, so long axes stay accurate
  for (int d = 0; d < axis_len; ++d) acc.add(tn_softmax_grad_term<kLog>(tn_f32(g[d * g_step]), tn_f32(v[d * v_step])));
  for (int d = 0; d < axis_len; ++d)
    dx[base + d * inner] =
        tn_cast<T>(tn_softmax_grad_finish<kLog>(tn_f32(g[d * g_step]), tn_f32(v[d * v_step]), acc.sum));
}

// grad.reduce_max, last axis: a warp per row of x (kRowsPerBlock warps a block). The row's
// gradient dy[r] goes to the first column where x equals the max y[r] (PyTorch's max(dim)
// returns that index), found 32 columns at a time with a ballot; every other column gets 0.
// dy and y are the reduced tensor, flat index r, last dim r_last.
template <typename T, int kRowsPerBlock>
__device__ __forceinline__ void tn_max_grad_rows(const T* dy, const T* x, const T* y, T* dx, long long rows, int len,
                                                 int x_stride, int r_last, int dy_stride, int y_stride) {
  const int lane = threadIdx.x & 31;
  const long long r = (long long)blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= rows) return;  // whole warps
  const float m = tn_f32(y[tn_padded(r, r_last, y_stride)]);
  const float g = tn_f32(dy[tn_padded(r, r_last, dy_stride)]);
  const T* xr = x + r * x_stride;
  int first = len;  // none: a NaN max matches no element
  for (int c0 = 0; c0 < len; c0 += 32) {
    const int c = c0 + lane;
    const unsigned hits = __ballot_sync(0xffffffffu, c < len && tn_f32(xr[c]) == m);
    if (hits) {
      first = c0 + __ffs(hits) - 1;
      break;
    }
  }
  T* out = dx + r * len;
  for (int c = lane; c < len; c += 32) out[c] = tn_cast<T>(c == first ? g : 0.f);
}

// grad.reduce_max, any other axis: one thread per (outer, inner) column of x viewed as
// [outer, len, inner], coalesced across inner: the first match along the axis, then the write.
template <typename T, int kBlock>
__device__ __forceinline__ void tn_max_grad_columns(const T* dy, const T* x, const T* y, T* dx, long long outer,
                                                    int len, long long inner, int x_last, int x_stride, int r_last,
                                                    int dy_stride, int y_stride) {
  const long long column = (long long)blockIdx.x * kBlock + threadIdx.x;
  if (column >= outer * inner) return;
  const long long o = column / inner, i = column - o * inner;
  const long long base = o * len * inner + i;
  const float m = tn_f32(y[tn_padded(column, r_last, y_stride)]);
  const float g = tn_f32(dy[tn_padded(column, r_last, dy_stride)]);
  int first = len;
  for (int d = 0; d < len; ++d) {
    if (tn_f32(x[tn_padded(base + (long long)d * inner, x_last, x_stride)]) == m) {
      first = d;
      break;
    }
  }
  for (int d = 0; d < len; ++d) dx[base + (long long)d * inner] = tn_cast<T>(d == first ? g : 0.f);
}

#endif  // TEENY_GRAD_ROWS_CUH
