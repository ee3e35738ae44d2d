// grad_conv2d.cuh instantiated for kernel_check (see check.cuh): dx's transposed implicit GEMM at
// the largest and smallest tiles (strided, padded, dilated and grouped windows) and its depthwise
// kernel; dweight's partials at the largest and the narrowest tiles and its depthwise kernel; in
// f32 and the 16-bit types.
#include "../grad_conv2d.cuh"
#include "check.cuh"

using Conv3x3 = tn_conv_shape<16, 128, 1, tn_window<3, 3, 1, 1, 1, 1, 1, 1>>;
using Conv5x3Grouped = tn_conv_shape<8, 12, 2, tn_window<5, 3, 2, 1, 2, 1, 1, 2>>;
using Conv1x1 = tn_conv_shape<16, 32, 1, tn_window<1, 1, 1, 1, 0, 0, 1, 1>>;
using Depthwise = tn_conv_shape<8, 16, 8, tn_window<3, 3, 2, 2, 1, 1, 1, 1>>;
using Depthwise7x7 = tn_conv_shape<32, 32, 32, tn_window<7, 7, 1, 1, 3, 3, 1, 1>>;
using Tile64 = tn_conv_tile<64, 64, 16, 8, 4>;
using Tile8 = tn_conv_tile<8, 64, 16, 1, 4>;
using Tile8x32 = tn_conv_tile<8, 32, 16, 1, 2>;

TN_ENTRY(grad_conv2d_dx_igemm_64x64, (128))
(const float* dy, const float* weight, float* dx, int batch, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d_dx<float, tn_conv2d_dgrad<Conv3x3, Tile64>>(dy, weight, dx, batch, in_h, in_w, out_h, out_w);
}
TN_ENTRY(grad_conv2d_dx_bf16_igemm_8x64, (128))
(const __nv_bfloat16* dy, const __nv_bfloat16* weight, __nv_bfloat16* dx, int batch, int in_h, int in_w, int out_h,
 int out_w) {
  tn_conv2d_dx<__nv_bfloat16, tn_conv2d_dgrad<Conv5x3Grouped, Tile8>>(dy, weight, dx, batch, in_h, in_w, out_h, out_w);
}
TN_ENTRY(grad_conv2d_dx_f16_gemm1x1_64x64, (128))
(const __half* dy, const __half* weight, __half* dx, int batch, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d_dx<__half, tn_conv2d_dgrad<Conv1x1, Tile64>>(dy, weight, dx, batch, in_h, in_w, out_h, out_w);
}
TN_ENTRY(grad_conv2d_dx_dw, (256))
(const float* dy, const float* weight, float* dx, long long count, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d_dx<float, tn_conv2d_dgrad_depthwise<Depthwise, 256>>(dy, weight, dx, count, in_h, in_w, out_h, out_w);
}
TN_ENTRY(grad_conv2d_dx_bf16_dw_7x7, (256))
(const __nv_bfloat16* dy, const __nv_bfloat16* weight, __nv_bfloat16* dx, long long count, int in_h, int in_w,
 int out_h, int out_w) {
  tn_conv2d_dx<__nv_bfloat16, tn_conv2d_dgrad_depthwise<Depthwise7x7, 256>>(dy, weight, dx, count, in_h, in_w, out_h,
                                                                            out_w);
}
TN_ENTRY(grad_conv2d_dweight_igemm_64x64, (128))
(const float* dy, const float* x, float* partials, int batch, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d_dweight_partials<float, tn_conv2d_wgrad<Conv3x3, Tile64, 1024>>(dy, x, partials, batch, in_h, in_w, out_h,
                                                                            out_w);
}
TN_ENTRY(grad_conv2d_dweight_f16_igemm_8x32, (128))
(const __half* dy, const __half* x, float* partials, int batch, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d_dweight_partials<__half, tn_conv2d_wgrad<Conv5x3Grouped, Tile8x32, 1024>>(dy, x, partials, batch, in_h,
                                                                                      in_w, out_h, out_w);
}
TN_ENTRY(grad_conv2d_dweight_bf16_dw, (256))
(const __nv_bfloat16* dy, const __nv_bfloat16* x, float* partials, int batch, int in_h, int in_w, int out_h,
 int out_w) {
  tn_conv2d_dweight_partials<__nv_bfloat16, tn_conv2d_wgrad_depthwise<Depthwise, 256, 4096>>(dy, x, partials, batch,
                                                                                             in_h, in_w, out_h, out_w);
}
TN_ENTRY(grad_conv2d_dweight_dw_7x7, (256))
(const float* dy, const float* x, float* partials, int batch, int in_h, int in_w, int out_h, int out_w) {
  tn_conv2d_dweight_partials<float, tn_conv2d_wgrad_depthwise<Depthwise7x7, 256, 4096>>(dy, x, partials, batch, in_h,
                                                                                        in_w, out_h, out_w);
}
TN_ENTRY(grad_conv2d_dweight_bf16_igemm_64x64, (128))
(const __nv_bfloat16* dy, const __nv_bfloat16* x, float* partials, int batch, int in_h, int in_w, int out_h,
 int out_w) {
  tn_conv2d_dweight_partials<__nv_bfloat16, tn_conv2d_wgrad<Conv1x1, Tile64, 1024>>(dy, x, partials, batch, in_h, in_w,
                                                                                    out_h, out_w);
}
