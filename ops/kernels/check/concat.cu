// concat.cuh instantiated for kernel_check (see check.cuh), each dtype.
#include "../concat.cuh"
#include "check.cuh"

TN_ENTRY(concat_f32, (256))
(const float* x, float* y, long long outer, int cols, int last, int x_stride, long long out_cols,
 long long col_offset) {
  tn_concat<float, 256>(x, y, outer, cols, last, x_stride, out_cols, col_offset);
}
TN_ENTRY(concat_bf16, (256))
(const __nv_bfloat16* x, __nv_bfloat16* y, long long outer, int cols, int last, int x_stride, long long out_cols,
 long long col_offset) {
  tn_concat<__nv_bfloat16, 256>(x, y, outer, cols, last, x_stride, out_cols, col_offset);
}
TN_ENTRY(concat_f16, (256))
(const __half* x, __half* y, long long outer, int cols, int last, int x_stride, long long out_cols,
 long long col_offset) {
  tn_concat<__half, 256>(x, y, outer, cols, last, x_stride, out_cols, col_offset);
}
