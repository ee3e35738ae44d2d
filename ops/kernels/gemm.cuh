// The GEMM entries of linear (ops/linear.cpp) and matmul (ops/matmul.cpp). Each forwards its
// launch's arguments to a GEMM kernel class, `Gemm`: tn_simt_gemm (f32 on CUDA cores),
// tn_mma_gemm (16-bit, mma.sync) or tn_wgmma_gemm (Hopper, persistent), whose block() computes
// output tiles, or for a few rows of x tn_gemv_mma / tn_gemv_simt (gemv.cuh).
#ifndef TEENY_GEMM_CUH
#define TEENY_GEMM_CUH

#include "gemm_common.cuh"
#include "gemm_mma.cuh"
#include "gemm_simt.cuh"
#include "gemm_wgmma.cuh"
#include "gemv.cuh"
#include "prelude.cuh"
#include "tma.cuh"

// ---- linear: y = x weightᵀ (+ bias, act, + residual) -----------------------------------------
// The launch passes x, weight, [bias], [residual], y, M, N, K, ldx, ldy, [ldr], then what its
// variant needs: nothing, the K split count (f32: `splits`) or the TMA kernel's tensor maps.
// tn_linear and tn_linear_residual take the optional operands; tn_linear_gemm the variants.

// One output tile a block, or, for the persistent kernel, the tiles it strides over.
template <class Gemm, typename T>
__device__ __forceinline__ void tn_linear_gemm(const T* x, const T* weight, const T* bias, const T* residual, T* y,
                                               int M, int N, int K, int ldx, int ldy, int ldr) {
  Gemm::block(x, weight, bias, y, M, N, K, ldx, K, ldy, blockIdx.x, residual, ldr);
}

// Split-K (f32; y was zeroed and the splits add into it). CUDA cores: split z = blockIdx.x /
// tiles covers K range [k0, k0 + k_split): x and weight are K-contiguous, so it is an offset.
// The persistent kernel walks (tile, split) units itself.
template <class Gemm, typename T>
__device__ __forceinline__ void tn_linear_gemm(const T* x, const T* weight, const T* bias, const T* residual, T* y,
                                               int M, int N, int K, int ldx, int ldy, int ldr, int splits) {
  if constexpr (Gemm::kPersistent) {
    Gemm::block(x, weight, bias, y, M, N, K, ldx, K, ldy, blockIdx.x, residual, ldr, splits);
  } else {
    const int tiles = ((M + Gemm::kBM - 1) / Gemm::kBM) * ((N + Gemm::kBN - 1) / Gemm::kBN);
    const int split = (int)(blockIdx.x / tiles);
    const int k_split = ((K + Gemm::kBK - 1) / Gemm::kBK + splits - 1) / splits * Gemm::kBK;
    const int k0 = split * k_split;
    if (k0 >= K) return;
    Gemm::block(x + k0, weight + k0, split == 0 ? bias : nullptr, y, M, N, min(K - k0, k_split), ldx, K, ldy,
                (int)(blockIdx.x % tiles), split == 0 ? residual : nullptr, ldr, splits > 1);
  }
}

// TMA: the operands load and the tiles store through the tensor maps.
template <class Gemm, typename T>
__device__ __forceinline__ void tn_linear_gemm(const T* x, const T* weight, const T* bias, const T* residual, T* y,
                                               int M, int N, int K, int ldx, int ldy, int ldr,
                                               const tn_tensor_map& a_map, const tn_tensor_map& b_map,
                                               const tn_tensor_map& c_map) {
  Gemm::block(x, weight, bias, y, M, N, K, ldx, K, ldy, blockIdx.x, residual, ldr, 1, &a_map, &b_map, &c_map);
}

// TMA with a residual, which arrives through r_map.
template <class Gemm, typename T>
__device__ __forceinline__ void tn_linear_gemm(const T* x, const T* weight, const T* bias, const T* residual, T* y,
                                               int M, int N, int K, int ldx, int ldy, int ldr,
                                               const tn_tensor_map& a_map, const tn_tensor_map& b_map,
                                               const tn_tensor_map& c_map, const tn_tensor_map& r_map) {
  Gemm::block(x, weight, bias, y, M, N, K, ldx, K, ldy, blockIdx.x, residual, ldr, 1, &a_map, &b_map, &c_map, &r_map);
}

template <class Gemm, typename T, typename... Variant>
__device__ __forceinline__ void tn_linear(const T* x, const T* weight, T* y, int M, int N, int K, int ldx, int ldy,
                                          const Variant&... variant) {
  static_assert(!Gemm::kHasBias && !Gemm::kHasResidual, "the launch passes no bias and no residual");
  tn_linear_gemm<Gemm, T>(x, weight, nullptr, nullptr, y, M, N, K, ldx, ldy, 0, variant...);
}
template <class Gemm, typename T, typename... Variant>
__device__ __forceinline__ void tn_linear(const T* x, const T* weight, const T* bias, T* y, int M, int N, int K,
                                          int ldx, int ldy, const Variant&... variant) {
  static_assert(Gemm::kHasBias && !Gemm::kHasResidual, "the launch passes a bias and no residual");
  tn_linear_gemm<Gemm, T>(x, weight, bias, nullptr, y, M, N, K, ldx, ldy, 0, variant...);
}
template <class Gemm, typename T, typename... Variant>
__device__ __forceinline__ void tn_linear_residual(const T* x, const T* weight, const T* residual, T* y, int M, int N,
                                                   int K, int ldx, int ldy, int ldr, const Variant&... variant) {
  static_assert(!Gemm::kHasBias && Gemm::kHasResidual, "the launch passes a residual and no bias");
  tn_linear_gemm<Gemm, T>(x, weight, nullptr, residual, y, M, N, K, ldx, ldy, ldr, variant...);
}
template <class Gemm, typename T, typename... Variant>
__device__ __forceinline__ void tn_linear_residual(const T* x, const T* weight, const T* bias, const T* residual, T* y,
                                                   int M, int N, int K, int ldx, int ldy, int ldr,
                                                   const Variant&... variant) {
  static_assert(Gemm::kHasBias && Gemm::kHasResidual, "the launch passes a bias and a residual");
  tn_linear_gemm<Gemm, T>(x, weight, bias, residual, y, M, N, K, ldx, ldy, ldr, variant...);
}

// Zeroes `count` floats of y (a split-K linear's output, before its splits add into it).
__device__ __forceinline__ void tn_linear_zero(float* y, long long count) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) y[i] = 0.f;
}

// ---- matmul: c = a · b over broadcast batch dims ---------------------------------------------

// Moves the operands' offsets to batch z of the output: per output batch dim, innermost first,
// its extent and a's and b's element strides (0 where that operand broadcasts).
__device__ __forceinline__ void tn_matmul_batch_offsets(long long&, long long&, long long&) {}
template <typename... Rest>
__device__ __forceinline__ void tn_matmul_batch_offsets(long long& z, long long& a_off, long long& b_off, int batch,
                                                        long long a_stride, long long b_stride, Rest... rest) {
  const long long idx = z % batch;
  z /= batch;
  a_off += idx * a_stride;
  b_off += idx * b_stride;
  tn_matmul_batch_offsets(z, a_off, b_off, rest...);
}

// One launch over all batches: block b computes tile b % tiles of batch b / tiles, whose
// operands sit at the batch strides `batch_dims` (tn_matmul_batch_offsets) and output at
// batch * M * N.
template <class Gemm, typename T, typename... BatchDims>
__device__ __forceinline__ void tn_matmul(const T* a, const T* b, T* c, int M, int N, int K, int lda, int ldb,
                                          BatchDims... batch_dims) {
  const int tiles = ((M + Gemm::kBM - 1) / Gemm::kBM) * ((N + Gemm::kBN - 1) / Gemm::kBN);
  long long z = blockIdx.x / tiles;
  const int pid = blockIdx.x % tiles;
  const long long c_off = z * M * (long long)N;
  long long a_off = 0, b_off = 0;
  tn_matmul_batch_offsets(z, a_off, b_off, batch_dims...);
  Gemm::block(a + a_off, b + b_off, nullptr, c + c_off, M, N, K, lda, ldb, N, pid);
}

// ---- the gradients' GEMMs (ops/grad_gemm.h): C = A · B, its sum over K split ------------------
// The launch passes a, b, c, the scratch buffer `partials`, M, N, K, lda, ldb and the split
// count, then tn_matmul's batch dims. With one split each block writes its tile of C; with more,
// split s of the batch-z matrix writes its partial sums (f32) to matrix s * batches + z of
// `partials`, and tn_gemm_sum_splits adds them into C in split order: no atomics, so the same
// bits on every run.

// The product of the batch dims' extents (every third of tn_matmul_batch_offsets' arguments).
__device__ __forceinline__ long long tn_batch_count() { return 1; }
template <typename... Rest>
__device__ __forceinline__ long long tn_batch_count(int batch, long long, long long, Rest... rest) {
  return batch * tn_batch_count(rest...);
}

// The K range [k0, k0 + k_split) of split `split`, whole k-steps of Gemm, clipped to K (empty
// past it: the split then writes zeros).
template <class Gemm>
__device__ __forceinline__ void tn_split_range(int K, int splits, int split, int& k0, int& k) {
  const int k_split = ((K + Gemm::kBK - 1) / Gemm::kBK + splits - 1) / splits * Gemm::kBK;
  k0 = min(split * k_split, K);
  k = min(K - k0, k_split);
}

// Block b computes tile b % tiles of matrix b / tiles, which is split * batches + batch; A and
// B start at the split's K range (k0 columns of a K-contiguous operand, k0 rows of the other).
// R (row stride ldr): what the epilogue reads, with one 2-D matrix and no split (tn_grad_gemm_res).
// The persistent wgmma kernel (one 2-D matrix) walks the (tile, split) units itself.
template <class Gemm, typename T, typename... BatchDims>
__device__ __forceinline__ void tn_grad_gemm_block(const T* a, const T* b, T* c, float* partials, const T* r, int ldr,
                                                   int M, int N, int K, int lda, int ldb, int splits,
                                                   BatchDims... batch_dims) {
  if constexpr (Gemm::kPersistent) {
    static_assert(sizeof...(BatchDims) == 0, "the persistent kernel computes one matrix");
    Gemm::block(a, b, nullptr, c, M, N, K, lda, ldb, N, blockIdx.x, r, ldr, splits, nullptr, nullptr, nullptr, nullptr,
                partials);
  } else {
    const int tiles = ((M + Gemm::kBM - 1) / Gemm::kBM) * ((N + Gemm::kBN - 1) / Gemm::kBN);
    const long long matrix = blockIdx.x / tiles, batches = tn_batch_count(batch_dims...);
    const int pid = blockIdx.x % tiles;
    long long z = matrix % batches, a_off = 0, b_off = 0;
    tn_matmul_batch_offsets(z, a_off, b_off, batch_dims...);
    int k0, k;
    tn_split_range<Gemm>(K, splits, (int)(matrix / batches), k0, k);
    a_off += Gemm::kAStoredKM ? (long long)k0 * lda : k0;
    b_off += Gemm::kBStoredNK ? k0 : (long long)k0 * ldb;
    const long long c_off = matrix * M * (long long)N;
    float* split_out = splits > 1 ? partials + c_off : nullptr;
    // f32 on CUDA cores, whose C is f32 already; the mma.sync kernel takes the partials apart.
    if constexpr (sizeof(T) == 4)
      Gemm::block(a + a_off, b + b_off, nullptr, split_out != nullptr ? split_out : c + c_off, M, N, k, lda, ldb, N,
                  pid, r, ldr);
    else
      Gemm::block(a + a_off, b + b_off, nullptr, c + c_off, M, N, k, lda, ldb, N, pid, r, ldr, split_out);
  }
}

template <class Gemm, typename T, typename... BatchDims>
__device__ __forceinline__ void tn_grad_gemm(const T* a, const T* b, T* c, float* partials, int M, int N, int K,
                                             int lda, int ldb, int splits, BatchDims... batch_dims) {
  tn_grad_gemm_block<Gemm>(a, b, c, partials, (const T*)nullptr, 0, M, N, K, lda, ldb, splits, batch_dims...);
}

// With an epilogue that reads r (Gemm's: an input gradient's activation derivative, or a fan-out
// gradient added in); one 2-D matrix, splits 1.
template <class Gemm, typename T>
__device__ __forceinline__ void tn_grad_gemm_res(const T* a, const T* b, T* c, float* partials, const T* r, int M,
                                                 int N, int K, int lda, int ldb, int ldr, int splits) {
  tn_grad_gemm_block<Gemm>(a, b, c, partials, r, ldr, M, N, K, lda, ldb, splits);
}

// The persistent wgmma kernel (2-D, loading by TMA through a_map and b_map, either operand
// K-major or MN-major, storing c by TMA through c_map): its blocks walk the (tile, split) units.
template <class Gemm, typename T>
__device__ __forceinline__ void tn_grad_gemm_tma(const T* a, const T* b, T* c, float* partials, int M, int N, int K,
                                                 int lda, int ldb, int splits, const tn_tensor_map& a_map,
                                                 const tn_tensor_map& b_map, const tn_tensor_map& c_map) {
  Gemm::block(a, b, nullptr, c, M, N, K, lda, ldb, N, blockIdx.x, nullptr, 0, splits, &a_map, &b_map, &c_map, nullptr,
              partials);
}

// The same with an epilogue reading r (loaded by TMA through r_map); splits 1.
template <class Gemm, typename T>
__device__ __forceinline__ void tn_grad_gemm_tma_res(const T* a, const T* b, T* c, float* partials, const T* r, int M,
                                                     int N, int K, int lda, int ldb, int ldr, int splits,
                                                     const tn_tensor_map& a_map, const tn_tensor_map& b_map,
                                                     const tn_tensor_map& c_map, const tn_tensor_map& r_map) {
  Gemm::block(a, b, nullptr, c, M, N, K, lda, ldb, N, blockIdx.x, r, ldr, splits, &a_map, &b_map, &c_map, &r_map,
              partials);
}

// c[i] = the sum over s of partials[s * count + i], s = 0, 1, ..., splits - 1 in order; four
// consecutive outputs a thread where count allows 16-byte loads.
template <typename T>
__device__ __forceinline__ void tn_gemm_sum_splits(const float* __restrict__ partials, T* __restrict__ c,
                                                   long long count, int splits) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (count % 4 == 0 && tn_aligned16(partials) &&
      (reinterpret_cast<unsigned long long>(c) & (4 * sizeof(T) - 1)) == 0) {
    for (long long i = first * 4; i < count; i += stride * 4) {
      float4 sum = *reinterpret_cast<const float4*>(partials + i);
      for (int s = 1; s < splits; ++s) {
        const float4 v = *reinterpret_cast<const float4*>(partials + s * count + i);
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
      }
      tn_store2(c + i, sum.x, sum.y);
      tn_store2(c + i + 2, sum.z, sum.w);
    }
    return;
  }
  for (long long i = first; i < count; i += stride) {
    float sum = partials[i];
    for (int s = 1; s < splits; ++s) sum += partials[s * count + i];
    c[i] = tn_cast<T>(sum);
  }
}

#endif  // TEENY_GEMM_CUH
