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

#endif  // TEENY_GEMM_CUH
