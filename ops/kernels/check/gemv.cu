// gemv.cuh instantiated for kernel_check (see check.cuh): the small-M linear classes as
// ops/linear.cpp launches them, with and without a bias, a residual and an activation.
#include "../gemm.cuh"
#include "check.cuh"

template <typename T, bool kBias, bool kResidual, template <typename> class Act = tn_act_none>
using Epi = tn_gemm_epilogue<T, Act, kBias, kResidual>;

TN_ENTRY(linear_bf16_gemv_bias, (512))
(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias, __nv_bfloat16* y, int M, int N, int K,
 int ldx, int ldy) {
  tn_linear<tn_gemv_mma<__nv_bfloat16, 16, 2, 2, Epi<__nv_bfloat16, true, false>>>(x, weight, bias, y, M, N, K, ldx,
                                                                                   ldy);
}
TN_ENTRY(linear_f16_gemv_gelu_res, (512))
(const __half* x, const __half* weight, const __half* residual, __half* y, int M, int N, int K, int ldx, int ldy,
 int ldr) {
  tn_linear_residual<tn_gemv_mma<__half, 16, 2, 2, Epi<__half, false, true, tn_act_gelu>>>(x, weight, residual, y, M, N,
                                                                                           K, ldx, ldy, ldr);
}
TN_ENTRY(linear_bf16_gemv_m8_bias, (512))
(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias, __nv_bfloat16* y, int M, int N, int K,
 int ldx, int ldy) {
  tn_linear<tn_gemv_mma<__nv_bfloat16, 16, 1, 2, Epi<__nv_bfloat16, true, false>>>(x, weight, bias, y, M, N, K, ldx,
                                                                                   ldy);
}
TN_ENTRY(linear_f32_gemv_m1_bias, (256))
(const float* x, const float* weight, const float* bias, float* y, int M, int N, int K, int ldx, int ldy) {
  tn_linear<tn_gemv_simt<256, 4, 1, Epi<float, true, false>>>(x, weight, bias, y, M, N, K, ldx, ldy);
}
TN_ENTRY(linear_f32_gemv_m4_bias, (256))
(const float* x, const float* weight, const float* bias, float* y, int M, int N, int K, int ldx, int ldy) {
  tn_linear<tn_gemv_simt<256, 4, 4, Epi<float, true, false>>>(x, weight, bias, y, M, N, K, ldx, ldy);
}
TN_ENTRY(linear_f32_gemv_m8_bias, (256))
(const float* x, const float* weight, const float* bias, float* y, int M, int N, int K, int ldx, int ldy) {
  tn_linear<tn_gemv_simt<256, 4, 8, Epi<float, true, false>>>(x, weight, bias, y, M, N, K, ldx, ldy);
}
TN_ENTRY(linear_f32_gemv_m16_bias, (128))
(const float* x, const float* weight, const float* bias, float* y, int M, int N, int K, int ldx, int ldy) {
  tn_linear<tn_gemv_simt<128, 4, 16, Epi<float, true, false>>>(x, weight, bias, y, M, N, K, ldx, ldy);
}
TN_ENTRY(linear_f32_gemv_relu_res, (128))
(const float* x, const float* weight, const float* residual, float* y, int M, int N, int K, int ldx, int ldy, int ldr) {
  tn_linear_residual<tn_gemv_simt<128, 4, 16, Epi<float, false, true, tn_act_relu>>>(x, weight, residual, y, M, N, K,
                                                                                     ldx, ldy, ldr);
}
