// grad.mse_loss (ops.md, "Gradients"): mse_loss's gradient with respect to the prediction,
// 2 (prediction - target) / N over its N elements (mse_loss's rule, ops/mse_loss.cpp, negates it
// for the target).
//
// One grid-stride kernel per dtype (ops/kernels/grad_elementwise.cuh, as grad.activation's),
// reading both inputs in place, padded rows included; N is a runtime argument, so one kernel
// serves every binding of a symbolic shape.
#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kBlock = 256;

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  const TensorType& prediction = ctx.inputs[0];
  const TensorType& target = ctx.inputs[1];
  require_same_shape("grad.mse_loss", prediction, "prediction", target, "target");
  return contiguous(output_float_dtype(def, ctx, dtype), prediction.shape);
}

Lowering lower(const OpContext& ctx) {
  const TensorType& prediction = ctx.inputs[0];
  const TensorType& target = ctx.inputs[1];
  const DType dtype = prediction.dtype;
  const Shape& shape = prediction.shape;
  const Expr n = product(shape);
  Launch launch;
  launch.args = {input(0, "p", dtype),
                 input(1, "t", dtype),
                 output("dx", dtype),
                 i64("rows", shape.empty() ? Expr(1) : product(Shape(shape.begin(), shape.end() - 1))),
                 i32("cols", shape.empty() ? Expr(1) : shape.back()),
                 i32("p_stride", prediction.row_stride),
                 i32("t_stride", target.row_stride),
                 i64("n", n)};
  Lowering lowering;
  lowering.kernels.push_back(template_kernel(fmt::format("grad_mse_loss_{}", dtype_name(dtype)), "grad_elementwise.cuh",
                                             fmt::format("tn_grad_mse<{}, {}>", dtype_c_type(dtype), kBlock),
                                             launch.args, kBlock, TEENY_KERNEL_ORIGIN));
  launch.block = {kBlock, 1, 1};
  launch.grid[0] = grid_stride_blocks(ceil_div(n, Expr(kBlock * vector_width(dtype))), kBlock);
  launch.bytes = n * Expr(static_cast<int64_t>(3 * dtype_size(dtype)));
  launch.flops = n * Expr(2);  // subtract, multiply
  lowering.launches.push_back(std::move(launch));
  return lowering;
}

HostTensor reference(const RefContext& ref) {
  const std::vector<double>& p = ref.inputs[0].data;
  const std::vector<double>& t = ref.inputs[1].data;
  HostTensor out{ref.op.output.dtype, ref.output_shape, std::vector<double>(p.size())};
  for (size_t i = 0; i < p.size(); ++i) out.data[i] = 2.0 * (p[i] - t[i]) / static_cast<double>(p.size());
  return out;
}

ConformanceCase pair_case(const std::string& label, DType dtype, const std::vector<std::string>& dims,
                          const std::string& shape, const std::vector<Bindings>& bindings) {
  return {fmt::format("{} {}", label, dtype_name(dtype)),
          case_graph(dims, {{"prediction", dtype, shape}, {"target", dtype, shape}},
                     {{"dx", "grad.mse_loss", {"prediction", "target"}}}),
          bindings};
}

// mse_loss's cases: awkward (B, W), one long row, a middle dim, in every dtype; then padded
// prediction rows (stride 20) against contiguous target rows (17), and both padded.
std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (DType dtype : float_dtypes()) {
    cases.push_back(pair_case("[B, W]", dtype, {"B", "W"}, "[B, W]", awkward_rows()));
    cases.push_back(pair_case("[W]", dtype, {"W"}, "[W]", {{{"W", 1}}, {{"W", 7}}, {{"W", 1000003}}}));
    cases.push_back(
        pair_case("[B, 3, W]", dtype, {"B", "W"}, "[B, 3, W]", {{{"B", 1}, {"W", 1}}, {{"B", 5}, {"W", 17}}}));
  }
  cases.push_back(
      {"padded prediction (linear, 17 of 20)",
       case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}, {"target", DType::kF32, "[B, 17]"}},
                  {{"p", "linear", {"x"}, {{"out_features", 17}}}, {"dx", "grad.mse_loss", {"p", "target"}}}),
       {{{"B", 1}}, {{"B", 999}}}});
  cases.push_back({"padded prediction and target (linears, 17 of 20)",
                   case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}},
                              {{"p", "linear", {"x"}, {{"out_features", 17}}},
                               {"t", "linear", {"x"}, {{"out_features", 17}}},
                               {"dx", "grad.mse_loss", {"p", "t"}}}),
                   {{{"B", 1}}, {{"B", 999}}}});
  return cases;
}

}  // namespace

OpDef grad_mse_loss_op() {
  OpDef def;
  def.name = "grad.mse_loss";
  def.doc = "mse_loss's gradient with respect to the prediction: 2 (prediction - target) / N over its N elements";
  def.inputs = {{"prediction", "the forward prediction, any shape"},
                {"target", "the forward target, the prediction's shape and dtype"}};
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
