// pool2d.cuh instantiated for kernel_check (see check.cuh).
#include "../pool2d.cuh"
#include "check.cuh"

TN_ENTRY(maxpool2d_k3x3s2x2p1x1, (256))
(const float* x, float* y, long long count, int in_h, int in_w, int out_h, int out_w) {
  tn_pool2d<float, 256, tn_window<3, 3, 2, 2, 1, 1, 1, 1>, tn_pool_max>(x, y, count, in_h, in_w, out_h, out_w);
}
TN_ENTRY(avgpool2d_k2x3s1x2, (256))
(const float* x, float* y, long long count, int in_h, int in_w, int out_h, int out_w) {
  tn_pool2d<float, 256, tn_window<2, 3, 1, 2, 0, 0, 1, 1>, tn_pool_avg>(x, y, count, in_h, in_w, out_h, out_w);
}
TN_ENTRY(global_avgpool_t32_v1, (256))(const float* x, float* y, int planes, int plane) {
  tn_global_avgpool<float, 256, 32, 1>(x, y, planes, plane);
}
TN_ENTRY(global_avgpool_t256_v4, (256))(const float* x, float* y, int planes, int plane) {
  tn_global_avgpool<float, 256, 256, 4>(x, y, planes, plane);
}
TN_ENTRY(maxpool2d_bf16_k2x2s2x2, (256))
(const __nv_bfloat16* x, __nv_bfloat16* y, long long count, int in_h, int in_w, int out_h, int out_w) {
  tn_pool2d<__nv_bfloat16, 256, tn_window<2, 2, 2, 2, 0, 0, 1, 1>, tn_pool_max>(x, y, count, in_h, in_w, out_h, out_w);
}
TN_ENTRY(avgpool2d_f16_k3x3s1x1p1x1, (256))
(const __half* x, __half* y, long long count, int in_h, int in_w, int out_h, int out_w) {
  tn_pool2d<__half, 256, tn_window<3, 3, 1, 1, 1, 1, 1, 1>, tn_pool_avg>(x, y, count, in_h, in_w, out_h, out_w);
}
TN_ENTRY(global_avgpool_bf16_t256_v8, (256))(const __nv_bfloat16* x, __nv_bfloat16* y, int planes, int plane) {
  tn_global_avgpool<__nv_bfloat16, 256, 256, 8>(x, y, planes, plane);
}
