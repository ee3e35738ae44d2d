// train.batchnorm_stats (ops.md, "Optimizer steps"): the running statistics' update of a
// batchnorm2d node in training mode, once a step, as PyTorch's training forward makes it:
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * n / (n - 1)
// with the batch's per-channel mean and biased var over n = B * H * W values (so the unbiased
// variance goes into running_var). batchnorm2d's training mode (core/autodiff.h, OpDef::train_mode)
// adds one per node to the update pass, reading the node's input x and writing the node's
// running_mean and running_var in place through param refs; it has no output tensor. It also
// reads the step counter (param ref "step"), and changes nothing where it halted (the loss was
// not finite: ops/train_step.cpp).
//
// No conformance cases of its own: batchnorm2d's training-graph cases check what it writes.
#include <fmt/format.h>

#include "ops/batchnorm_common.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/vision_common.h"

namespace teeny::ops {
namespace {

constexpr const char* kOp = "train.batchnorm_stats";

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  const TensorType& x = ctx.inputs.at(0);
  check_nchw(kOp, x);
  check_batch_statistics(kOp, x);
  return contiguous(dtype, {x.shape[1]});
}

std::vector<ParamSpec> params(const OpContext& ctx) {
  const TensorType& x = ctx.inputs.at(0);
  std::vector<ParamSpec> specs;
  for (const char* slot : {"running_mean", "running_var"})
    specs.push_back({slot, {x.shape.at(1)}, x.dtype, ParamInit::kTrained, {}});
  specs.push_back({"step", {Expr(1)}, DType::kI32, ParamInit::kZero, {}});
  return specs;
}

Lowering lower(const OpContext& ctx) {
  const TensorType& x = ctx.inputs.at(0);
  const Shape& s = x.shape;
  const DType dtype = x.dtype;
  Launch launch;
  launch.args = {input(0, "x", dtype),
                 param_out("running_mean", "running_mean", dtype),
                 param_out("running_var", "running_var", dtype),
                 i32("batch", s[0]),
                 i32("channels", s[1]),
                 i32("plane", s[2] * s[3]),
                 f32("momentum", ctx.attrs.real("momentum")),
                 param("step", "step", DType::kI32)};
  Lowering lowering;
  lowering.kernels.push_back(
      template_kernel(fmt::format("batchnorm_stats_{}", dtype_name(dtype)), "batchnorm_train.cuh",
                      fmt::format("tn_bn_running_stats<{}, {}>", dtype_c_type(dtype), kBatchNormThreads), launch.args,
                      kBatchNormThreads, TEENY_KERNEL_ORIGIN));
  launch.block = {kBatchNormThreads, 1, 1};
  launch.grid = {s[1], Expr(1), Expr(1)};
  launch.bytes = Expr(2 * static_cast<int64_t>(dtype_size(dtype))) * product(s);
  launch.flops = Expr(4) * product(s);
  lowering.launches.push_back(std::move(launch));
  return lowering;
}

std::map<std::string, HostTensor> update_reference(const RefContext& ref) {
  if (ref.params.at(2).data.at(0) < 1) return {{"running_mean", ref.params[0]}, {"running_var", ref.params[1]}};
  const double momentum = ref.op.attrs.real("momentum");
  const ChannelMoments m = channel_moments(ref.inputs.at(0));
  const double n = static_cast<double>(m.count);
  HostTensor mean = ref.params.at(0), var = ref.params.at(1);
  for (size_t c = 0; c < mean.data.size(); ++c) {
    mean.data[c] = (1 - momentum) * mean.data[c] + momentum * m.mean[c];
    var.data[c] = (1 - momentum) * var.data[c] + momentum * m.var[c] * n / (n - 1);
  }
  return {{"running_mean", mean}, {"running_var", var}};
}

}  // namespace

OpDef train_batchnorm_stats_op() {
  OpDef def;
  def.name = kOp;
  def.doc =
      "batchnorm2d's running statistics' update in place, once a training step: (1 - momentum) * running + "
      "momentum * the batch's (the unbiased variance); an update node of a training graph, with no output tensor";
  def.inputs = {{"x", "the batchnorm2d node's input [B, C, H, W]"}};
  AttrSpec momentum = attr_spec("momentum", AttrType::kFloat, "the batchnorm2d node's momentum", 0.1);
  momentum.min_value = 0;
  momentum.max_value = 1;
  def.attrs = {momentum};
  def.dtypes = float_dtypes();
  def.param_slots = {"running_mean", "running_var", "step"};
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.params = params;
  def.lower = lower;
  def.update = true;
  def.update_reference = update_reference;
  return def;
}

}  // namespace teeny::ops
