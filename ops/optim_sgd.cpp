// optim.sgd (ops.md, "Optimizer steps"): one param's torch.optim.SGD step, in place, with the
// learning-rate schedule (docs/training.md, "Optimizer semantics"). A training graph with
// `optimizer: {type: sgd, ...}` gets one node of it per trained param; the optimizer's keys are
// its attrs. The maths is core/optim.h's sgd_step on the host and optim.cuh's tn_sgd_step* on the
// GPU (ops/optim_common.h: params, launch, reference values).
//
// No conformance cases: an update has no output tensor for the GPU conformance run to compare.
// tests/test_optim_ops.cpp checks the launches and the host reference.
#include <fmt/format.h>

#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/optim_common.h"

namespace teeny::ops {
namespace {

constexpr const char* kMomentumBuffer = "momentum_buffer";

SgdConfig config_of(const Attrs& attrs) {
  SgdConfig config;
  config.lr = attrs.real("lr");
  config.momentum = attrs.real("momentum");
  config.dampening = attrs.real("dampening");
  config.weight_decay = attrs.real("weight_decay");
  config.nesterov = attrs.boolean("nesterov");
  return config;
}

// The momentum buffer exists only with momentum, as in PyTorch.
std::vector<std::string> state_of(const Attrs& attrs) {
  if (attrs.real("momentum") == 0) return {};
  return {kMomentumBuffer};
}

TensorType infer(const OpDef& def, const OpContext& ctx) {
  check_update_inputs(def, ctx);
  throw_config_problem(config_problem(config_of(ctx.attrs), kOptimizerSection));
  check_schedule(ctx.attrs);
  return ctx.inputs[0];
}

Lowering lower(const OpContext& ctx) {
  const SgdConfig config = config_of(ctx.attrs);
  if (config.momentum == 0)
    return update_lowering(ctx, "sgd_step_no_momentum", {}, {f32("weight_decay", config.weight_decay)}, 5);
  return update_lowering(ctx, "sgd_step", {kMomentumBuffer},
                         {f32("momentum", config.momentum), f32("dampening", config.dampening),
                          f32("weight_decay", config.weight_decay), i32("nesterov", Expr(config.nesterov ? 1 : 0))},
                         9);
}

std::map<std::string, HostTensor> reference(const RefContext& ref) {
  const Attrs& attrs = ref.op.attrs;
  const std::vector<std::string> state = state_of(attrs);
  return update_reference(ref, state, [&](UpdateValues& values) {
    std::vector<double> no_buffer;
    std::vector<double>& buffer = state.empty() ? no_buffer : values.state.at(kMomentumBuffer);
    sgd_step(config_of(attrs), schedule_factor(schedule_of(attrs), values.step), values.weights, values.grad, buffer,
             values.step);
  });
}

std::vector<AttrSpec> attr_specs() {
  std::vector<AttrSpec> specs{
      attr_spec("lr", AttrType::kFloat, "learning rate (the schedule's peak)"),
      attr_spec("momentum", AttrType::kFloat, "momentum factor, below 1; 0: no momentum buffer", 0.0),
      attr_spec("dampening", AttrType::kFloat, "dampening of the momentum", 0.0),
      attr_spec("weight_decay", AttrType::kFloat, "L2 penalty added to the gradient", 0.0),
      attr_spec("nesterov", AttrType::kBool, "Nesterov momentum (needs momentum > 0 and dampening 0)", false),
  };
  specs[0].min_value = 0;
  specs[0].min_exclusive = true;
  specs[1].min_value = 0;
  specs[2].min_value = 0;
  specs[2].max_value = 1;
  specs[3].min_value = 0;
  for (AttrSpec& spec : schedule_attr_specs()) specs.push_back(std::move(spec));
  return specs;
}

}  // namespace

OpDef optim_sgd_op() {
  OpDef def;
  def.name = "optim.sgd";
  def.doc =
      "one param's torch.optim.SGD step in place (momentum, dampening, weight decay, Nesterov), with a learning-rate "
      "schedule; an update node of a training graph, with no output tensor";
  def.inputs = {{"grad", "the param's gradient (its shape and dtype)"},
                {"clip", "the clip node's [coefficient, norm], f32 [2]: the gradient is scaled by the coefficient"}};
  def.optional_inputs = 1;
  def.attrs = attr_specs();
  def.dtypes = float_dtypes();
  def.param_slots = {"param", "step", kMomentumBuffer, "master"};
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.params = [](const OpContext& ctx) { return update_params(ctx, state_of(ctx.attrs)); };
  def.lower = lower;
  def.update = true;
  def.update_reference = reference;
  def.conformance_cases = [] {
    return update_conformance_cases("sgd", "lr: 0.1, momentum: 0.9, weight_decay: 0.01, nesterov: true");
  };
  return def;
}

}  // namespace teeny::ops
