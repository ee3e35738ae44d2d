// train.step (ops.md, "Optimizer steps"): the step counter of a training graph's update pass.
// Its param "count" (i32 [1], zero at first) holds the optimizer steps taken; the node runs
// before the step's updates and adds one, so every update reads the 1-based step it applies
// (its "step" slot is a param ref to this one), and a run that stops between steps leaves the
// steps taken, as a checkpoint records them. On the GPU the counter never leaves device memory,
// so a step replays as a CUDA graph (ops/kernels/optim.cuh, tn_step_increment).
//
// Its input is the loss: where that is not finite, the counter halts at -(steps taken + 1) and
// stays there, and every update node reads a counter below 1 as "change nothing". So the updates
// need not wait for the host to read the loss: teeny train enqueues them behind the backward
// pass and stops at a non-finite loss with the params of the step before.
//
// No conformance cases of its own: the optimizers' (ops/optim_common.h) check its count, as every
// training graph steps it.
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kThreads = 32;

TensorType infer(const OpContext& ctx) {
  const TensorType& loss = ctx.inputs.at(0);
  if (!is_float(loss.dtype) || product(loss.shape).const_value() != std::optional<int64_t>(1))
    throw OpError("inputs", fmt::format("input 0 is {} {}; train.step reads the loss, one float",
                                        dtype_name(loss.dtype), shape_str(loss.shape)));
  return contiguous(DType::kI32, {Expr(1)});
}

Lowering lower(const OpContext& ctx) {
  const DType dtype = ctx.inputs.at(0).dtype;
  Launch launch;
  launch.args = {param_out("count", "step", DType::kI32), input(0, "loss", dtype)};
  Lowering lowering;
  lowering.kernels.push_back(template_kernel(fmt::format("step_increment_{}", dtype_name(dtype)), "optim.cuh",
                                             fmt::format("tn_step_increment<{}>", dtype_c_type(dtype)), launch.args,
                                             kThreads, TEENY_KERNEL_ORIGIN));
  launch.block = {kThreads, 1, 1};
  launch.bytes = Expr(8 + static_cast<int64_t>(dtype_size(dtype)));  // the counter read and written, the loss
  launch.flops = Expr(0);
  lowering.launches.push_back(std::move(launch));
  return lowering;
}

std::map<std::string, HostTensor> update_reference(const RefContext& ref) {
  HostTensor count = ref.params.at(0);
  const double taken = count.data.at(0);
  if (taken >= 0) count.data[0] = std::isfinite(ref.inputs.at(0).data.at(0)) ? taken + 1 : -(taken + 1);
  return {{"count", count}};
}

}  // namespace

OpDef train_step_op() {
  OpDef def;
  def.name = "train.step";
  def.doc =
      "the optimizer step counter: adds one to its param count (the steps taken, i32) before the step's updates, "
      "which read it as the step they apply; where the loss is not finite it halts below 1 for good and the updates "
      "change nothing; an update node of a training graph, with no output tensor";
  def.inputs = {{"loss", "the training graph's loss (one float)"}};
  def.dtypes = float_dtypes();
  def.param_slots = {"count"};
  def.source_file = TEENY_OP_FILE;
  def.infer = infer;
  def.params = [](const OpContext&) {
    return std::vector<ParamSpec>{{"count", {Expr(1)}, DType::kI32, ParamInit::kZero, {}}};
  };
  def.lower = lower;
  def.update = true;
  def.update_reference = update_reference;
  return def;
}

}  // namespace teeny::ops
