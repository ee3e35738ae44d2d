// grad.layernorm_dx, grad.rmsnorm_dx (ops.md, "Gradients"): the input gradients of layernorm and
// rmsnorm over the last dim, from dy, the forward input x and the forward node's weight (a param
// ref in a training graph). The statistics are recomputed from x rather than saved.
//
// plan_rows's group per row (a warp or a block), three passes over the row in chunks of 8
// elements a thread (ops/kernels/grad_norms.cuh): the statistics, sum(g) and sum(g · x̂), then dx.
#include <fmt/format.h>

#include <algorithm>

#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/norm_common.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

// The row plan of the forward pass with 8 elements a thread a chunk: g, x̂ and the weight of a
// chunk are held at once (16 elements spilled at the 64 registers ptxas aims for in a block of
// 256), and a longer row takes more chunks.
RowPlan grad_row_plan(const Expr& cols, DType dtype) {
  RowPlan plan = plan_rows(cols, dtype);
  plan.items = std::max(1, 8 / vector_width(dtype));
  return plan;
}

bool weighted(const OpContext& ctx, bool rms) { return rms || ctx.attrs.boolean("affine"); }

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = norm_grad_dtype(def, ctx);
  return contiguous(output_float_dtype(def, ctx, dtype), ctx.inputs[1].shape);
}

std::vector<ParamSpec> params(const OpContext& ctx, bool rms) {
  if (!weighted(ctx, rms)) return {};
  return {{"weight", {ctx.inputs[1].shape.back()}, ctx.output.dtype, ParamInit::kTrained, {}}};
}

Lowering lower(const OpContext& ctx, const std::string& name, bool rms) {
  const TensorType& dy = ctx.inputs[0];
  const TensorType& x = ctx.inputs[1];
  const DType dtype = x.dtype;
  const bool with_weight = weighted(ctx, rms);
  const Expr cols = x.shape.back();
  const Expr rows = product(Shape(x.shape.begin(), x.shape.end() - 1));
  const RowPlan plan = grad_row_plan(cols, dtype);

  Launch launch;
  launch.args = {input(0, "dy", dtype), input(1, "x", dtype)};
  if (with_weight) launch.args.push_back(param("weight", "weight", dtype));
  for (KernelArg arg : {output("dx", dtype), i64("rows", rows), i32("cols", cols), i32("dy_stride", dy.row_stride),
                        i32("x_stride", x.row_stride), f32("eps", ctx.attrs.real("eps"))})
    launch.args.push_back(std::move(arg));
  const std::string function = with_weight ? fmt::format("tn_norm_grad_dx<{}, {}, {}, {}, {}>", dtype_c_type(dtype),
                                                         rms, plan.threads, plan.rows_per_block, plan.items)
                                           : fmt::format("tn_norm_grad_dx_plain<{}, {}, {}, {}>", dtype_c_type(dtype),
                                                         plan.threads, plan.rows_per_block, plan.items);
  Lowering lowering;
  lowering.kernels.push_back(template_kernel(fmt::format("grad_{}_dx{}_{}_t{}_i{}", name, with_weight ? "" : "_plain",
                                                         dtype_name(dtype), plan.threads, plan.items),
                                             "grad_norms.cuh", function, launch.args, plan.block(),
                                             TEENY_KERNEL_ORIGIN));
  launch.block = {plan.block(), 1, 1};
  launch.grid[0] = ceil_div(rows, Expr(plan.rows_per_block));
  const Expr elem(static_cast<int64_t>(dtype_size(dtype)));
  launch.bytes = (Expr(3) * rows * cols + (with_weight ? cols : Expr(0))) * elem;
  launch.flops = rows * cols * Expr(rms ? 8 : 11);
  lowering.launches.push_back(std::move(launch));
  return lowering;
}

HostTensor reference(const RefContext& ref, bool rms) {
  const std::vector<double>& dy = ref.inputs[0].data;
  const std::vector<double>& x = ref.inputs[1].data;
  const int64_t cols = ref.output_shape.back();
  const int64_t rows = cols == 0 ? 0 : static_cast<int64_t>(x.size()) / cols;
  const double eps = ref.op.attrs.real("eps");
  const bool with_weight = !ref.params.empty();
  HostTensor dx{ref.op.output.dtype, ref.output_shape, std::vector<double>(x.size())};
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * cols;
    const double* dyr = dy.data() + r * cols;
    const auto [mean, rstd] = norm_row_stats(xr, cols, eps, rms);
    double mean_g = 0.0, mean_gx = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double g = dyr[c] * (with_weight ? ref.params[0].data[c] : 1.0);
      mean_g += g / cols;
      mean_gx += g * (xr[c] - mean) * rstd / cols;
    }
    if (rms) mean_g = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double g = dyr[c] * (with_weight ? ref.params[0].data[c] : 1.0);
      dx.data[r * cols + c] = rstd * (g - mean_g - (xr[c] - mean) * rstd * mean_gx);
    }
  }
  return dx;
}

std::vector<ConformanceCase> conformance_cases(const std::string& op, bool rms) {
  std::vector<ConformanceCase> cases;
  auto node = [&](nlohmann::json attrs = nlohmann::json::object()) {
    return CaseNode("dx", op, {"dy", "x"}, std::move(attrs));
  };
  for (DType dtype : float_dtypes()) {
    cases.push_back(norm_grad_rows_case(node(), dtype, {"B", "W"}, "[B, W]", awkward_rows()));
    // A warp a row (17, 768), a block (4096), a block over several chunks (20000).
    for (int width : {17, 768, 4096, 20000})
      cases.push_back(
          norm_grad_rows_case(node(), dtype, {"B"}, fmt::format("[B, {}]", width), {{{"B", 1}}, {{"B", 129}}}));
  }
  if (!rms)
    cases.push_back({"no affine [B, W] f32",
                     case_graph({"B", "W"}, {{"dy", DType::kF32, "[B, W]"}, {"x", DType::kF32, "[B, W]"}},
                                {node({{"affine", false}})}),
                     awkward_rows()});
  cases.push_back(norm_grad_padded_case(node()));
  return cases;
}

OpDef grad_norm_dx_op(const std::string& name, bool rms) {
  OpDef def;
  def.name = "grad." + name + "_dx";
  def.doc = rms ? "rmsnorm's input gradient from dy, x [..., D] and weight [D]"
                : "layernorm's input gradient from dy, x [..., D] and (affine) weight [D]";
  def.inputs = {{"dy", "dL/dy [..., D]"}, {"x", "the forward input [..., D]"}};
  def.attrs.push_back(norm_eps_attr(rms, "the forward node's eps"));
  if (!rms)
    def.attrs.push_back(attr_spec("affine", AttrType::kBool, "the forward node's affine", nlohmann::json(true)));
  def.dtypes = float_dtypes();
  def.param_slots = {"weight"};
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.params = [rms](const OpContext& ctx) { return params(ctx, rms); };
  def.lower = [name, rms](const OpContext& ctx) { return lower(ctx, name, rms); };
  def.reference = [rms](const RefContext& ref) { return reference(ref, rms); };
  const std::string op = def.name;
  def.conformance_cases = [op, rms] { return conformance_cases(op, rms); };
  return def;
}

}  // namespace

OpDef grad_layernorm_dx_op() { return grad_norm_dx_op("layernorm", false); }
OpDef grad_rmsnorm_dx_op() { return grad_norm_dx_op("rmsnorm", true); }

}  // namespace teeny::ops
