// grad.cross_entropy (ops.md, "Gradients"): cross_entropy's gradient with respect to the logits,
// (softmax(logits[r]) - onehot(targets[r])) / count with count the targets not equal to
// ignore_index (PyTorch's); a row whose target is ignored gets 0, one whose target is outside
// [0, classes) NaN, as the loss is.
//
// Two launches (ops/kernels/loss.cuh): one block counts the targets exactly (integers) and leaves
// 1 / count in the scratch buffer "inv_count"; then the forward's plan, a warp or a block per row
// (cross_entropy_plan), computes the row's max and sum of exp as the forward does and writes the
// row, its padding (rows padded to 16 bytes) as zeros. Nothing is added across rows, so the
// gradient's bits are the same on every run.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "ops/kernel_util.h"
#include "ops/loss_common.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kCountThreads = 1024;

TensorType infer(const OpDef& def, const OpContext& ctx) {
  check_logits_and_targets(def, ctx);
  const TensorType& logits = ctx.inputs[0];
  // Rows padded to 16 bytes, as linear's logits are: the gradient GEMMs that read them load whole
  // 16-byte chunks only from aligned rows.
  const DType dtype = output_float_dtype(def, ctx, logits.dtype);
  TensorType out = contiguous(dtype, logits.shape);
  out.row_stride = round_up(logits.shape.back(), Expr(16 / static_cast<int64_t>(dtype_size(dtype))));
  return out;
}

Lowering lower(const OpContext& ctx) {
  const TensorType& logits = ctx.inputs[0];
  const TensorType& targets = ctx.inputs[1];
  const DType dtype = logits.dtype;
  const Expr rows = logit_rows(logits.shape);
  const Expr classes = logits.shape.back();
  const Expr targets_last = targets.shape.empty() ? Expr(1) : targets.shape.back();
  const int64_t ignore_index = ctx.attrs.integer("ignore_index");

  Lowering lowering;
  lowering.scratch.push_back({"inv_count", DType::kF32, Expr(1)});
  Launch count;
  count.args = {input(1, "targets", DType::kI32),
                scratch("inv_count", "inv_count", DType::kF32),
                i64("rows", rows),
                i32("targets_last", targets_last),
                i32("targets_stride", targets.row_stride),
                i32("ignore_index", ignore_index)};
  lowering.kernels.push_back(template_kernel("grad_cross_entropy_count", "loss.cuh",
                                             fmt::format("tn_cross_entropy_count<{}>", kCountThreads), count.args,
                                             kCountThreads, TEENY_KERNEL_ORIGIN));
  count.block = {kCountThreads, 1, 1};
  count.bytes = rows * Expr(4) + Expr(4);
  count.flops = rows;
  lowering.launches.push_back(std::move(count));

  const RowPlan plan = cross_entropy_plan(classes, dtype);
  Launch grad;
  grad.kernel = 1;
  grad.args = {input(0, "logits", dtype),
               input(1, "targets", DType::kI32),
               scratch("inv_count", "inv_count", DType::kF32),
               output("dx", dtype),
               i64("rows", rows),
               i32("classes", classes),
               i32("x_stride", logits.row_stride),
               i32("dx_stride", ctx.output.row_stride),
               i32("targets_last", targets_last),
               i32("targets_stride", targets.row_stride),
               i32("ignore_index", ignore_index)};
  lowering.kernels.push_back(template_kernel(
      fmt::format("grad_cross_entropy_{}_t{}_i{}", dtype_name(dtype), plan.threads, plan.items), "loss.cuh",
      fmt::format("tn_cross_entropy_grad<{}, {}, {}, {}>", dtype_c_type(dtype), plan.threads, plan.rows_per_block,
                  plan.items),
      grad.args, plan.block(), TEENY_KERNEL_ORIGIN));
  grad.block = {plan.block(), 1, 1};
  grad.grid[0] = ceil_div(rows, Expr(plan.rows_per_block));
  // The logits read twice (the second time mostly from cache), dx written once.
  grad.bytes = rows * classes * Expr(static_cast<int64_t>(3 * dtype_size(dtype))) + rows * Expr(4);
  grad.flops = rows * classes * Expr(7);  // max, subtract, exp, add; subtract, exp, scale
  lowering.launches.push_back(std::move(grad));
  return lowering;
}

HostTensor reference(const RefContext& ref) {
  const HostTensor& logits = ref.inputs[0];
  const std::vector<double>& targets = ref.inputs[1].data;
  const int64_t classes = logits.shape.back();
  const int64_t ignore_index = ref.op.attrs.integer("ignore_index");
  int64_t count = 0;
  for (double target : targets) count += static_cast<int64_t>(target) != ignore_index;
  HostTensor out{ref.op.output.dtype, ref.output_shape, std::vector<double>(logits.data.size(), 0.0)};
  for (size_t r = 0; r < targets.size(); ++r) {
    const int64_t target = static_cast<int64_t>(targets[r]);
    if (target == ignore_index) continue;
    double* dx = out.data.data() + r * classes;
    if (target < 0 || target >= classes) {
      std::fill(dx, dx + classes, std::nan(""));
      continue;
    }
    const double* x = logits.data.data() + r * classes;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < classes; ++c) m = std::max(m, x[c]);
    double s = 0.0;
    for (int64_t c = 0; c < classes; ++c) s += std::exp(x[c] - m);
    for (int64_t c = 0; c < classes; ++c)
      dx[c] = (std::exp(x[c] - m) / s - (c == target ? 1.0 : 0.0)) / static_cast<double>(count);
  }
  return out;
}

}  // namespace

OpDef grad_cross_entropy_op() {
  OpDef def;
  def.name = "grad.cross_entropy";
  def.doc =
      "cross_entropy's gradient with respect to the logits: (softmax(logits[r]) - onehot(targets[r])) / count, "
      "count the targets not equal to ignore_index; 0 in ignored rows, NaN in rows whose target is outside "
      "[0, classes)";
  def.inputs = {{"logits", "the forward logits [..., classes]"},
                {"targets", "the forward i32 class indices, the logits' shape without the class dim"}};
  def.inputs[1].id_bound_input = 0;
  def.attrs = {ignore_index_attr("the forward's: targets equal to it count for nothing")};
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.lower = lower;
  def.reference = reference;
  def.conformance_cases = [] { return logits_cases("grad.cross_entropy", "dx", {{50257, 33}, {128256, 5}}); };
  return def;
}

}  // namespace teeny::ops
