// batchnorm_train.cuh instantiated for kernel_check (see check.cuh).
#include "../batchnorm_train.cuh"
#include "check.cuh"

TN_ENTRY(bn_batch_stats_f32, (256))(const float* x, float* stats, int batch, int channels, int plane, float eps) {
  tn_bn_batch_stats<float, 256>(x, stats, batch, channels, plane, eps);
}
TN_ENTRY(bn_train_apply_bf16, (256))
(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias, const float* stats, __nv_bfloat16* y,
 long long count, int plane, int channels) {
  tn_bn_train_apply<__nv_bfloat16, 256>(x, weight, bias, stats, y, count, plane, channels);
}
TN_ENTRY(bn_grad_sums_f16, (256))
(const __half* dy, const __half* x, const float* stats, float* sums, int batch, int channels, int plane) {
  tn_bn_grad_sums<__half, 256>(dy, x, stats, sums, batch, channels, plane);
}
TN_ENTRY(bn_dweight_f32, (256))
(const float* dy, const float* x, const float* stats, float* dweight, int batch, int channels, int plane) {
  tn_bn_dweight<float, 256>(dy, x, stats, dweight, batch, channels, plane);
}
TN_ENTRY(bn_train_dx_f32, (256))
(const float* dy, const float* x, const float* weight, const float* stats, const float* sums, float* dx,
 long long count, int plane, int channels, long long n) {
  tn_bn_train_dx<float, 256>(dy, x, weight, stats, sums, dx, count, plane, channels, n);
}
TN_ENTRY(bn_running_stats_bf16, (256))
(const __nv_bfloat16* x, __nv_bfloat16* running_mean, __nv_bfloat16* running_var, int batch, int channels, int plane,
 float momentum, const int* step) {
  tn_bn_running_stats<__nv_bfloat16, 256>(x, running_mean, running_var, batch, channels, plane, momentum, step);
}
