// Optimizer semantics: the one definition of what an SGD or AdamW step, the learning-rate
// schedule and gradient-norm clipping compute (docs/training.md, "Optimizer semantics"). The
// host reference steps here run in double precision and follow PyTorch exactly:
// torch.optim.SGD, torch.optim.AdamW (amsgrad=False, maximize=False, the single-tensor math) and
// torch.nn.utils.clip_grad_norm_. The device kernels (ops/kernels/optim.cuh) compute the same
// formulas in f32.
//
// Order within one training step, as in PyTorch:
//   1. total_norm = sqrt(sum of g^2 over every trainable param's gradient)
//   2. clip = clip_coefficient(total_norm, max_norm)   (1 when the graph does not clip)
//   3. each param: *_step(config, schedule_factor(schedule, step), param, clip * grad, state, step)
//   4. step += 1
// The gradient passed to sgd_step and adamw_step is already multiplied by the clip coefficient.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace teeny {

// torch.optim.SGD's hyper-parameters.
struct SgdConfig {
  double lr = 0;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

// torch.optim.AdamW's hyper-parameters (betas = (beta1, beta2)).
struct AdamWConfig {
  double lr = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

// The learning rate of step s (1-based: the step about to be applied) is lr * schedule_factor(s).
// kConstant: factor 1. kWarmupCosine, with W = warmup_steps, T = total_steps, m = min_lr_ratio:
//
//   factor(s) = s <= W ? s / W
//                      : m + (1 - m) * (1 + cos(pi * min(1, (s - W) / max(1, T - W)))) / 2
//
// a linear warm-up reaching 1 at step W, then a cosine decay reaching m at step T and staying
// there. In PyTorch: LambdaLR(optimizer, lambda k: factor(k + 1)), since LambdaLR's k counts the
// scheduler steps already taken (0 for the first optimizer step).
struct Schedule {
  enum class Kind { kConstant, kWarmupCosine } kind = Kind::kConstant;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
  double min_lr_ratio = 0;
};

double schedule_factor(const Schedule& schedule, int64_t step);

// torch.nn.utils.clip_grad_norm_'s factor for every gradient: max_norm / (total_norm + 1e-6),
// clamped to at most 1. It is below 1 already when total_norm == max_norm, as in PyTorch; a NaN
// total norm gives NaN (torch.clamp keeps NaN), an infinite one 0.
double clip_coefficient(double total_norm, double max_norm);

// One SGD step on one param, in place. lr_factor: schedule_factor of this step. grad: already
// multiplied by the clip coefficient. momentum_buffer: the param's state, as many elements as
// param (empty when momentum is 0); step 1 initialises it from the gradient (PyTorch's first
// step: buffer = grad + weight_decay * param, with no dampening) whatever it held. step >= 1.
void sgd_step(const SgdConfig& config, double lr_factor, std::vector<double>& param, const std::vector<double>& grad,
              std::vector<double>& momentum_buffer, int64_t step);

// One AdamW step on one param, in place. lr_factor and grad as for sgd_step. exp_avg and
// exp_avg_sq: the param's state, as many elements as param; at step 1 they count as zeros
// (PyTorch's initial state) whatever they held. With lr = config.lr * lr_factor:
//   param *= 1 - lr * weight_decay
//   exp_avg = beta1 * exp_avg + (1 - beta1) * grad
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * grad^2
//   param -= lr / (1 - beta1^step) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps)
void adamw_step(const AdamWConfig& config, double lr_factor, std::vector<double>& param,
                const std::vector<double>& grad, std::vector<double>& exp_avg, std::vector<double>& exp_avg_sq,
                int64_t step);

// A bad hyper-parameter: its key relative to the section ("lr", "betas[1]"), for pointing at it in
// the spec, and the whole message ("optimizer.betas[1] is 1.5; it must be in [0, 1)").
struct ConfigProblem {
  std::string key;
  std::string message;
};

// The first bad value of a config, in declaration order; `section` prefixes the keys in messages.
// SGD: lr > 0 and finite, momentum in [0, 1), dampening in [0, 1], weight_decay >= 0 and finite,
// nesterov only with momentum > 0 and dampening 0 (PyTorch's rule). AdamW: lr, eps > 0 and
// finite, betas in [0, 1), weight_decay >= 0 and finite. Schedule (kWarmupCosine only):
// warmup_steps >= 0, total_steps >= 1, warmup_steps <= total_steps, min_lr_ratio in [0, 1].
std::optional<ConfigProblem> config_problem(const SgdConfig& config, std::string_view section = "optimizer");
std::optional<ConfigProblem> config_problem(const AdamWConfig& config, std::string_view section = "optimizer");
std::optional<ConfigProblem> config_problem(const Schedule& schedule, std::string_view section = "optimizer.schedule");
// max_norm > 0 and finite; `key` is the whole key and the problem's key.
std::optional<ConfigProblem> max_norm_problem(double max_norm, std::string_view key = "optimizer.max_grad_norm");

// The same checks, throwing teeny::Error with the problem's message.
void check_config(const SgdConfig& config, std::string_view section = "optimizer");
void check_config(const AdamWConfig& config, std::string_view section = "optimizer");
void check_config(const Schedule& schedule, std::string_view section = "optimizer.schedule");
void check_max_norm(double max_norm, std::string_view key = "optimizer.max_grad_norm");

}  // namespace teeny
