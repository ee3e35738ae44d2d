// softmax.cuh instantiated for kernel_check (see check.cuh): the row plans of plan_rows (a warp
// with 4 rows a block, a whole block, the streaming path beyond the cache) and the column kernel.
#include "../softmax.cuh"
#include "check.cuh"

TN_ENTRY(softmax_rows_f32_t32_i1, (128))(const float* x, float* y, long long rows, int cols, int x_stride) {
  tn_softmax_rows<float, false, 32, 4, 1>(x, y, rows, cols, x_stride);
}
TN_ENTRY(log_softmax_rows_f32_t32_i8, (128))(const float* x, float* y, long long rows, int cols, int x_stride) {
  tn_softmax_rows<float, true, 32, 4, 8>(x, y, rows, cols, x_stride);
}
TN_ENTRY(softmax_rows_f32_t512_i4, (512))(const float* x, float* y, long long rows, int cols, int x_stride) {
  tn_softmax_rows<float, false, 512, 1, 4>(x, y, rows, cols, x_stride);
}
TN_ENTRY(softmax_rows_bf16_t256_i2, (256))
(const __nv_bfloat16* x, __nv_bfloat16* y, long long rows, int cols, int x_stride) {
  tn_softmax_rows<__nv_bfloat16, false, 256, 1, 2>(x, y, rows, cols, x_stride);
}
TN_ENTRY(log_softmax_rows_f16_t512_i5, (512))(const __half* x, __half* y, long long rows, int cols, int x_stride) {
  tn_softmax_rows<__half, true, 512, 1, 5>(x, y, rows, cols, x_stride);
}
TN_ENTRY(softmax_columns_f32, (256))
(const float* x, float* y, long long outer, int axis_len, long long inner, int last, int x_stride) {
  tn_softmax_columns<float, false, 256>(x, y, outer, axis_len, inner, last, x_stride);
}
TN_ENTRY(log_softmax_columns_bf16, (256))
(const __nv_bfloat16* x, __nv_bfloat16* y, long long outer, int axis_len, long long inner, int last, int x_stride) {
  tn_softmax_columns<__nv_bfloat16, true, 256>(x, y, outer, axis_len, inner, last, x_stride);
}
