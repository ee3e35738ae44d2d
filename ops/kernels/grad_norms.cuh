// layernorm's and rmsnorm's gradients (ops/grad_norm_dx.cpp, ops/grad_norm_dweight.cpp), over the
// last dim, any row length. Statistics in f32 as the forward pass computes them (norms.cuh's
// tn_norm_stats), recomputed from x: mean (layernorm; 0 for rmsnorm) and rstd = 1 / sqrt(var +
// eps) (rmsnorm: of the mean square). With x̂ = (x - mean) · rstd and g = dy · weight:
//   layernorm: dx = rstd · (g - mean(g) - x̂ · mean(g · x̂))
//   rmsnorm:   dx = rstd · (g - x̂ · mean(g · x̂))
#ifndef TEENY_GRAD_NORMS_CUH
#define TEENY_GRAD_NORMS_CUH

#include "norms.cuh"

// dx of one row a group (kRowsPerBlock groups a block), dx contiguous. Three passes over the
// row in chunks (statistics, the two sums, the write); a row of up to one chunk stays in L1
// between them.
template <typename T, bool kRms, bool kWeight, int kThreads, int kRowsPerBlock, int kItems>
__device__ __forceinline__ void tn_norm_grad_rows(const T* dy, const T* x, const T* weight, T* dx, long long rows,
                                                  int cols, int dy_stride, int x_stride, float eps) {
  __shared__ float smem32[32];
  constexpr int kN = tn_pack<T>::kN;
  constexpr int kChunk = kThreads * kItems * kN;
  const int group = threadIdx.x / kThreads;
  const int t = threadIdx.x % kThreads;
  const long long r = (long long)blockIdx.x * kRowsPerBlock + group;
  if (r >= rows) return;  // whole groups only: a block-wide group has kRowsPerBlock == 1
  const T* xr = x + r * x_stride;
  const T* dyr = dy + r * dy_stride;
  T* dxr = dx + r * cols;
  const bool vec_x = tn_aligned16(xr), vec_dy = tn_aligned16(dyr), vec_dx = tn_aligned16(dxr);
  const bool vec_w = kWeight && tn_aligned16(weight);
  float mean, rstd;
  tn_norm_stats<T, kRms, kThreads, kItems>(xr, cols, vec_x, t, eps, smem32, mean, rstd);
  // g and x̂ of the chunk at column c0; past the row both are 0.
  auto load = [&](int c0, float(&g)[kItems][kN], float(&xhat)[kItems][kN]) {
    tn_row_load<T, kThreads, kItems>(dyr + c0, cols - c0, vec_dy, t, 0.f, g);
    tn_row_load<T, kThreads, kItems>(xr + c0, cols - c0, vec_x, t, mean, xhat);
    if constexpr (kWeight) {
      float w[kItems][kN];
      tn_row_load<T, kThreads, kItems>(weight + c0, cols - c0, vec_w, t, 0.f, w);
#pragma unroll
      for (int i = 0; i < kItems; ++i)
#pragma unroll
        for (int k = 0; k < kN; ++k) g[i][k] *= w[i][k];
    }
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kN; ++k) xhat[i][k] = (xhat[i][k] - mean) * rstd;
  };
  float sum_g = 0.f, sum_gx = 0.f;
  for (int c0 = 0; c0 < cols; c0 += kChunk) {
    float g[kItems][kN], xhat[kItems][kN];
    load(c0, g, xhat);
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        sum_g += g[i][k];
        sum_gx += g[i][k] * xhat[i][k];
      }
  }
  const float inv_cols = 1.f / (float)cols;
  const float mean_g = kRms ? 0.f : tn_group_sum<kThreads>(sum_g, smem32) * inv_cols;
  const float mean_gx = tn_group_sum<kThreads>(sum_gx, smem32) * inv_cols;
  for (int c0 = 0; c0 < cols; c0 += kChunk) {
    float g[kItems][kN], xhat[kItems][kN];
    load(c0, g, xhat);
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kN; ++k) g[i][k] = rstd * (g[i][k] - mean_g - xhat[i][k] * mean_gx);
    tn_row_store<T, kThreads, kItems>(dxr + c0, cols - c0, vec_dx, t, g);
  }
}

// The argument lists: with the forward node's weight (layernorm with affine, rmsnorm) and
// without (layernorm, affine: false).
template <typename T, bool kRms, int kThreads, int kRowsPerBlock, int kItems>
__device__ __forceinline__ void tn_norm_grad_dx(const T* dy, const T* x, const T* weight, T* dx, long long rows,
                                                int cols, int dy_stride, int x_stride, float eps) {
  tn_norm_grad_rows<T, kRms, true, kThreads, kRowsPerBlock, kItems>(dy, x, weight, dx, rows, cols, dy_stride, x_stride,
                                                                    eps);
}
template <typename T, int kThreads, int kRowsPerBlock, int kItems>
__device__ __forceinline__ void tn_norm_grad_dx_plain(const T* dy, const T* x, T* dx, long long rows, int cols,
                                                      int dy_stride, int x_stride, float eps) {
  tn_norm_grad_rows<T, false, false, kThreads, kRowsPerBlock, kItems>(dy, x, nullptr, dx, rows, cols, dy_stride,
                                                                      x_stride, eps);
}

// Each row's (mean, rstd) into stats[2r], stats[2r + 1], for the weight gradient's x̂.
template <typename T, bool kRms, int kThreads, int kRowsPerBlock, int kItems>
__device__ __forceinline__ void tn_norm_row_stats(const T* x, float* stats, long long rows, int cols, int x_stride,
                                                  float eps) {
  __shared__ float smem32[32];
  const int group = threadIdx.x / kThreads;
  const int t = threadIdx.x % kThreads;
  const long long r = (long long)blockIdx.x * kRowsPerBlock + group;
  if (r >= rows) return;
  const T* xr = x + r * x_stride;
  float mean, rstd;
  tn_norm_stats<T, kRms, kThreads, kItems>(xr, cols, tn_aligned16(xr), t, eps, smem32, mean, rstd);
  if (t == 0) {
    stats[2 * r] = mean;
    stats[2 * r + 1] = rstd;
  }
}

#endif  // TEENY_GRAD_NORMS_CUH
