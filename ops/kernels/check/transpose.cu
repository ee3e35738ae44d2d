// transpose.cuh instantiated for kernel_check (see check.cuh): the tiled kernel per dtype, and
// the gather at ranks 0, 3 and 4, with and without the last dim kept.
#include "../transpose.cuh"
#include "check.cuh"

TN_ENTRY(transpose_tiled_f32, (256))(const float* x, float* y, long long batch, int rows, int cols, int x_stride) {
  tn_transpose_tiled<float, 32, 8>(x, y, batch, rows, cols, x_stride);
}
TN_ENTRY(transpose_tiled_bf16, (256))
(const __nv_bfloat16* x, __nv_bfloat16* y, long long batch, int rows, int cols, int x_stride) {
  tn_transpose_tiled<__nv_bfloat16, 32, 8>(x, y, batch, rows, cols, x_stride);
}
TN_ENTRY(transpose_tiled_f16, (256))(const __half* x, __half* y, long long batch, int rows, int cols, int x_stride) {
  tn_transpose_tiled<__half, 32, 8>(x, y, batch, rows, cols, x_stride);
}
TN_ENTRY(transpose_rank0_f32, (256))(const float* x, float* y, long long n) {
  tn_transpose_gather<float, 256, false>(x, y, n);
}
TN_ENTRY(transpose_201_f16, (256))
(const __half* x, __half* y, long long n, long long d0, long long s0, long long d1, long long s1, long long d2,
 long long s2) {
  tn_transpose_gather<__half, 256, false>(x, y, n, d0, s0, d1, s1, d2, s2);
}
TN_ENTRY(transpose_0213_bf16, (256))
(const __nv_bfloat16* x, __nv_bfloat16* y, long long n, long long d0, long long s0, long long d1, long long s1,
 long long d2, long long s2, long long d3, long long s3) {
  tn_transpose_gather<__nv_bfloat16, 256, true>(x, y, n, d0, s0, d1, s1, d2, s2, d3, s3);
}
