// The small NCHW vision kernels: inference batch norm (ops/batchnorm2d.cpp), nearest upsampling
// (ops/upsample_nearest2d.cpp) and the YOLO box decode (ops/yolo_detect_decode.cpp), and what the
// convolution and pooling headers share: the sliding window and scalar loads. Every kernel takes
// its storage type T (float, __half, __nv_bfloat16) and computes in f32.
#ifndef TEENY_VISION_CUH
#define TEENY_VISION_CUH

#include "prelude.cuh"

// One element, unconverted, through the read-only cache: __ldg has no overload for the prelude's
// 16-bit types, so their bits load as an unsigned short.
template <typename T>
__device__ __forceinline__ T tn_ldg(const T* p) {
  if constexpr (sizeof(T) == 4)
    return __ldg(p);
  else
    return tn_from_raw<T>(__ldg(reinterpret_cast<const unsigned short*>(p)));
}

// One element as a float, through the read-only cache.
template <typename T>
__device__ __forceinline__ float tn_ldg_f32(const T* p) {
  return tn_f32(tn_ldg(p));
}

// A sliding window over an image: kernel kKh x kKw, stride, zero padding and dilation per axis.
// Output pixel (oh, ow) reads input rows oh * kSh - kPh + kh * kDh, columns likewise.
template <int kKernelH, int kKernelW, int kStrideH, int kStrideW, int kPadH, int kPadW, int kDilationH, int kDilationW>
struct tn_window {
  static constexpr int kKh = kKernelH, kKw = kKernelW;
  static constexpr int kSh = kStrideH, kSw = kStrideW;
  static constexpr int kPh = kPadH, kPw = kPadW;
  static constexpr int kDh = kDilationH, kDw = kDilationW;
};

// y = (x - mean) / sqrt(var + eps) * weight + bias per channel, folded into one fmaf. One kVec-wide
// group of a channel plane per thread (kVec = tn_pack<T>::kN, one 16-byte access, when every plane
// is a whole number of them, so a group never straddles two planes; else 1); `count` groups,
// `plane` groups a plane.
template <typename T, int kThreads, int kVec>
__device__ __forceinline__ void tn_batchnorm2d(const T* x, const T* weight, const T* bias, const T* running_mean,
                                               const T* running_var, T* y, float eps, long long count, int plane,
                                               int channels) {
  static_assert(kVec == 1 || kVec == tn_pack<T>::kN, "a vector is 16 bytes");
  const long long i = (long long)blockIdx.x * kThreads + threadIdx.x;
  if (i >= count) return;
  const int c = (int)((i / plane) % channels);
  // sqrtf (IEEE) rather than rsqrtf, to stay within float rounding of PyTorch.
  const float scale = tn_ldg_f32(weight + c) / sqrtf(tn_ldg_f32(running_var + c) + eps);
  const float shift = tn_ldg_f32(bias + c) - tn_ldg_f32(running_mean + c) * scale;
  if constexpr (kVec > 1) {
    float v[kVec];
    if (tn_aligned16(x) && tn_aligned16(y)) {
      tn_load16<T>(x + i * kVec, v);
      for (int k = 0; k < kVec; ++k) v[k] = fmaf(v[k], scale, shift);
      tn_store16<T>(y + i * kVec, v);
    } else {
      for (int k = 0; k < kVec; ++k) y[i * kVec + k] = tn_cast<T>(fmaf(tn_ldg_f32(x + i * kVec + k), scale, shift));
    }
  } else {
    y[i] = tn_cast<T>(fmaf(tn_ldg_f32(x + i), scale, shift));
  }
}

// Two copies of v at p (aligned to two elements) in one store.
template <typename T>
__device__ __forceinline__ void tn_store_twice(T* p, T v) {
  if constexpr (sizeof(T) == 4)
    *reinterpret_cast<float2*>(p) = make_float2(v, v);
  else
    *reinterpret_cast<unsigned*>(p) = (unsigned)tn_raw(v) * 0x10001u;
}

// x [planes, in_h, in_w] -> y [planes, in_h * kScale, in_w * kScale], `count` input elements. One
// input element per thread: a coalesced read, then kScale rows of kScale adjacent stores (one
// store of two elements a row for kScale = 2 when y allows it). Elements are copied, never
// converted.
template <typename T, int kThreads, int kScale>
__device__ __forceinline__ void tn_upsample_nearest2d(const T* x, T* y, long long count, int in_h, int in_w) {
  const long long i = (long long)blockIdx.x * kThreads + threadIdx.x;
  if (i >= count) return;
  const int iw = (int)(i % in_w);
  const long long rows = i / in_w;  // plane * in_h + ih
  const T v = tn_ldg(x + i);
  const int out_w = in_w * kScale;
  T* dst = y + rows * kScale * out_w + (long long)iw * kScale;
#pragma unroll
  for (int r = 0; r < kScale; ++r) {
    if constexpr (kScale == 2) {
      if ((reinterpret_cast<unsigned long long>(y) & (2 * sizeof(T) - 1)) == 0) {
        tn_store_twice(dst + r * out_w, v);
        continue;
      }
    }
#pragma unroll
    for (int c = 0; c < kScale; ++c) dst[r * out_w + c] = v;
  }
}

// Box distances [B, 4, kAnchors] (l, t, r, b) -> (cx, cy, w, h) * stride, as Ultralytics
// dist2bbox(xywh=True). A flat grid over images x tiles of kBlockA anchors, one anchor a thread.
template <typename T, int kBlockA, int kAnchors>
__device__ __forceinline__ void tn_yolo_detect_decode(const T* boxes, const T* anchor_x, const T* anchor_y,
                                                      const T* strides, T* y) {
  constexpr int kTiles = (kAnchors + kBlockA - 1) / kBlockA;
  const int img = blockIdx.x / kTiles;
  const int a = (blockIdx.x % kTiles) * kBlockA + threadIdx.x;
  if (a >= kAnchors) return;
  const T* d = boxes + (long long)img * 4 * kAnchors + a;
  T* out = y + (long long)img * 4 * kAnchors + a;
  const float ax = tn_ldg_f32(anchor_x + a), ay = tn_ldg_f32(anchor_y + a), s = tn_ldg_f32(strides + a);
  // dist2bbox's order of operations, then * stride.
  const float x1 = ax - tn_ldg_f32(d), y1 = ay - tn_ldg_f32(d + kAnchors);
  const float x2 = ax + tn_ldg_f32(d + 2 * kAnchors), y2 = ay + tn_ldg_f32(d + 3 * kAnchors);
  out[0] = tn_cast<T>((x1 + x2) / 2.f * s);
  out[kAnchors] = tn_cast<T>((y1 + y2) / 2.f * s);
  out[2 * kAnchors] = tn_cast<T>((x2 - x1) * s);
  out[3 * kAnchors] = tn_cast<T>((y2 - y1) * s);
}

#endif  // TEENY_VISION_CUH
