#include "ops/activation.h"

#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace teeny::ops {
namespace {

double host_sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

}  // namespace

const std::vector<Activation>& activations() {
  // The device forms are the functors of ops/kernels/activation.cuh (which says why they use
  // __expf and __fdividef); gelu_tanh's precision follows the storage type of its kernel.
  static const std::vector<Activation> table = {
      {"relu", [](double v) { return v < 0 ? 0.0 : v; }, 1, "tn_act_relu"},
      {"silu", [](double v) { return v * host_sigmoid(v); }, 4, "tn_act_silu"},
      {"sigmoid", host_sigmoid, 3, "tn_act_sigmoid"},
      {"tanh", [](double v) { return std::tanh(v); }, 5, "tn_act_tanh"},
      {"gelu", [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }, 8, "tn_act_gelu"},
      {"gelu_tanh",
       [](double v) { return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))); }, 8,
       "tn_act_gelu_tanh"},
  };
  return table;
}

const Activation& activation(const std::string& name) {
  for (const Activation& a : activations())
    if (a.name == name) return a;
  throw Error(fmt::format("unknown activation '{}'", name));
}

std::optional<std::string> activation_of_op(const std::string& op, const Attrs& attrs) {
  if (op == "gelu") return attrs.text("approximate") == "tanh" ? "gelu_tanh" : "gelu";
  for (const Activation& a : activations())
    if (a.name == op) return op;
  return std::nullopt;
}

}  // namespace teeny::ops
