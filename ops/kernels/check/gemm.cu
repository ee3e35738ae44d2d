// gemm.cuh (and gemm_simt/mma/wgmma.cuh, tma.cuh) instantiated for kernel_check (see check.cuh):
// the kernel classes at the tiles and stage counts ops/dense_gemm.cpp chooses, linear's argument
// lists (bias, residual, split-K, TMA), an activation per path, and matmul's batched entry.
#include "../gemm.cuh"
#include "check.cuh"

template <typename T, bool kBias, bool kResidual, template <typename> class Act = tn_act_none>
using Epi = tn_gemm_epilogue<T, Act, kBias, kResidual>;

#define TN_LINEAR_PARAMS(T) const T *x, const T *weight
#define TN_LINEAR_DIMS int M, int N, int K, int ldx, int ldy
#define TN_TENSOR_MAPS                                                                      \
  const __grid_constant__ tn_tensor_map a_map, const __grid_constant__ tn_tensor_map b_map, \
      const __grid_constant__ tn_tensor_map c_map

// CUDA cores (f32): the narrow tile split over K, with a residual and an activation; the
// 128x128 tile of matmul over two batch dims; split-K's zeroing.
TN_ENTRY(linear_f32_64x64x16_bias_split, (256, 2))
(TN_LINEAR_PARAMS(float), const float* bias, float* y, TN_LINEAR_DIMS, int splits) {
  tn_linear<tn_simt_gemm<64, 64, 16, 256, 4, 4, true, Epi<float, true, false>>>(x, weight, bias, y, M, N, K, ldx, ldy,
                                                                                splits);
}
TN_ENTRY(linear_f32_64x64x16_bias_relu_res, (256, 2))
(TN_LINEAR_PARAMS(float), const float* bias, const float* residual, float* y, TN_LINEAR_DIMS, int ldr) {
  tn_linear_residual<tn_simt_gemm<64, 64, 16, 256, 4, 4, true, Epi<float, true, true, tn_act_relu>>>(
      x, weight, bias, residual, y, M, N, K, ldx, ldy, ldr);
}
TN_ENTRY(matmul_f32_kn_128x128x8_b2, (256, 2))
(const float* a, const float* b, float* c, int M, int N, int K, int lda, int ldb, int batch1, long long a_stride1,
 long long b_stride1, int batch0, long long a_stride0, long long b_stride0) {
  tn_matmul<tn_simt_gemm<128, 128, 8, 256, 8, 8, false, Epi<float, false, false>>>(
      a, b, c, M, N, K, lda, ldb, batch1, a_stride1, b_stride1, batch0, a_stride0, b_stride0);
}
TN_ENTRY(linear_zero_f32, (256))(float* y, long long count) { tn_linear_zero(y, count); }

// mma.sync (16-bit): linear's narrow tile with a residual, matmul's tiles in [K, N] layout.
TN_ENTRY(linear_f16_64x64x32_bias_relu_res, (128, 1))
(TN_LINEAR_PARAMS(__half), const __half* bias, const __half* residual, __half* y, TN_LINEAR_DIMS, int ldr) {
  tn_linear_residual<tn_mma_gemm<__half, 64, 64, 32, 128, 2, 2, true, Epi<__half, true, true, tn_act_relu>>>(
      x, weight, bias, residual, y, M, N, K, ldx, ldy, ldr);
}
TN_ENTRY(matmul_bf16_kn_128x128x32_b1, (256, 1))
(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int M, int N, int K, int lda, int ldb, int batch0,
 long long a_stride0, long long b_stride0) {
  tn_matmul<tn_mma_gemm<__nv_bfloat16, 128, 128, 32, 256, 2, 4, false, Epi<__nv_bfloat16, false, false>>>(
      a, b, c, M, N, K, lda, ldb, batch0, a_stride0, b_stride0);
}
TN_ENTRY(matmul_f16_kn_64x64x32_b0, (128, 1))
(const __half* a, const __half* b, __half* c, int M, int N, int K, int lda, int ldb) {
  tn_matmul<tn_mma_gemm<__half, 64, 64, 32, 128, 2, 2, false, Epi<__half, false, false>>>(a, b, c, M, N, K, lda, ldb);
}

// wgmma (16-bit): by TMA with an activation, by cp.async on the pingpong schedule, and the
// cooperative 128x192 and 128x256 tiles. Left out: 3xTF32 (f32) and TMA with a residual. nvcc's
// code for them differs from NVRTC's, which teeny compiles kernels with (among others, 32-bit
// shared-memory pointers), and at the 168-register cap of 384 threads it spills 4 to 272 bytes
// where NVRTC's spills none (the f16/bf16 GELU + residual TMA kernel spills 28 bytes in both).
TN_ENTRY(linear_bf16_128x128x64_wgmma_pp_tma_bias_gelu_tanh, (384, 1))
(TN_LINEAR_PARAMS(__nv_bfloat16), const __nv_bfloat16* bias, __nv_bfloat16* y, TN_LINEAR_DIMS, TN_TENSOR_MAPS) {
  tn_linear<tn_wgmma_gemm<__nv_bfloat16, 128, 128, 64, 384, 6, true, false, true, 32,
                          Epi<__nv_bfloat16, true, false, tn_act_gelu_tanh>>>(x, weight, bias, y, M, N, K, ldx, ldy,
                                                                              a_map, b_map, c_map);
}
TN_ENTRY(linear_f16_128x128x64_wgmma_pp, (384, 1))(TN_LINEAR_PARAMS(__half), __half* y, TN_LINEAR_DIMS) {
  tn_linear<tn_wgmma_gemm<__half, 128, 128, 64, 384, 6, true, false, false, 32, Epi<__half, false, false>>>(
      x, weight, y, M, N, K, ldx, ldy);
}
TN_ENTRY(linear_bf16_128x192x64_wgmma_bias_silu, (384, 1))
(TN_LINEAR_PARAMS(__nv_bfloat16), const __nv_bfloat16* bias, __nv_bfloat16* y, TN_LINEAR_DIMS) {
  tn_linear<tn_wgmma_gemm<__nv_bfloat16, 128, 192, 64, 384, 5, false, false, false, 32,
                          Epi<__nv_bfloat16, true, false, tn_act_silu>>>(x, weight, bias, y, M, N, K, ldx, ldy);
}
TN_ENTRY(linear_f16_128x256x64_wgmma_bias, (384, 1))
(TN_LINEAR_PARAMS(__half), const __half* bias, __half* y, TN_LINEAR_DIMS) {
  tn_linear<tn_wgmma_gemm<__half, 128, 256, 64, 384, 4, false, false, false, 32, Epi<__half, true, false>>>(
      x, weight, bias, y, M, N, K, ldx, ldy);
}
