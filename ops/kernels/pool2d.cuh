// Pooling over NCHW (ops/pool2d.cpp): max and average over sliding windows, and the mean of each
// whole channel plane. Storage type T (float, __half, __nv_bfloat16); the math is f32.
#ifndef TEENY_POOL2D_CUH
#define TEENY_POOL2D_CUH

#include "prelude.cuh"
#include "vision.cuh"

// maxpool2d: padding is never the max; a NaN in the window wins, as in PyTorch.
struct tn_pool_max {
  static __device__ __forceinline__ float init() { return tn_neg_inf(); }
  static __device__ __forceinline__ float add(float acc, float v) { return (v > acc || v != v) ? v : acc; }
  static __device__ __forceinline__ float finish(float acc, int) { return acc; }
};

// avgpool2d: padding counts as zeros (count_include_pad = true), so every window divides by its
// full size.
struct tn_pool_avg {
  static __device__ __forceinline__ float init() { return 0.f; }
  static __device__ __forceinline__ float add(float acc, float v) { return acc + v; }
  static __device__ __forceinline__ float finish(float acc, int window_size) { return acc / window_size; }
};

// One output per thread, flat over [B, C, Ho, Wo] (`count` outputs) so stores are coalesced;
// Pool (tn_pool_max, tn_pool_avg) combines the window's in-bounds inputs.
template <typename T, int kThreads, class Window, class Pool>
__device__ __forceinline__ void tn_pool2d(const T* x, T* y, long long count, int in_h, int in_w, int out_h, int out_w) {
  const long long i = (long long)blockIdx.x * kThreads + threadIdx.x;
  if (i >= count) return;
  const int ow = (int)(i % out_w);
  const long long rows = i / out_w;
  const int oh = (int)(rows % out_h);
  const T* plane = x + (rows / out_h) * in_h * in_w;
  const int ih0 = oh * Window::kSh - Window::kPh, iw0 = ow * Window::kSw - Window::kPw;
  float acc = Pool::init();
#pragma unroll
  for (int kh = 0; kh < Window::kKh; ++kh)
#pragma unroll
    for (int kw = 0; kw < Window::kKw; ++kw) {
      const int ih = ih0 + kh * Window::kDh, iw = iw0 + kw * Window::kDw;
      if ((unsigned)ih < (unsigned)in_h && (unsigned)iw < (unsigned)in_w)
        acc = Pool::add(acc, tn_ldg_f32(plane + ih * in_w + iw));
    }
  y[i] = tn_cast<T>(Pool::finish(acc, Window::kKh * Window::kKw));
}

// The sum of v[kFirst, kFirst + kCount) as a balanced tree: (v0 + v1) + (v2 + v3) for four values.
template <int kN, int kFirst = 0, int kCount = kN>
__device__ __forceinline__ float tn_pairwise_sum(const float (&v)[kN]) {
  if constexpr (kCount == 1)
    return v[kFirst];
  else
    return tn_pairwise_sum<kN, kFirst, kCount / 2>(v) + tn_pairwise_sum<kN, kFirst + kCount / 2, kCount / 2>(v);
}

// y[p] = the mean of plane p of x (`planes` planes of `plane` elements). kPlaneThreads (a warp, or
// the whole block of kThreads for large planes) share a plane; their partial sums meet by warp
// shuffles (and shared memory across warps). kVec = tn_pack<T>::kN: every plane a whole number of
// 16-byte packs, read as such.
template <typename T, int kThreads, int kPlaneThreads, int kVec>
__device__ __forceinline__ void tn_global_avgpool(const T* x, T* y, int planes, int plane) {
  static_assert(kVec == 1 || kVec == tn_pack<T>::kN, "a vector is 16 bytes");
  constexpr int kPlanesPerBlock = kThreads / kPlaneThreads;
  __shared__ float smem32[32];
  const int lane = threadIdx.x % kPlaneThreads;
  const int p = blockIdx.x * kPlanesPerBlock + threadIdx.x / kPlaneThreads;
  float sum = 0.f;
  if (p < planes) {
    const T* src = x + (long long)p * plane;
    if (kVec > 1 && tn_aligned16(x)) {
      for (int i = lane * kVec; i < plane; i += kPlaneThreads * kVec) {
        float v[tn_pack<T>::kN];
        tn_load16<T>(src + i, v);
        sum += tn_pairwise_sum(v);
      }
    } else {
      for (int i = lane; i < plane; i += kPlaneThreads) sum += tn_ldg_f32(src + i);
    }
  }
  sum = tn_group_sum<kPlaneThreads>(sum, smem32);
  if (lane == 0 && p < planes) y[p] = tn_cast<T>(sum / plane);
}

#endif  // TEENY_POOL2D_CUH
