// Unary elementwise ops: relu, silu, sigmoid, tanh, gelu, scale (ops.md, "Elementwise").
//
// One grid-stride kernel per (op, dtype): 16-byte vector loads/stores when the rows allow it
// (contiguous input: the whole tensor is one flat row with a scalar tail; padded input: rows
// whose stride and pointers are 16-byte aligned), a scalar path otherwise. Output is
// contiguous. Compute is in f32 for every storage dtype.
#include <fmt/format.h>

#include "ops/activation.h"
#include "ops/conformance.h"
#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kBlock = 256;
constexpr int kUnroll = 4;  // independent 16-byte loads in flight per thread

struct UnaryFn {
  // Kernel name suffix and the functor template (ops/kernels/) applied to each value, per attrs.
  std::function<std::pair<std::string, std::string>(const Attrs&)> functor;
  std::function<double(double, const Attrs&)> host;
  int flops_per_element = 1;
  BackwardFn backward;  // docs/training.md; ops.md, "Gradients"
};

Expr rows_of(const TensorType& type) {
  if (type.shape.empty()) return Expr(1);
  return product(Shape(type.shape.begin(), type.shape.end() - 1));
}
Expr cols_of(const TensorType& type) { return type.shape.empty() ? Expr(1) : type.shape.back(); }

// Every dtype over awkward (B, W), once per attr set; and f32 input rows padded by linear.
std::vector<ConformanceCase> unary_cases(const std::string& name, const std::vector<nlohmann::json>& attr_sets) {
  std::vector<ConformanceCase> cases;
  for (const nlohmann::json& attrs : attr_sets) {
    for (DType dtype : float_dtypes())
      cases.push_back({fmt::format("[B, W] {} {}", dtype_name(dtype), attrs.dump()),
                       case_graph({"B", "W"}, {{"x", dtype, "[B, W]"}}, {{"y", name, {"x"}, attrs}}), awkward_rows()});
    cases.push_back({"padded input rows (linear, 17 of 20) " + attrs.dump(),
                     case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}},
                                {{"p", "linear", {"x"}, {{"out_features", 17}}}, {"y", name, {"p"}, attrs}}),
                     {{{"B", 1}}, {{"B", 999}}}});
  }
  return cases;
}

OpDef unary_op(const std::string& name, std::string doc, UnaryFn fn, std::vector<AttrSpec> attrs = {},
               std::vector<nlohmann::json> case_attrs = {nlohmann::json::object()}) {
  OpDef def;
  def.name = name;
  def.doc = std::move(doc);
  def.inputs = {{"x", "input tensor (any shape)"}};
  def.attrs = std::move(attrs);
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  const bool has_value = name == "scale";

  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = common_float_dtype(meta, ctx);
    return contiguous(output_float_dtype(meta, ctx, dtype), ctx.inputs[0].shape);
  };
  def.lower = [name, fn, has_value](const OpContext& ctx) {
    const TensorType& x = ctx.inputs[0];
    const DType dtype = x.dtype;
    std::vector<KernelArg> args = {input(0, "x", dtype), output("y", dtype), i64("rows", rows_of(x)),
                                   i32("cols", cols_of(x)), i32("x_stride", x.row_stride)};
    if (has_value) args.push_back(f32("value", ctx.attrs.real("value")));

    const auto [variant, functor] = fn.functor(ctx.attrs);
    Lowering lowering;
    lowering.kernels.push_back(
        template_kernel(fmt::format("{}{}_{}", name, variant, dtype_name(dtype)), "elementwise.cuh",
                        fmt::format("tn_unary<{}, {}, {}, {}>", dtype_c_type(dtype), kBlock, kUnroll, functor), args,
                        kBlock, TEENY_KERNEL_ORIGIN));
    Launch launch;
    launch.block = {kBlock, 1, 1};
    const Expr n = product(x.shape);
    launch.grid[0] = grid_stride_blocks(ceil_div(n, Expr(kBlock * vector_width(dtype))), kBlock);
    launch.args = std::move(args);
    launch.bytes = n * Expr(static_cast<int64_t>(2 * dtype_size(dtype)));
    launch.flops = n * Expr(fn.flops_per_element);
    lowering.launches.push_back(std::move(launch));
    return lowering;
  };
  def.conformance_cases = [name, case_attrs] { return unary_cases(name, case_attrs); };
  def.backward = fn.backward;
  def.reference = [fn](const RefContext& ref) {
    HostTensor out;
    out.dtype = ref.op.output.dtype;
    out.shape = ref.output_shape;
    out.data.reserve(ref.inputs[0].data.size());
    for (double v : ref.inputs[0].data) out.data.push_back(fn.host(v, ref.op.attrs));
    return out;
  };
  return def;
}

// The backward of the activation `op` computes (gelu's attr picks its form): grad.activation.
BackwardFn activation_backward(const std::string& op) {
  return [op](GradBuilder& g) { g.input_grad(0, activation_grad(g, *activation_of_op(op, g.ctx().attrs))); };
}

// An elementwise op over one activation of ops/activation.h.
UnaryFn from_activation(const std::string& name) {
  const Activation& a = activation(name);
  return {[a](const Attrs&) { return std::make_pair(std::string(), a.functor); },
          [a](double v, const Attrs&) { return a.host(v); }, a.flops, activation_backward(name)};
}

}  // namespace

OpDef relu_op() { return unary_op("relu", "max(x, 0) (NaN propagates)", from_activation("relu")); }

OpDef silu_op() { return unary_op("silu", "x * sigmoid(x)", from_activation("silu")); }

OpDef sigmoid_op() { return unary_op("sigmoid", "1 / (1 + exp(-x))", from_activation("sigmoid")); }

OpDef tanh_op() { return unary_op("tanh", "hyperbolic tangent", from_activation("tanh")); }

OpDef gelu_op() {
  AttrSpec approximate =
      attr_spec("approximate", AttrType::kEnum, "none: x * Phi(x) with erf; tanh: the tanh approximation",
                nlohmann::json("none"), {"none", "tanh"});
  UnaryFn fn;
  // Kernel names: gelu_<dtype> (erf) and gelu_tanh_<dtype>.
  fn.functor = [](const Attrs& attrs) {
    const bool tanh_form = attrs.text("approximate") == "tanh";
    return std::make_pair(std::string(tanh_form ? "_tanh" : ""), activation(tanh_form ? "gelu_tanh" : "gelu").functor);
  };
  fn.host = [](double v, const Attrs& attrs) { return activation(*activation_of_op("gelu", attrs)).host(v); };
  fn.flops_per_element = activation("gelu").flops;
  fn.backward = activation_backward("gelu");
  return unary_op("gelu", "Gaussian error linear unit (PyTorch nn.GELU)", fn, {approximate},
                  {{{"approximate", "none"}}, {{"approximate", "tanh"}}});
}

OpDef scale_op() {
  AttrSpec value = attr_spec("value", AttrType::kFloat, "the factor");
  UnaryFn fn;
  fn.functor = [](const Attrs&) { return std::make_pair(std::string(), std::string("tn_scale_by")); };
  fn.host = [](double v, const Attrs& attrs) { return v * attrs.real("value"); };
  fn.backward = [](GradBuilder& g) {
    g.input_grad(0, g.add("scale", {g.grad_output()}, {{"value", g.ctx().attrs.real("value")}}));
  };
  return unary_op("scale", "y = x * value", fn, {value}, {{{"value", -2.5}}});
}

}  // namespace teeny::ops
