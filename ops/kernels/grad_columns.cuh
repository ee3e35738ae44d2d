// Column sums over rows for gradients (ops/grad_sum_rows.cpp, ops/grad_norm_dweight.cpp): a
// bias's dL/db = Σ_rows dy and a norm's dL/dweight = Σ_rows dy · x̂, of [rows, cols] tensors,
// deterministically: no atomics, every sum in an order fixed by the shape alone.
//
// Two launches. tn_*_partials: block (part, column tile) sums rows [part * kRowsPerPart, ...) of
// kColumns columns, thread (column, lane) every kLanes-th row of the part, then lane 0 adds the
// lanes' sums in lane order into partials[part * cols + column] (f32). tn_column_sums: thread
// `column` adds the parts in order and stores the sum as T.
#ifndef TEENY_GRAD_COLUMNS_CUH
#define TEENY_GRAD_COLUMNS_CUH

#include "prelude.cuh"

constexpr int kTnGradColumns = 32;  // a warp: 32 consecutive columns a row

// Term(r, c) is row r's value in column c; the block's threads are kColumns x kLanes.
template <int kLanes, int kRowsPerPart, class Term>
__device__ __forceinline__ void tn_column_partials(const Term& term, float* partials, long long rows, int cols) {
  __shared__ float lane_sums[kLanes][kTnGradColumns + 1];
  const int tx = threadIdx.x % kTnGradColumns, lane = threadIdx.x / kTnGradColumns;
  const long long part = blockIdx.x;
  const int c = blockIdx.y * kTnGradColumns + tx;
  const long long r0 = part * kRowsPerPart;
  const long long r1 = min(rows, r0 + kRowsPerPart);
  float acc = 0.f;
  if (c < cols)
    for (long long r = r0 + lane; r < r1; r += kLanes) acc += term(r, c);
  lane_sums[lane][tx] = acc;
  __syncthreads();
  if (lane != 0 || c >= cols) return;
  float sum = 0.f;
#pragma unroll
  for (int l = 0; l < kLanes; ++l) sum += lane_sums[l][tx];
  partials[part * cols + c] = sum;
}

// dy[r][c].
template <typename T>
struct tn_dy_term {
  const T* dy;
  int dy_stride;
  __device__ __forceinline__ float operator()(long long r, int c) const { return tn_f32(dy[r * dy_stride + c]); }
};

// dy[r][c] · (x[r][c] - mean_r) · rstd_r, with (mean_r, rstd_r) = stats[2r], stats[2r + 1].
template <typename T>
struct tn_dy_xhat_term {
  const T* dy;
  const T* x;
  const float* stats;
  int dy_stride, x_stride;
  __device__ __forceinline__ float operator()(long long r, int c) const {
    return tn_f32(dy[r * dy_stride + c]) * (tn_f32(x[r * x_stride + c]) - stats[2 * r]) * stats[2 * r + 1];
  }
};

template <typename T, int kLanes, int kRowsPerPart>
__device__ __forceinline__ void tn_sum_rows_partials(const T* dy, float* partials, long long rows, int cols,
                                                     int dy_stride) {
  tn_column_partials<kLanes, kRowsPerPart>(tn_dy_term<T>{dy, dy_stride}, partials, rows, cols);
}

template <typename T, int kLanes, int kRowsPerPart>
__device__ __forceinline__ void tn_norm_dweight_partials(const T* dy, const T* x, const float* stats, float* partials,
                                                         long long rows, int cols, int dy_stride, int x_stride) {
  tn_column_partials<kLanes, kRowsPerPart>(tn_dy_xhat_term<T>{dy, x, stats, dy_stride, x_stride}, partials, rows, cols);
}

// out[c] = Σ_p partials[p * cols + c], p = 0, 1, ... in order.
template <typename T, int kThreads>
__device__ __forceinline__ void tn_column_sums(const float* partials, T* out, int parts, int cols) {
  const int c = blockIdx.x * kThreads + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.f;
  for (int p = 0; p < parts; ++p) sum += partials[(long long)p * cols + c];
  out[c] = tn_cast<T>(sum);
}

#endif  // TEENY_GRAD_COLUMNS_CUH
