// layernorm and rmsnorm over the last dim (ops.md, "Dense"), any row length.
//
// Same row scheme as softmax (plan_rows): a warp or a block per row; a row that fits the
// group's registers is read once (layernorm: mean, then the variance of the cached values,
// then the write; rmsnorm: mean square, then the write); longer rows stream in chunks
// (layernorm three passes, rmsnorm two). Statistics in f32; weight/bias in the input's dtype.
#include <fmt/format.h>

#include "core/autodiff.h"
#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/norm_common.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

OpDef norm_op(const std::string& name, bool rms) {
  OpDef def;
  def.name = name;
  def.doc = rms ? "y = x / sqrt(mean(x^2) + eps) * weight, over the last dim"
                : "y = (x - mean) / sqrt(var + eps) * weight + bias, over the last dim (biased var)";
  def.inputs = {{"x", "input [..., D]"}};
  def.attrs.push_back(norm_eps_attr(rms, "added to the variance"));
  if (!rms)
    def.attrs.push_back(attr_spec("affine", AttrType::kBool, "learnable weight and bias", nlohmann::json(true)));
  def.dtypes = float_dtypes();
  def.param_slots = rms ? std::vector<std::string>{"weight"} : std::vector<std::string>{"weight", "bias"};
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;

  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = common_float_dtype(meta, ctx);
    const TensorType& x = ctx.inputs[0];
    if (x.shape.empty()) throw OpError("inputs", meta.name + " needs an input of rank >= 1");
    return contiguous(output_float_dtype(meta, ctx, dtype), x.shape);
  };
  const auto has_weight = [rms](const OpContext& ctx) { return rms || ctx.attrs.boolean("affine"); };
  def.params = [rms, has_weight](const OpContext& ctx) {
    std::vector<ParamSpec> params;
    if (!has_weight(ctx)) return params;
    const Expr d = ctx.inputs[0].shape.back();
    ParamSpec weight;
    weight.slot = "weight";
    weight.shape = {d};
    weight.dtype = ctx.inputs[0].dtype;
    params.push_back(weight);
    if (!rms) {
      ParamSpec bias = weight;
      bias.slot = "bias";
      params.push_back(bias);
    }
    return params;
  };

  def.lower = [name, rms, has_weight](const OpContext& ctx) {
    const TensorType& x = ctx.inputs[0];
    const DType dtype = x.dtype;
    const bool weighted = has_weight(ctx);
    const bool affine = weighted && !rms;
    const Expr cols = x.shape.back();
    const Expr rows = product(Shape(x.shape.begin(), x.shape.end() - 1));
    const RowPlan plan = plan_rows(cols, dtype);

    Launch launch;
    launch.args = {input(0, "x", dtype)};
    if (weighted) launch.args.push_back(param("weight", "weight", dtype));
    if (affine) launch.args.push_back(param("bias", "bias", dtype));
    for (KernelArg arg : {output("y", dtype), i64("rows", rows), i32("cols", cols), i32("x_stride", x.row_stride),
                          f32("eps", ctx.attrs.real("eps"))})
      launch.args.push_back(std::move(arg));

    // One template per argument list: layernorm with and without weight and bias, rmsnorm.
    const char* function = rms ? "tn_rmsnorm" : affine ? "tn_layernorm" : "tn_layernorm_plain";
    Lowering lowering;
    lowering.kernels.push_back(template_kernel(
        fmt::format("{}{}_{}_t{}_i{}", name, weighted ? "" : "_plain", dtype_name(dtype), plan.threads, plan.items),
        "norms.cuh",
        fmt::format("{}<{}, {}, {}, {}>", function, dtype_c_type(dtype), plan.threads, plan.rows_per_block, plan.items),
        launch.args, plan.block(), TEENY_KERNEL_ORIGIN));
    launch.block = {plan.block(), 1, 1};
    launch.grid[0] = ceil_div(rows, Expr(plan.rows_per_block));
    const Expr elem = Expr(static_cast<int64_t>(dtype_size(dtype)));
    const int param_count = weighted ? (affine ? 2 : 1) : 0;
    launch.bytes = (Expr(2) * rows * cols + Expr(param_count) * cols) * elem;
    launch.flops = rows * cols * Expr(rms ? 4 : 7);
    lowering.launches.push_back(std::move(launch));
    return lowering;
  };

  def.conformance_cases = [name, rms] {
    std::vector<ConformanceCase> cases;
    for (DType dtype : float_dtypes()) {
      const std::vector<ConformanceCase> rows = row_cases(name, dtype, {17, 768, 4096, 20000});
      cases.insert(cases.end(), rows.begin(), rows.end());
    }
    if (!rms)
      cases.push_back(
          {"no affine [B, W] f32",
           case_graph({"B", "W"}, {{"x", DType::kF32, "[B, W]"}}, {{"y", name, {"x"}, {{"affine", false}}}}),
           awkward_rows()});
    cases.push_back({"padded rows (linear, 17 of 20)",
                     case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}},
                                {{"p", "linear", {"x"}, {{"out_features", 17}}}, {"y", name, {"p"}}}),
                     {{{"B", 1}}, {{"B", 999}}}});
    return cases;
  };

  // dx (grad.<name>_dx, reading x and the weight), dweight = Σ_rows dy · x̂ (grad.<name>_dweight,
  // reading x), dbias = Σ_rows dy (grad.sum_rows). x is what the forward pass saves: the
  // statistics are recomputed from it.
  def.backward = [name, rms, has_weight](GradBuilder& g) {
    const std::string& dy = g.grad_output();
    const std::string& x = g.input(0);
    const double eps = g.ctx().attrs.real("eps");
    if (g.needs_input_grad(0)) {
      nlohmann::json attrs{{"eps", eps}};
      if (!rms) attrs["affine"] = g.ctx().attrs.boolean("affine");
      std::map<std::string, std::string> params;
      if (has_weight(g.ctx())) params["weight"] = g.param("weight");
      g.input_grad(0, g.add("grad." + name + "_dx", {dy, x}, attrs, params));
    }
    if (g.needs_param_grad("weight"))
      g.param_grad("weight", g.add("grad." + name + "_dweight", {dy, x}, {{"eps", eps}}));
    if (g.needs_param_grad("bias")) g.param_grad("bias", g.add("grad.sum_rows", {dy}));
  };

  def.reference = [rms, has_weight](const RefContext& ref) {
    const std::vector<int64_t>& shape = ref.output_shape;
    const int64_t cols = shape.back();
    const int64_t rows = cols == 0 ? 0 : ref.inputs[0].numel() / cols;
    const double eps = ref.op.attrs.real("eps");
    const bool weighted = has_weight(ref.op);
    const std::vector<double>& x = ref.inputs[0].data;
    HostTensor out;
    out.dtype = ref.op.output.dtype;
    out.shape = shape;
    out.data.resize(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      const double* row = x.data() + r * cols;
      const auto [mean, rstd] = norm_row_stats(row, cols, eps, rms);
      for (int64_t c = 0; c < cols; ++c) {
        double v = (row[c] - mean) * rstd;
        if (weighted) v *= ref.params[0].data[c];
        if (weighted && !rms) v += ref.params[1].data[c];
        out.data[r * cols + c] = v;
      }
    }
    return out;
  };
  return def;
}

}  // namespace

OpDef layernorm_op() { return norm_op("layernorm", false); }
OpDef rmsnorm_op() { return norm_op("rmsnorm", true); }

}  // namespace teeny::ops
