// Binary elementwise ops with broadcasting (ops/binary.cpp): y = Op(a, b), computed in f32 for
// every storage dtype, over the output's dims collapsed to the fewest evenly strided ones.
#ifndef TEENY_BINARY_CUH
#define TEENY_BINARY_CUH

#include "prelude.cuh"

template <typename T>
struct tn_add {
  __device__ __forceinline__ float operator()(float p, float q) const { return p + q; }
};
template <typename T>
struct tn_sub {
  __device__ __forceinline__ float operator()(float p, float q) const { return p - q; }
};
template <typename T>
struct tn_mul {
  __device__ __forceinline__ float operator()(float p, float q) const { return p * q; }
};
// IEEE division: x/0 is inf or nan.
template <typename T>
struct tn_div {
  __device__ __forceinline__ float operator()(float p, float q) const { return p / q; }
};

// Element offsets in a and b of output element e, from the dims d[] (outermost first) and each
// operand's strides (0 where it broadcasts).
template <typename I, int kDims>
__device__ __forceinline__ void tn_binary_offsets(I e, const long long (&d)[kDims], const long long (&sa)[kDims],
                                                  const long long (&sb)[kDims], I& oa, I& ob) {
  oa = 0;
  ob = 0;
#pragma unroll
  for (int j = kDims - 1; j >= 0; --j) {
    I idx = e;
    if (j > 0) {
      const I q = e / (I)d[j];
      idx = e - q * (I)d[j];
      e = q;
    }
    oa += idx * (I)sa[j];
    ob += idx * (I)sb[j];
  }
}

// A grid-stride loop over the n output elements in index type I: 16-byte packs when the innermost
// dim, every stride and the pointers allow (kBcastA/kBcastB: that operand broadcasts along the
// innermost dim, so one value fills the pack), element by element otherwise.
template <typename I, typename T, int kBlock, int kDims, bool kBcastA, bool kBcastB, template <typename> class Op>
__device__ __forceinline__ void tn_binary_loop(const T* a, const T* b, T* y, long long n, const long long (&d)[kDims],
                                               const long long (&sa)[kDims], const long long (&sb)[kDims]) {
  const Op<T> op;
  constexpr int kVec = tn_pack<T>::kN;
  const I threads = (I)gridDim.x * kBlock;
  const I tid = (I)blockIdx.x * kBlock + threadIdx.x;
  bool vec = d[kDims - 1] % kVec == 0 && tn_aligned16(a) && tn_aligned16(b) && tn_aligned16(y);
  vec = vec && (kBcastA || sa[kDims - 1] == 1) && (kBcastB || sb[kDims - 1] == 1);
#pragma unroll
  for (int j = 0; j < kDims - 1; ++j) vec = vec && sa[j] % kVec == 0 && sb[j] % kVec == 0;
  if (vec) {
    const I nv = (I)(n / kVec);
    for (I i = tid; i < nv; i += threads) {
      I oa, ob;
      tn_binary_offsets<I>(i * kVec, d, sa, sb, oa, ob);
      float va[kVec], vb[kVec];
      if (kBcastA) {
        const float s = tn_f32(a[oa]);
#pragma unroll
        for (int k = 0; k < kVec; ++k) va[k] = s;
      } else {
        tn_load16(a + oa, va);
      }
      if (kBcastB) {
        const float s = tn_f32(b[ob]);
#pragma unroll
        for (int k = 0; k < kVec; ++k) vb[k] = s;
      } else {
        tn_load16(b + ob, vb);
      }
#pragma unroll
      for (int k = 0; k < kVec; ++k) va[k] = op(va[k], vb[k]);
      tn_store16(y + i * kVec, va);
    }
  } else {
    for (I i = tid; i < (I)n; i += threads) {
      I oa, ob;
      tn_binary_offsets<I>(i, d, sa, sb, oa, ob);
      y[i] = tn_cast<T>(op(tn_f32(a[oa]), tn_f32(b[ob])));
    }
  }
}

// y = Op(a, b) over n output elements. kBroadcast names, outermost dim first, who broadcasts
// along each collapsed dim: 'a', 'b', or 'f' (neither). `sizes` are, per dim, its size, then a's
// stride unless a broadcasts, then b's unless b broadcasts. Index arithmetic is 32-bit below 2^31
// elements (headroom for operand offsets past n in padded rows).
template <typename T, int kBlock, template <typename> class Op, char... kBroadcast, typename... Sizes>
__device__ __forceinline__ void tn_binary(const T* a, const T* b, T* y, long long n, Sizes... sizes) {
  constexpr int kDims = sizeof...(kBroadcast);
  constexpr char kWho[kDims] = {kBroadcast...};
  const long long packed[] = {sizes...};
  long long d[kDims], sa[kDims], sb[kDims];
  int next = 0;
#pragma unroll
  for (int j = 0; j < kDims; ++j) {
    d[j] = packed[next++];
    sa[j] = kWho[j] == 'a' ? 0 : packed[next++];
    sb[j] = kWho[j] == 'b' ? 0 : packed[next++];
  }
  constexpr bool kBcastA = kWho[kDims - 1] == 'a', kBcastB = kWho[kDims - 1] == 'b';
  if (n < (1ll << 31))
    tn_binary_loop<unsigned, T, kBlock, kDims, kBcastA, kBcastB, Op>(a, b, y, n, d, sa, sb);
  else
    tn_binary_loop<long long, T, kBlock, kDims, kBcastA, kBcastB, Op>(a, b, y, n, d, sa, sb);
}

#endif  // TEENY_BINARY_CUH
