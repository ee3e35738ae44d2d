// cross_entropy (ops.md, "Losses"): PyTorch's F.cross_entropy with class-index targets and
// reduction 'mean': the mean over the targets that are not ignore_index of
// logsumexp(logits[r]) - logits[r, target[r]], an f32 scalar.
//
// Two launches (ops/kernels/loss.cuh): a warp or a block per row (plan_rows) streams the row's
// 16-byte packs once for a stable log-sum-exp in f32, each block summing its rows' losses and
// counting them into the scratch buffer; then one block averages the blocks' partials in a
// fixed order. Vocabulary-sized rows (32000-128000 classes) take a 512-thread block each.
//
// Its gradient (dL/dlogits; the targets have none) is grad.cross_entropy's
// (ops/grad_cross_entropy.cpp).
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "ops/kernel_util.h"
#include "ops/loss_common.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

TensorType infer(const OpDef& def, const OpContext& ctx) {
  check_logits_and_targets(def, ctx);
  return loss_output(def, ctx);
}

Lowering lower(const OpContext& ctx) {
  const TensorType& logits = ctx.inputs[0];
  const TensorType& targets = ctx.inputs[1];
  const DType dtype = logits.dtype;
  const Expr rows = logit_rows(logits.shape);
  const Expr classes = logits.shape.back();
  const RowPlan plan = cross_entropy_plan(classes, dtype);
  const Expr parts = loss_parts(ceil_div(rows, Expr(plan.rows_per_block)), plan.block());

  Lowering lowering;
  Launch launch;
  launch.args = {input(0, "logits", dtype),
                 input(1, "targets", DType::kI32),
                 scratch("partials", "partials", DType::kF32),
                 i64("rows", rows),
                 i32("classes", classes),
                 i32("x_stride", logits.row_stride),
                 i32("targets_last", targets.shape.empty() ? Expr(1) : targets.shape.back()),
                 i32("targets_stride", targets.row_stride),
                 i32("ignore_index", ctx.attrs.integer("ignore_index"))};
  lowering.kernels.push_back(
      template_kernel(fmt::format("cross_entropy_{}_t{}_i{}", dtype_name(dtype), plan.threads, plan.items), "loss.cuh",
                      fmt::format("tn_cross_entropy_partials<{}, {}, {}, {}>", dtype_c_type(dtype), plan.threads,
                                  plan.rows_per_block, plan.items),
                      launch.args, plan.block(), TEENY_KERNEL_ORIGIN));
  launch.block = {plan.block(), 1, 1};
  launch.grid[0] = parts;
  launch.bytes = rows * classes * Expr(static_cast<int64_t>(dtype_size(dtype))) + rows * Expr(4) + parts * Expr(8);
  launch.flops = rows * classes * Expr(4);  // max, subtract, exp, add per logit
  lowering.launches.push_back(std::move(launch));
  add_loss_mean(lowering, "cross_entropy", parts, true, rows);
  return lowering;
}

HostTensor reference(const RefContext& ref) {
  const HostTensor& logits = ref.inputs[0];
  const std::vector<double>& targets = ref.inputs[1].data;
  const int64_t classes = logits.shape.back();
  const int64_t ignore_index = ref.op.attrs.integer("ignore_index");
  double sum = 0.0;
  int64_t count = 0;
  for (size_t r = 0; r < targets.size(); ++r) {
    const int64_t target = static_cast<int64_t>(targets[r]);
    if (target == ignore_index) continue;
    ++count;
    if (target < 0 || target >= classes) return HostTensor{DType::kF32, {}, {std::nan("")}};
    const double* x = logits.data.data() + r * classes;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < classes; ++c) m = std::max(m, x[c]);
    double s = 0.0;
    for (int64_t c = 0; c < classes; ++c) s += std::exp(x[c] - m);
    sum += m + std::log(s) - x[target];
  }
  return HostTensor{DType::kF32, {}, {sum / static_cast<double>(count)}};  // 0 / 0: NaN, as PyTorch
}

}  // namespace

OpDef cross_entropy_op() {
  OpDef def;
  def.name = "cross_entropy";
  def.doc =
      "mean over the targets not equal to ignore_index of logsumexp(logits[r]) - logits[r, target[r]] "
      "(PyTorch's F.cross_entropy, reduction 'mean'); an f32 scalar; NaN when every target is ignored or "
      "one is outside [0, classes)";
  def.inputs = {{"logits", "unnormalised scores [..., classes]"},
                {"targets", "i32 class indices, the logits' shape without the class dim"}};
  def.inputs[1].id_bound_input = 0;
  def.attrs = {ignore_index_attr("targets equal to it count for nothing")};
  def.dtypes = float_dtypes();
  def.loss = true;
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.lower = lower;
  def.reference = reference;
  def.conformance_cases = [] { return logits_cases("cross_entropy", "loss", {{32003, 300}, {50257, 33}}); };
  def.backward = [](GradBuilder& g) {
    require_loss_root(g, "cross_entropy");
    if (g.needs_input_grad(1))
      throw Error(fmt::format("node '{}': cross_entropy's targets are integers and have no gradient", g.node()));
    g.input_grad(0, g.add("grad.cross_entropy", {g.input(0), g.input(1)},
                          {{"ignore_index", g.ctx().attrs.integer("ignore_index")}}));
  };
  return def;
}

}  // namespace teeny::ops
