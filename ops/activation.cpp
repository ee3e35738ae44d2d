#include "ops/activation.h"

#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace teeny::ops {
namespace {

double host_sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

}  // namespace

const std::vector<Activation>& activations() {
  // The logistic forms use __expf and __fdividef (a few ulp: within every dtype's tolerance)
  // instead of expf, tanhf and IEEE division, whose instruction sequences made GPT-2's fused
  // GELU epilogue the longest part of its 3072-wide GEMM. gelu_tanh's precision follows the
  // storage type T of the kernel it is in (tn_gelu_tanh, ops/kernel_util.cpp).
  static const std::vector<Activation> table = {
      {"relu", "(v < 0.f ? 0.f : v)", [](double v) { return v < 0 ? 0.0 : v; }, 1, "tn_act_relu"},
      {"silu", "__fdividef(v, 1.f + __expf(-v))", [](double v) { return v * host_sigmoid(v); }, 4, "tn_act_silu"},
      {"sigmoid", "__fdividef(1.f, 1.f + __expf(-v))", host_sigmoid, 3, "tn_act_sigmoid"},
      {"tanh", "tanhf(v)", [](double v) { return std::tanh(v); }, 5, "tn_act_tanh"},
      {"gelu", "(0.5f * v * (1.f + erff(v * 0.7071067811865476f)))",
       [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }, 8, "tn_act_gelu"},
      {"gelu_tanh", "tn_gelu_tanh<T>(v)",
       [](double v) { return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))); },
       8, "tn_act_gelu_tanh"},
  };
  return table;
}

const Activation& activation(const std::string& name) {
  for (const Activation& a : activations())
    if (a.name == name) return a;
  throw Error(fmt::format("unknown activation '{}'", name));
}

std::optional<std::string> activation_of_op(const std::string& op, const Attrs& attrs) {
  if (op == "gelu") return attrs.s("approximate") == "tanh" ? "gelu_tanh" : "gelu";
  for (const Activation& a : activations())
    if (a.name == op) return op;
  return std::nullopt;
}

}  // namespace teeny::ops
