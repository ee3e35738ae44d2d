// loss.cuh instantiated for kernel_check (see check.cuh): cross entropy's row plans (a warp with 4
// rows a block, a block of 256 or 512 streaming a long row) in each dtype, the squared error's
// grid-stride sum in each dtype, both means, and cross entropy's gradient (its count, and its rows
// in the same plans).
#include "../loss.cuh"
#include "check.cuh"

TN_ENTRY(cross_entropy_partials_f32_t32_i4, (128))
(const float* logits, const int* targets, float* partials, long long rows, int classes, int x_stride, int dx_stride,
 int targets_last, int targets_stride, int ignore_index) {
  tn_cross_entropy_partials<float, 32, 4, 4>(logits, targets, partials, rows, classes, x_stride, targets_last,
                                             targets_stride, ignore_index);
}
TN_ENTRY(cross_entropy_partials_bf16_t512_i4, (512))
(const __nv_bfloat16* logits, const int* targets, float* partials, long long rows, int classes, int x_stride,
 int dx_stride, int targets_last, int targets_stride, int ignore_index) {
  tn_cross_entropy_partials<__nv_bfloat16, 512, 1, 4>(logits, targets, partials, rows, classes, x_stride, targets_last,
                                                      targets_stride, ignore_index);
}
TN_ENTRY(cross_entropy_partials_f16_t256_i4, (256))
(const __half* logits, const int* targets, float* partials, long long rows, int classes, int x_stride, int dx_stride,
 int targets_last, int targets_stride, int ignore_index) {
  tn_cross_entropy_partials<__half, 256, 1, 4>(logits, targets, partials, rows, classes, x_stride, targets_last,
                                               targets_stride, ignore_index);
}
TN_ENTRY(mse_partials_f32, (256))
(const float* a, const float* b, float* partials, long long rows, int cols, int a_stride, int b_stride) {
  tn_mse_partials<float, 256, 4>(a, b, partials, rows, cols, a_stride, b_stride);
}
TN_ENTRY(mse_partials_bf16, (256))
(const __nv_bfloat16* a, const __nv_bfloat16* b, float* partials, long long rows, int cols, int a_stride,
 int b_stride) {
  tn_mse_partials<__nv_bfloat16, 256, 4>(a, b, partials, rows, cols, a_stride, b_stride);
}
TN_ENTRY(mse_partials_f16, (256))
(const __half* a, const __half* b, float* partials, long long rows, int cols, int a_stride, int b_stride) {
  tn_mse_partials<__half, 256, 4>(a, b, partials, rows, cols, a_stride, b_stride);
}
TN_ENTRY(loss_mean_counted, (256))(const float* partials, float* loss, int parts, long long n) {
  tn_loss_mean<256, true>(partials, loss, parts, n);
}
TN_ENTRY(loss_mean, (256))(const float* partials, float* loss, int parts, long long n) {
  tn_loss_mean<256, false>(partials, loss, parts, n);
}
TN_ENTRY(grad_cross_entropy_count, (1024))
(const int* targets, float* inv_count, long long rows, int targets_last, int targets_stride, int ignore_index) {
  tn_cross_entropy_count<1024>(targets, inv_count, rows, targets_last, targets_stride, ignore_index);
}
TN_ENTRY(grad_cross_entropy_f32_t32_i4, (128))
(const float* logits, const int* targets, const float* inv_count, float* dx, long long rows, int classes, int x_stride,
 int dx_stride, int targets_last, int targets_stride, int ignore_index) {
  tn_cross_entropy_grad<float, 32, 4, 4>(logits, targets, inv_count, dx, rows, classes, x_stride, dx_stride,
                                         targets_last, targets_stride, ignore_index);
}
TN_ENTRY(grad_cross_entropy_bf16_t512_i4, (512))
(const __nv_bfloat16* logits, const int* targets, const float* inv_count, __nv_bfloat16* dx, long long rows,
 int classes, int x_stride, int dx_stride, int targets_last, int targets_stride, int ignore_index) {
  tn_cross_entropy_grad<__nv_bfloat16, 512, 1, 4>(logits, targets, inv_count, dx, rows, classes, x_stride, dx_stride,
                                                  targets_last, targets_stride, ignore_index);
}
TN_ENTRY(grad_cross_entropy_f16_t256_i4, (256))
(const __half* logits, const int* targets, const float* inv_count, __half* dx, long long rows, int classes,
 int x_stride, int dx_stride, int targets_last, int targets_stride, int ignore_index) {
  tn_cross_entropy_grad<__half, 256, 1, 4>(logits, targets, inv_count, dx, rows, classes, x_stride, dx_stride,
                                           targets_last, targets_stride, ignore_index);
}
