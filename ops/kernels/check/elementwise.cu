// elementwise.cuh and activation.cuh instantiated for kernel_check (see check.cuh).
#include "../elementwise.cuh"
#include "check.cuh"

TN_ENTRY(unary_relu_f32, (256))(const float* x, float* y, long long rows, int cols, int x_stride) {
  tn_unary<float, 256, 4, tn_act_relu>(x, y, rows, cols, x_stride);
}
TN_ENTRY(unary_silu_f32, (256))(const float* x, float* y, long long rows, int cols, int x_stride) {
  tn_unary<float, 256, 4, tn_act_silu>(x, y, rows, cols, x_stride);
}
TN_ENTRY(unary_sigmoid_f16, (256))(const __half* x, __half* y, long long rows, int cols, int x_stride) {
  tn_unary<__half, 256, 4, tn_act_sigmoid>(x, y, rows, cols, x_stride);
}
TN_ENTRY(unary_tanh_bf16, (256))(const __nv_bfloat16* x, __nv_bfloat16* y, long long rows, int cols, int x_stride) {
  tn_unary<__nv_bfloat16, 256, 4, tn_act_tanh>(x, y, rows, cols, x_stride);
}
TN_ENTRY(unary_gelu_tanh_bf16, (256))
(const __nv_bfloat16* x, __nv_bfloat16* y, long long rows, int cols, int x_stride) {
  tn_unary<__nv_bfloat16, 256, 4, tn_act_gelu_tanh>(x, y, rows, cols, x_stride);
}
TN_ENTRY(unary_gelu_f16, (256))(const __half* x, __half* y, long long rows, int cols, int x_stride) {
  tn_unary<__half, 256, 4, tn_act_gelu>(x, y, rows, cols, x_stride);
}
TN_ENTRY(unary_scale_f32, (256))(const float* x, float* y, long long rows, int cols, int x_stride, float value) {
  tn_unary<float, 256, 4, tn_scale_by>(x, y, rows, cols, x_stride, value);
}
