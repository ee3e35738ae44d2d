// The pools' gradients over NCHW (ops/grad_maxpool2d.cpp, ops/grad_avgpool2d.cpp,
// ops/grad_upsample_nearest2d.cpp). One thread per element of dx [B, C, H, W], flat (`count`
// elements) so stores are coalesced: each gathers, in a fixed order, the dy of every output
// window that covers it, so overlapping windows need no atomics and the bits never vary. dy is
// [B, C, out_h, out_w]. Storage type T (float, __half, __nv_bfloat16); the math is f32.
#ifndef TEENY_GRAD_POOL2D_CUH
#define TEENY_GRAD_POOL2D_CUH

#include "prelude.cuh"
#include "vision.cuh"

// Where dx element i sits: its plane (image and channel) and its row and column.
struct tn_pool_grad_pos {
  long long plane;
  int h, w;
};

__device__ __forceinline__ tn_pool_grad_pos tn_pool_grad_position(long long i, int in_h, int in_w) {
  const long long rows = i / in_w;
  return {rows / in_h, (int)(rows % in_h), (int)(i % in_w)};
}

// The windows [first, last) along one axis (kernel kK, stride kS, padding kP, no dilation) that
// cover input index i, of `out` windows: PyTorch's phstart / phend.
template <int kK, int kS, int kP>
__device__ __forceinline__ int tn_first_window(int i) {
  return i + kP < kK ? 0 : (i + kP - kK) / kS + 1;
}
template <int kS, int kP>
__device__ __forceinline__ int tn_last_window(int i, int out) {
  return min((i + kP) / kS + 1, out);
}

// The flat index in its plane of the element maxpool2d picks for window (oh, ow), as PyTorch's
// CUDA maxpool does: the window clipped to the input and scanned row by row from its first
// element, replaced by a greater value or by a NaN (so the last NaN, if any, else the first max).
template <class Window, typename T>
__device__ __forceinline__ int tn_window_argmax(const T* plane, int in_h, int in_w, int oh, int ow) {
  const int h0 = max(oh * Window::kSh - Window::kPh, 0), w0 = max(ow * Window::kSw - Window::kPw, 0);
  const int h1 = min(oh * Window::kSh - Window::kPh + Window::kKh, in_h);
  const int w1 = min(ow * Window::kSw - Window::kPw + Window::kKw, in_w);
  int best = h0 * in_w + w0;
  float best_value = tn_neg_inf();
  for (int h = h0; h < h1; ++h)
    for (int w = w0; w < w1; ++w) {
      const float v = tn_ldg_f32(plane + h * in_w + w);
      if (v > best_value || v != v) {
        best = h * in_w + w;
        best_value = v;
      }
    }
  return best;
}

// maxpool2d's backward: dx = the sum of dy over the windows whose pick (recomputed from x) is
// this element, in window order.
template <typename T, int kThreads, class Window>
__device__ __forceinline__ void tn_maxpool2d_grad(const T* dy, const T* x, T* dx, long long count, int in_h, int in_w,
                                                  int out_h, int out_w) {
  static_assert(Window::kDh == 1 && Window::kDw == 1, "pools have no dilation");
  const long long i = (long long)blockIdx.x * kThreads + threadIdx.x;
  if (i >= count) return;
  const tn_pool_grad_pos p = tn_pool_grad_position(i, in_h, in_w);
  const T* x_plane = x + p.plane * in_h * in_w;
  const T* dy_plane = dy + p.plane * out_h * out_w;
  const int self = p.h * in_w + p.w;
  const int oh1 = tn_last_window<Window::kSh, Window::kPh>(p.h, out_h);
  const int ow1 = tn_last_window<Window::kSw, Window::kPw>(p.w, out_w);
  float acc = 0.f;
  for (int oh = tn_first_window<Window::kKh, Window::kSh, Window::kPh>(p.h); oh < oh1; ++oh)
    for (int ow = tn_first_window<Window::kKw, Window::kSw, Window::kPw>(p.w); ow < ow1; ++ow)
      if (tn_window_argmax<Window>(x_plane, in_h, in_w, oh, ow) == self) acc += tn_ldg_f32(dy_plane + oh * out_w + ow);
  dx[i] = tn_cast<T>(acc);
}

// avgpool2d's backward (count_include_pad, floor mode: every window divides by kKh * kKw): dx =
// the sum over the covering windows of dy / (kKh * kKw), each term divided first, as PyTorch's.
template <typename T, int kThreads, class Window>
__device__ __forceinline__ void tn_avgpool2d_grad(const T* dy, T* dx, long long count, int in_h, int in_w, int out_h,
                                                  int out_w) {
  static_assert(Window::kDh == 1 && Window::kDw == 1, "pools have no dilation");
  const long long i = (long long)blockIdx.x * kThreads + threadIdx.x;
  if (i >= count) return;
  const tn_pool_grad_pos p = tn_pool_grad_position(i, in_h, in_w);
  const T* dy_plane = dy + p.plane * out_h * out_w;
  const float size = (float)(Window::kKh * Window::kKw);
  const int oh1 = tn_last_window<Window::kSh, Window::kPh>(p.h, out_h);
  const int ow1 = tn_last_window<Window::kSw, Window::kPw>(p.w, out_w);
  float acc = 0.f;
  for (int oh = tn_first_window<Window::kKh, Window::kSh, Window::kPh>(p.h); oh < oh1; ++oh)
    for (int ow = tn_first_window<Window::kKw, Window::kSw, Window::kPw>(p.w); ow < ow1; ++ow)
      acc += tn_ldg_f32(dy_plane + oh * out_w + ow) / size;
  dx[i] = tn_cast<T>(acc);
}

// upsample_nearest2d's backward: dx = the sum of the kScale x kScale block of dy it was copied
// to, row by row.
template <typename T, int kThreads, int kScale>
__device__ __forceinline__ void tn_upsample_nearest2d_grad(const T* dy, T* dx, long long count, int in_h, int in_w,
                                                           int out_h, int out_w) {
  const long long i = (long long)blockIdx.x * kThreads + threadIdx.x;
  if (i >= count) return;
  const tn_pool_grad_pos p = tn_pool_grad_position(i, in_h, in_w);
  const T* block = dy + p.plane * out_h * out_w + (long long)p.h * kScale * out_w + p.w * kScale;
  float acc = 0.f;
  for (int a = 0; a < kScale; ++a)
    for (int b = 0; b < kScale; ++b) acc += tn_ldg_f32(block + a * out_w + b);
  dx[i] = tn_cast<T>(acc);
}

#endif  // TEENY_GRAD_POOL2D_CUH
