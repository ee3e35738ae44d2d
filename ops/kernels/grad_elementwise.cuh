// Elementwise gradients. The activations' (ops/grad_activation.cpp): dx = dy * f'(.), written in
// the forward tensor the backward rule saved: the output y (relu, sigmoid, tanh) or the input x
// (silu, gelu, gelu_tanh); and mse_loss's (ops/grad_mse_loss.cpp), at the end. Math in f32
// whatever the storage type; IEEE expf, erff and division (not the forward's __expf and
// __fdividef): a gradient check sees every ulp.
#ifndef TEENY_GRAD_ELEMENTWISE_CUH
#define TEENY_GRAD_ELEMENTWISE_CUH

#include "prelude.cuh"

// relu from y: PyTorch's threshold_backward, dy where y > 0 (a NaN y passes dy), else 0.
template <typename T>
struct tn_act_grad_relu {
  __device__ __forceinline__ float operator()(float dy, float y) const { return y <= 0.f ? 0.f : dy; }
};

template <typename T>
struct tn_act_grad_sigmoid {
  __device__ __forceinline__ float operator()(float dy, float y) const { return dy * y * (1.f - y); }
};

template <typename T>
struct tn_act_grad_tanh {
  __device__ __forceinline__ float operator()(float dy, float y) const { return dy * (1.f - y * y); }
};

// silu from x: s (1 + x (1 - s)) with s = sigmoid(x).
template <typename T>
struct tn_act_grad_silu {
  __device__ __forceinline__ float operator()(float dy, float x) const {
    const float s = 1.f / (1.f + expf(-x));
    return dy * s * (1.f + x * (1.f - s));
  }
};

// gelu (erf form) from x: Phi(x) + x phi(x).
template <typename T>
struct tn_act_grad_gelu {
  __device__ __forceinline__ float operator()(float dy, float x) const {
    const float cdf = 0.5f * (1.f + erff(x * 0.7071067811865476f));
    const float pdf = 0.3989422804014327f * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
  }
};

// gelu (tanh form) from x, as PyTorch's gelu_backward(approximate='tanh'): with
// t = tanh(k (x + c x^3)), 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2).
template <typename T>
struct tn_act_grad_gelu_tanh {
  __device__ __forceinline__ float operator()(float dy, float x) const {
    constexpr float kK = 0.7978845608028654f, kC = 0.044715f;
    const float t = tanhf(kK * (x + kC * x * x * x));
    return dy * (0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kK * (1.f + 3.f * kC * x * x));
  }
};

// A grid-stride loop over rows x cols elements: dx = op(dy, s), dy and s of one shape with their
// own row strides (a linear's padded output may be either), dx contiguous. 16-byte vectors when
// the rows allow (all contiguous: one flat row with a scalar tail; padded rows whose strides and
// pointers keep 16-byte alignment), a scalar path otherwise.
template <typename T, int kBlock, typename Op>
__device__ __forceinline__ void tn_grad_map(const T* dy, const T* s, T* dx, long long rows, int cols, int dy_stride,
                                            int s_stride, const Op& op) {
  const long long n = rows * (long long)cols;
  const long long threads = (long long)gridDim.x * kBlock;
  const long long tid = (long long)blockIdx.x * kBlock + threadIdx.x;
  constexpr int kVec = tn_pack<T>::kN;
  const bool aligned = tn_aligned16(dy) && tn_aligned16(s) && tn_aligned16(dx);
  if (dy_stride == cols && s_stride == cols) {
    long long head = 0;
    if (aligned) {
      const long long nv = n / kVec;
      for (long long i = tid; i < nv; i += threads) {
        float g[kVec], v[kVec];
        tn_load16(dy + i * kVec, g);
        tn_load16(s + i * kVec, v);
#pragma unroll
        for (int k = 0; k < kVec; ++k) g[k] = op(g[k], v[k]);
        tn_store16(dx + i * kVec, g);
      }
      head = nv * kVec;
    }
    for (long long i = head + tid; i < n; i += threads) dx[i] = tn_cast<T>(op(tn_f32(dy[i]), tn_f32(s[i])));
  } else if (aligned && cols % kVec == 0 && dy_stride % kVec == 0 && s_stride % kVec == 0) {
    const int packs = cols / kVec;
    const long long nv = rows * packs;
    for (long long i = tid; i < nv; i += threads) {
      const long long r = i / packs;
      const int c = (int)(i - r * packs) * kVec;
      float g[kVec], v[kVec];
      tn_load16(dy + r * dy_stride + c, g);
      tn_load16(s + r * s_stride + c, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) g[k] = op(g[k], v[k]);
      tn_store16(dx + r * cols + c, g);
    }
  } else {
    for (long long i = tid; i < n; i += threads) {
      const long long r = i / cols;
      const int c = (int)(i - r * cols);
      dx[i] = tn_cast<T>(op(tn_f32(dy[r * dy_stride + c]), tn_f32(s[r * s_stride + c])));
    }
  }
}

// An activation's gradient (grad.activation): dx = Op<T>()(dy, saved).
template <typename T, int kBlock, template <typename> class Op>
__device__ __forceinline__ void tn_grad_unary(const T* dy, const T* s, T* dx, long long rows, int cols, int dy_stride,
                                              int s_stride) {
  tn_grad_map<T, kBlock>(dy, s, dx, rows, cols, dy_stride, s_stride, Op<T>());
}

// mse_loss's gradient (grad.mse_loss, ops/grad_mse_loss.cpp): dx = 2 (p - t) / n over n
// elements, divided by n in f32 (IEEE) per element.
struct tn_mse_grad {
  float n;
  __device__ __forceinline__ float operator()(float p, float t) const { return 2.f * (p - t) / n; }
};
template <typename T, int kBlock>
__device__ __forceinline__ void tn_grad_mse(const T* p, const T* t, T* dx, long long rows, int cols, int p_stride,
                                            int t_stride, long long n) {
  tn_grad_map<T, kBlock>(p, t, dx, rows, cols, p_stride, t_stride, tn_mse_grad{(float)n});
}

#endif  // TEENY_GRAD_ELEMENTWISE_CUH
