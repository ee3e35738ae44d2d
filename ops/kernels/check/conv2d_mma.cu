// conv2d_mma.cuh instantiated for kernel_check (see check.cuh): the tensor-core implicit GEMM at
// the largest and smallest tiles, general (strided, padded, dilated, grouped) and 1x1 windows,
// under each epilogue, in f32 (3xTF32) and the 16-bit types.
#include "../conv2d_mma.cuh"
#include "check.cuh"

using Conv3x3 = tn_conv_shape<64, 128, 1, tn_window<3, 3, 1, 1, 1, 1, 1, 1>>;
using Conv5x3Grouped = tn_conv_shape<8, 36, 2, tn_window<5, 3, 2, 1, 2, 1, 1, 2>>;
using Conv1x1 = tn_conv_shape<256, 64, 1, tn_window<1, 1, 1, 1, 0, 0, 1, 1>>;
using Tile128 = tn_conv_mma_tile<128, 128, 4, 2>;
using Tile16 = tn_conv_mma_tile<16, 64, 1, 4>;

TN_ENTRY(conv2d_f32_mma_128x128, (256))
(const float* x, const float* weight, float* y, int batch, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d<float, tn_conv2d_mma<Conv3x3, Tile128>, tn_act_none>(x, weight, y, batch, in_h, in_w, out_h, out_w);
}
TN_ENTRY(conv2d_f32_mma_16x64_bias, (128))
(const float* x, const float* weight, const float* bias, float* y, int batch, int in_h, int in_w, int out_h,
 int out_w) {
  tn_conv2d_bias<float, tn_conv2d_mma<Conv5x3Grouped, Tile16>, tn_act_none>(x, weight, bias, y, batch, in_h, in_w,
                                                                            out_h, out_w);
}
TN_ENTRY(conv2d_bf16_mma_128x128_bn_add_relu, (256))
(const __nv_bfloat16* x, const __nv_bfloat16* residual, const __nv_bfloat16* weight, const __nv_bfloat16* bn_weight,
 const __nv_bfloat16* bn_bias, const __nv_bfloat16* bn_mean, const __nv_bfloat16* bn_var, float eps, __nv_bfloat16* y,
 int batch, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d_bn_add_act<__nv_bfloat16, tn_conv2d_mma<Conv3x3, Tile128>, tn_act_relu>(
      x, residual, weight, bn_weight, bn_bias, bn_mean, bn_var, eps, y, batch, in_h, in_w, out_h, out_w);
}
TN_ENTRY(conv2d_f16_mma_1x1_128x128_bn_silu, (256))
(const __half* x, const __half* weight, const __half* bn_weight, const __half* bn_bias, const __half* bn_mean,
 const __half* bn_var, float eps, __half* y, int batch, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d_bn_act<__half, tn_conv2d_mma<Conv1x1, Tile128>, tn_act_silu>(x, weight, bn_weight, bn_bias, bn_mean, bn_var,
                                                                         eps, y, batch, in_h, in_w, out_h, out_w);
}
TN_ENTRY(conv2d_bf16_mma_16x64_bias, (128))
(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias, __nv_bfloat16* y, int batch, int in_h,
 int in_w, int out_h, int out_w) {
  tn_conv2d_bias<__nv_bfloat16, tn_conv2d_mma<Conv5x3Grouped, Tile16>, tn_act_relu>(x, weight, bias, y, batch, in_h,
                                                                                    in_w, out_h, out_w);
}
