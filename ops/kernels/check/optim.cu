// optim.cuh instantiated for kernel_check (see check.cuh): every update on f32, bf16 and f16
// params (16-bit ones plain and on f32 master weights), clipped (a clip pointer) and not (the
// float 1), SGD with and without momentum, the gradient norm and the step counter.
#include "../optim.cuh"
#include "check.cuh"

// The updates' lists after the params (and master weights): the gradient of type G, the
// optimizer's state, the clip (Clip: a pointer, or the float 1) and the hyperparameters.
#define TN_SCHEDULE_PARAMS float lr, int warmup_steps, int total_steps, float min_lr_ratio
#define TN_SCHEDULE_ARGS lr, warmup_steps, total_steps, min_lr_ratio
#define TN_SGD_PARAMS(G, Clip)                                                                                        \
  const G *grad, float *momentum_buffer, long long n, const int *step, Clip clip, TN_SCHEDULE_PARAMS, float momentum, \
      float dampening, float weight_decay, int nesterov
#define TN_SGD_ARGS grad, momentum_buffer, n, step, clip, TN_SCHEDULE_ARGS, momentum, dampening, weight_decay, nesterov
#define TN_SGD_NO_MOMENTUM_PARAMS(G, Clip) \
  const G *grad, long long n, const int *step, Clip clip, TN_SCHEDULE_PARAMS, float weight_decay
#define TN_SGD_NO_MOMENTUM_ARGS grad, n, step, clip, TN_SCHEDULE_ARGS, weight_decay
#define TN_ADAMW_PARAMS(G, Clip)                                                                                 \
  const G *grad, float *exp_avg, float *exp_avg_sq, long long n, const int *step, Clip clip, TN_SCHEDULE_PARAMS, \
      float beta1, float beta2, float eps, float weight_decay
#define TN_ADAMW_ARGS grad, exp_avg, exp_avg_sq, n, step, clip, TN_SCHEDULE_ARGS, beta1, beta2, eps, weight_decay

// An entry running update `function` on P params in place, or on their f32 master weights.
#define TN_STEP(name, function, P, G, PARAMS, ARGS) \
  TN_ENTRY(name, (256))(P * param, PARAMS) { function<P, G, 256>(param, ARGS); }
#define TN_MASTER_STEP(name, function, P, G, PARAMS, ARGS) \
  TN_ENTRY(name, (256))(P * param, float* master, PARAMS) { function<P, G, 256>(param, master, ARGS); }

TN_STEP(sgd_step_f32, tn_sgd_step, float, float, TN_SGD_PARAMS(float, const float*), TN_SGD_ARGS)
TN_STEP(sgd_step_f32_unclipped, tn_sgd_step, float, float, TN_SGD_PARAMS(float, float), TN_SGD_ARGS)
TN_STEP(sgd_step_bf16, tn_sgd_step, __nv_bfloat16, __nv_bfloat16, TN_SGD_PARAMS(__nv_bfloat16, const float*),
        TN_SGD_ARGS)
TN_STEP(sgd_step_f16, tn_sgd_step, __half, __half, TN_SGD_PARAMS(__half, const float*), TN_SGD_ARGS)
TN_MASTER_STEP(sgd_step_master_bf16, tn_sgd_step_master, __nv_bfloat16, __nv_bfloat16,
               TN_SGD_PARAMS(__nv_bfloat16, const float*), TN_SGD_ARGS)
TN_MASTER_STEP(sgd_step_master_f16, tn_sgd_step_master, __half, __half, TN_SGD_PARAMS(__half, const float*),
               TN_SGD_ARGS)
TN_STEP(sgd_step_no_momentum_f32, tn_sgd_step_no_momentum, float, float, TN_SGD_NO_MOMENTUM_PARAMS(float, float),
        TN_SGD_NO_MOMENTUM_ARGS)
TN_MASTER_STEP(sgd_step_no_momentum_master_bf16, tn_sgd_step_no_momentum_master, __nv_bfloat16, __nv_bfloat16,
               TN_SGD_NO_MOMENTUM_PARAMS(__nv_bfloat16, const float*), TN_SGD_NO_MOMENTUM_ARGS)
TN_STEP(adamw_step_f32, tn_adamw_step, float, float, TN_ADAMW_PARAMS(float, const float*), TN_ADAMW_ARGS)
TN_STEP(adamw_step_f32_unclipped, tn_adamw_step, float, float, TN_ADAMW_PARAMS(float, float), TN_ADAMW_ARGS)
TN_STEP(adamw_step_bf16, tn_adamw_step, __nv_bfloat16, __nv_bfloat16, TN_ADAMW_PARAMS(__nv_bfloat16, const float*),
        TN_ADAMW_ARGS)
TN_STEP(adamw_step_f16, tn_adamw_step, __half, __half, TN_ADAMW_PARAMS(__half, const float*), TN_ADAMW_ARGS)
TN_MASTER_STEP(adamw_step_master_bf16, tn_adamw_step_master, __nv_bfloat16, __nv_bfloat16,
               TN_ADAMW_PARAMS(__nv_bfloat16, const float*), TN_ADAMW_ARGS)
TN_MASTER_STEP(adamw_step_master_f16, tn_adamw_step_master, __half, __half, TN_ADAMW_PARAMS(__half, float),
               TN_ADAMW_ARGS)
TN_MASTER_STEP(adamw_step_master_bf16_grad_f32, tn_adamw_step_master, __nv_bfloat16, float,
               TN_ADAMW_PARAMS(float, const float*), TN_ADAMW_ARGS)

// The gradient norm's two launches: the sum of squares of one gradient and of gradients of
// every dtype together, then the clip coefficient at the op's block of 256, a warp and the
// largest block.
TN_ENTRY(grad_sq_sum_f32, (256))(float* partials, const float* grad0, long long n0) {
  tn_grad_sq_sum<256, 8192>(partials, grad0, n0);
}
TN_ENTRY(grad_sq_sum_f32_bf16_f16, (256))
(float* partials, const float* grad0, long long n0, const __nv_bfloat16* grad1, long long n1, const __half* grad2,
 long long n2) {
  tn_grad_sq_sum<256, 8192>(partials, grad0, n0, grad1, n1, grad2, n2);
}
#define TN_CLIP_COEF(threads)                                                                                \
  TN_ENTRY(clip_coef_t##threads, (threads))(const float* partials, int count, float max_norm, float* clip) { \
    tn_clip_coef<threads>(partials, count, max_norm, clip);                                                  \
  }

TN_CLIP_COEF(256)
TN_CLIP_COEF(1024)
TN_CLIP_COEF(32)
TN_ENTRY(step_increment_f32, (32))(int* step, const float* loss) { tn_step_increment(step, loss); }
TN_ENTRY(step_increment_bf16, (32))(int* step, const __nv_bfloat16* loss) { tn_step_increment(step, loss); }
