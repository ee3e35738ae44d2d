// The gradient ops that move and sum values between shapes: grad.sum_to (a broadcasting op's
// operand gradient), grad.broadcast (a reduction's input gradient) and grad.slice (a concat's
// input gradient); ops/grad_sum_to.cpp, ops/grad_broadcast.cpp, ops/grad_slice.cpp. Sums in f32
// in a fixed order whatever the storage type: no atomics, the same bits on every run.
#ifndef TEENY_GRAD_SHAPE_CUH
#define TEENY_GRAD_SHAPE_CUH

#include "prelude.cuh"

// The element offset of flat index `index` over dims d[] (outermost first) with strides s[].
template <int kDims>
__device__ __forceinline__ long long tn_dims_offset(long long index, const long long (&d)[kDims],
                                                    const long long (&s)[kDims]) {
  long long offset = 0;
#pragma unroll
  for (int j = kDims - 1; j >= 0; --j) {
    const long long q = j > 0 ? index / d[j] : 0;
    offset += (index - q * d[j]) * s[j];
    index = q;
  }
  return offset;
}

template <char kKind, char... kKinds>
struct tn_kind_count {
  static constexpr int kValue = ((kKinds == kKind ? 1 : 0) + ... + 0);
};

// dy's collapsed dims split by kind: 'k' dims are the output's (kept), 'r' dims are summed over;
// `dims_and_strides` hold, per dim outermost first, its size and dy's element stride. The
// lowering gives at least one dim of each kind.
template <char... kKinds>
struct tn_sum_to_dims {
  static constexpr int kKept = tn_kind_count<'k', kKinds...>::kValue;
  static constexpr int kReduced = tn_kind_count<'r', kKinds...>::kValue;
  long long dk[kKept], sk[kKept], dr[kReduced], sr[kReduced];

  template <typename... Sizes>
  __device__ __forceinline__ explicit tn_sum_to_dims(Sizes... dims_and_strides) {
    constexpr char kWho[] = {kKinds...};
    const long long packed[] = {dims_and_strides...};
    int k = 0, r = 0;
#pragma unroll
    for (int j = 0; j < (int)sizeof...(kKinds); ++j) {
      if (kWho[j] == 'k') {
        dk[k] = packed[2 * j];
        sk[k++] = packed[2 * j + 1];
      } else {
        dr[r] = packed[2 * j];
        sr[r++] = packed[2 * j + 1];
      }
    }
  }
  __device__ __forceinline__ long long kept(long long o) const { return tn_dims_offset<kKept>(o, dk, sk); }
  __device__ __forceinline__ long long reduced(long long r) const { return tn_dims_offset<kReduced>(r, dr, sr); }
};

// grad.sum_to with the innermost dim kept: a block of 32 x kParts threads takes 32 consecutive
// outputs (coalesced reads along the kept dim), each of its kParts rows of threads sums every
// kParts-th reduced element, and the parts are added in order through shared memory. Blocks
// stride over the tiles of 32 outputs.
template <typename T, int kParts, char... kKinds, typename... Sizes>
__device__ __forceinline__ void tn_sum_to_columns(const T* dy, T* y, long long outputs, long long reduced,
                                                  Sizes... dims_and_strides) {
  __shared__ float partial[kParts][33];
  const tn_sum_to_dims<kKinds...> dims(dims_and_strides...);
  const int lane = threadIdx.x & 31, part = threadIdx.x >> 5;
  for (long long tile = blockIdx.x; tile * 32 < outputs; tile += gridDim.x) {
    const long long o = tile * 32 + lane;
    float acc = 0.f;
    if (o < outputs) {
      const T* base = dy + dims.kept(o);
      for (long long r = part; r < reduced; r += kParts) acc += tn_f32(base[dims.reduced(r)]);
    }
    partial[part][lane] = acc;
    __syncthreads();
    if (part == 0 && o < outputs) {
      float sum = 0.f;
#pragma unroll
      for (int p = 0; p < kParts; ++p) sum += partial[p][lane];
      y[o] = tn_cast<T>(sum);
    }
    __syncthreads();
  }
}

// grad.sum_to with the innermost dim summed: a group of kThreads (a warp, kGroups a block; or
// the whole block, kGroups 1) per output, its threads striding over the reduced elements
// (coalesced along the innermost one), then a group sum. Blocks stride over the outputs.
template <typename T, int kThreads, int kGroups, char... kKinds, typename... Sizes>
__device__ __forceinline__ void tn_sum_to_rows(const T* dy, T* y, long long outputs, long long reduced,
                                               Sizes... dims_and_strides) {
  __shared__ float smem32[32];
  const tn_sum_to_dims<kKinds...> dims(dims_and_strides...);
  const int group = threadIdx.x / kThreads, t = threadIdx.x % kThreads;
  for (long long o0 = (long long)blockIdx.x * kGroups; o0 < outputs; o0 += (long long)gridDim.x * kGroups) {
    const long long o = o0 + group;
    float acc = 0.f;
    if (o < outputs) {
      const T* base = dy + dims.kept(o);
      for (long long r = t; r < reduced; r += kThreads) acc += tn_f32(base[dims.reduced(r)]);
    }
    acc = tn_group_sum<kThreads>(acc, smem32);
    if (t == 0 && o < outputs) y[o] = tn_cast<T>(acc);
  }
}

// grad.broadcast: y (n elements, contiguous) = dy at each output element's offset, from the
// output dims and dy's strides along them (0 where dy is broadcast); kMean divides by `count`,
// the output elements each dy element fills. 16-byte stores when the innermost dim allows
// (broadcast along it: one value fills a pack; contiguous: 16-byte loads too).
template <typename T, int kBlock, bool kMean, typename... Sizes>
__device__ __forceinline__ void tn_broadcast(const T* dy, T* y, long long n, long long count,
                                             Sizes... dims_and_strides) {
  constexpr int kDims = sizeof...(Sizes) / 2;
  constexpr int kVec = tn_pack<T>::kN;
  long long d[kDims], s[kDims];
  const long long packed[] = {dims_and_strides...};
#pragma unroll
  for (int j = 0; j < kDims; ++j) {
    d[j] = packed[2 * j];
    s[j] = packed[2 * j + 1];
  }
  const float divisor = kMean ? (float)count : 1.f;
  const long long threads = (long long)gridDim.x * kBlock;
  const long long tid = (long long)blockIdx.x * kBlock + threadIdx.x;
  const bool splat = s[kDims - 1] == 0;
  bool vec = d[kDims - 1] % kVec == 0 && tn_aligned16(y);
  if (!splat) {
    vec = vec && s[kDims - 1] == 1 && tn_aligned16(dy);
#pragma unroll
    for (int j = 0; j < kDims - 1; ++j) vec = vec && s[j] % kVec == 0;
  }
  if (vec) {
    for (long long i = tid; i < n / kVec; i += threads) {
      const long long offset = tn_dims_offset<kDims>(i * kVec, d, s);
      float v[kVec];
      if (splat) {
        const float value = tn_f32(dy[offset]);
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[k] = value;
      } else {
        tn_load16(dy + offset, v);
      }
      if (kMean) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[k] = v[k] / divisor;
      }
      tn_store16(y + i * kVec, v);
    }
  } else {
    for (long long i = tid; i < n; i += threads) {
      const float value = tn_f32(dy[tn_dims_offset<kDims>(i, d, s)]);
      y[i] = tn_cast<T>(kMean ? value / divisor : value);
    }
  }
}

// grad.slice: y viewed as [outer, cols] = columns [col_offset, col_offset + cols) of dy viewed
// as [outer, in_cols] (dy's last dim `last` stored dy_stride apart). 16-byte packs when dy is
// contiguous and every row start stays 16-byte aligned, element by element otherwise.
template <typename T, int kBlock>
__device__ __forceinline__ void tn_slice(const T* dy, T* y, long long outer, int cols, int last, int dy_stride,
                                         long long in_cols, long long col_offset) {
  constexpr int kVec = tn_pack<T>::kN;
  const long long threads = (long long)gridDim.x * kBlock;
  const long long tid = (long long)blockIdx.x * kBlock + threadIdx.x;
  const bool contiguous = dy_stride == last;
  if (contiguous && cols % kVec == 0 && in_cols % kVec == 0 && col_offset % kVec == 0 && tn_aligned16(dy) &&
      tn_aligned16(y)) {
    const int packs = cols / kVec;
    for (long long i = tid; i < outer * packs; i += threads) {
      const long long o = i / packs;
      const long long c = (i - o * packs) * kVec;
      float v[kVec];
      tn_load16(dy + o * in_cols + col_offset + c, v);
      tn_store16(y + o * cols + c, v);
    }
  } else {
    for (long long i = tid; i < outer * cols; i += threads) {
      const long long o = i / cols;
      const long long f = o * in_cols + col_offset + (i - o * cols);
      y[i] = dy[contiguous ? f : (f / last) * dy_stride + f % last];
    }
  }
}

#endif  // TEENY_GRAD_SHAPE_CUH
