#include "core/optim.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace teeny {
namespace {

constexpr double kPi = 3.14159265358979323846;

// The host steps are called by teeny's own code, so a mismatch is a bug, reported plainly.
void require_same_size(const char* what, const std::vector<double>& state, const std::vector<double>& param) {
  if (state.size() != param.size())
    throw Error(fmt::format("optimizer step: {} has size {}; the param has size {}", what, state.size(), param.size()));
}

void require_valid_step(int64_t step) {
  if (step < 1) throw Error(fmt::format("optimizer step: step is {}; it must be >= 1", step));
}

ConfigProblem problem(std::string_view section, std::string key, const std::string& value, std::string_view rule) {
  std::string message = fmt::format("{}.{} is {}; it must be {}", section, key, value, rule);
  return {std::move(key), std::move(message)};
}

ConfigProblem problem(std::string_view section, std::string key, double value, std::string_view rule) {
  return problem(section, std::move(key), fmt::format("{}", value), rule);
}

bool positive_finite(double v) { return std::isfinite(v) && v > 0; }
bool non_negative_finite(double v) { return std::isfinite(v) && v >= 0; }
bool in_unit_interval_open_right(double v) { return v >= 0 && v < 1; }  // false for NaN
bool in_unit_interval(double v) { return v >= 0 && v <= 1; }

constexpr std::string_view kPositive = "> 0 and finite";
constexpr std::string_view kNonNegative = ">= 0 and finite";
constexpr std::string_view kUnitOpen = "in [0, 1)";
constexpr std::string_view kUnitClosed = "in [0, 1]";

void throw_if(const std::optional<ConfigProblem>& found) {
  if (found) throw Error(found->message);
}

}  // namespace

double schedule_factor(const Schedule& schedule, int64_t step) {
  if (schedule.kind == Schedule::Kind::kConstant) return 1;
  const double s = static_cast<double>(step);
  const double warmup = static_cast<double>(schedule.warmup_steps);
  if (step <= schedule.warmup_steps) return s / warmup;
  const double decay_steps = static_cast<double>(std::max<int64_t>(1, schedule.total_steps - schedule.warmup_steps));
  const double progress = std::min(1.0, (s - warmup) / decay_steps);
  const double m = schedule.min_lr_ratio;
  return m + (1 - m) * (1 + std::cos(kPi * progress)) / 2;
}

double clip_coefficient(double total_norm, double max_norm) {
  const double coef = max_norm / (total_norm + 1e-6);
  return coef > 1 ? 1 : coef;  // not std::min(1, coef): NaN must stay NaN
}

void sgd_step(const SgdConfig& config, double lr_factor, std::vector<double>& param, const std::vector<double>& grad,
              std::vector<double>& momentum_buffer, int64_t step) {
  require_valid_step(step);
  require_same_size("grad", grad, param);
  if (config.momentum != 0) require_same_size("momentum_buffer", momentum_buffer, param);
  const double lr = config.lr * lr_factor;
  for (size_t i = 0; i < param.size(); ++i) {
    double d = grad[i];
    // PyTorch skips the term when weight_decay is 0, so an infinite param does not give NaN.
    if (config.weight_decay != 0) d += config.weight_decay * param[i];
    if (config.momentum != 0) {
      double& buffer = momentum_buffer[i];
      buffer = step == 1 ? d : config.momentum * buffer + (1 - config.dampening) * d;
      d = config.nesterov ? d + config.momentum * buffer : buffer;
    }
    param[i] -= lr * d;
  }
}

void adamw_step(const AdamWConfig& config, double lr_factor, std::vector<double>& param,
                const std::vector<double>& grad, std::vector<double>& exp_avg, std::vector<double>& exp_avg_sq,
                int64_t step) {
  require_valid_step(step);
  require_same_size("grad", grad, param);
  require_same_size("exp_avg", exp_avg, param);
  require_same_size("exp_avg_sq", exp_avg_sq, param);
  const double lr = config.lr * lr_factor;
  const double s = static_cast<double>(step);
  const double step_size = lr / (1 - std::pow(config.beta1, s));
  const double bias_correction2_sqrt = std::sqrt(1 - std::pow(config.beta2, s));
  const double decay = 1 - lr * config.weight_decay;
  for (size_t i = 0; i < param.size(); ++i) {
    const double g = grad[i];
    const double m = step == 1 ? 0 : exp_avg[i];
    const double v = step == 1 ? 0 : exp_avg_sq[i];
    exp_avg[i] = config.beta1 * m + (1 - config.beta1) * g;
    exp_avg_sq[i] = config.beta2 * v + (1 - config.beta2) * g * g;
    const double denom = std::sqrt(exp_avg_sq[i]) / bias_correction2_sqrt + config.eps;
    param[i] = param[i] * decay - step_size * (exp_avg[i] / denom);
  }
}

std::optional<ConfigProblem> config_problem(const SgdConfig& config, std::string_view section) {
  if (!positive_finite(config.lr)) return problem(section, "lr", config.lr, kPositive);
  if (!in_unit_interval_open_right(config.momentum)) return problem(section, "momentum", config.momentum, kUnitOpen);
  if (!in_unit_interval(config.dampening)) return problem(section, "dampening", config.dampening, kUnitClosed);
  if (!non_negative_finite(config.weight_decay))
    return problem(section, "weight_decay", config.weight_decay, kNonNegative);
  if (config.nesterov && config.momentum == 0)
    return problem(section, "momentum", config.momentum, fmt::format("> 0 with {}.nesterov", section));
  if (config.nesterov && config.dampening != 0)
    return problem(section, "dampening", config.dampening, fmt::format("0 with {}.nesterov", section));
  return std::nullopt;
}

std::optional<ConfigProblem> config_problem(const AdamWConfig& config, std::string_view section) {
  if (!positive_finite(config.lr)) return problem(section, "lr", config.lr, kPositive);
  if (!in_unit_interval_open_right(config.beta1)) return problem(section, "betas[0]", config.beta1, kUnitOpen);
  if (!in_unit_interval_open_right(config.beta2)) return problem(section, "betas[1]", config.beta2, kUnitOpen);
  if (!positive_finite(config.eps)) return problem(section, "eps", config.eps, kPositive);
  if (!non_negative_finite(config.weight_decay))
    return problem(section, "weight_decay", config.weight_decay, kNonNegative);
  return std::nullopt;
}

std::optional<ConfigProblem> config_problem(const Schedule& schedule, std::string_view section) {
  if (schedule.kind == Schedule::Kind::kConstant) return std::nullopt;
  const std::string warmup = std::to_string(schedule.warmup_steps);
  if (schedule.warmup_steps < 0) return problem(section, "warmup_steps", warmup, ">= 0");
  if (schedule.total_steps < 1) return problem(section, "total_steps", std::to_string(schedule.total_steps), ">= 1");
  if (schedule.warmup_steps > schedule.total_steps)
    return problem(section, "warmup_steps", warmup,
                   fmt::format("<= {}.total_steps ({})", section, schedule.total_steps));
  if (!in_unit_interval(schedule.min_lr_ratio))
    return problem(section, "min_lr_ratio", schedule.min_lr_ratio, kUnitClosed);
  return std::nullopt;
}

std::optional<ConfigProblem> max_norm_problem(double max_norm, std::string_view key) {
  if (positive_finite(max_norm)) return std::nullopt;
  return ConfigProblem{std::string(key), fmt::format("{} is {}; it must be {}", key, max_norm, kPositive)};
}

void check_config(const SgdConfig& config, std::string_view section) { throw_if(config_problem(config, section)); }
void check_config(const AdamWConfig& config, std::string_view section) { throw_if(config_problem(config, section)); }
void check_config(const Schedule& schedule, std::string_view section) { throw_if(config_problem(schedule, section)); }
void check_max_norm(double max_norm, std::string_view key) { throw_if(max_norm_problem(max_norm, key)); }

}  // namespace teeny
