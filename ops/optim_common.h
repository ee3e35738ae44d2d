// What the optimizer update ops (ops/optim_sgd.cpp, ops/optim_adamw.cpp) share: the schedule's
// attrs, the inputs and params of an update node, its one grid-stride launch of
// ops/kernels/optim.cuh, and the values its host reference reads and writes. The maths is
// core/optim.h's on the host and optim.cuh's on the GPU (docs/training.md).
//
// An update node (core/autodiff.h adds one per trained param) reads the param's gradient and,
// where the graph clips, the clip node's [coefficient, norm]; it writes in place, through
// param_out args, the param (a param ref to the forward node's), its own optimizer state and, for
// a 16-bit param, its f32 master weights. It has no output tensor.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/op.h"
#include "core/optim.h"

namespace teeny::ops {

// The section an optimizer's hyper-parameters are named under in errors ("optimizer.lr is -1;
// ..."): the train section's `optimizer:` key, where autodiff reports an update op's errors.
inline constexpr const char* kOptimizerSection = "optimizer";

// The learning-rate schedule's attrs, which every optimizer takes after its own: schedule
// (constant | warmup_cosine), warmup_steps, total_steps, min_lr_ratio.
std::vector<AttrSpec> schedule_attr_specs();
Schedule schedule_of(const Attrs& attrs);

// Throws OpError at "attrs.<key>" for a problem core/optim.h's config_problem found.
void throw_config_problem(const std::optional<ConfigProblem>& problem);

// The schedule's problems: config_problem's for warmup_cosine; for the constant schedule, any of
// warmup_steps, total_steps, min_lr_ratio set (they would be ignored, which is never what was
// meant). Throws OpError at "attrs.<key>".
void check_schedule(const Attrs& attrs);

// The inputs of an update: `grad` (a dtype of def.dtypes, rows not padded: the kernel reads it as
// one flat array) and, where given, the clip node's output (f32 [2]). Throws OpError("inputs").
void check_update_inputs(const OpDef& def, const OpContext& ctx);

// Whether the update of a param of `dtype` keeps f32 master weights: 16-bit params do.
bool keeps_master(DType dtype);

// An update's params: "param" (the param it updates: the gradient's shape and dtype) and "step"
// (the step counter, i32 [1]), both bound by param refs in a training graph; then `state` (f32,
// zero, one value per param element) and, for a 16-bit param, "master" (f32, zero: the first step
// reads the param instead, so it needs no initial value).
std::vector<ParamSpec> update_params(const OpContext& ctx, const std::vector<std::string>& state);

// The one launch of an update: `function` of optim.cuh ("sgd_step", ...; "_master" appended for a
// 16-bit param), a grid-stride loop over the gradient's elements, called as
//   tn_<function>[_master]<P, G, kThreads>(param, [master,] grad, <state...>, n, step, clip, lr,
//                                          warmup_steps, total_steps, min_lr_ratio, <hyper...>)
// where clip is the clip input or, without one, the float 1. `flops_per_element` is the cost.
Lowering update_lowering(const OpContext& ctx, const std::string& function, const std::vector<std::string>& state,
                         std::vector<KernelArg> hyper, int flops_per_element);

// GPU conformance cases of optimizer `type` ("sgd"): a linear layer trained against mse_loss, in
// every float dtype (16-bit params with f32 master weights), with and without gradient clipping,
// `optimizer` the rest of the optimizer map ("lr: 0.1, momentum: 0.9"). The run checks one step
// node by node: the forward and backward nodes, the step counter and every param and state the
// updates write.
std::vector<ConformanceCase> update_conformance_cases(const std::string& type, const std::string& optimizer);

// What an update's host reference reads and writes.
struct UpdateValues {
  int64_t step = 0;
  std::vector<double> grad;                          // times the clip coefficient
  std::vector<double> weights;                       // what is stepped: the master copy, or the param (and at step 1)
  std::map<std::string, std::vector<double>> state;  // by slot
};

// An update's host reference, for state slots `state`: every slot it writes after `step` changed
// the values of `ref` (its inputs and params), or unchanged where the step counter halted (the
// loss was not finite: ops/train_step.cpp).
std::map<std::string, HostTensor> update_reference(const RefContext& ref, const std::vector<std::string>& state,
                                                   const std::function<void(UpdateValues&)>& step);

}  // namespace teeny::ops
