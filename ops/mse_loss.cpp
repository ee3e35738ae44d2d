// mse_loss (ops.md, "Losses"): PyTorch's F.mse_loss with reduction 'mean': the mean of
// (prediction - target)^2 over every element, an f32 scalar.
//
// Two launches (ops/kernels/loss.cuh): a grid-stride sum of squares, 16-byte loads of both
// inputs when both are contiguous, each block's sum into the scratch buffer; then one block
// averages the blocks' sums in a fixed order.
//
// Its gradient: grad.mse_loss's 2 (prediction - target) / N for the prediction
// (ops/grad_mse_loss.cpp), negated for the target.
#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/loss_common.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kBlock = 256;
constexpr int kUnroll = 4;

TensorType infer(const OpDef& def, const OpContext& ctx) {
  common_float_dtype(def, ctx);
  const TensorType& prediction = ctx.inputs[0];
  const TensorType& target = ctx.inputs[1];
  if (prediction.shape != target.shape) {
    throw OpError("inputs", fmt::format("prediction has shape {} but target has {}; mse_loss needs one shape",
                                        shape_str(prediction.shape), shape_str(target.shape)));
  }
  return loss_output(def, ctx);
}

Lowering lower(const OpContext& ctx) {
  const TensorType& prediction = ctx.inputs[0];
  const TensorType& target = ctx.inputs[1];
  const DType dtype = prediction.dtype;
  const Shape& shape = prediction.shape;
  const Expr n = product(shape);
  const Expr cols = shape.empty() ? Expr(1) : shape.back();
  const Expr parts = loss_parts(ceil_div(n, Expr(kBlock * kUnroll * vector_width(dtype))), kBlock);

  Lowering lowering;
  Launch launch;
  launch.args = {input(0, "a", dtype),
                 input(1, "b", dtype),
                 scratch("partials", "partials", DType::kF32),
                 i64("rows", shape.empty() ? Expr(1) : product(Shape(shape.begin(), shape.end() - 1))),
                 i32("cols", cols),
                 i32("a_stride", prediction.row_stride),
                 i32("b_stride", target.row_stride)};
  lowering.kernels.push_back(
      template_kernel(fmt::format("mse_loss_{}", dtype_name(dtype)), "loss.cuh",
                      fmt::format("tn_mse_partials<{}, {}, {}>", dtype_c_type(dtype), kBlock, kUnroll), launch.args,
                      kBlock, TEENY_KERNEL_ORIGIN));
  launch.block = {kBlock, 1, 1};
  launch.grid[0] = parts;
  launch.bytes = n * Expr(static_cast<int64_t>(2 * dtype_size(dtype))) + parts * Expr(4);
  launch.flops = n * Expr(3);  // subtract, multiply, add per element
  lowering.launches.push_back(std::move(launch));
  add_loss_mean(lowering, "mse_loss", parts, false, n);
  return lowering;
}

HostTensor reference(const RefContext& ref) {
  const std::vector<double>& a = ref.inputs[0].data;
  const std::vector<double>& b = ref.inputs[1].data;
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += (a[i] - b[i]) * (a[i] - b[i]);
  return HostTensor{DType::kF32, {}, {sum / static_cast<double>(a.size())}};
}

ConformanceCase pair_case(const std::string& label, DType dtype, const std::vector<std::string>& dims,
                          const std::string& shape, const std::vector<Bindings>& bindings) {
  return {fmt::format("{} {}", label, dtype_name(dtype)),
          case_graph(dims, {{"prediction", dtype, shape}, {"target", dtype, shape}},
                     {{"loss", "mse_loss", {"prediction", "target"}}}),
          bindings};
}

std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (DType dtype : float_dtypes()) {
    cases.push_back(pair_case("[B, W]", dtype, {"B", "W"}, "[B, W]", awkward_rows()));
    cases.push_back(pair_case("[W]", dtype, {"W"}, "[W]", {{{"W", 1}}, {{"W", 7}}, {{"W", 1000003}}}));
    cases.push_back(
        pair_case("[B, 3, W]", dtype, {"B", "W"}, "[B, 3, W]", {{{"B", 1}, {"W", 1}}, {{"B", 5}, {"W", 17}}}));
  }
  // Padded rows (stride 20) against contiguous ones (17).
  cases.push_back({"padded prediction (linear, 17 of 20)",
                   case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}, {"target", DType::kF32, "[B, 17]"}},
                              {{"p", "linear", {"x"}, {{"out_features", 17}}}, {"loss", "mse_loss", {"p", "target"}}}),
                   {{{"B", 1}}, {{"B", 999}}}});
  return cases;
}

}  // namespace

OpDef mse_loss_op() {
  OpDef def;
  def.name = "mse_loss";
  def.doc =
      "mean over every element of (prediction - target)^2 (PyTorch's F.mse_loss, reduction 'mean'); an f32 scalar";
  def.inputs = {{"prediction", "any shape"}, {"target", "the prediction's shape and dtype"}};
  def.dtypes = float_dtypes();
  def.loss = true;
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.lower = lower;
  def.reference = reference;
  def.conformance_cases = conformance_cases;
  def.backward = [](GradBuilder& g) {
    require_loss_root(g, "mse_loss");
    const std::string d_prediction = g.add("grad.mse_loss", {g.input(0), g.input(1)});
    if (g.needs_input_grad(0)) g.input_grad(0, d_prediction);
    if (g.needs_input_grad(1)) g.input_grad(1, g.add("scale", {d_prediction}, {{"value", -1.0}}));
  };
  return def;
}

}  // namespace teeny::ops
