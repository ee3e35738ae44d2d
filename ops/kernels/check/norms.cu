// norms.cuh instantiated for kernel_check (see check.cuh): each argument list (layernorm with and
// without weight and bias, rmsnorm) on warp-per-row, block-per-row and long-row plans.
#include "../norms.cuh"
#include "check.cuh"

TN_ENTRY(layernorm_f32_t32_i6, (128))
(const float* x, const float* weight, const float* bias, float* y, long long rows, int cols, int x_stride, float eps) {
  tn_layernorm<float, 32, 4, 6>(x, weight, bias, y, rows, cols, x_stride, eps);
}
TN_ENTRY(layernorm_bf16_t32_i3, (128))
(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias, __nv_bfloat16* y, long long rows,
 int cols, int x_stride, float eps) {
  tn_layernorm<__nv_bfloat16, 32, 4, 3>(x, weight, bias, y, rows, cols, x_stride, eps);
}
TN_ENTRY(layernorm_f16_t512_i5, (512))
(const __half* x, const __half* weight, const __half* bias, __half* y, long long rows, int cols, int x_stride,
 float eps) {
  tn_layernorm<__half, 512, 1, 5>(x, weight, bias, y, rows, cols, x_stride, eps);
}
TN_ENTRY(layernorm_plain_f32_t256_i4, (256))
(const float* x, float* y, long long rows, int cols, int x_stride, float eps) {
  tn_layernorm_plain<float, 256, 1, 4>(x, y, rows, cols, x_stride, eps);
}
TN_ENTRY(rmsnorm_f32_t512_i4, (512))
(const float* x, const float* weight, float* y, long long rows, int cols, int x_stride, float eps) {
  tn_rmsnorm<float, 512, 1, 4>(x, weight, y, rows, cols, x_stride, eps);
}
TN_ENTRY(rmsnorm_bf16_t256_i2, (256))
(const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* y, long long rows, int cols, int x_stride,
 float eps) {
  tn_rmsnorm<__nv_bfloat16, 256, 1, 2>(x, weight, y, rows, cols, x_stride, eps);
}
