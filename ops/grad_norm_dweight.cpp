// grad.layernorm_dweight, grad.rmsnorm_dweight (ops.md, "Gradients"): the weight gradients of
// layernorm and rmsnorm, Σ_rows dy · x̂ -> [D], with x̂ the forward pass's normalized x.
//
// Three launches: each row's statistics (plan_rows's group per row, ops/kernels/grad_norms.cuh)
// into the scratch buffer "stats", then the deterministic column sums of dy · x̂
// (ops/grad_columns.h).
#include <fmt/format.h>

#include <algorithm>

#include "ops/conformance.h"
#include "ops/grad_columns.h"
#include "ops/kernel_util.h"
#include "ops/norm_common.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = norm_grad_dtype(def, ctx);
  return contiguous(output_float_dtype(def, ctx, dtype), {ctx.inputs[1].shape.back()});
}

Lowering lower(const OpContext& ctx, const std::string& name, bool rms) {
  const TensorType& dy = ctx.inputs[0];
  const TensorType& x = ctx.inputs[1];
  const DType dtype = x.dtype;
  const Expr cols = x.shape.back();
  const Expr rows = product(Shape(x.shape.begin(), x.shape.end() - 1));
  const Expr elem(static_cast<int64_t>(dtype_size(dtype)));
  // The statistics alone: a thread holds one chunk of 16 elements at a time.
  RowPlan plan = plan_rows(cols, dtype);
  plan.items = std::max(1, 16 / vector_width(dtype));

  Lowering lowering;
  lowering.scratch.push_back({"stats", DType::kF32, rows * Expr(2)});
  Launch stats;
  stats.args = {input(1, "x", dtype), scratch("stats", "stats", DType::kF32), i64("rows", rows),
                i32("cols", cols),    i32("x_stride", x.row_stride),          f32("eps", ctx.attrs.real("eps"))};
  lowering.kernels.push_back(template_kernel(
      fmt::format("grad_{}_stats_{}_t{}_i{}", name, dtype_name(dtype), plan.threads, plan.items), "grad_norms.cuh",
      fmt::format("tn_norm_row_stats<{}, {}, {}, {}, {}>", dtype_c_type(dtype), rms, plan.threads, plan.rows_per_block,
                  plan.items),
      stats.args, plan.block(), TEENY_KERNEL_ORIGIN));
  stats.block = {plan.block(), 1, 1};
  stats.grid[0] = ceil_div(rows, Expr(plan.rows_per_block));
  stats.bytes = rows * cols * elem * Expr(rms ? 1 : 2) + rows * Expr(8);
  stats.flops = rows * cols * Expr(rms ? 2 : 4);
  lowering.launches.push_back(std::move(stats));

  ColumnSums sums;
  sums.name = fmt::format("grad_{}_dweight", name);
  sums.dtype = dtype;
  sums.rows = rows;
  sums.cols = cols;
  sums.partials_function = "tn_norm_dweight_partials";
  sums.partials_args = {input(0, "dy", dtype),
                        input(1, "x", dtype),
                        scratch("stats", "stats", DType::kF32),
                        scratch("partials", "partials", DType::kF32),
                        i64("rows", rows),
                        i32("cols", cols),
                        i32("dy_stride", dy.row_stride),
                        i32("x_stride", x.row_stride)};
  sums.bytes = Expr(2) * rows * cols * elem + rows * Expr(8);
  sums.flops = Expr(3) * rows * cols;
  add_column_sums(lowering, sums);
  return lowering;
}

HostTensor reference(const RefContext& ref, bool rms) {
  const std::vector<double>& dy = ref.inputs[0].data;
  const std::vector<double>& x = ref.inputs[1].data;
  const int64_t cols = ref.output_shape.back();
  const int64_t rows = cols == 0 ? 0 : static_cast<int64_t>(x.size()) / cols;
  const double eps = ref.op.attrs.real("eps");
  HostTensor dw{ref.op.output.dtype, ref.output_shape, std::vector<double>(cols, 0.0)};
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * cols;
    const auto [mean, rstd] = norm_row_stats(xr, cols, eps, rms);
    for (int64_t c = 0; c < cols; ++c) dw.data[c] += dy[r * cols + c] * (xr[c] - mean) * rstd;
  }
  return dw;
}

std::vector<ConformanceCase> conformance_cases(const std::string& op) {
  std::vector<ConformanceCase> cases;
  const CaseNode node("dw", op, {"dy", "x"});
  for (DType dtype : float_dtypes()) {
    cases.push_back(norm_grad_rows_case(node, dtype, {"B", "W"}, "[B, W]", awkward_rows()));
    // Rows of a warp, of a block, and streamed; one part of rows, a ragged one, many.
    for (int width : {7, 768, 20000}) {
      cases.push_back(norm_grad_rows_case(node, dtype, {"B"}, fmt::format("[B, {}]", width),
                                          {{{"B", 1}}, {{"B", 257}}, {{"B", width == 20000 ? 300 : 5000}}}));
    }
  }
  cases.push_back(norm_grad_padded_case(node));
  return cases;
}

OpDef grad_norm_dweight_op(const std::string& name, bool rms) {
  OpDef def;
  def.name = "grad." + name + "_dweight";
  def.doc = fmt::format("{}'s weight gradient: Σ over rows of dy · x̂, dy and x [..., D] -> [D]", name);
  def.inputs = {{"dy", "dL/dy [..., D]"}, {"x", "the forward input [..., D]"}};
  def.attrs.push_back(norm_eps_attr(rms, "the forward node's eps"));
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.lower = [name, rms](const OpContext& ctx) { return lower(ctx, name, rms); };
  def.reference = [rms](const RefContext& ref) { return reference(ref, rms); };
  const std::string op = def.name;
  def.conformance_cases = [op] { return conformance_cases(op); };
  return def;
}

}  // namespace

OpDef grad_layernorm_dweight_op() { return grad_norm_dweight_op("layernorm", false); }
OpDef grad_rmsnorm_dweight_op() { return grad_norm_dweight_op("rmsnorm", true); }

}  // namespace teeny::ops
