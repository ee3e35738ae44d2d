// batchnorm2d in training mode (ops/batchnorm2d.cpp), its gradients (ops/grad_batchnorm2d.cpp) and
// the update of its running statistics (ops/train_batchnorm_stats.cpp), over x [B, C, H, W].
// Per-channel sums over the channel's n = B * H * W values run in one block per channel: each
// thread adds its values (t, t + kThreads, ...) in order, then the block adds the threads' sums as
// a tree, so the order is fixed by the shapes and the bits never vary (no atomics). Statistics
// are f32 (scratch), storage type T (float, __half, __nv_bfloat16), the math f32.
#ifndef TEENY_BATCHNORM_TRAIN_CUH
#define TEENY_BATCHNORM_TRAIN_CUH

#include "optim.cuh"
#include "prelude.cuh"
#include "vision.cuh"

// Where value j (0 <= j < n) of channel c sits: image j / plane, pixel j % plane.
__device__ __forceinline__ long long tn_bn_offset(long long j, int c, int channels, int plane) {
  return ((j / plane) * channels + c) * (long long)plane + j % plane;
}

// The sum over channel blockIdx.x's n values of f(offset); every thread gets it.
template <int kThreads, class F>
__device__ __forceinline__ float tn_bn_channel_sum(F f, long long n, int channels, int plane, float* smem32) {
  float s = 0.f;
  for (long long j = threadIdx.x; j < n; j += kThreads) s += f(tn_bn_offset(j, blockIdx.x, channels, plane));
  return tn_block_sum<kThreads>(s, smem32);
}

// Channel blockIdx.x's mean and biased variance (two passes: the mean, then the squared
// deviations from it).
template <typename T, int kThreads>
__device__ __forceinline__ float2 tn_bn_moments(const T* x, long long n, int channels, int plane, float* smem32) {
  const float mean =
      tn_bn_channel_sum<kThreads>([&](long long o) { return tn_ldg_f32(x + o); }, n, channels, plane, smem32) /
      (float)n;
  const float var = tn_bn_channel_sum<kThreads>(
                        [&](long long o) {
                          const float d = tn_ldg_f32(x + o) - mean;
                          return d * d;
                        },
                        n, channels, plane, smem32) /
                    (float)n;
  return make_float2(mean, var);
}

// stats[2c], stats[2c + 1] = the batch's mean and 1 / sqrt(var + eps) of channel c (a block each).
template <typename T, int kThreads>
__device__ __forceinline__ void tn_bn_batch_stats(const T* x, float* stats, int batch, int channels, int plane,
                                                  float eps) {
  __shared__ float smem32[32];
  const float2 m = tn_bn_moments<T, kThreads>(x, (long long)batch * plane, channels, plane, smem32);
  if (threadIdx.x == 0) {
    stats[2 * blockIdx.x] = m.x;
    // sqrtf (IEEE) rather than rsqrtf, to stay within float rounding of PyTorch.
    stats[2 * blockIdx.x + 1] = 1.f / sqrtf(m.y + eps);
  }
}

// y = (x - mean) * rstd * weight + bias per channel from the batch's stats, folded into one fmaf;
// one element per thread, `count` elements.
template <typename T, int kThreads>
__device__ __forceinline__ void tn_bn_train_apply(const T* x, const T* weight, const T* bias, const float* stats, T* y,
                                                  long long count, int plane, int channels) {
  const long long i = (long long)blockIdx.x * kThreads + threadIdx.x;
  if (i >= count) return;
  const int c = (int)((i / plane) % channels);
  const float scale = tn_ldg_f32(weight + c) * stats[2 * c + 1];
  const float shift = tn_ldg_f32(bias + c) - stats[2 * c] * scale;
  y[i] = tn_cast<T>(fmaf(tn_ldg_f32(x + i), scale, shift));
}

// Channel blockIdx.x's sums of dy and of dy * x̂ (x̂ = (x - mean) * rstd from `stats`).
template <typename T, int kThreads>
__device__ __forceinline__ float2 tn_bn_grad_moments(const T* dy, const T* x, const float* stats, long long n,
                                                     int channels, int plane, float* smem32) {
  const float mean = stats[2 * blockIdx.x], rstd = stats[2 * blockIdx.x + 1];
  const float sum_dy =
      tn_bn_channel_sum<kThreads>([&](long long o) { return tn_ldg_f32(dy + o); }, n, channels, plane, smem32);
  const float sum_dy_xhat =
      tn_bn_channel_sum<kThreads>([&](long long o) { return tn_ldg_f32(dy + o) * ((tn_ldg_f32(x + o) - mean) * rstd); },
                                  n, channels, plane, smem32);
  return make_float2(sum_dy, sum_dy_xhat);
}

// sums[2c], sums[2c + 1] = Σ dy and Σ dy x̂ over channel c (a block each).
template <typename T, int kThreads>
__device__ __forceinline__ void tn_bn_grad_sums(const T* dy, const T* x, const float* stats, float* sums, int batch,
                                                int channels, int plane) {
  __shared__ float smem32[32];
  const float2 s = tn_bn_grad_moments<T, kThreads>(dy, x, stats, (long long)batch * plane, channels, plane, smem32);
  if (threadIdx.x == 0) {
    sums[2 * blockIdx.x] = s.x;
    sums[2 * blockIdx.x + 1] = s.y;
  }
}

// dweight[c] = Σ dy x̂ over channel c (a block each).
template <typename T, int kThreads>
__device__ __forceinline__ void tn_bn_dweight(const T* dy, const T* x, const float* stats, T* dweight, int batch,
                                              int channels, int plane) {
  __shared__ float smem32[32];
  const float2 s = tn_bn_grad_moments<T, kThreads>(dy, x, stats, (long long)batch * plane, channels, plane, smem32);
  if (threadIdx.x == 0) dweight[blockIdx.x] = tn_cast<T>(s.y);
}

// dx = weight * rstd * (dy - Σdy / n - x̂ Σ(dy x̂) / n), the batch statistics' own dependence on x
// included; one element per thread, `count` elements.
template <typename T, int kThreads>
__device__ __forceinline__ void tn_bn_train_dx(const T* dy, const T* x, const T* weight, const float* stats,
                                               const float* sums, T* dx, long long count, int plane, int channels,
                                               long long n) {
  const long long i = (long long)blockIdx.x * kThreads + threadIdx.x;
  if (i >= count) return;
  const int c = (int)((i / plane) % channels);
  const float mean = stats[2 * c], rstd = stats[2 * c + 1];
  const float xhat = (tn_ldg_f32(x + i) - mean) * rstd;
  const float g = tn_ldg_f32(dy + i) - sums[2 * c] / (float)n - xhat * (sums[2 * c + 1] / (float)n);
  dx[i] = tn_cast<T>(tn_ldg_f32(weight + c) * rstd * g);
}

// The running statistics' update of channel blockIdx.x in place, as PyTorch's training forward:
// running = (1 - momentum) * running + momentum * batch, with the unbiased batch variance
// var * n / (n - 1); nothing where the step counter halted (optim.cuh).
template <typename T, int kThreads>
__device__ __forceinline__ void tn_bn_running_stats(const T* x, T* running_mean, T* running_var, int batch,
                                                    int channels, int plane, float momentum, const int* step) {
  __shared__ float smem32[32];
  if (tn_step_halted(*step)) return;  // the step's loss was not finite: every thread returns
  const long long n = (long long)batch * plane;
  const float2 m = tn_bn_moments<T, kThreads>(x, n, channels, plane, smem32);
  if (threadIdx.x != 0) return;
  const int c = blockIdx.x;
  const float unbiased = m.y * ((float)n / (float)(n - 1));
  // Plain loads: the read-only cache may not hold what a kernel writes.
  running_mean[c] = tn_cast<T>((1.f - momentum) * tn_f32(running_mean[c]) + momentum * m.x);
  running_var[c] = tn_cast<T>((1.f - momentum) * tn_f32(running_var[c]) + momentum * unbiased);
}

#endif  // TEENY_BATCHNORM_TRAIN_CUH
