// conv2d.cuh instantiated for kernel_check (see check.cuh): each kernel (general implicit GEMM,
// the 1x1 path with scalar and float4 loads, depthwise) at the largest and smallest tiles, under
// each epilogue, in f32 and the 16-bit types.
#include "../conv2d.cuh"
#include "check.cuh"

using Conv3x3 = tn_conv_shape<16, 128, 1, tn_window<3, 3, 1, 1, 1, 1, 1, 1>>;
using Conv5x5Grouped = tn_conv_shape<8, 12, 2, tn_window<5, 3, 2, 1, 2, 1, 1, 2>>;
using Conv1x1 = tn_conv_shape<16, 32, 1, tn_window<1, 1, 1, 1, 0, 0, 1, 1>>;
using Depthwise = tn_conv_shape<8, 16, 8, tn_window<3, 3, 2, 2, 1, 1, 1, 1>>;
using Tile64 = tn_conv_tile<64, 64, 16, 8, 4>;
using Tile8 = tn_conv_tile<8, 64, 16, 1, 4>;

TN_ENTRY(conv2d_igemm_64x64, (128))
(const float* x, const float* weight, float* y, int batch, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d<float, tn_conv2d_igemm<Conv3x3, Tile64, 1>, tn_act_none>(x, weight, y, batch, in_h, in_w, out_h, out_w);
}
TN_ENTRY(conv2d_igemm_8x64_bias, (128))
(const float* x, const float* weight, const float* bias, float* y, int batch, int in_h, int in_w, int out_h,
 int out_w) {
  tn_conv2d_bias<float, tn_conv2d_igemm<Conv5x5Grouped, Tile8, 1>, tn_act_none>(x, weight, bias, y, batch, in_h, in_w,
                                                                                out_h, out_w);
}
TN_ENTRY(conv2d_bn_silu_igemm_64x64, (128))
(const float* x, const float* weight, const float* bn_weight, const float* bn_bias, const float* bn_mean,
 const float* bn_var, float eps, float* y, int batch, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d_bn_act<float, tn_conv2d_igemm<Conv3x3, Tile64, 1>, tn_act_silu>(
      x, weight, bn_weight, bn_bias, bn_mean, bn_var, eps, y, batch, in_h, in_w, out_h, out_w);
}
TN_ENTRY(conv2d_gemm1x1_64x64_v4_bias, (128))
(const float* x, const float* weight, const float* bias, float* y, int batch, int in_h, int in_w, int out_h,
 int out_w) {
  tn_conv2d_bias<float, tn_conv2d_igemm<Conv1x1, Tile64, 4>, tn_act_none>(x, weight, bias, y, batch, in_h, in_w, out_h,
                                                                          out_w);
}
TN_ENTRY(conv2d_gemm1x1_8x64_v1, (128))
(const float* x, const float* weight, float* y, int batch, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d<float, tn_conv2d_igemm<Conv1x1, Tile8, 1>, tn_act_none>(x, weight, y, batch, in_h, in_w, out_h, out_w);
}
TN_ENTRY(conv2d_dw_8x8_bias, (64))
(const float* x, const float* weight, const float* bias, float* y, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d_bias<float, tn_conv2d_depthwise<Depthwise, 8, 8>, tn_act_none>(x, weight, bias, y, in_h, in_w, out_h,
                                                                           out_w);
}
TN_ENTRY(conv2d_bn_silu_dw_8x32, (256))
(const float* x, const float* weight, const float* bn_weight, const float* bn_bias, const float* bn_mean,
 const float* bn_var, float eps, float* y, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d_bn_act<float, tn_conv2d_depthwise<Depthwise, 8, 32>, tn_act_silu>(x, weight, bn_weight, bn_bias, bn_mean,
                                                                              bn_var, eps, y, in_h, in_w, out_h, out_w);
}
TN_ENTRY(conv2d_bf16_igemm_64x64_bias, (128))
(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias, __nv_bfloat16* y, int batch, int in_h,
 int in_w, int out_h, int out_w) {
  tn_conv2d_bias<__nv_bfloat16, tn_conv2d_igemm<Conv3x3, Tile64, 1>, tn_act_relu>(x, weight, bias, y, batch, in_h, in_w,
                                                                                  out_h, out_w);
}
TN_ENTRY(conv2d_bn_silu_f16_gemm1x1_64x64_v4, (128))
(const __half* x, const __half* weight, const __half* bn_weight, const __half* bn_bias, const __half* bn_mean,
 const __half* bn_var, float eps, __half* y, int batch, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d_bn_act<__half, tn_conv2d_igemm<Conv1x1, Tile64, 4>, tn_act_silu>(
      x, weight, bn_weight, bn_bias, bn_mean, bn_var, eps, y, batch, in_h, in_w, out_h, out_w);
}
TN_ENTRY(conv2d_bf16_dw_8x8, (64))
(const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* y, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d<__nv_bfloat16, tn_conv2d_depthwise<Depthwise, 8, 8>, tn_act_none>(x, weight, y, in_h, in_w, out_h, out_w);
}
TN_ENTRY(conv2d_bf16_igemm_64x64_bn_add_relu, (128))
(const __nv_bfloat16* x, const __nv_bfloat16* residual, const __nv_bfloat16* weight, const __nv_bfloat16* bn_weight,
 const __nv_bfloat16* bn_bias, const __nv_bfloat16* bn_mean, const __nv_bfloat16* bn_var, float eps, __nv_bfloat16* y,
 int batch, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d_bn_add_act<__nv_bfloat16, tn_conv2d_igemm<Conv3x3, Tile64, 1>, tn_act_relu>(
      x, residual, weight, bn_weight, bn_bias, bn_mean, bn_var, eps, y, batch, in_h, in_w, out_h, out_w);
}
