// grad_norms.cuh instantiated for kernel_check (see check.cuh): dx with and without a weight at
// the row plans ops/grad_norm_dx.cpp picks (a warp with 4 rows a block, blocks of 256 and 512),
// and the row statistics.
#include "../grad_norms.cuh"
#include "check.cuh"

TN_ENTRY(grad_layernorm_dx_f32_t32_i2, (128))
(const float* dy, const float* x, const float* weight, float* dx, long long rows, int cols, int dy_stride, int x_stride,
 float eps) {
  tn_norm_grad_dx<float, false, 32, 4, 2>(dy, x, weight, dx, rows, cols, dy_stride, x_stride, eps);
}
TN_ENTRY(grad_rmsnorm_dx_bf16_t512_i1, (512))
(const __nv_bfloat16* dy, const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* dx, long long rows,
 int cols, int dy_stride, int x_stride, float eps) {
  tn_norm_grad_dx<__nv_bfloat16, true, 512, 1, 1>(dy, x, weight, dx, rows, cols, dy_stride, x_stride, eps);
}
TN_ENTRY(grad_layernorm_dx_plain_f16_t256_i1, (256))
(const __half* dy, const __half* x, __half* dx, long long rows, int cols, int dy_stride, int x_stride, float eps) {
  tn_norm_grad_dx_plain<__half, 256, 1, 1>(dy, x, dx, rows, cols, dy_stride, x_stride, eps);
}
TN_ENTRY(grad_layernorm_stats_bf16_t32_i2, (128))
(const __nv_bfloat16* x, float* stats, long long rows, int cols, int x_stride, float eps) {
  tn_norm_row_stats<__nv_bfloat16, false, 32, 4, 2>(x, stats, rows, cols, x_stride, eps);
}
TN_ENTRY(grad_rmsnorm_stats_f32_t512_i4, (512))
(const float* x, float* stats, long long rows, int cols, int x_stride, float eps) {
  tn_norm_row_stats<float, true, 512, 1, 4>(x, stats, rows, cols, x_stride, eps);
}
