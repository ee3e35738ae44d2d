// vision.cuh instantiated for kernel_check (see check.cuh).
#include "../vision.cuh"
#include "check.cuh"

TN_ENTRY(batchnorm2d_v4, (256))
(const float* x, const float* weight, const float* bias, const float* running_mean, const float* running_var, float* y,
 float eps, long long count, int plane, int channels) {
  tn_batchnorm2d<256, 4>(x, weight, bias, running_mean, running_var, y, eps, count, plane, channels);
}
TN_ENTRY(batchnorm2d_v1, (256))
(const float* x, const float* weight, const float* bias, const float* running_mean, const float* running_var, float* y,
 float eps, long long count, int plane, int channels) {
  tn_batchnorm2d<256, 1>(x, weight, bias, running_mean, running_var, y, eps, count, plane, channels);
}
TN_ENTRY(upsample_nearest2d_s2, (256))(const float* x, float* y, long long count, int in_h, int in_w) {
  tn_upsample_nearest2d<256, 2>(x, y, count, in_h, in_w);
}
TN_ENTRY(upsample_nearest2d_s3, (256))(const float* x, float* y, long long count, int in_h, int in_w) {
  tn_upsample_nearest2d<256, 3>(x, y, count, in_h, in_w);
}
TN_ENTRY(yolo_detect_decode, (128))
(const float* boxes, const float* anchor_x, const float* anchor_y, const float* strides, float* y) {
  tn_yolo_detect_decode<128, 1344>(boxes, anchor_x, anchor_y, strides, y);
}
