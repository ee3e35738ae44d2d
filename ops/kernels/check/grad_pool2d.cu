// grad_pool2d.cuh instantiated for kernel_check (see check.cuh).
#include "../grad_pool2d.cuh"
#include "check.cuh"

TN_ENTRY(grad_maxpool2d_k3x3s2x2p1x1, (256))
(const float* dy, const float* x, float* dx, long long count, int in_h, int in_w, int out_h, int out_w) {
  tn_maxpool2d_grad<float, 256, tn_window<3, 3, 2, 2, 1, 1, 1, 1>>(dy, x, dx, count, in_h, in_w, out_h, out_w);
}
TN_ENTRY(grad_maxpool2d_bf16_k2x3s1x2, (256))
(const __nv_bfloat16* dy, const __nv_bfloat16* x, __nv_bfloat16* dx, long long count, int in_h, int in_w, int out_h,
 int out_w) {
  tn_maxpool2d_grad<__nv_bfloat16, 256, tn_window<2, 3, 1, 2, 0, 0, 1, 1>>(dy, x, dx, count, in_h, in_w, out_h, out_w);
}
TN_ENTRY(grad_avgpool2d_f16_k3x3s2x2p1x1, (256))
(const __half* dy, __half* dx, long long count, int in_h, int in_w, int out_h, int out_w) {
  tn_avgpool2d_grad<__half, 256, tn_window<3, 3, 2, 2, 1, 1, 1, 1>>(dy, dx, count, in_h, in_w, out_h, out_w);
}
TN_ENTRY(grad_avgpool2d_k5x5s1x1p2x2, (256))
(const float* dy, float* dx, long long count, int in_h, int in_w, int out_h, int out_w) {
  tn_avgpool2d_grad<float, 256, tn_window<5, 5, 1, 1, 2, 2, 1, 1>>(dy, dx, count, in_h, in_w, out_h, out_w);
}
TN_ENTRY(grad_upsample_nearest2d_s2, (256))
(const float* dy, float* dx, long long count, int in_h, int in_w, int out_h, int out_w) {
  tn_upsample_nearest2d_grad<float, 256, 2>(dy, dx, count, in_h, in_w, out_h, out_w);
}
TN_ENTRY(grad_upsample_nearest2d_bf16_s3, (256))
(const __nv_bfloat16* dy, __nv_bfloat16* dx, long long count, int in_h, int in_w, int out_h, int out_w) {
  tn_upsample_nearest2d_grad<__nv_bfloat16, 256, 3>(dy, dx, count, in_h, in_w, out_h, out_w);
}
