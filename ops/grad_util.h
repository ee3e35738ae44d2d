// What the ops' backward rules (OpDef::backward, core/autodiff.h) share: the gradient ops they
// add (the grad.* ops, each in ops/grad_<name>.cpp; ops.md, "Gradients") named in one place,
// and the steps several rules take.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/autodiff.h"
#include "core/op.h"

namespace teeny::ops {

// A symbolic shape as the value of a kShape attr: each dim's expression as text.
nlohmann::json shape_attr(const Shape& shape);

// dL/d(tensor), an operand of a broadcasting op, from `grad`, the gradient of the op's output:
// `grad` summed over the dims `tensor` was broadcast along (grad.sum_rows for the last dim alone,
// else grad.sum_to), or `grad` itself where the shapes agree.
std::string sum_to(GradBuilder& g, const std::string& grad, const std::string& tensor);

// The activation rule's node: dL/dx of the node computing `activation` (ops/activation.h) from
// dL/dy and the forward tensor its derivative is written in (grad.activation).
std::string activation_grad(GradBuilder& g, const std::string& activation);

// Whether grad.activation reads the forward output y of `activation` (relu, sigmoid, tanh) rather
// than its input x (silu, gelu, gelu_tanh). Throws Error for an unknown activation.
bool activation_grad_reads_output(const std::string& activation);

// The activations grad.activation takes, and its host rule dx = dy * f'(saved), in double.
std::vector<std::string> activation_grad_names();
double activation_grad_host(const std::string& activation, double dy, double saved);

}  // namespace teeny::ops
