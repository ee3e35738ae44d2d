// gemm.cuh's batched entry as the dense ops' gradients take it (ops/grad_gemm.h), for
// kernel_check (see check.cuh): A stored transposed ([K, M], the weight gradients) on CUDA cores
// and mma.sync at both tile sizes, B as [K, N] and as [N, K].
#include "../gemm.cuh"
#include "check.cuh"

template <typename T>
using Epi = tn_gemm_epilogue<T, tn_act_none, false, false>;

TN_ENTRY(grad_linear_dweight_f32_kn_64x64x16_at_b0, (256, 2))
(const float* a, const float* b, float* c, int M, int N, int K, int lda, int ldb) {
  tn_matmul<tn_simt_gemm<64, 64, 16, 256, 4, 4, false, Epi<float>, true>>(a, b, c, M, N, K, lda, ldb);
}
TN_ENTRY(grad_matmul_db_f32_kn_128x128x8_at_b1, (256, 2))
(const float* a, const float* b, float* c, int M, int N, int K, int lda, int ldb, int batch0, long long a_stride0,
 long long b_stride0) {
  tn_matmul<tn_simt_gemm<128, 128, 8, 256, 8, 8, false, Epi<float>, true>>(a, b, c, M, N, K, lda, ldb, batch0,
                                                                           a_stride0, b_stride0);
}
TN_ENTRY(grad_matmul_da_f32_nk_128x128x8_b1, (256, 2))
(const float* a, const float* b, float* c, int M, int N, int K, int lda, int ldb, int batch0, long long a_stride0,
 long long b_stride0) {
  tn_matmul<tn_simt_gemm<128, 128, 8, 256, 8, 8, true, Epi<float>>>(a, b, c, M, N, K, lda, ldb, batch0, a_stride0,
                                                                    b_stride0);
}
TN_ENTRY(grad_linear_dweight_bf16_kn_64x64x32_at_b0, (128, 1))
(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int M, int N, int K, int lda, int ldb) {
  tn_matmul<tn_mma_gemm<__nv_bfloat16, 64, 64, 32, 128, 2, 2, false, Epi<__nv_bfloat16>, true>>(a, b, c, M, N, K, lda,
                                                                                                ldb);
}
TN_ENTRY(grad_matmul_db_f16_kn_128x128x32_at_b2, (256, 1))
(const __half* a, const __half* b, __half* c, int M, int N, int K, int lda, int ldb, int batch1, long long a_stride1,
 long long b_stride1, int batch0, long long a_stride0, long long b_stride0) {
  tn_matmul<tn_mma_gemm<__half, 128, 128, 32, 256, 2, 4, false, Epi<__half>, true>>(
      a, b, c, M, N, K, lda, ldb, batch1, a_stride1, b_stride1, batch0, a_stride0, b_stride0);
}
TN_ENTRY(grad_matmul_da_bf16_nk_128x128x32_b1, (256, 1))
(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int M, int N, int K, int lda, int ldb, int batch0,
 long long a_stride0, long long b_stride0) {
  tn_matmul<tn_mma_gemm<__nv_bfloat16, 128, 128, 32, 256, 2, 4, true, Epi<__nv_bfloat16>>>(
      a, b, c, M, N, K, lda, ldb, batch0, a_stride0, b_stride0);
}
