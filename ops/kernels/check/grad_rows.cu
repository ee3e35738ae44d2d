// grad_rows.cuh instantiated for kernel_check (see check.cuh): grad.softmax's row plans (a warp
// per row, a block per row at the register cap) and columns in both forms, grad.reduce_max's
// rows and columns; every dtype.
#include "../grad_rows.cuh"
#include "check.cuh"

TN_ENTRY(grad_softmax_rows_f32_t32_i4, (128))
(const float* dy, const float* y, float* dx, long long rows, int cols, int dy_stride, int y_stride) {
  tn_softmax_grad_rows<float, false, 32, 4, 4>(dy, y, dx, rows, cols, dy_stride, y_stride);
}
TN_ENTRY(grad_log_softmax_rows_bf16_t512_i2, (512))
(const __nv_bfloat16* dy, const __nv_bfloat16* y, __nv_bfloat16* dx, long long rows, int cols, int dy_stride,
 int y_stride) {
  tn_softmax_grad_rows<__nv_bfloat16, true, 512, 1, 2>(dy, y, dx, rows, cols, dy_stride, y_stride);
}
TN_ENTRY(grad_softmax_rows_f16_t256_i2, (256))
(const __half* dy, const __half* y, __half* dx, long long rows, int cols, int dy_stride, int y_stride) {
  tn_softmax_grad_rows<__half, false, 256, 1, 2>(dy, y, dx, rows, cols, dy_stride, y_stride);
}
TN_ENTRY(grad_softmax_rows_f32_t512_i4, (512))
(const float* dy, const float* y, float* dx, long long rows, int cols, int dy_stride, int y_stride) {
  tn_softmax_grad_rows<float, false, 512, 1, 4>(dy, y, dx, rows, cols, dy_stride, y_stride);
}
TN_ENTRY(grad_softmax_columns_f32, (256))
(const float* dy, const float* y, float* dx, long long outer, int axis_len, long long inner, int last, int dy_stride,
 int y_stride) {
  tn_softmax_grad_columns<float, false, 256>(dy, y, dx, outer, axis_len, inner, last, dy_stride, y_stride);
}
TN_ENTRY(grad_log_softmax_columns_f16, (256))
(const __half* dy, const __half* y, __half* dx, long long outer, int axis_len, long long inner, int last, int dy_stride,
 int y_stride) {
  tn_softmax_grad_columns<__half, true, 256>(dy, y, dx, outer, axis_len, inner, last, dy_stride, y_stride);
}
TN_ENTRY(grad_reduce_max_rows_bf16, (256))
(const __nv_bfloat16* dy, const __nv_bfloat16* x, const __nv_bfloat16* y, __nv_bfloat16* dx, long long rows, int len,
 int x_stride, int r_last, int dy_stride, int y_stride) {
  tn_max_grad_rows<__nv_bfloat16, 8>(dy, x, y, dx, rows, len, x_stride, r_last, dy_stride, y_stride);
}
TN_ENTRY(grad_reduce_max_columns_f32, (256))
(const float* dy, const float* x, const float* y, float* dx, long long outer, int len, long long inner, int x_last,
 int x_stride, int r_last, int dy_stride, int y_stride) {
  tn_max_grad_columns<float, 256>(dy, x, y, dx, outer, len, inner, x_last, x_stride, r_last, dy_stride, y_stride);
}
