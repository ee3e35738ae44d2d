// The losses (ops/cross_entropy.cpp, ops/mse_loss.cpp): a mean over many terms, in two launches
// and in a fixed order, so that a loss is bitwise the same from run to run (no atomics). Launch 1:
// each block sums its share of the terms in f32 and writes its partial result to the node's
// scratch buffer; launch 2: one block adds the partials in double, in a fixed order, and writes
// the mean as an f32 scalar. Also cross entropy's gradient (ops/grad_cross_entropy.cpp), which
// shares its row plans and log-sum-exp; mse_loss's is elementwise (grad_elementwise.cuh).
#ifndef TEENY_LOSS_CUH
#define TEENY_LOSS_CUH

#include "prelude.cuh"

__device__ __forceinline__ float tn_nan() { return __int_as_float(0x7fffffff); }

// A row's max and sum of exp(x - max) for a stable log-sum-exp, which every thread of the group
// (kThreads, a warp or the block, owning the row) gets. The row streams in chunks of kItems
// 16-byte packs a thread: each chunk's max rescales the running sum once, so every logit costs
// one exp.
struct tn_max_sum {
  float max, sum;
};
template <typename T, int kThreads, int kItems>
__device__ __forceinline__ tn_max_sum tn_row_max_sum(const T* xr, int classes, bool vec, int t, float* smem32) {
  constexpr int kN = tn_pack<T>::kN;
  constexpr int kChunk = kThreads * kItems * kN;
  float m = tn_neg_inf(), s = 0.f;
  for (int c0 = 0; c0 < classes; c0 += kChunk) {
    float v[kItems][kN];
    tn_row_load<T, kThreads, kItems>(xr + c0, classes - c0, vec, t, tn_neg_inf(), v);
    float chunk_max = m;
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kN; ++k) chunk_max = fmaxf(chunk_max, v[i][k]);
    if (chunk_max == tn_neg_inf()) continue;  // only -inf (or columns past the row) so far
    s *= expf(m - chunk_max);                 // 0 while m is still -inf, when s is 0 too
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kN; ++k) s += expf(v[i][k] - chunk_max);
    m = chunk_max;
  }
  const float row_max = tn_group_max<kThreads>(m, smem32);
  s = m == tn_neg_inf() ? 0.f : s * expf(m - row_max);
  return {row_max, tn_group_sum<kThreads>(s, smem32)};
}

// Element r of the targets, which have the logits' leading shape (rows of targets_last,
// targets_stride apart).
__device__ __forceinline__ int tn_target(const int* targets, long long r, int targets_last, int targets_stride) {
  return targets[(r / targets_last) * targets_stride + r % targets_last];
}

// Cross entropy, launch 1. A group of kThreads (a warp, or the block; kRowsPerBlock groups a
// block) owns one row of `classes` logits at a time, the blocks striding over the rows. The row's
// loss is lse - logits[target]; a target equal to ignore_index is skipped (its logits are not
// read), any other outside [0, classes) makes the loss NaN (nothing is read out of bounds).
// partials[2b], [2b + 1]: block b's sum of losses and count of targets not ignored.
template <typename T, int kThreads, int kRowsPerBlock, int kItems>
__device__ __forceinline__ void tn_cross_entropy_partials(const T* logits, const int* targets, float* partials,
                                                          long long rows, int classes, int x_stride, int targets_last,
                                                          int targets_stride, int ignore_index) {
  __shared__ float smem32[32];
  __shared__ float group_sums[kRowsPerBlock];
  __shared__ int group_counts[kRowsPerBlock];
  const int group = threadIdx.x / kThreads;
  const int t = threadIdx.x % kThreads;
  float sum = 0.f;
  int count = 0;
  // The loop runs alike for the whole group (a row and its target are the group's), so the
  // group-wide reductions inside it meet every thread of the group.
  for (long long r = (long long)blockIdx.x * kRowsPerBlock + group; r < rows;
       r += (long long)gridDim.x * kRowsPerBlock) {
    const int target = tn_target(targets, r, targets_last, targets_stride);
    if (target == ignore_index) continue;
    ++count;
    if (target < 0 || target >= classes) {
      sum = tn_nan();
      continue;
    }
    const T* xr = logits + r * x_stride;
    const tn_max_sum lse = tn_row_max_sum<T, kThreads, kItems>(xr, classes, tn_aligned16(xr), t, smem32);
    sum += lse.max + logf(lse.sum) - tn_f32(xr[target]);
  }
  if (t == 0) {
    group_sums[group] = sum;
    group_counts[group] = count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float block_sum = 0.f;
    int block_count = 0;
    for (int g = 0; g < kRowsPerBlock; ++g) {
      block_sum += group_sums[g];
      block_count += group_counts[g];
    }
    partials[2 * blockIdx.x] = block_sum;
    partials[2 * blockIdx.x + 1] = (float)block_count;
  }
}

// Cross entropy's gradient (grad.cross_entropy), launch 1, one block of kThreads: the targets not
// equal to ignore_index counted exactly (integers, any order), and 1 / count written to
// inv_count[0] (inf when there are none; then no row reads it).
template <int kThreads>
__device__ __forceinline__ void tn_cross_entropy_count(const int* targets, float* inv_count, long long rows,
                                                       int targets_last, int targets_stride, int ignore_index) {
  __shared__ long long warp_counts[kThreads / 32];
  long long count = 0;
  for (long long r = threadIdx.x; r < rows; r += kThreads)
    count += tn_target(targets, r, targets_last, targets_stride) != ignore_index;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) count += __shfl_xor_sync(0xffffffffu, count, o);
  if ((threadIdx.x & 31) == 0) warp_counts[threadIdx.x >> 5] = count;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_counts[w];
    inv_count[0] = 1.f / (float)total;
  }
}

// Cross entropy's gradient, launch 2: a group of kThreads per row (kRowsPerBlock groups a block,
// as the forward's plan) writes the row of dx = (softmax(logits[r]) - onehot(target)) / count:
// the row's max and sum of exp first, then a second pass over the logits writing dx (a row of up
// to one chunk is read again from L1). A row whose target is ignore_index gets 0, one whose
// target is outside [0, classes) NaN (its loss is NaN); neither reads its logits.
template <typename T, int kThreads, int kRowsPerBlock, int kItems>
__device__ __forceinline__ void tn_cross_entropy_grad(const T* logits, const int* targets, const float* inv_count,
                                                      T* dx, long long rows, int classes, int x_stride, int dx_stride,
                                                      int targets_last, int targets_stride, int ignore_index) {
  __shared__ float smem32[32];
  constexpr int kN = tn_pack<T>::kN;
  constexpr int kChunk = kThreads * kItems * kN;
  const int t = threadIdx.x % kThreads;
  const long long r = (long long)blockIdx.x * kRowsPerBlock + threadIdx.x / kThreads;
  if (r >= rows) return;  // whole groups only: a block-wide group has kRowsPerBlock == 1
  const int target = tn_target(targets, r, targets_last, targets_stride);
  T* out = dx + r * dx_stride;  // the row's padding (to dx_stride) is written as zeros
  const bool vo = tn_aligned16(out);
  if (target == ignore_index || target < 0 || target >= classes) {
    const float fill = target == ignore_index ? 0.f : tn_nan();
    for (int c0 = 0; c0 < dx_stride; c0 += kChunk) {
      float v[kItems][kN];
#pragma unroll
      for (int i = 0; i < kItems; ++i)
#pragma unroll
        for (int k = 0; k < kN; ++k) v[i][k] = c0 + (i * kThreads + t) * kN + k < classes ? fill : 0.f;
      tn_row_store<T, kThreads, kItems>(out + c0, dx_stride - c0, vo, t, v);
    }
    return;
  }
  const T* xr = logits + r * x_stride;
  const bool vx = tn_aligned16(xr);
  const tn_max_sum lse = tn_row_max_sum<T, kThreads, kItems>(xr, classes, vx, t, smem32);
  const float scale = inv_count[0];
  const float p_scale = scale / lse.sum;  // softmax = exp(x - max) / sum
  for (int c0 = 0; c0 < dx_stride; c0 += kChunk) {
    float v[kItems][kN];
    tn_row_load<T, kThreads, kItems>(xr + c0, classes - c0, vx, t, 0.f, v);
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        const int c = c0 + (i * kThreads + t) * kN + k;
        v[i][k] = c < classes ? expf(v[i][k] - lse.max) * p_scale - (c == target ? scale : 0.f) : 0.f;
      }
    tn_row_store<T, kThreads, kItems>(out + c0, dx_stride - c0, vo, t, v);
  }
}

// Squared error, launch 1: sum of (a - b)^2 over rows x cols elements (row strides a_stride,
// b_stride), a grid-stride loop. Contiguous inputs are one flat row: kUnroll 16-byte loads of
// each in flight a thread, then a scalar tail. Padded rows (only ever padded to 16 bytes, so
// their width is no whole number of packs) are read element by element. partials[b]: block b's
// sum.
template <typename T, int kBlock, int kUnroll>
__device__ __forceinline__ void tn_mse_partials(const T* a, const T* b, float* partials, long long rows, int cols,
                                                int a_stride, int b_stride) {
  __shared__ float smem32[32];
  constexpr int kVec = tn_pack<T>::kN;
  const long long n = rows * (long long)cols;
  const long long threads = (long long)gridDim.x * kBlock;
  const long long tid = (long long)blockIdx.x * kBlock + threadIdx.x;
  const bool aligned = tn_aligned16(a) && tn_aligned16(b);
  float acc = 0.f;
  if (a_stride == cols && b_stride == cols) {
    long long head = 0;
    if (aligned) {
      const long long nv = n / kVec;
      for (long long i = tid; i < nv; i += threads * kUnroll) {
        float va[kUnroll][kVec], vb[kUnroll][kVec];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (i + u * threads < nv) {
            tn_load16(a + (i + u * threads) * kVec, va[u]);
            tn_load16(b + (i + u * threads) * kVec, vb[u]);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (i + u * threads < nv) {
#pragma unroll
            for (int k = 0; k < kVec; ++k) {
              const float d = va[u][k] - vb[u][k];
              acc += d * d;
            }
          }
        }
      }
      head = nv * kVec;
    }
    for (long long i = head + tid; i < n; i += threads) {
      const float d = tn_f32(a[i]) - tn_f32(b[i]);
      acc += d * d;
    }
  } else {
    for (long long i = tid; i < n; i += threads) {
      const long long r = i / cols;
      const int c = (int)(i - r * cols);
      const float d = tn_f32(a[r * a_stride + c]) - tn_f32(b[r * b_stride + c]);
      acc += d * d;
    }
  }
  acc = tn_block_sum<kBlock>(acc, smem32);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Launch 2, one block of kThreads: the mean from `parts` partials, added in double in a fixed
// order (thread i takes partials i, i + kThreads, ..., then a tree). kCounted: the partials are
// (sum, count) pairs and the mean is over their counts (0 counts give NaN); else they are sums and
// the mean is over `n`.
template <int kThreads, bool kCounted>
__device__ __forceinline__ void tn_loss_mean(const float* partials, float* loss, int parts, long long n) {
  __shared__ double sums[kThreads], counts[kThreads];
  double sum = 0.0, count = 0.0;
  for (int p = threadIdx.x; p < parts; p += kThreads) {
    if (kCounted) {
      sum += partials[2 * p];
      count += partials[2 * p + 1];
    } else {
      sum += partials[p];
    }
  }
  sums[threadIdx.x] = sum;
  counts[threadIdx.x] = count;
  __syncthreads();
#pragma unroll
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      sums[threadIdx.x] += sums[threadIdx.x + half];
      counts[threadIdx.x] += counts[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] = (float)(sums[0] / (kCounted ? counts[0] : (double)n));
}

#endif  // TEENY_LOSS_CUH
