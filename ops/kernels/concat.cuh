// concat (ops/concat.cpp): copies one input, viewed as [outer, cols], into the output viewed as
// [outer, out_cols] at column col_offset; one launch per input.
#ifndef TEENY_CONCAT_CUH
#define TEENY_CONCAT_CUH

#include "prelude.cuh"

// A grid-stride copy in index type I: 16-byte packs when the input is contiguous and every row
// start stays 16-byte aligned, element by element otherwise (honouring padded input rows: the
// input's last dim `last` is stored x_stride apart).
template <typename I, typename T, int kBlock>
__device__ __forceinline__ void tn_concat_copy(const T* x, T* y, long long outer, int cols, int last, int x_stride,
                                               long long out_cols, long long col_offset) {
  constexpr int kVec = tn_pack<T>::kN;
  const I threads = (I)gridDim.x * kBlock;
  const I tid = (I)blockIdx.x * kBlock + threadIdx.x;
  const bool contiguous = x_stride == last;
  if (contiguous && cols % kVec == 0 && out_cols % kVec == 0 && col_offset % kVec == 0 && tn_aligned16(x) &&
      tn_aligned16(y)) {
    const int packs = cols / kVec;
    for (I i = tid; i < (I)(outer * packs); i += threads) {
      const I o = i / (I)packs;
      const I c = (i - o * (I)packs) * kVec;
      float v[kVec];
      tn_load16(x + o * (I)cols + c, v);
      tn_store16(y + o * (I)out_cols + (I)col_offset + c, v);
    }
  } else {
    for (I i = tid; i < (I)(outer * cols); i += threads) {
      const I o = i / (I)cols;
      const I c = i - o * (I)cols;
      const I src = contiguous ? i : (i / (I)last) * (I)x_stride + i % (I)last;
      y[o * (I)out_cols + (I)col_offset + c] = x[src];
    }
  }
}

// Index arithmetic is 32-bit when the output has fewer than 2^31 elements.
template <typename T, int kBlock>
__device__ __forceinline__ void tn_concat(const T* x, T* y, long long outer, int cols, int last, int x_stride,
                                          long long out_cols, long long col_offset) {
  if (outer * out_cols < (1ll << 31))
    tn_concat_copy<unsigned, T, kBlock>(x, y, outer, cols, last, x_stride, out_cols, col_offset);
  else
    tn_concat_copy<long long, T, kBlock>(x, y, outer, cols, last, x_stride, out_cols, col_offset);
}

#endif  // TEENY_CONCAT_CUH
