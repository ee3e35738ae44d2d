#include "ops/optim_common.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/kernel_util.h"

namespace teeny::ops {
namespace {

constexpr int kThreads = 256;
constexpr int kElementsPerThread = 4;  // optim.cuh's packs of four

// The step counts reach the kernel as int.
constexpr double kMaxSteps = std::numeric_limits<int32_t>::max();

AttrSpec bounded(AttrSpec spec, std::optional<double> min_value, std::optional<double> max_value = std::nullopt) {
  spec.min_value = min_value;
  spec.max_value = max_value;
  return spec;
}

const HostTensor& slot_value(const RefContext& ref, const std::string& slot, const std::vector<ParamSpec>& specs) {
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].slot == slot) return ref.params.at(i);
  throw Error(fmt::format("internal: update node '{}' has no param slot '{}'", ref.op.node, slot));
}

}  // namespace

std::vector<AttrSpec> schedule_attr_specs() {
  return {
      attr_spec("schedule", AttrType::kEnum,
                "learning-rate schedule: constant, or warmup_cosine (a linear warm-up over warmup_steps, then a "
                "cosine decay to min_lr_ratio * lr at total_steps)",
                "constant", {"constant", "warmup_cosine"}),
      bounded(attr_spec("warmup_steps", AttrType::kInt, "warmup_cosine: steps of linear warm-up", 0), 0, kMaxSteps),
      bounded(attr_spec("total_steps", AttrType::kInt,
                        "warmup_cosine (which needs it at least 1): the step where the decay ends", 0),
              0, kMaxSteps),
      bounded(attr_spec("min_lr_ratio", AttrType::kFloat, "warmup_cosine: the final learning rate over lr", 0.0), 0, 1),
  };
}

Schedule schedule_of(const Attrs& attrs) {
  Schedule schedule;
  schedule.kind = attrs.text("schedule") == "warmup_cosine" ? Schedule::Kind::kWarmupCosine : Schedule::Kind::kConstant;
  schedule.warmup_steps = attrs.integer("warmup_steps");
  schedule.total_steps = attrs.integer("total_steps");
  schedule.min_lr_ratio = attrs.real("min_lr_ratio");
  return schedule;
}

void throw_config_problem(const std::optional<ConfigProblem>& problem) {
  if (problem) throw OpError("attrs." + problem->key, problem->message);
}

void check_schedule(const Attrs& attrs) {
  const Schedule schedule = schedule_of(attrs);
  if (schedule.kind == Schedule::Kind::kConstant) {
    for (const char* key : {"warmup_steps", "total_steps", "min_lr_ratio"}) {
      if (attrs.real(key) != 0)
        throw OpError(fmt::format("attrs.{}", key),
                      fmt::format("{0}.{1} is {2}, but {0}.schedule is constant, which has no {1}; use schedule: "
                                  "warmup_cosine",
                                  kOptimizerSection, key, attrs.json().at(key).dump()));
    }
  }
  throw_config_problem(config_problem(schedule, kOptimizerSection));
}

void check_update_inputs(const OpDef& def, const OpContext& ctx) {
  const TensorType& grad = ctx.inputs.at(0);
  if (std::find(def.dtypes.begin(), def.dtypes.end(), grad.dtype) == def.dtypes.end())
    throw OpError("inputs", fmt::format("{} does not update {} params (supported: f32, bf16, f16)", def.name,
                                        dtype_name(grad.dtype)));
  if (is_padded(grad))
    throw OpError("inputs", fmt::format("the gradient's rows are padded (row stride {}, last dim {}); {} reads it as "
                                        "one contiguous array",
                                        grad.row_stride.str(), grad.shape.back().str(), def.name));
  if (ctx.inputs.size() < 2) return;
  const TensorType& clip = ctx.inputs[1];
  if (clip.dtype != DType::kF32 || clip.shape != Shape{Expr(2)})
    throw OpError("inputs", fmt::format("input 1 is {} {}; the clip coefficient and norm are f32 [2]",
                                        dtype_name(clip.dtype), shape_str(clip.shape)));
}

bool keeps_master(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }

std::vector<ParamSpec> update_params(const OpContext& ctx, const std::vector<std::string>& state) {
  const TensorType& grad = ctx.inputs.at(0);
  std::vector<ParamSpec> specs{{"param", grad.shape, grad.dtype, ParamInit::kTrained, {}},
                               {"step", {Expr(1)}, DType::kI32, ParamInit::kZero, {}}};
  for (const std::string& slot : state) specs.push_back({slot, grad.shape, DType::kF32, ParamInit::kZero, {}});
  if (keeps_master(grad.dtype)) specs.push_back({"master", grad.shape, DType::kF32, ParamInit::kZero, {}});
  return specs;
}

Lowering update_lowering(const OpContext& ctx, const std::string& function, const std::vector<std::string>& state,
                         std::vector<KernelArg> hyper, int flops_per_element) {
  const DType dtype = ctx.inputs.at(0).dtype;
  const bool master = keeps_master(dtype);
  const bool clipped = ctx.inputs.size() > 1;
  const Schedule schedule = schedule_of(ctx.attrs);
  const bool constant = schedule.kind == Schedule::Kind::kConstant;
  const Expr n = product(ctx.inputs[0].shape);

  Launch launch;
  launch.args.push_back(param_out("param", "param", dtype));
  if (master) launch.args.push_back(param_out("master", "master", DType::kF32));
  launch.args.push_back(input(0, "grad", dtype));
  for (const std::string& slot : state) launch.args.push_back(param_out(slot, slot, DType::kF32));
  launch.args.push_back(i64("n", n));
  launch.args.push_back(param("step", "step", DType::kI32));
  launch.args.push_back(clipped ? input(1, "clip", DType::kF32) : f32("clip", 1.0));
  launch.args.push_back(f32("lr", ctx.attrs.real("lr")));
  // optim.cuh's constant schedule is total_steps 0, whatever the (unused) attrs say.
  launch.args.push_back(i32("warmup_steps", Expr(constant ? 0 : schedule.warmup_steps)));
  launch.args.push_back(i32("total_steps", Expr(constant ? 0 : schedule.total_steps)));
  launch.args.push_back(f32("min_lr_ratio", schedule.min_lr_ratio));
  for (KernelArg& arg : hyper) launch.args.push_back(std::move(arg));

  const std::string entry = function + (master ? "_master" : "");
  const std::string c_type = dtype_c_type(dtype);
  Lowering lowering;
  lowering.kernels.push_back(template_kernel(
      fmt::format("{}_{}{}", entry, dtype_name(dtype), clipped ? "" : "_unclipped"), "optim.cuh",
      fmt::format("tn_{}<{}, {}, {}>", entry, c_type, c_type, kThreads), launch.args, kThreads, TEENY_KERNEL_ORIGIN));
  launch.block = {kThreads, 1, 1};
  launch.grid[0] = grid_stride_blocks(ceil_div(n, Expr(kThreads * kElementsPerThread)), kThreads);
  // The param read and written, the gradient read, every f32 state (and master) value read and
  // written.
  const int64_t f32_slots = static_cast<int64_t>(state.size()) + (master ? 1 : 0);
  launch.bytes = n * Expr(static_cast<int64_t>(3 * dtype_size(dtype)) + 8 * f32_slots);
  launch.flops = n * Expr(flops_per_element);
  lowering.launches.push_back(std::move(launch));
  return lowering;
}

namespace {

// The values of `ref` (the node's inputs and params) for an update with state slots `state`.
UpdateValues update_values(const RefContext& ref, const std::vector<std::string>& state) {
  const std::vector<ParamSpec> specs = update_params(ref.op, state);
  UpdateValues values;
  values.step = std::llround(slot_value(ref, "step", specs).data.at(0));
  const double clip = ref.inputs.size() > 1 ? ref.inputs[1].data.at(0) : 1.0;
  values.grad = ref.inputs.at(0).data;
  for (double& g : values.grad) g *= clip;
  const bool master = keeps_master(ref.op.inputs.at(0).dtype);
  values.weights = slot_value(ref, master && values.step > 1 ? "master" : "param", specs).data;
  for (const std::string& slot : state) values.state[slot] = slot_value(ref, slot, specs).data;
  return values;
}

// The new value of every slot the update writes after stepping `values`: param (and master) from
// the weights, each state slot from its values.
std::map<std::string, HostTensor> written_slots(const RefContext& ref, UpdateValues values) {
  const std::vector<int64_t>& shape = ref.params.at(0).shape;
  std::map<std::string, HostTensor> slots;
  if (keeps_master(ref.op.inputs.at(0).dtype)) slots["master"] = {DType::kF32, shape, values.weights};
  slots["param"] = {ref.op.inputs[0].dtype, shape, std::move(values.weights)};
  for (auto& [slot, data] : values.state) slots[slot] = {DType::kF32, shape, std::move(data)};
  return slots;
}

}  // namespace

std::map<std::string, HostTensor> update_reference(const RefContext& ref, const std::vector<std::string>& state,
                                                   const std::function<void(UpdateValues&)>& step) {
  UpdateValues values = update_values(ref, state);
  if (values.step >= 1) {
    step(values);
    return written_slots(ref, std::move(values));
  }
  std::map<std::string, HostTensor> slots;
  const std::vector<ParamSpec> specs = update_params(ref.op, state);
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].slot != "step") slots[specs[i].slot] = ref.params.at(i);
  return slots;
}

std::vector<ConformanceCase> update_conformance_cases(const std::string& type, const std::string& optimizer) {
  std::vector<ConformanceCase> cases;
  for (DType dtype : float_dtypes()) {
    for (const char* clip : {"", "  clip_grad_norm: 0.5\n"}) {
      // 19 x 37 weights: an element count that is no multiple of the kernel's packs of four.
      const std::string graph =
          case_graph({"B"}, {{"x", dtype, "[B, 37]"}, {"target", dtype, "[B, 19]"}},
                     {{"fc", "linear", {"x"}, {{"out_features", 19}}}, {"loss", "mse_loss", {"fc", "target"}}}) +
          fmt::format("train:\n  loss: loss\n  optimizer: {{type: {}, {}}}\n{}", type, optimizer, clip);
      cases.push_back({fmt::format("linear + mse_loss, {}{}", dtype_name(dtype), *clip ? ", clipped" : ""),
                       graph,
                       {{{"B", 1}}, {{"B", 130}}}});
    }
  }
  return cases;
}

}  // namespace teeny::ops
