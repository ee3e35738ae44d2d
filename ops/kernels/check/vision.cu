// vision.cuh instantiated for kernel_check (see check.cuh).
#include "../vision.cuh"
#include "check.cuh"

TN_ENTRY(batchnorm2d_v4, (256))
(const float* x, const float* weight, const float* bias, const float* running_mean, const float* running_var, float* y,
 float eps, long long count, int plane, int channels) {
  tn_batchnorm2d<float, 256, 4>(x, weight, bias, running_mean, running_var, y, eps, count, plane, channels);
}
TN_ENTRY(batchnorm2d_v1, (256))
(const float* x, const float* weight, const float* bias, const float* running_mean, const float* running_var, float* y,
 float eps, long long count, int plane, int channels) {
  tn_batchnorm2d<float, 256, 1>(x, weight, bias, running_mean, running_var, y, eps, count, plane, channels);
}
TN_ENTRY(upsample_nearest2d_s2, (256))(const float* x, float* y, long long count, int in_h, int in_w) {
  tn_upsample_nearest2d<float, 256, 2>(x, y, count, in_h, in_w);
}
TN_ENTRY(upsample_nearest2d_s3, (256))(const float* x, float* y, long long count, int in_h, int in_w) {
  tn_upsample_nearest2d<float, 256, 3>(x, y, count, in_h, in_w);
}
TN_ENTRY(yolo_detect_decode, (128))
(const float* boxes, const float* anchor_x, const float* anchor_y, const float* strides, float* y) {
  tn_yolo_detect_decode<float, 128, 1344>(boxes, anchor_x, anchor_y, strides, y);
}
TN_ENTRY(batchnorm2d_bf16_v8, (256))
(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias, const __nv_bfloat16* running_mean,
 const __nv_bfloat16* running_var, __nv_bfloat16* y, float eps, long long count, int plane, int channels) {
  tn_batchnorm2d<__nv_bfloat16, 256, 8>(x, weight, bias, running_mean, running_var, y, eps, count, plane, channels);
}
TN_ENTRY(upsample_nearest2d_f16_s2, (256))(const __half* x, __half* y, long long count, int in_h, int in_w) {
  tn_upsample_nearest2d<__half, 256, 2>(x, y, count, in_h, in_w);
}
TN_ENTRY(yolo_detect_decode_f16, (128))
(const __half* boxes, const __half* anchor_x, const __half* anchor_y, const __half* strides, __half* y) {
  tn_yolo_detect_decode<__half, 128, 1344>(boxes, anchor_x, anchor_y, strides, y);
}
