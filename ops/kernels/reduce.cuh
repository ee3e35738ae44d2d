// reduce_sum, reduce_mean and reduce_max over one axis (ops/reduce.cpp), any extent, with f32
// accumulation whatever the storage dtype T. The reduction is a type (tn_reduce_*): its
// identity, how two values combine, the group-wide combine, and the final value from the
// accumulator and the extent.
#ifndef TEENY_REDUCE_CUH
#define TEENY_REDUCE_CUH

#include "prelude.cuh"

struct tn_reduce_sum {
  static __device__ __forceinline__ float identity() { return 0.f; }
  static __device__ __forceinline__ float combine(float acc, float v) { return acc + v; }
  template <int kThreads>
  static __device__ __forceinline__ float group(float v, float* smem32) {
    return tn_group_sum<kThreads>(v, smem32);
  }
  static __device__ __forceinline__ float finish(float acc, int) { return acc; }
};

struct tn_reduce_mean : tn_reduce_sum {
  static __device__ __forceinline__ float finish(float acc, int len) { return acc / (float)len; }
};

struct tn_reduce_max {
  static __device__ __forceinline__ float identity() { return tn_neg_inf(); }
  static __device__ __forceinline__ float combine(float acc, float v) { return fmaxf(acc, v); }
  template <int kThreads>
  static __device__ __forceinline__ float group(float v, float* smem32) {
    return tn_group_max<kThreads>(v, smem32);
  }
  static __device__ __forceinline__ float finish(float acc, int) { return acc; }
};

// Last axis: a group of kThreads (a warp or the block; kRowsPerBlock groups a block) owns a
// row of `len` elements (row stride x_stride), streaming it in 16-byte packs, kItems packs in
// flight a thread, then combining across the group.
template <typename T, class Reduction, int kThreads, int kRowsPerBlock, int kItems>
__device__ __forceinline__ void tn_reduce_rows(const T* x, T* y, long long rows, int len, int x_stride) {
  __shared__ float smem32[32];
  constexpr int kN = tn_pack<T>::kN;
  constexpr int kChunk = kThreads * kItems * kN;
  const int group = threadIdx.x / kThreads;
  const int t = threadIdx.x % kThreads;
  const long long r = (long long)blockIdx.x * kRowsPerBlock + group;
  if (r >= rows) return;  // whole groups only: a block-wide group has kRowsPerBlock == 1
  const T* xr = x + r * x_stride;
  const bool vec = tn_aligned16(xr);
  float acc = Reduction::identity();
  for (int c0 = 0; c0 < len; c0 += kChunk) {
    float v[kItems][kN];
    tn_row_load<T, kThreads, kItems>(xr + c0, len - c0, vec, t, Reduction::identity(), v);
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kN; ++k) acc = Reduction::combine(acc, v[i][k]);
  }
  acc = Reduction::template group<kThreads>(acc, smem32);
  if (t == 0) y[r] = tn_cast<T>(Reduction::finish(acc, len));
}

// Any other axis: x viewed as [outer, len, inner], one thread per (outer, inner) output
// element, coalesced across inner. Element offsets honour the input's padded rows via
// (f / last) * x_stride + f % last.
template <typename T, class Reduction, int kBlock>
__device__ __forceinline__ void tn_reduce_columns(const T* x, T* y, long long outer, int len, long long inner, int last,
                                                  int x_stride) {
  const long long column = (long long)blockIdx.x * kBlock + threadIdx.x;
  if (column >= outer * inner) return;
  const long long o = column / inner, i = column - o * inner;
  const long long base = o * len * inner + i;
  float acc = Reduction::identity();
  for (int d = 0; d < len; ++d) {
    const long long f = base + (long long)d * inner;
    acc = Reduction::combine(acc, tn_f32(x[(f / last) * x_stride + f % last]));
  }
  y[column] = tn_cast<T>(Reduction::finish(acc, len));
}

#endif  // TEENY_REDUCE_CUH
