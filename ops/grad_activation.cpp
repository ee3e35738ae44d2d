// grad.activation (ops.md, "Gradients"): dx = dy * f'(.) for the activations of
// ops/activation.h, the backward of relu, silu, sigmoid, tanh and gelu (both forms).
//
// The derivative is written in the forward tensor that needs no recomputation: relu's, sigmoid's
// and tanh's in their output y, silu's and gelu's in their input x; the rule (ops/grad_util.h)
// passes that one, so it is the tensor the forward pass saves. One grid-stride kernel per
// (activation, dtype), ops/kernels/grad_elementwise.cuh.
#include <cmath>

#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kBlock = 256;

struct ActivationGrad {
  std::string activation;  // its name in ops/activation.h
  bool reads_output;       // the saved tensor is y; else x
  double (*host)(double dy, double saved);
  int flops;  // per element, for cost
};

double host_sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

const std::vector<ActivationGrad>& activation_grads() {
  static const std::vector<ActivationGrad> table = {
      {"relu", true, [](double dy, double y) { return y <= 0 ? 0.0 : dy; }, 1},
      {"silu", false,
       [](double dy, double x) {
         const double s = host_sigmoid(x);
         return dy * s * (1.0 + x * (1.0 - s));
       },
       7},
      {"sigmoid", true, [](double dy, double y) { return dy * y * (1.0 - y); }, 3},
      {"tanh", true, [](double dy, double y) { return dy * (1.0 - y * y); }, 3},
      {"gelu", false,
       [](double dy, double x) {
         const double cdf = 0.5 * (1.0 + std::erf(x / std::sqrt(2.0)));
         const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
         return dy * (cdf + x * pdf);
       },
       12},
      {"gelu_tanh", false,
       [](double dy, double x) {
         const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
         const double t = std::tanh(k * (x + c * x * x * x));
         return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x));
       },
       16},
  };
  return table;
}

const ActivationGrad& activation_grad_of(const std::string& name) {
  for (const ActivationGrad& a : activation_grads())
    if (a.activation == name) return a;
  throw Error(fmt::format("internal: no gradient for activation '{}'", name));
}

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  const TensorType& dy = ctx.inputs[0];
  const TensorType& saved = ctx.inputs[1];
  require_same_shape("grad.activation", dy, "dy", saved, "saved");
  return contiguous(output_float_dtype(def, ctx, dtype), dy.shape);
}

Lowering lower(const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  const TensorType& saved = ctx.inputs[1];
  const DType dtype = dy.dtype;
  const std::string& name = ctx.attrs.text("activation");
  const Expr rows = dy.shape.empty() ? Expr(1) : product(Shape(dy.shape.begin(), dy.shape.end() - 1));
  const Expr cols = dy.shape.empty() ? Expr(1) : dy.shape.back();
  Launch launch;
  launch.args = {input(0, "dy", dtype),
                 input(1, "saved", dtype),
                 output("dx", dtype),
                 i64("rows", rows),
                 i32("cols", cols),
                 i32("dy_stride", dy.row_stride),
                 i32("saved_stride", saved.row_stride)};
  Lowering lowering;
  lowering.kernels.push_back(
      template_kernel(fmt::format("grad_{}_{}", name, dtype_name(dtype)), "grad_elementwise.cuh",
                      fmt::format("tn_grad_unary<{}, {}, tn_act_grad_{}>", dtype_c_type(dtype), kBlock, name),
                      launch.args, kBlock, TEENY_KERNEL_ORIGIN));
  const Expr n = product(dy.shape);
  launch.block = {kBlock, 1, 1};
  launch.grid[0] = grid_stride_blocks(ceil_div(n, Expr(kBlock * vector_width(dtype))), kBlock);
  launch.bytes = n * Expr(static_cast<int64_t>(3 * dtype_size(dtype)));
  launch.flops = n * Expr(activation_grad_of(name).flops);
  lowering.launches.push_back(std::move(launch));
  return lowering;
}

HostTensor reference(const RefContext& ref) {
  const ActivationGrad& grad = activation_grad_of(ref.op.attrs.text("activation"));
  HostTensor out{ref.op.output.dtype, ref.output_shape, {}};
  const std::vector<double>& dy = ref.inputs[0].data;
  const std::vector<double>& saved = ref.inputs[1].data;
  out.data.resize(dy.size());
  for (size_t i = 0; i < dy.size(); ++i) out.data[i] = grad.host(dy[i], saved[i]);
  return out;
}

// Every activation in every dtype over awkward (B, W); saved rows padded by a linear.
std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (const std::string& name : activation_grad_names()) {
    const nlohmann::json attrs = {{"activation", name}};
    for (DType dtype : float_dtypes())
      cases.push_back({fmt::format("{} [B, W] {}", name, dtype_name(dtype)),
                       case_graph({"B", "W"}, {{"dy", dtype, "[B, W]"}, {"saved", dtype, "[B, W]"}},
                                  {{"dx", "grad.activation", {"dy", "saved"}, attrs}}),
                       awkward_rows()});
    cases.push_back(
        {fmt::format("{} padded saved rows (linear, 17 of 20)", name),
         case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}, {"dy", DType::kF32, "[B, 17]"}},
                    {{"p", "linear", {"x"}, {{"out_features", 17}}}, {"dx", "grad.activation", {"dy", "p"}, attrs}}),
         {{{"B", 1}}, {{"B", 999}}}});
  }
  return cases;
}

}  // namespace

bool activation_grad_reads_output(const std::string& activation) { return activation_grad_of(activation).reads_output; }

std::vector<std::string> activation_grad_names() {
  std::vector<std::string> names;
  for (const ActivationGrad& a : activation_grads()) names.push_back(a.activation);
  return names;
}

double activation_grad_host(const std::string& activation, double dy, double saved) {
  return activation_grad_of(activation).host(dy, saved);
}

OpDef grad_activation_op() {
  OpDef def;
  def.name = "grad.activation";
  def.doc = "dx = dy * f'(.) of an activation (its backward), from y (relu, sigmoid, tanh) or x (silu, gelu)";
  def.inputs = {{"dy", "dL/dy, the activation output's gradient"},
                {"saved",
                 "the forward tensor f' is written in: y for relu, sigmoid, tanh; x for silu, gelu, "
                 "gelu_tanh; dy's shape"}};
  def.attrs = {attr_spec("activation", AttrType::kEnum, "the forward activation (gelu_tanh: gelu, approximate tanh)",
                         std::nullopt, activation_grad_names())};
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
