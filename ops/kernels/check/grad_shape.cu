// grad_shape.cuh instantiated for kernel_check (see check.cuh): grad.sum_to's three layouts over
// dim patterns with the innermost kept or summed, grad.broadcast plain and mean over one to three
// dims, grad.slice; every dtype.
#include "../grad_shape.cuh"
#include "check.cuh"

TN_ENTRY(grad_sum_to_f32_rk_columns, (256))
(const float* dy, float* y, long long outputs, long long reduced, long long d0, long long s0, long long d1,
 long long s1) {
  tn_sum_to_columns<float, 8, 'r', 'k'>(dy, y, outputs, reduced, d0, s0, d1, s1);
}
TN_ENTRY(grad_sum_to_bf16_krk_columns, (256))
(const __nv_bfloat16* dy, __nv_bfloat16* y, long long outputs, long long reduced, long long d0, long long s0,
 long long d1, long long s1, long long d2, long long s2) {
  tn_sum_to_columns<__nv_bfloat16, 8, 'k', 'r', 'k'>(dy, y, outputs, reduced, d0, s0, d1, s1, d2, s2);
}
TN_ENTRY(grad_sum_to_f16_rkr_rows, (256))
(const __half* dy, __half* y, long long outputs, long long reduced, long long d0, long long s0, long long d1,
 long long s1, long long d2, long long s2) {
  tn_sum_to_rows<__half, 32, 8, 'r', 'k', 'r'>(dy, y, outputs, reduced, d0, s0, d1, s1, d2, s2);
}
TN_ENTRY(grad_sum_to_f32_kr_block, (256))
(const float* dy, float* y, long long outputs, long long reduced, long long d0, long long s0, long long d1,
 long long s1) {
  tn_sum_to_rows<float, 256, 1, 'k', 'r'>(dy, y, outputs, reduced, d0, s0, d1, s1);
}
TN_ENTRY(grad_broadcast_f32_d1, (256))
(const float* dy, float* y, long long n, long long count, long long d0, long long s0) {
  tn_broadcast<float, 256, false>(dy, y, n, count, d0, s0);
}
TN_ENTRY(grad_broadcast_bf16_d2_mean, (256))
(const __nv_bfloat16* dy, __nv_bfloat16* y, long long n, long long count, long long d0, long long s0, long long d1,
 long long s1) {
  tn_broadcast<__nv_bfloat16, 256, true>(dy, y, n, count, d0, s0, d1, s1);
}
TN_ENTRY(grad_broadcast_f16_d3_mean, (256))
(const __half* dy, __half* y, long long n, long long count, long long d0, long long s0, long long d1, long long s1,
 long long d2, long long s2) {
  tn_broadcast<__half, 256, true>(dy, y, n, count, d0, s0, d1, s1, d2, s2);
}
TN_ENTRY(grad_slice_f32, (256))
(const float* dy, float* y, long long outer, int cols, int last, int dy_stride, long long in_cols,
 long long col_offset) {
  tn_slice<float, 256>(dy, y, outer, cols, last, dy_stride, in_cols, col_offset);
}
TN_ENTRY(grad_slice_bf16, (256))
(const __nv_bfloat16* dy, __nv_bfloat16* y, long long outer, int cols, int last, int dy_stride, long long in_cols,
 long long col_offset) {
  tn_slice<__nv_bfloat16, 256>(dy, y, outer, cols, last, dy_stride, in_cols, col_offset);
}
