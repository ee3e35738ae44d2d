// The pointwise activations, written once: the elementwise ops (relu, silu, sigmoid, tanh,
// gelu) and the GEMM epilogue of fused.linear (ops/fused_linear.cpp) both take their device
// functor (ops/kernels/activation.cuh) and host reference from this table, so a fused layer
// computes exactly what the unfused pair does.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/attrs.h"

namespace teeny::ops {

struct Activation {
  std::string name;        // "relu", "gelu" (erf form), "gelu_tanh", ...: also kernel-name parts
  double (*host)(double);  // the double-precision reference
  int flops = 1;           // per element, for cost
  // The functor template in ops/kernels/activation.cuh ("tn_act_relu"), applied as Op<T>.
  std::string functor;
};

// Every activation, in a fixed order (the enum of fused.linear's `activation` attr).
const std::vector<Activation>& activations();

// By name; throws Error for an unknown name.
const Activation& activation(const std::string& name);

// The activation that an elementwise node computes, or nullopt when `op` is not one of them:
// "gelu" with approximate: tanh is "gelu_tanh".
std::optional<std::string> activation_of_op(const std::string& op, const Attrs& attrs);

}  // namespace teeny::ops
