// optim.cuh instantiated for kernel_check (see check.cuh): every update on f32, bf16 and f16
// params (16-bit ones plain and on f32 master weights), clipped (a clip pointer) and not (the
// float 1), SGD with and without momentum, the gradient norm and the step counter.
#include "../optim.cuh"
#include "check.cuh"

TN_ENTRY(sgd_step_f32, (256))
(float* param, const float* grad, float* momentum_buffer, long long n, const int* step, const float* clip, float lr,
 int warmup_steps, int total_steps, float min_lr_ratio, float momentum, float dampening, float weight_decay,
 int nesterov) {
  tn_sgd_step<float, float, 256>(param, grad, momentum_buffer, n, step, clip, lr, warmup_steps, total_steps,
                                 min_lr_ratio, momentum, dampening, weight_decay, nesterov);
}
TN_ENTRY(sgd_step_f32_unclipped, (256))
(float* param, const float* grad, float* momentum_buffer, long long n, const int* step, float clip, float lr,
 int warmup_steps, int total_steps, float min_lr_ratio, float momentum, float dampening, float weight_decay,
 int nesterov) {
  tn_sgd_step<float, float, 256>(param, grad, momentum_buffer, n, step, clip, lr, warmup_steps, total_steps,
                                 min_lr_ratio, momentum, dampening, weight_decay, nesterov);
}
TN_ENTRY(sgd_step_bf16, (256))
(__nv_bfloat16* param, const __nv_bfloat16* grad, float* momentum_buffer, long long n, const int* step,
 const float* clip, float lr, int warmup_steps, int total_steps, float min_lr_ratio, float momentum, float dampening,
 float weight_decay, int nesterov) {
  tn_sgd_step<__nv_bfloat16, __nv_bfloat16, 256>(param, grad, momentum_buffer, n, step, clip, lr, warmup_steps,
                                                 total_steps, min_lr_ratio, momentum, dampening, weight_decay,
                                                 nesterov);
}
TN_ENTRY(sgd_step_f16, (256))
(__half* param, const __half* grad, float* momentum_buffer, long long n, const int* step, const float* clip, float lr,
 int warmup_steps, int total_steps, float min_lr_ratio, float momentum, float dampening, float weight_decay,
 int nesterov) {
  tn_sgd_step<__half, __half, 256>(param, grad, momentum_buffer, n, step, clip, lr, warmup_steps, total_steps,
                                   min_lr_ratio, momentum, dampening, weight_decay, nesterov);
}
TN_ENTRY(sgd_step_master_bf16, (256))
(__nv_bfloat16* param, float* master, const __nv_bfloat16* grad, float* momentum_buffer, long long n, const int* step,
 const float* clip, float lr, int warmup_steps, int total_steps, float min_lr_ratio, float momentum, float dampening,
 float weight_decay, int nesterov) {
  tn_sgd_step_master<__nv_bfloat16, __nv_bfloat16, 256>(param, master, grad, momentum_buffer, n, step, clip, lr,
                                                        warmup_steps, total_steps, min_lr_ratio, momentum, dampening,
                                                        weight_decay, nesterov);
}
TN_ENTRY(sgd_step_master_f16, (256))
(__half* param, float* master, const __half* grad, float* momentum_buffer, long long n, const int* step,
 const float* clip, float lr, int warmup_steps, int total_steps, float min_lr_ratio, float momentum, float dampening,
 float weight_decay, int nesterov) {
  tn_sgd_step_master<__half, __half, 256>(param, master, grad, momentum_buffer, n, step, clip, lr, warmup_steps,
                                          total_steps, min_lr_ratio, momentum, dampening, weight_decay, nesterov);
}
TN_ENTRY(sgd_step_no_momentum_f32, (256))
(float* param, const float* grad, long long n, const int* step, float clip, float lr, int warmup_steps, int total_steps,
 float min_lr_ratio, float weight_decay) {
  tn_sgd_step_no_momentum<float, float, 256>(param, grad, n, step, clip, lr, warmup_steps, total_steps, min_lr_ratio,
                                             weight_decay);
}
TN_ENTRY(sgd_step_no_momentum_master_bf16, (256))
(__nv_bfloat16* param, float* master, const __nv_bfloat16* grad, long long n, const int* step, const float* clip,
 float lr, int warmup_steps, int total_steps, float min_lr_ratio, float weight_decay) {
  tn_sgd_step_no_momentum_master<__nv_bfloat16, __nv_bfloat16, 256>(
      param, master, grad, n, step, clip, lr, warmup_steps, total_steps, min_lr_ratio, weight_decay);
}
TN_ENTRY(adamw_step_f32, (256))
(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, long long n, const int* step, const float* clip,
 float lr, int warmup_steps, int total_steps, float min_lr_ratio, float beta1, float beta2, float eps,
 float weight_decay) {
  tn_adamw_step<float, float, 256>(param, grad, exp_avg, exp_avg_sq, n, step, clip, lr, warmup_steps, total_steps,
                                   min_lr_ratio, beta1, beta2, eps, weight_decay);
}
TN_ENTRY(adamw_step_f32_unclipped, (256))
(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, long long n, const int* step, float clip, float lr,
 int warmup_steps, int total_steps, float min_lr_ratio, float beta1, float beta2, float eps, float weight_decay) {
  tn_adamw_step<float, float, 256>(param, grad, exp_avg, exp_avg_sq, n, step, clip, lr, warmup_steps, total_steps,
                                   min_lr_ratio, beta1, beta2, eps, weight_decay);
}
TN_ENTRY(adamw_step_bf16, (256))
(__nv_bfloat16* param, const __nv_bfloat16* grad, float* exp_avg, float* exp_avg_sq, long long n, const int* step,
 const float* clip, float lr, int warmup_steps, int total_steps, float min_lr_ratio, float beta1, float beta2,
 float eps, float weight_decay) {
  tn_adamw_step<__nv_bfloat16, __nv_bfloat16, 256>(param, grad, exp_avg, exp_avg_sq, n, step, clip, lr, warmup_steps,
                                                   total_steps, min_lr_ratio, beta1, beta2, eps, weight_decay);
}
TN_ENTRY(adamw_step_f16, (256))
(__half* param, const __half* grad, float* exp_avg, float* exp_avg_sq, long long n, const int* step, const float* clip,
 float lr, int warmup_steps, int total_steps, float min_lr_ratio, float beta1, float beta2, float eps,
 float weight_decay) {
  tn_adamw_step<__half, __half, 256>(param, grad, exp_avg, exp_avg_sq, n, step, clip, lr, warmup_steps, total_steps,
                                     min_lr_ratio, beta1, beta2, eps, weight_decay);
}
TN_ENTRY(adamw_step_master_bf16, (256))
(__nv_bfloat16* param, float* master, const __nv_bfloat16* grad, float* exp_avg, float* exp_avg_sq, long long n,
 const int* step, const float* clip, float lr, int warmup_steps, int total_steps, float min_lr_ratio, float beta1,
 float beta2, float eps, float weight_decay) {
  tn_adamw_step_master<__nv_bfloat16, __nv_bfloat16, 256>(param, master, grad, exp_avg, exp_avg_sq, n, step, clip, lr,
                                                          warmup_steps, total_steps, min_lr_ratio, beta1, beta2, eps,
                                                          weight_decay);
}
TN_ENTRY(adamw_step_master_f16, (256))
(__half* param, float* master, const __half* grad, float* exp_avg, float* exp_avg_sq, long long n, const int* step,
 float clip, float lr, int warmup_steps, int total_steps, float min_lr_ratio, float beta1, float beta2, float eps,
 float weight_decay) {
  tn_adamw_step_master<__half, __half, 256>(param, master, grad, exp_avg, exp_avg_sq, n, step, clip, lr, warmup_steps,
                                            total_steps, min_lr_ratio, beta1, beta2, eps, weight_decay);
}
TN_ENTRY(adamw_step_master_bf16_grad_f32, (256))
(__nv_bfloat16* param, float* master, const float* grad, float* exp_avg, float* exp_avg_sq, long long n,
 const int* step, const float* clip, float lr, int warmup_steps, int total_steps, float min_lr_ratio, float beta1,
 float beta2, float eps, float weight_decay) {
  tn_adamw_step_master<__nv_bfloat16, float, 256>(param, master, grad, exp_avg, exp_avg_sq, n, step, clip, lr,
                                                  warmup_steps, total_steps, min_lr_ratio, beta1, beta2, eps,
                                                  weight_decay);
}
TN_ENTRY(grad_sq_sum_f32, (256))
(const float* grad, long long n, float* partials, int offset) { tn_grad_sq_sum<float, 256>(grad, n, partials, offset); }
TN_ENTRY(grad_sq_sum_bf16, (256))
(const __nv_bfloat16* grad, long long n, float* partials, int offset) {
  tn_grad_sq_sum<__nv_bfloat16, 256>(grad, n, partials, offset);
}
TN_ENTRY(grad_sq_sum_f16, (256))
(const __half* grad, long long n, float* partials, int offset) {
  tn_grad_sq_sum<__half, 256>(grad, n, partials, offset);
}
TN_ENTRY(clip_coef_t256, (256))(const float* partials, int count, float max_norm, float* clip) {
  tn_clip_coef<256>(partials, count, max_norm, clip);
}
TN_ENTRY(clip_coef_t1024, (1024))(const float* partials, int count, float max_norm, float* clip) {
  tn_clip_coef<1024>(partials, count, max_norm, clip);
}
TN_ENTRY(clip_coef_t32, (32))(const float* partials, int count, float max_norm, float* clip) {
  tn_clip_coef<32>(partials, count, max_norm, clip);
}
TN_ENTRY(step_increment, (32))(int* step) { tn_step_increment(step); }
