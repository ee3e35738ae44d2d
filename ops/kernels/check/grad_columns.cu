// grad_columns.cuh instantiated for kernel_check (see check.cuh): both partials entries in each
// dtype at the part size ops/grad_columns.cpp uses, and the sums of the parts.
#include "../grad_columns.cuh"
#include "check.cuh"

TN_ENTRY(grad_sum_rows_partials_f32, (256))
(const float* dy, float* partials, long long rows, int cols, int dy_stride) {
  tn_sum_rows_partials<float, 8, 256>(dy, partials, rows, cols, dy_stride);
}
TN_ENTRY(grad_sum_rows_partials_bf16, (256))
(const __nv_bfloat16* dy, float* partials, long long rows, int cols, int dy_stride) {
  tn_sum_rows_partials<__nv_bfloat16, 8, 256>(dy, partials, rows, cols, dy_stride);
}
TN_ENTRY(grad_layernorm_dweight_partials_f16, (256))
(const __half* dy, const __half* x, const float* stats, float* partials, long long rows, int cols, int dy_stride,
 int x_stride) {
  tn_norm_dweight_partials<__half, 8, 256>(dy, x, stats, partials, rows, cols, dy_stride, x_stride);
}
TN_ENTRY(grad_rmsnorm_dweight_partials_f32, (256))
(const float* dy, const float* x, const float* stats, float* partials, long long rows, int cols, int dy_stride,
 int x_stride) {
  tn_norm_dweight_partials<float, 8, 256>(dy, x, stats, partials, rows, cols, dy_stride, x_stride);
}
TN_ENTRY(grad_column_sums_f32, (256))(const float* partials, float* out, int parts, int cols) {
  tn_column_sums<float, 256>(partials, out, parts, cols);
}
TN_ENTRY(grad_column_sums_bf16, (256))(const float* partials, __nv_bfloat16* out, int parts, int cols) {
  tn_column_sums<__nv_bfloat16, 256>(partials, out, parts, cols);
}
