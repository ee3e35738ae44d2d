// reduce.cuh instantiated for kernel_check (see check.cuh): each reduction on the row kernel
// (warp-per-row and block-per-row plans) and the column kernel.
#include "../reduce.cuh"
#include "check.cuh"

TN_ENTRY(reduce_sum_rows_f32_t32_i1, (128))(const float* x, float* y, long long rows, int len, int x_stride) {
  tn_reduce_rows<float, tn_reduce_sum, 32, 4, 1>(x, y, rows, len, x_stride);
}
TN_ENTRY(reduce_mean_rows_bf16_t256_i2, (256))
(const __nv_bfloat16* x, __nv_bfloat16* y, long long rows, int len, int x_stride) {
  tn_reduce_rows<__nv_bfloat16, tn_reduce_mean, 256, 1, 2>(x, y, rows, len, x_stride);
}
TN_ENTRY(reduce_max_rows_f32_t256_i4, (256))(const float* x, float* y, long long rows, int len, int x_stride) {
  tn_reduce_rows<float, tn_reduce_max, 256, 1, 4>(x, y, rows, len, x_stride);
}
TN_ENTRY(reduce_sum_columns_f16, (256))
(const __half* x, __half* y, long long outer, int len, long long inner, int last, int x_stride) {
  tn_reduce_columns<__half, tn_reduce_sum, 256>(x, y, outer, len, inner, last, x_stride);
}
TN_ENTRY(reduce_mean_columns_f32, (256))
(const float* x, float* y, long long outer, int len, long long inner, int last, int x_stride) {
  tn_reduce_columns<float, tn_reduce_mean, 256>(x, y, outer, len, inner, last, x_stride);
}
TN_ENTRY(reduce_max_columns_bf16, (256))
(const __nv_bfloat16* x, __nv_bfloat16* y, long long outer, int len, long long inner, int last, int x_stride) {
  tn_reduce_columns<__nv_bfloat16, tn_reduce_max, 256>(x, y, outer, len, inner, last, x_stride);
}
