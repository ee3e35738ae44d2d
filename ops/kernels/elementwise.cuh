// Unary elementwise ops (ops/elementwise.cpp): y = Op(x), computed in f32 for every storage
// dtype, output contiguous.
#ifndef TEENY_ELEMENTWISE_CUH
#define TEENY_ELEMENTWISE_CUH

#include "activation.cuh"
#include "prelude.cuh"

// scale: y = x * value.
template <typename T>
struct tn_scale_by {
  float value;
  __device__ __forceinline__ float operator()(float v) const { return v * value; }
};

// A grid-stride loop over rows x cols elements of x (row stride x_stride), kUnroll independent
// 16-byte loads in flight a thread: 16-byte vectors when the rows allow (a contiguous input is
// one flat row with a scalar tail; padded rows whose stride and pointers keep 16-byte
// alignment), a scalar path otherwise. `op_args` construct the functor (scale's value).
template <typename T, int kBlock, int kUnroll, template <typename> class Op, typename... OpArgs>
__device__ __forceinline__ void tn_unary(const T* x, T* y, long long rows, int cols, int x_stride, OpArgs... op_args) {
  const Op<T> op{op_args...};
  const long long n = rows * (long long)cols;
  const long long threads = (long long)gridDim.x * kBlock;
  const long long tid = (long long)blockIdx.x * kBlock + threadIdx.x;
  constexpr int kVec = tn_pack<T>::kN;
  if (x_stride == cols) {
    // Contiguous: one flat row of n elements, vectorised up to a scalar tail.
    long long head = 0;
    if (tn_aligned16(x) && tn_aligned16(y)) {
      const long long nv = n / kVec;
      for (long long i = tid; i < nv; i += threads * kUnroll) {
        float v[kUnroll][kVec];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (i + u * threads < nv) tn_load16(x + (i + u * threads) * kVec, v[u]);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (i + u * threads < nv) {
#pragma unroll
            for (int k = 0; k < kVec; ++k) v[u][k] = op(v[u][k]);
            tn_store16(y + (i + u * threads) * kVec, v[u]);
          }
        }
      }
      head = nv * kVec;
    }
    for (long long i = head + tid; i < n; i += threads) y[i] = tn_cast<T>(op(tn_f32(x[i])));
  } else if (cols % kVec == 0 && x_stride % kVec == 0 && tn_aligned16(x) && tn_aligned16(y)) {
    // Padded rows that keep 16-byte alignment.
    const int packs = cols / kVec;
    const long long nv = rows * packs;
    for (long long i = tid; i < nv; i += threads) {
      const long long r = i / packs;
      const int c = (int)(i - r * packs) * kVec;
      float v[kVec];
      tn_load16(x + r * x_stride + c, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[k] = op(v[k]);
      tn_store16(y + r * cols + c, v);
    }
  } else {
    for (long long i = tid; i < n; i += threads) {
      const long long r = i / cols;
      const int c = (int)(i - r * cols);
      y[i] = tn_cast<T>(op(tn_f32(x[r * x_stride + c])));
    }
  }
}

#endif  // TEENY_ELEMENTWISE_CUH
