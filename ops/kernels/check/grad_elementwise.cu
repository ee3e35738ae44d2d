// grad_elementwise.cuh instantiated for kernel_check (see check.cuh): every activation's
// gradient and mse_loss's, each dtype.
#include "../grad_elementwise.cuh"
#include "check.cuh"

#define TN_GRAD_ENTRY(name, T, act)                                                                 \
  TN_ENTRY(name, (256))                                                                             \
  (const T* dy, const T* saved, T* dx, long long rows, int cols, int dy_stride, int saved_stride) { \
    tn_grad_unary<T, 256, act>(dy, saved, dx, rows, cols, dy_stride, saved_stride);                 \
  }

TN_GRAD_ENTRY(grad_relu_f32, float, tn_act_grad_relu)
TN_GRAD_ENTRY(grad_silu_bf16, __nv_bfloat16, tn_act_grad_silu)
TN_GRAD_ENTRY(grad_sigmoid_f16, __half, tn_act_grad_sigmoid)
TN_GRAD_ENTRY(grad_tanh_f32, float, tn_act_grad_tanh)
TN_GRAD_ENTRY(grad_gelu_f16, __half, tn_act_grad_gelu)
TN_GRAD_ENTRY(grad_gelu_tanh_bf16, __nv_bfloat16, tn_act_grad_gelu_tanh)
TN_GRAD_ENTRY(grad_gelu_tanh_f32, float, tn_act_grad_gelu_tanh)

#define TN_MSE_GRAD_ENTRY(name, T)                                                                     \
  TN_ENTRY(name, (256))                                                                                \
  (const T* p, const T* t, T* dx, long long rows, int cols, int p_stride, int t_stride, long long n) { \
    tn_grad_mse<T, 256>(p, t, dx, rows, cols, p_stride, t_stride, n);                                  \
  }

TN_MSE_GRAD_ENTRY(grad_mse_loss_f32, float)
TN_MSE_GRAD_ENTRY(grad_mse_loss_bf16, __nv_bfloat16)
TN_MSE_GRAD_ENTRY(grad_mse_loss_f16, __half)
