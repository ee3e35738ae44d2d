// Optimizer updates: SGD and AdamW steps, the global gradient norm for clipping, and the step
// counter. The formulas are core/optim.h's (docs/training.md, "Optimizer semantics"), here in
// f32 whatever the storage dtypes; optimizer state (momentum, exp_avg, exp_avg_sq, master
// weights) is f32.
//
// Built for CUDA-graph replay: nothing comes from the host between steps.
//   step   const int*, device memory: the steps taken. tn_step_increment (the train.step node,
//          launched before a step's updates) advances it, so the update kernels read the 1-based
//          step they apply, and between steps it counts the steps taken (0 before the first).
//          Where the step's loss is not finite it halts instead (below 1, for good), and every
//          update reads that as "skip": the params and state keep the step before's values
//          without the host deciding between the backward pass and the updates.
//   clip   const float*, device memory: clip[0] multiplies every gradient. tn_clip_coef writes
//          it (and the total norm into clip[1]). A graph without clipping passes the float 1
//          instead: the update functions take either (their Clip template argument).
//   lr, warmup_steps, total_steps, min_lr_ratio
//          the schedule, as scalar arguments: the learning rate of step s is
//          lr * tn_lr_factor(s, ...); a constant schedule passes total_steps = 0.
// The update kernels are grid-stride loops over n elements (any grid), four elements a thread
// an iteration when every pointer allows one 16-byte (f32) or 8-byte (16-bit) access. Each comes
// plain (the param in its own dtype) and as *_master (a 16-bit param on f32 master weights);
// SGD also without momentum (*_no_momentum: no buffer, no momentum hyper-parameters).
#ifndef TEENY_OPTIM_CUH
#define TEENY_OPTIM_CUH

#include "prelude.cuh"

// core/optim.h's schedule_factor in f32: with W = warmup_steps, T = total_steps, m = min_lr_ratio,
// s <= W ? s / W : m + (1 - m) * (1 + cos(pi * min(1, (s - W) / max(1, T - W)))) / 2; 1 when T is 0.
__device__ __forceinline__ float tn_lr_factor(int step, int warmup_steps, int total_steps, float min_lr_ratio) {
  if (total_steps <= 0) return 1.f;
  if (step <= warmup_steps) return (float)step / (float)warmup_steps;
  const float progress = fminf(1.f, (float)(step - warmup_steps) / (float)max(1, total_steps - warmup_steps));
  return min_lr_ratio + (1.f - min_lr_ratio) * (1.f + cospif(progress)) * 0.5f;
}

// The clip coefficient: the clip node's clip[0], or 1 where the graph does not clip.
__device__ __forceinline__ float tn_clip_value(const float* clip) { return clip[0]; }
__device__ __forceinline__ float tn_clip_value(float clip) { return clip; }

// ---- element access ------------------------------------------------------------------------

// Whether p allows an access of four elements at once.
template <typename T>
__device__ __forceinline__ bool tn_optim_aligned4(const T* p) {
  return (reinterpret_cast<unsigned long long>(p) & (4 * sizeof(T) - 1)) == 0;
}

// kW consecutive elements as f32: one access when kW == 4 (p 4-element aligned), else scalars.
template <typename T, int kW>
__device__ __forceinline__ void tn_optim_load(const T* p, float (&v)[kW]) {
  if constexpr (kW == 4 && sizeof(T) == 4) {
    const float4 r = *reinterpret_cast<const float4*>(p);
    v[0] = r.x;
    v[1] = r.y;
    v[2] = r.z;
    v[3] = r.w;
  } else if constexpr (kW == 4) {
    const uint2 r = *reinterpret_cast<const uint2*>(p);  // element 0 in r.x's low half
    v[0] = tn_f32(tn_from_raw<T>((unsigned short)(r.x & 0xffffu)));
    v[1] = tn_f32(tn_from_raw<T>((unsigned short)(r.x >> 16)));
    v[2] = tn_f32(tn_from_raw<T>((unsigned short)(r.y & 0xffffu)));
    v[3] = tn_f32(tn_from_raw<T>((unsigned short)(r.y >> 16)));
  } else {
#pragma unroll
    for (int k = 0; k < kW; ++k) v[k] = tn_f32(p[k]);
  }
}

template <typename T, int kW>
__device__ __forceinline__ void tn_optim_store(T* p, const float (&v)[kW]) {
  if constexpr (kW == 4 && sizeof(T) == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else if constexpr (kW == 4) {
    uint2 r;
    r.x = (unsigned)tn_raw(tn_cast<T>(v[0])) | ((unsigned)tn_raw(tn_cast<T>(v[1])) << 16);
    r.y = (unsigned)tn_raw(tn_cast<T>(v[2])) | ((unsigned)tn_raw(tn_cast<T>(v[3])) << 16);
    *reinterpret_cast<uint2*>(p) = r;
  } else {
#pragma unroll
    for (int k = 0; k < kW; ++k) p[k] = tn_cast<T>(v[k]);
  }
}

// The weights an update reads and writes: the param itself (its own dtype, rounded on store).
template <typename P>
struct tn_weights {
  P* param;
  __device__ __forceinline__ bool aligned4() const { return tn_optim_aligned4(param); }
  template <int kW>
  __device__ __forceinline__ void load(long long i, float (&w)[kW]) const {
    tn_optim_load(param + i, w);
  }
  template <int kW>
  __device__ __forceinline__ void store(long long i, const float (&w)[kW]) const {
    tn_optim_store(param + i, w);
  }
};

// f32 master weights: the update reads and writes master, and param (16-bit) receives its
// rounding, so small updates accumulate in master instead of rounding away in param. The first
// step reads the param instead (master starts as the param's values in f32), so master needs no
// initialisation and a param loaded from weights before step 1 is the one trained.
template <typename P>
struct tn_master_weights {
  P* param;
  float* master;
  bool first;
  __device__ __forceinline__ bool aligned4() const { return tn_optim_aligned4(param) && tn_optim_aligned4(master); }
  template <int kW>
  __device__ __forceinline__ void load(long long i, float (&w)[kW]) const {
    if (first)
      tn_optim_load(param + i, w);
    else
      tn_optim_load(master + i, w);
  }
  template <int kW>
  __device__ __forceinline__ void store(long long i, const float (&w)[kW]) const {
    tn_optim_store(master + i, w);
    tn_optim_store(param + i, w);
  }
};

// Elements [i, i + kW): the weights and the gradient loaded, updated, the weights stored.
template <int kW, typename G, class Weights, class Update>
__device__ __forceinline__ void tn_optim_elements(long long i, const Weights& weights, const G* grad,
                                                  const Update& update) {
  float w[kW], g[kW];
  weights.load(i, w);
  tn_optim_load(grad + i, g);
  update(i, w, g);
  weights.store(i, w);
}

// The grid-stride loop every update shares: packs of four while every pointer allows, then a
// scalar tail.
template <typename G, int kThreads, class Weights, class Update>
__device__ __forceinline__ void tn_optim_apply(const Weights& weights, const G* grad, long long n,
                                               const Update& update) {
  const long long threads = (long long)gridDim.x * kThreads;
  const long long tid = (long long)blockIdx.x * kThreads + threadIdx.x;
  long long head = 0;
  if (weights.aligned4() && tn_optim_aligned4(grad) && update.aligned4()) {
    const long long packs = n / 4;
    for (long long q = tid; q < packs; q += threads) tn_optim_elements<4>(q * 4, weights, grad, update);
    head = packs * 4;
  }
  for (long long i = head + tid; i < n; i += threads) tn_optim_elements<1>(i, weights, grad, update);
}

// ---- SGD -----------------------------------------------------------------------------------

// torch.optim.SGD on kW elements: d = clip * g (+ weight_decay * w); with momentum, the buffer
// becomes d on the first step, momentum * buffer + (1 - dampening) * d after, and d becomes the
// buffer (or d + momentum * buffer with Nesterov); w -= lr * d. The buffer is neither read nor
// written without momentum, and not read on the first step.
struct tn_sgd_update {
  float* buffer;
  float clip, lr, momentum, dampening, weight_decay;
  bool nesterov, first;
  __device__ __forceinline__ bool aligned4() const { return momentum == 0.f || tn_optim_aligned4(buffer); }
  template <int kW>
  __device__ __forceinline__ void operator()(long long i, float (&w)[kW], const float (&g)[kW]) const {
    float b[kW] = {};
    if (momentum != 0.f && !first) tn_optim_load(buffer + i, b);
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      float d = g[k] * clip;
      if (weight_decay != 0.f) d = fmaf(weight_decay, w[k], d);  // as PyTorch: no 0 * inf
      if (momentum != 0.f) {
        b[k] = first ? d : fmaf(momentum, b[k], (1.f - dampening) * d);
        d = nesterov ? fmaf(momentum, b[k], d) : b[k];
      }
      w[k] = fmaf(-lr, d, w[k]);
    }
    if (momentum != 0.f) tn_optim_store(buffer + i, b);
  }
};

// Whether an update reads the step counter halted (tn_step_increment): it then changes nothing.
__device__ __forceinline__ bool tn_step_halted(int step) { return step < 1; }

__device__ __forceinline__ tn_sgd_update tn_make_sgd_update(float* momentum_buffer, int step, float clip, float lr,
                                                            int warmup_steps, int total_steps, float min_lr_ratio,
                                                            float momentum, float dampening, float weight_decay,
                                                            int nesterov) {
  return {momentum_buffer, clip,      lr * tn_lr_factor(step, warmup_steps, total_steps, min_lr_ratio),
          momentum,        dampening, weight_decay,
          nesterov != 0,   step == 1};
}

// param (f32 or 16-bit) updated in place from grad; momentum_buffer: n f32 values.
template <typename P, typename G, int kThreads, typename Clip>
__device__ __forceinline__ void tn_sgd_step(P* param, const G* grad, float* momentum_buffer, long long n,
                                            const int* step, Clip clip, float lr, int warmup_steps, int total_steps,
                                            float min_lr_ratio, float momentum, float dampening, float weight_decay,
                                            int nesterov) {
  const int s = *step;
  if (tn_step_halted(s)) return;
  const tn_sgd_update update =
      tn_make_sgd_update(momentum_buffer, s, tn_clip_value(clip), lr, warmup_steps, total_steps, min_lr_ratio, momentum,
                         dampening, weight_decay, nesterov);
  tn_optim_apply<G, kThreads>(tn_weights<P>{param}, grad, n, update);
}

// The same on f32 master weights: master updated, param (16-bit) written as its rounding.
template <typename P, typename G, int kThreads, typename Clip>
__device__ __forceinline__ void tn_sgd_step_master(P* param, float* master, const G* grad, float* momentum_buffer,
                                                   long long n, const int* step, Clip clip, float lr, int warmup_steps,
                                                   int total_steps, float min_lr_ratio, float momentum, float dampening,
                                                   float weight_decay, int nesterov) {
  const int s = *step;
  if (tn_step_halted(s)) return;
  const tn_sgd_update update =
      tn_make_sgd_update(momentum_buffer, s, tn_clip_value(clip), lr, warmup_steps, total_steps, min_lr_ratio, momentum,
                         dampening, weight_decay, nesterov);
  tn_optim_apply<G, kThreads>(tn_master_weights<P>{param, master, s == 1}, grad, n, update);
}

// SGD without momentum (momentum 0): no buffer.
template <typename P, typename G, int kThreads, typename Clip>
__device__ __forceinline__ void tn_sgd_step_no_momentum(P* param, const G* grad, long long n, const int* step,
                                                        Clip clip, float lr, int warmup_steps, int total_steps,
                                                        float min_lr_ratio, float weight_decay) {
  const int s = *step;
  if (tn_step_halted(s)) return;
  const tn_sgd_update update = tn_make_sgd_update(nullptr, s, tn_clip_value(clip), lr, warmup_steps, total_steps,
                                                  min_lr_ratio, 0.f, 0.f, weight_decay, 0);
  tn_optim_apply<G, kThreads>(tn_weights<P>{param}, grad, n, update);
}

template <typename P, typename G, int kThreads, typename Clip>
__device__ __forceinline__ void tn_sgd_step_no_momentum_master(P* param, float* master, const G* grad, long long n,
                                                               const int* step, Clip clip, float lr, int warmup_steps,
                                                               int total_steps, float min_lr_ratio,
                                                               float weight_decay) {
  const int s = *step;
  if (tn_step_halted(s)) return;
  const tn_sgd_update update = tn_make_sgd_update(nullptr, s, tn_clip_value(clip), lr, warmup_steps, total_steps,
                                                  min_lr_ratio, 0.f, 0.f, weight_decay, 0);
  tn_optim_apply<G, kThreads>(tn_master_weights<P>{param, master, s == 1}, grad, n, update);
}

// ---- AdamW ---------------------------------------------------------------------------------

// torch.optim.AdamW on kW elements, with g = clip * grad: w *= 1 - lr * weight_decay;
// m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
// w -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), bc_i = 1 - beta_i^step. m and v count as
// zeros on the first step (PyTorch's initial state), so they need no initialisation.
struct tn_adamw_update {
  float* exp_avg;
  float* exp_avg_sq;
  float clip, decay, beta1, beta2, step_size, bias_correction2_sqrt, eps;
  bool first;
  __device__ __forceinline__ bool aligned4() const {
    return tn_optim_aligned4(exp_avg) && tn_optim_aligned4(exp_avg_sq);
  }
  template <int kW>
  __device__ __forceinline__ void operator()(long long i, float (&w)[kW], const float (&g)[kW]) const {
    float m[kW] = {}, v[kW] = {};
    if (!first) {
      tn_optim_load(exp_avg + i, m);
      tn_optim_load(exp_avg_sq + i, v);
    }
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      const float gk = g[k] * clip;
      m[k] = fmaf(beta1, m[k], (1.f - beta1) * gk);
      v[k] = fmaf(beta2, v[k], (1.f - beta2) * gk * gk);
      const float denom = sqrtf(v[k]) / bias_correction2_sqrt + eps;
      w[k] = w[k] * decay - step_size * (m[k] / denom);
    }
    tn_optim_store(exp_avg + i, m);
    tn_optim_store(exp_avg_sq + i, v);
  }
};

__device__ __forceinline__ tn_adamw_update tn_make_adamw_update(float* exp_avg, float* exp_avg_sq, int step, float clip,
                                                                float lr, int warmup_steps, int total_steps,
                                                                float min_lr_ratio, float beta1, float beta2, float eps,
                                                                float weight_decay) {
  const float lr_s = lr * tn_lr_factor(step, warmup_steps, total_steps, min_lr_ratio);
  const float bias_correction1 = 1.f - powf(beta1, (float)step);
  const float bias_correction2 = 1.f - powf(beta2, (float)step);
  return {exp_avg,
          exp_avg_sq,
          clip,
          1.f - lr_s * weight_decay,
          beta1,
          beta2,
          lr_s / bias_correction1,
          sqrtf(bias_correction2),
          eps,
          step == 1};
}

// param (f32, or 16-bit updated in its own precision) updated in place from grad; exp_avg and
// exp_avg_sq: n f32 values each.
template <typename P, typename G, int kThreads, typename Clip>
__device__ __forceinline__ void tn_adamw_step(P* param, const G* grad, float* exp_avg, float* exp_avg_sq, long long n,
                                              const int* step, Clip clip, float lr, int warmup_steps, int total_steps,
                                              float min_lr_ratio, float beta1, float beta2, float eps,
                                              float weight_decay) {
  const int s = *step;
  if (tn_step_halted(s)) return;
  const tn_adamw_update update = tn_make_adamw_update(exp_avg, exp_avg_sq, s, tn_clip_value(clip), lr, warmup_steps,
                                                      total_steps, min_lr_ratio, beta1, beta2, eps, weight_decay);
  tn_optim_apply<G, kThreads>(tn_weights<P>{param}, grad, n, update);
}

// The same on f32 master weights: master updated, param (16-bit) written as its rounding.
template <typename P, typename G, int kThreads, typename Clip>
__device__ __forceinline__ void tn_adamw_step_master(P* param, float* master, const G* grad, float* exp_avg,
                                                     float* exp_avg_sq, long long n, const int* step, Clip clip,
                                                     float lr, int warmup_steps, int total_steps, float min_lr_ratio,
                                                     float beta1, float beta2, float eps, float weight_decay) {
  const int s = *step;
  if (tn_step_halted(s)) return;
  const tn_adamw_update update = tn_make_adamw_update(exp_avg, exp_avg_sq, s, tn_clip_value(clip), lr, warmup_steps,
                                                      total_steps, min_lr_ratio, beta1, beta2, eps, weight_decay);
  tn_optim_apply<G, kThreads>(tn_master_weights<P>{param, master, s == 1}, grad, n, update);
}

// ---- gradient norm and clipping ------------------------------------------------------------

// The sum of squares splits the gradients, in turn, into chunks of kChunk elements, one block a
// chunk (block b takes gradient i's chunk b - (chunks of gradients 0..i-1)). A thread's loads of a
// whole chunk are independent, so they are in flight together: a thread walking every gradient
// in turn would wait on one load after another, as many as there are params.
template <int kThreads, int kChunk, typename G>
__device__ __forceinline__ float tn_sq_sum_chunk(const G* grad, long long begin, long long end) {
  float acc = 0.f;
  if (end - begin == kChunk && tn_optim_aligned4(grad)) {
    static_assert(kChunk % (4 * kThreads) == 0, "whole packs of four a thread");
#pragma unroll
    for (int j = 0; j < kChunk / (4 * kThreads); ++j) {
      float g[4];
      tn_optim_load<G, 4>(grad + begin + 4 * (j * kThreads + (int)threadIdx.x), g);
#pragma unroll
      for (int k = 0; k < 4; ++k) acc = fmaf(g[k], g[k], acc);
    }
    return acc;
  }
  for (long long i = begin + threadIdx.x; i < end; i += kThreads) {
    const float g = tn_f32(grad[i]);
    acc = fmaf(g, g, acc);
  }
  return acc;
}
template <int kThreads, int kChunk>
__device__ __forceinline__ float tn_sq_sum_block(long long) {
  return 0.f;
}
template <int kThreads, int kChunk, typename G, typename... Rest>
__device__ __forceinline__ float tn_sq_sum_block(long long b, const G* grad, long long n, Rest... rest) {
  const long long chunks = (n + kChunk - 1) / kChunk;
  if (b >= chunks) return tn_sq_sum_block<kThreads, kChunk>(b - chunks, rest...);
  const long long begin = b * kChunk;
  return tn_sq_sum_chunk<kThreads, kChunk>(grad, begin, begin + kChunk < n ? begin + kChunk : n);
}

// Sum of g^2 over every element of the gradients (grad0, n0, grad1, n1, ...: each a pointer of
// any float type and its element count), one launch for all of them (grid: the chunks of every
// gradient), one f32 partial a chunk in partials[blockIdx.x]. f32 accumulation, as PyTorch's norm
// kernels; deterministic: the chunks follow from the sizes alone, each thread sums a fixed set of
// elements in a fixed order and the block sum is a fixed tree.
template <int kThreads, int kChunk, typename... Grads>
__device__ __forceinline__ void tn_grad_sq_sum(float* partials, Grads... grads) {
  __shared__ float smem32[32];
  const float acc = tn_block_sum<kThreads>(tn_sq_sum_block<kThreads, kChunk>(blockIdx.x, grads...), smem32);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// tn_block_sum in f64, for a 1-D block of kThreads (a multiple of 32); every thread gets the sum.
template <int kThreads>
__device__ __forceinline__ double tn_block_sum_f64(double v, double* smem32) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (kThreads > 32) {
    if ((threadIdx.x & 31) == 0) smem32[threadIdx.x >> 5] = v;
    __syncthreads();
    v = (threadIdx.x & 31) < kThreads / 32 ? smem32[threadIdx.x & 31] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}

// One block: the total norm sqrt(sum of the `count` partials), summed in f64 in a fixed order,
// and torch.nn.utils.clip_grad_norm_'s coefficient min(1, max_norm / (norm + 1e-6)), a NaN norm
// giving NaN as torch.clamp does. clip[0] = coefficient, clip[1] = norm.
template <int kThreads>
__device__ __forceinline__ void tn_clip_coef(const float* partials, int count, float max_norm, float* clip) {
  __shared__ double smem32[32];
  if (blockIdx.x != 0) return;
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += kThreads) acc += (double)partials[i];
  acc = tn_block_sum_f64<kThreads>(acc, smem32);
  if (threadIdx.x == 0) {
    const float norm = (float)sqrt(acc);
    const float coef = max_norm / (norm + 1e-6f);
    clip[0] = coef > 1.f ? 1.f : coef;
    clip[1] = norm;
  }
}

// ---- step counter --------------------------------------------------------------------------

// Before the updates of a step: the counter moves from the steps taken s to the step about to be
// applied, s + 1, where the step's loss is finite; where it is not, to -(s + 1), and a halted
// counter stays as it is (tn_step_halted). One thread.
template <typename L>
__device__ __forceinline__ void tn_step_increment(int* step, const L* loss) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const int s = *step;
  if (s < 0) return;
  *step = isfinite(tn_f32(*loss)) ? s + 1 : -(s + 1);
}

#endif  // TEENY_OPTIM_CUH
