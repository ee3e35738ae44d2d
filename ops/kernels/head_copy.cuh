// split_heads and merge_heads (ops/split_heads.cpp, ops/merge_heads.cpp): one copy kernel over
// units of kUnit elements of the contiguous output (16 bytes, or 1 when the head width or the
// input's row stride does not allow), reading the input through its row stride ldx. The two
// differ only in where output unit i reads from: their Layout type's source().
#ifndef TEENY_HEAD_COPY_CUH
#define TEENY_HEAD_COPY_CUH

#include "prelude.cuh"

// x [B, S, heads*head_dim] -> [B*heads, S, head_dim].
struct tn_split_heads {
  template <typename T, int kUnit>
  static __device__ __forceinline__ const T* source(const T* x, long long i, int S, int heads, int head_dim, int ldx) {
    const int per_head = head_dim / kUnit;
    const int d = (int)(i % per_head) * kUnit;
    long long t = i / per_head;
    const int s = (int)(t % S);
    t /= S;
    const int h = (int)(t % heads);
    const long long b = t / heads;
    return x + (b * S + s) * ldx + (long long)h * head_dim + d;
  }
};

// x [B*heads, S, head_dim] -> [B, S, heads*head_dim].
struct tn_merge_heads {
  template <typename T, int kUnit>
  static __device__ __forceinline__ const T* source(const T* x, long long i, int S, int heads, int head_dim, int ldx) {
    const int per_row = heads * head_dim / kUnit;
    const int c = (int)(i % per_row) * kUnit;
    const long long t = i / per_row;  // b * S + s
    const int s = (int)(t % S);
    const long long b = t / S;
    const int h = c / head_dim, d = c % head_dim;
    return x + ((b * heads + h) * S + s) * ldx + d;
  }
};

// One thread per output unit.
template <typename T, int kUnit, class Layout>
__device__ __forceinline__ void tn_head_copy(const T* x, T* y, long long units, int S, int heads, int head_dim,
                                             int ldx) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= units) return;
  const T* src = Layout::template source<T, kUnit>(x, i, S, heads, head_dim, ldx);
  T* dst = y + i * kUnit;
  if (kUnit > 1 && tn_aligned16(src) && tn_aligned16(dst)) {
    *reinterpret_cast<uint4*>(dst) = __ldg(reinterpret_cast<const uint4*>(src));
  } else {
#pragma unroll
    for (int e = 0; e < kUnit; ++e) dst[e] = src[e];
  }
}

#endif  // TEENY_HEAD_COPY_CUH
