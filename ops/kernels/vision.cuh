// The small NCHW vision kernels (f32): inference batch norm (ops/batchnorm2d.cpp), nearest
// upsampling (ops/upsample_nearest2d.cpp) and the YOLO box decode (ops/yolo_detect_decode.cpp),
// and the sliding window that the convolution and pooling headers share.
#ifndef TEENY_VISION_CUH
#define TEENY_VISION_CUH

#include "prelude.cuh"

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
// group of a channel plane per thread (kVec = 4 when every plane is a whole number of float4s, so
// a group never straddles two planes); `count` groups, `plane` groups a plane.
template <int kThreads, int kVec>
__device__ __forceinline__ void tn_batchnorm2d(const float* x, const float* weight, const float* bias,
                                               const float* running_mean, const float* running_var, float* y, float eps,
                                               long long count, int plane, int channels) {
  const long long i = (long long)blockIdx.x * kThreads + threadIdx.x;
  if (i >= count) return;
  const int c = (int)((i / plane) % channels);
  // sqrtf (IEEE) rather than rsqrtf, to stay within float rounding of PyTorch.
  const float scale = __ldg(weight + c) / sqrtf(__ldg(running_var + c) + eps);
  const float shift = __ldg(bias + c) - __ldg(running_mean + c) * scale;
  if constexpr (kVec == 4) {
    float v[4];
    if (tn_aligned16(x) && tn_aligned16(y)) {
      tn_load16<float>(x + i * 4, v);
      for (int k = 0; k < 4; ++k) v[k] = fmaf(v[k], scale, shift);
      tn_store16<float>(y + i * 4, v);
    } else {
      for (int k = 0; k < 4; ++k) y[i * 4 + k] = fmaf(__ldg(x + i * 4 + k), scale, shift);
    }
  } else {
    y[i] = fmaf(__ldg(x + i), scale, shift);
  }
}

// x [planes, in_h, in_w] -> y [planes, in_h * kScale, in_w * kScale], `count` input elements. One
// input element per thread: a coalesced read, then kScale rows of kScale adjacent stores (one
// 8-byte store a row for kScale = 2 when y allows it).
template <int kThreads, int kScale>
__device__ __forceinline__ void tn_upsample_nearest2d(const float* x, float* y, long long count, int in_h, int in_w) {
  const long long i = (long long)blockIdx.x * kThreads + threadIdx.x;
  if (i >= count) return;
  const int iw = (int)(i % in_w);
  const long long rows = i / in_w;  // plane * in_h + ih
  const float v = __ldg(x + i);
  const int out_w = in_w * kScale;
  float* dst = y + rows * kScale * out_w + (long long)iw * kScale;
#pragma unroll
  for (int r = 0; r < kScale; ++r) {
    if constexpr (kScale == 2) {
      if ((reinterpret_cast<unsigned long long>(y) & 7ull) == 0) {
        *reinterpret_cast<float2*>(dst + r * out_w) = make_float2(v, v);
        continue;
      }
    }
#pragma unroll
    for (int c = 0; c < kScale; ++c) dst[r * out_w + c] = v;
  }
}

// Box distances [B, 4, kAnchors] (l, t, r, b) -> (cx, cy, w, h) * stride, as Ultralytics
// dist2bbox(xywh=True). A flat grid over images x tiles of kBlockA anchors, one anchor a thread.
template <int kBlockA, int kAnchors>
__device__ __forceinline__ void tn_yolo_detect_decode(const float* boxes, const float* anchor_x, const float* anchor_y,
                                                      const float* strides, float* y) {
  constexpr int kTiles = (kAnchors + kBlockA - 1) / kBlockA;
  const int img = blockIdx.x / kTiles;
  const int a = (blockIdx.x % kTiles) * kBlockA + threadIdx.x;
  if (a >= kAnchors) return;
  const float* d = boxes + (long long)img * 4 * kAnchors + a;
  float* out = y + (long long)img * 4 * kAnchors + a;
  const float ax = __ldg(anchor_x + a), ay = __ldg(anchor_y + a), s = __ldg(strides + a);
  // dist2bbox's order of operations, then * stride.
  const float x1 = ax - __ldg(d), y1 = ay - __ldg(d + kAnchors);
  const float x2 = ax + __ldg(d + 2 * kAnchors), y2 = ay + __ldg(d + 3 * kAnchors);
  out[0] = (x1 + x2) / 2.f * s;
  out[kAnchors] = (y1 + y2) / 2.f * s;
  out[2 * kAnchors] = (x2 - x1) * s;
  out[3 * kAnchors] = (y2 - y1) * s;
}

#endif  // TEENY_VISION_CUH
