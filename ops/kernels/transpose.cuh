// transpose (ops/transpose.cpp): permutes dims with a real copy.
#ifndef TEENY_TRANSPOSE_CUH
#define TEENY_TRANSPOSE_CUH

#include "prelude.cuh"

// Swapping the last two dims of [batch, rows, cols] (input rows x_stride apart): kTile x kTile
// tiles staged through shared memory (padded to kTile + 1 columns against bank conflicts), so
// both the read and the write are coalesced. Block kTile x kTileRows; grid y and z stride over the
// row tiles and the batch.
template <typename T, int kTile, int kTileRows>
__device__ __forceinline__ void tn_transpose_tiled(const T* x, T* y, long long batch, int rows, int cols,
                                                   int x_stride) {
  __shared__ float tile[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tiles_r = (rows + kTile - 1) / kTile;
  const int c0 = blockIdx.x * kTile;
  for (long long z = blockIdx.z; z < batch; z += gridDim.z) {
    const T* xz = x + z * rows * x_stride;
    T* yz = y + z * rows * cols;
    for (int tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
      const int r0 = tr * kTile;
#pragma unroll
      for (int j = ty; j < kTile; j += kTileRows)
        if (r0 + j < rows && c0 + tx < cols) tile[j][tx] = tn_f32(xz[(long long)(r0 + j) * x_stride + c0 + tx]);
      __syncthreads();
#pragma unroll
      for (int j = ty; j < kTile; j += kTileRows)
        if (c0 + j < cols && r0 + tx < rows) yz[(long long)(c0 + j) * rows + r0 + tx] = tn_cast<T>(tile[tx][j]);
      __syncthreads();
    }
  }
}

// The input offset of output element e, from the output dims d[] (outermost first) and the
// input's element stride s[] along each of them.
template <typename I, int kDims>
__device__ __forceinline__ I tn_transpose_source(I e, const long long (&d)[kDims], const long long (&s)[kDims]) {
  I offset = 0;
#pragma unroll
  for (int j = kDims - 1; j >= 0; --j) {
    I idx = e;
    if (j > 0) {
      const I q = e / (I)d[j];
      idx = e - q * (I)d[j];
      e = q;
    }
    offset += idx * (I)s[j];
  }
  return offset;
}

// A grid-stride gather over the n output elements in index type I: one 16-byte pack a step when
// the last dim stays last (kLastKept) and the strides and pointers keep packs aligned.
template <typename I, typename T, int kBlock, bool kLastKept, int kDims>
__device__ __forceinline__ void tn_transpose_gather_loop(const T* x, T* y, long long n, const long long (&d)[kDims],
                                                         const long long (&s)[kDims]) {
  constexpr int kVec = tn_pack<T>::kN;
  const I threads = (I)gridDim.x * kBlock;
  const I tid = (I)blockIdx.x * kBlock + threadIdx.x;
  bool vec = kLastKept && d[kDims - 1] % kVec == 0 && tn_aligned16(x) && tn_aligned16(y);
#pragma unroll
  for (int j = 0; j < kDims - 1; ++j) vec = vec && s[j] % kVec == 0;
  if (vec) {
    for (I i = tid; i < (I)(n / kVec); i += threads) {
      float v[kVec];
      tn_load16(x + tn_transpose_source<I>(i * kVec, d, s), v);
      tn_store16(y + i * kVec, v);
    }
  } else {
    for (I i = tid; i < (I)n; i += threads) y[i] = x[tn_transpose_source<I>(i, d, s)];
  }
}

// Any permutation: `dims_and_strides` are, per output dim (outermost first), its size and the
// input's element stride along it; a rank-0 tensor passes none and copies its one element.
// Index arithmetic is 32-bit below 2^31 elements.
template <typename T, int kBlock, bool kLastKept, typename... Sizes>
__device__ __forceinline__ void tn_transpose_gather(const T* x, T* y, long long n, Sizes... dims_and_strides) {
  constexpr int kRank = sizeof...(Sizes) / 2;
  constexpr int kDims = kRank > 0 ? kRank : 1;
  long long d[kDims] = {1}, s[kDims] = {1};
  if constexpr (kRank > 0) {
    const long long packed[] = {dims_and_strides...};
#pragma unroll
    for (int j = 0; j < kRank; ++j) {
      d[j] = packed[2 * j];
      s[j] = packed[2 * j + 1];
    }
  }
  if (n < (1ll << 31))
    tn_transpose_gather_loop<unsigned, T, kBlock, kLastKept>(x, y, n, d, s);
  else
    tn_transpose_gather_loop<long long, T, kBlock, kLastKept>(x, y, n, d, s);
}

#endif  // TEENY_TRANSPOSE_CUH
