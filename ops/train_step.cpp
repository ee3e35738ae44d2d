// train.step (ops.md, "Optimizer steps"): the step counter of a training graph's update pass.
// Its param "count" (i32 [1], zero at first) holds the optimizer steps taken; the node runs
// before the step's updates and adds one, so every update reads the 1-based step it applies
// (its "step" slot is a param ref to this one), and a run that stops between steps leaves the
// steps taken, as a checkpoint records them. On the GPU the counter never leaves device memory,
// so a step replays as a CUDA graph (ops/kernels/optim.cuh, tn_step_increment).
//
// No conformance cases of its own: the optimizers' (ops/optim_common.h) check its count, as every
// training graph steps it.
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kThreads = 32;

Lowering lower(const OpContext&) {
  Launch launch;
  launch.args = {param_out("count", "step", DType::kI32)};
  Lowering lowering;
  lowering.kernels.push_back(
      template_kernel("step_increment", "optim.cuh", "tn_step_increment", launch.args, kThreads, TEENY_KERNEL_ORIGIN));
  launch.block = {kThreads, 1, 1};
  launch.bytes = Expr(8);  // the counter read and written
  launch.flops = Expr(0);
  lowering.launches.push_back(std::move(launch));
  return lowering;
}

std::map<std::string, HostTensor> update_reference(const RefContext& ref) {
  HostTensor count = ref.params.at(0);
  count.data.at(0) += 1;
  return {{"count", count}};
}

}  // namespace

OpDef train_step_op() {
  OpDef def;
  def.name = "train.step";
  def.doc =
      "the optimizer step counter: adds one to its param count (the steps taken, i32) before the step's updates, "
      "which read it as the step they apply; an update node of a training graph, with no output tensor";
  def.dtypes = {DType::kI32};
  def.param_slots = {"count"};
  def.source_file = TEENY_OP_FILE;
  def.infer = [](const OpContext&) { return contiguous(DType::kI32, {Expr(1)}); };
  def.params = [](const OpContext&) {
    return std::vector<ParamSpec>{{"count", {Expr(1)}, DType::kI32, ParamInit::kZero, {}}};
  };
  def.lower = lower;
  def.update = true;
  def.update_reference = update_reference;
  return def;
}

}  // namespace teeny::ops
