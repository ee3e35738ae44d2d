// optim.adamw (ops.md, "Optimizer steps"): one param's torch.optim.AdamW step, in place, with
// the learning-rate schedule (docs/training.md, "Optimizer semantics"). A training graph with
// `optimizer: {type: adamw, ...}` gets one node of it per trained param; the optimizer's keys are
// its attrs. The maths is core/optim.h's adamw_step on the host and optim.cuh's tn_adamw_step* on
// the GPU (ops/optim_common.h: params, launch, reference values).
//
// No conformance cases: an update has no output tensor for the GPU conformance run to compare.
// tests/test_optim_ops.cpp checks the launches and the host reference.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/optim_common.h"

namespace teeny::ops {
namespace {

constexpr const char* kExpAvg = "exp_avg";
constexpr const char* kExpAvgSq = "exp_avg_sq";

AdamWConfig config_of(const Attrs& attrs) {
  AdamWConfig config;
  config.lr = attrs.real("lr");
  const std::vector<double> betas = attrs.reals("betas");
  config.beta1 = betas.at(0);
  config.beta2 = betas.at(1);
  config.eps = attrs.real("eps");
  config.weight_decay = attrs.real("weight_decay");
  return config;
}

TensorType infer(const OpDef& def, const OpContext& ctx) {
  check_update_inputs(def, ctx);
  const std::vector<double> betas = ctx.attrs.reals("betas");
  if (betas.size() != 2)
    throw OpError("attrs.betas", fmt::format("{}.betas is [{}]; it must be [beta1, beta2]", kOptimizerSection,
                                             fmt::join(betas, ", ")));
  throw_config_problem(config_problem(config_of(ctx.attrs), kOptimizerSection));
  check_schedule(ctx.attrs);
  return ctx.inputs[0];
}

Lowering lower(const OpContext& ctx) {
  const AdamWConfig config = config_of(ctx.attrs);
  return update_lowering(ctx, "adamw_step", {kExpAvg, kExpAvgSq},
                         {f32("beta1", config.beta1), f32("beta2", config.beta2), f32("eps", config.eps),
                          f32("weight_decay", config.weight_decay)},
                         14);
}

std::map<std::string, HostTensor> reference(const RefContext& ref) {
  const Attrs& attrs = ref.op.attrs;
  return update_reference(ref, {kExpAvg, kExpAvgSq}, [&](UpdateValues& values) {
    adamw_step(config_of(attrs), schedule_factor(schedule_of(attrs), values.step), values.weights, values.grad,
               values.state.at(kExpAvg), values.state.at(kExpAvgSq), values.step);
  });
}

std::vector<AttrSpec> attr_specs() {
  std::vector<AttrSpec> specs{
      attr_spec("lr", AttrType::kFloat, "learning rate (the schedule's peak)"),
      attr_spec("betas", AttrType::kFloatList, "[beta1, beta2]: decay rates of the moment estimates, each below 1",
                nlohmann::json::array({0.9, 0.999})),
      attr_spec("eps", AttrType::kFloat, "added to the denominator", 1e-8),
      attr_spec("weight_decay", AttrType::kFloat, "decoupled weight decay", 0.01),
  };
  specs[0].min_value = 0;
  specs[0].min_exclusive = true;
  specs[1].min_value = 0;
  specs[2].min_value = 0;
  specs[2].min_exclusive = true;
  specs[3].min_value = 0;
  for (AttrSpec& spec : schedule_attr_specs()) specs.push_back(std::move(spec));
  return specs;
}

}  // namespace

OpDef optim_adamw_op() {
  OpDef def;
  def.name = "optim.adamw";
  def.doc =
      "one param's torch.optim.AdamW step in place (decoupled weight decay, bias-corrected moments), with a "
      "learning-rate schedule; an update node of a training graph, with no output tensor";
  def.inputs = {{"grad", "the param's gradient (its shape and dtype)"},
                {"clip", "the clip node's [coefficient, norm], f32 [2]: the gradient is scaled by the coefficient"}};
  def.optional_inputs = 1;
  def.attrs = attr_specs();
  def.dtypes = float_dtypes();
  def.param_slots = {"param", "step", kExpAvg, kExpAvgSq, "master"};
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.params = [](const OpContext& ctx) { return update_params(ctx, {kExpAvg, kExpAvgSq}); };
  def.lower = lower;
  def.update = true;
  def.update_reference = reference;
  def.conformance_cases = [] {
    return update_conformance_cases(
        "adamw", "lr: 0.01, weight_decay: 0.1, schedule: warmup_cosine, warmup_steps: 1, total_steps: 10");
  };
  return def;
}

}  // namespace teeny::ops
