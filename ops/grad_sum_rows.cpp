// grad.sum_rows (ops.md, "Gradients"): a bias's gradient, dy [..., N] summed over every leading
// dim -> [N] (linear's and layernorm's bias). Deterministic column sums (ops/grad_columns.h).
#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/grad_columns.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  if (dy.shape.empty()) throw OpError("inputs", "grad.sum_rows needs dy of rank >= 1, got a scalar");
  return contiguous(output_float_dtype(def, ctx, common_float_dtype(def, ctx)), {dy.shape.back()});
}

Lowering lower(const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  ColumnSums sums;
  sums.name = "grad_sum_rows";
  sums.dtype = dy.dtype;
  sums.rows = product(Shape(dy.shape.begin(), dy.shape.end() - 1));
  sums.cols = dy.shape.back();
  sums.partials_function = "tn_sum_rows_partials";
  sums.partials_args = {input(0, "dy", dy.dtype), scratch("partials", "partials", DType::kF32), i64("rows", sums.rows),
                        i32("cols", sums.cols), i32("dy_stride", dy.row_stride)};
  sums.bytes = sums.rows * sums.cols * Expr(static_cast<int64_t>(dtype_size(dy.dtype)));
  sums.flops = sums.rows * sums.cols;
  Lowering lowering;
  add_column_sums(lowering, sums);
  return lowering;
}

HostTensor reference(const RefContext& ref) {
  const HostTensor& dy = ref.inputs[0];
  const int64_t cols = dy.shape.back();
  HostTensor out{ref.op.output.dtype, ref.output_shape, std::vector<double>(cols, 0.0)};
  for (size_t i = 0; i < dy.data.size(); ++i) out.data[i % cols] += dy.data[i];
  return out;
}

std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (DType dtype : float_dtypes()) {
    const std::string dt = dtype_name(dtype);
    cases.push_back({"dy [B, W] " + dt,
                     case_graph({"B", "W"}, {{"dy", dtype, "[B, W]"}}, {{"db", "grad.sum_rows", {"dy"}}}),
                     awkward_rows()});
    // Parts of 256 rows: one short part, one whole and one ragged, many.
    cases.push_back({"dy [B, 3, 7] " + dt,
                     case_graph({"B"}, {{"dy", dtype, "[B, 3, 7]"}}, {{"db", "grad.sum_rows", {"dy"}}}),
                     {{{"B", 1}}, {{"B", 86}}, {{"B", 3000}}}});
  }
  cases.push_back({"dy [W]",
                   case_graph({"W"}, {{"dy", DType::kF32, "[W]"}}, {{"db", "grad.sum_rows", {"dy"}}}),
                   {{{"W", 1}}, {{"W", 1000}}}});
  cases.push_back({"padded dy (linear, 17 of 20)",
                   case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}},
                              {{"p", "linear", {"x"}, {{"out_features", 17}}}, {"db", "grad.sum_rows", {"p"}}}),
                   {{{"B", 1}}, {{"B", 999}}}});
  return cases;
}

}  // namespace

OpDef grad_sum_rows_op() {
  OpDef def;
  def.name = "grad.sum_rows";
  def.doc = "a bias's gradient: dy [..., N] summed over every leading dim -> [N], in a fixed order";
  def.inputs = {{"dy", "dL/dy [..., N]"}};
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.lower = lower;
  def.reference = reference;
  def.conformance_cases = conformance_cases;
  return def;
}

}  // namespace teeny::ops
