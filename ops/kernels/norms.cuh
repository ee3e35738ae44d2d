// layernorm and rmsnorm over the last dim (ops/norms.cpp), any row length. Statistics in f32;
// weight and bias in the storage dtype T; the output is contiguous.
#ifndef TEENY_NORMS_CUH
#define TEENY_NORMS_CUH

#include "prelude.cuh"

// Row xr's statistics, for a group of kThreads owning it, in chunks of kItems packs a thread:
// the mean (0 for rmsnorm) and rstd = 1 / sqrt(var + eps) (rmsnorm: of the mean square), for
// the forward pass's streamed rows and the gradients (grad_norms.cuh), which recompute them from
// x. Columns past the row read as the mean, so they add no deviation.
template <typename T, bool kRms, int kThreads, int kItems>
__device__ __forceinline__ void tn_norm_stats(const T* xr, int cols, bool vec, int t, float eps, float* smem32,
                                              float& mean, float& rstd) {
  constexpr int kN = tn_pack<T>::kN;
  constexpr int kChunk = kThreads * kItems * kN;
  const float inv_cols = 1.f / (float)cols;
  mean = 0.f;
  if constexpr (!kRms) {
    float s = 0.f;
    for (int c0 = 0; c0 < cols; c0 += kChunk) {
      float v[kItems][kN];
      tn_row_load<T, kThreads, kItems>(xr + c0, cols - c0, vec, t, 0.f, v);
#pragma unroll
      for (int i = 0; i < kItems; ++i)
#pragma unroll
        for (int k = 0; k < kN; ++k) s += v[i][k];
    }
    mean = tn_group_sum<kThreads>(s, smem32) * inv_cols;
  }
  float sq = 0.f;
  for (int c0 = 0; c0 < cols; c0 += kChunk) {
    float v[kItems][kN];
    tn_row_load<T, kThreads, kItems>(xr + c0, cols - c0, vec, t, mean, v);
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kN; ++k) sq += (v[i][k] - mean) * (v[i][k] - mean);
  }
  rstd = rsqrtf(tn_group_sum<kThreads>(sq, smem32) * inv_cols + eps);
}

// A group of kThreads (a warp or the block; kRowsPerBlock groups a block) owns a row of `cols`
// elements (row stride x_stride). A row that fits kItems packs a thread is read once
// (layernorm: the mean, then the variance of the cached values, then the write; rmsnorm: the
// mean square, then the write); longer rows stream in chunks (layernorm three passes, rmsnorm
// two). kRms: x / rms(x), else (x - mean) / std(x); then times weight (kWeight) plus bias
// (kBias). weight and bias are not read when their flag is off.
template <typename T, bool kRms, bool kWeight, bool kBias, int kThreads, int kRowsPerBlock, int kItems>
__device__ __forceinline__ void tn_norm_rows(const T* x, const T* weight, const T* bias, T* y, long long rows, int cols,
                                             int x_stride, float eps) {
  static_assert(kWeight || !kBias, "a bias comes with a weight");
  __shared__ float smem32[32];
  constexpr int kN = tn_pack<T>::kN;
  const int group = threadIdx.x / kThreads;
  const int t = threadIdx.x % kThreads;
  const long long r = (long long)blockIdx.x * kRowsPerBlock + group;
  if (r >= rows) return;  // whole groups only: a block-wide group has kRowsPerBlock == 1
  const T* xr = x + r * x_stride;
  T* yr = y + r * cols;
  const bool vec = tn_aligned16(xr) && tn_aligned16(yr);
  const bool vec_w = kBias ? tn_aligned16(weight) && tn_aligned16(bias) : kWeight && tn_aligned16(weight);
  const float inv_cols = 1.f / (float)cols;
  // This lane's kN columns of the chunk at column c0: normalized, weighted, biased and stored.
  auto write_chunk = [&](int c0, float(&v)[1][kN], float shift, float scale) {
#pragma unroll
    for (int k = 0; k < kN; ++k) v[0][k] = (v[0][k] - shift) * scale;
    if constexpr (kWeight) {
      float w[1][kN];
      tn_row_load<T, kThreads, 1>(weight + c0, cols - c0, vec_w, t, 0.f, w);
#pragma unroll
      for (int k = 0; k < kN; ++k) v[0][k] *= w[0][k];
    }
    if constexpr (kBias) {
      float b[1][kN];
      tn_row_load<T, kThreads, 1>(bias + c0, cols - c0, vec_w, t, 0.f, b);
#pragma unroll
      for (int k = 0; k < kN; ++k) v[0][k] += b[0][k];
    }
    tn_row_store<T, kThreads, 1>(yr + c0, cols - c0, vec, t, v);
  };
  if (cols <= kThreads * kItems * kN) {
    float v[kItems][kN];
    tn_row_load<T, kThreads, kItems>(xr, cols, vec, t, 0.f, v);
    float shift = 0.f, scale;
    if constexpr (kRms) {
      float ss = 0.f;
#pragma unroll
      for (int i = 0; i < kItems; ++i)
#pragma unroll
        for (int k = 0; k < kN; ++k) ss += v[i][k] * v[i][k];
      scale = rsqrtf(tn_group_sum<kThreads>(ss, smem32) * inv_cols + eps);
    } else {
      float s = 0.f;
#pragma unroll
      for (int i = 0; i < kItems; ++i)
#pragma unroll
        for (int k = 0; k < kN; ++k) s += v[i][k];
      shift = tn_group_sum<kThreads>(s, smem32) * inv_cols;
      float sq = 0.f;
#pragma unroll
      for (int i = 0; i < kItems; ++i)
#pragma unroll
        for (int k = 0; k < kN; ++k) {
          const float dev = (i * kThreads + t) * kN + k < cols ? v[i][k] - shift : 0.f;
          sq += dev * dev;
        }
      scale = rsqrtf(tn_group_sum<kThreads>(sq, smem32) * inv_cols + eps);
    }
    // One item (kN columns a lane) at a time: weight and bias never all sit in registers
    // beside the cached row, which keeps the register count, and so the rows in flight an SM,
    // what the row alone needs.
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      float u[1][kN];
#pragma unroll
      for (int k = 0; k < kN; ++k) u[0][k] = v[i][k];
      write_chunk(i * kThreads * kN, u, shift, scale);
    }
    return;
  }
  // Streaming: rows longer than the registers hold.
  constexpr int kChunk = kThreads * kN;
  float shift, scale;
  tn_norm_stats<T, kRms, kThreads, 1>(xr, cols, vec, t, eps, smem32, shift, scale);
  for (int c0 = 0; c0 < cols; c0 += kChunk) {
    float v[1][kN];
    tn_row_load<T, kThreads, 1>(xr + c0, cols - c0, vec, t, 0.f, v);
    write_chunk(c0, v, shift, scale);
  }
}

// The three kernels' argument lists: layernorm with weight and bias, layernorm without
// (affine: false), and rmsnorm (always weighted).
template <typename T, int kThreads, int kRowsPerBlock, int kItems>
__device__ __forceinline__ void tn_layernorm(const T* x, const T* weight, const T* bias, T* y, long long rows, int cols,
                                             int x_stride, float eps) {
  tn_norm_rows<T, false, true, true, kThreads, kRowsPerBlock, kItems>(x, weight, bias, y, rows, cols, x_stride, eps);
}
template <typename T, int kThreads, int kRowsPerBlock, int kItems>
__device__ __forceinline__ void tn_layernorm_plain(const T* x, T* y, long long rows, int cols, int x_stride,
                                                   float eps) {
  tn_norm_rows<T, false, false, false, kThreads, kRowsPerBlock, kItems>(x, nullptr, nullptr, y, rows, cols, x_stride,
                                                                        eps);
}
template <typename T, int kThreads, int kRowsPerBlock, int kItems>
__device__ __forceinline__ void tn_rmsnorm(const T* x, const T* weight, T* y, long long rows, int cols, int x_stride,
                                           float eps) {
  tn_norm_rows<T, true, true, false, kThreads, kRowsPerBlock, kItems>(x, weight, nullptr, y, rows, cols, x_stride, eps);
}

#endif  // TEENY_NORMS_CUH
