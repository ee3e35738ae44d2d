// fused.linear: y = activation(x Wᵀ + b) + residual — a linear with its following activation
// and/or residual add done in the GEMM's epilogue, so neither the pre-activation nor the
// un-added output makes a round trip through memory. Made by the fuse_linear_epilogue pass
// (ops/fuse_linear_epilogue.cpp) from linear -> relu/silu/sigmoid/tanh/gelu and
// linear -> add; it keeps linear's params (weight, bias), their names and its padded rows.
#include <fmt/format.h>

#include "core/autodiff.h"
#include "ops/activation.h"
#include "ops/conformance.h"
#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/linear.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

GemmEpilogue epilogue_of(const OpContext& ctx) {
  const std::string& act = ctx.attrs.text("activation");
  return {act == "none" ? "" : act, ctx.inputs.size() == 2};
}

TensorType infer_fused_linear(const OpDef& meta, const OpContext& ctx) {
  TensorType out = infer_linear(meta, ctx);
  if (ctx.inputs.size() == 2) {
    const TensorType& residual = ctx.inputs[1];
    if (residual.shape != out.shape || residual.dtype != out.dtype) {
      throw OpError("inputs",
                    fmt::format("the residual must match the linear's output {} {}; got {} {}", dtype_name(out.dtype),
                                shape_str(out.shape), dtype_name(residual.dtype), shape_str(residual.shape)));
    }
  }
  return out;
}

HostTensor fused_linear_reference(const RefContext& ref) {
  HostTensor y = linear_reference(ref);
  const std::string& act = ref.op.attrs.text("activation");
  if (act != "none")
    for (double& v : y.data) v = activation(act).host(v);
  if (ref.inputs.size() == 2)
    for (size_t i = 0; i < y.data.size(); ++i) y.data[i] += ref.inputs[1].data[i];
  return y;
}

// dL/d(x Wᵀ + b) from dL/dy. Without an activation it is dy itself. An activation's derivative
// (grad.activation) reads the output where y = act(z) has no residual added; otherwise z = x Wᵀ + b
// is not saved, so a `linear` reading the node's params computes it again (and, for an
// activation written in its output, the activation of it).
std::string pre_activation_grad(GradBuilder& g) {
  const std::string& act = g.ctx().attrs.text("activation");
  if (act == "none") return g.grad_output();
  const bool residual = g.ctx().inputs.size() == 2;
  const bool reads_output = activation_grad_reads_output(act);
  if (reads_output && !residual) return g.add("grad.activation", {g.grad_output(), g.output()}, {{"activation", act}});
  std::map<std::string, std::string> params{{"weight", g.param("weight")}};
  if (g.ctx().attrs.boolean("bias")) params["bias"] = g.param("bias");
  std::string saved =
      g.add("linear", {g.input(0)},
            {{"out_features", g.ctx().attrs.integer("out_features")}, {"bias", g.ctx().attrs.boolean("bias")}}, params);
  if (reads_output) saved = g.add(act, {saved});
  return g.add("grad.activation", {g.grad_output(), saved}, {{"activation", act}});
}

void fused_linear_backward(GradBuilder& g) {
  if (g.ctx().inputs.size() == 2 && g.needs_input_grad(1)) g.input_grad(1, g.grad_output());
  const bool needs_linear = g.needs_input_grad(0) || g.needs_param_grad("weight") || g.needs_param_grad("bias");
  if (needs_linear) linear_backward(g, pre_activation_grad(g));
}

std::vector<ConformanceCase> fused_linear_cases() {
  std::vector<ConformanceCase> cases;
  auto node = [](int out, const std::string& act, bool residual) {
    return CaseNode("y", "fused.linear", residual ? std::vector<std::string>{"x", "r"} : std::vector<std::string>{"x"},
                    {{"out_features", out}, {"activation", act}});
  };
  for (DType dtype : float_dtypes()) {
    const std::string dt = dtype_name(dtype);
    // Narrow (64-wide tiles) over awkward K and batch, every activation once across dtypes.
    cases.push_back(
        {"[B, W] -> 17 relu + residual " + dt,
         case_graph({"B", "W"}, {{"x", dtype, "[B, W]"}, {"r", dtype, "[B, 17]"}}, {node(17, "relu", true)}),
         awkward_rows()});
    cases.push_back({"[B, W] -> 600 silu " + dt,
                     case_graph({"B", "W"}, {{"x", dtype, "[B, W]"}}, {node(600, "silu", false)}),
                     {{{"B", 3}, {"W", 17}}, {{"B", 300}, {"W", 1000}}}});
    // GPT-2's MLP: K = 768 (16-bit: pingpong wgmma; f32: no split-K under an activation) and
    // K = 3072 + residual (16-bit: cooperative wgmma; f32: split-K, residual added once).
    cases.push_back({"[B, 768] -> 3072 gelu_tanh " + dt,
                     case_graph({"B"}, {{"x", dtype, "[B, 768]"}}, {node(3072, "gelu_tanh", false)}),
                     {{{"B", 1}}, {{"B", 300}}}});
    cases.push_back(
        {"[B, 3072] -> 768 + residual " + dt,
         case_graph({"B"}, {{"x", dtype, "[B, 3072]"}, {"r", dtype, "[B, 768]"}}, {node(768, "none", true)}),
         {{{"B", 1}}, {{"B", 300}}}});
    // The small-M kernel's epilogue, K with a ragged last chunk.
    cases.push_back(
        {"[B, 4104] -> 1000 gelu + residual, small M " + dt,
         case_graph({"B"}, {{"x", dtype, "[B, 4104]"}, {"r", dtype, "[B, 1000]"}}, {node(1000, "gelu", true)}),
         {{{"B", 5}}, {{"B", 16}}}});
    cases.push_back(
        {"[B, 200] -> 1000 gelu + residual " + dt,
         case_graph({"B"}, {{"x", dtype, "[B, 200]"}, {"r", dtype, "[B, 1000]"}}, {node(1000, "gelu", true)}),
         {{{"B", 1100}}}});
  }
  // A padded residual (a linear's 17 of 20 columns) and a padded output read by a linear.
  cases.push_back({"padded residual -> sigmoid, tanh f32",
                   case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}},
                              {{"p", "linear", {"x"}, {{"out_features", 17}}},
                               {"s", "fused.linear", {"x", "p"}, {{"out_features", 17}, {"activation", "sigmoid"}}},
                               {"y", "fused.linear", {"s"}, {{"out_features", 5}, {"activation", "tanh"}}}}),
                   {{{"B", 1}}, {{"B", 999}}}});
  return cases;
}

}  // namespace

OpDef fused_linear_op() {
  OpDef def;
  def.name = "fused.linear";
  def.doc =
      "y = activation(x Wᵀ + b) + residual in one GEMM (the epilogue applies both); made by the "
      "fuse_linear_epilogue pass from linear -> activation and linear -> add";
  def.inputs = {{"x", "[..., in]"}, {"residual", "optional, the output's shape and dtype: added last"}};
  def.optional_inputs = 1;
  std::vector<std::string> names = {"none"};
  for (const Activation& a : activations()) names.push_back(a.name);
  def.attrs = linear_attr_specs();
  def.attrs.push_back(attr_spec("activation", AttrType::kEnum,
                                "applied to x Wᵀ + b, before the residual (gelu: erf form)", nlohmann::json("none"),
                                names));
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_fused_linear(meta, ctx); };
  def.params = linear_params;
  def.param_slots = {"weight", "bias"};
  def.lower = [](const OpContext& ctx) { return lower_linear(ctx, epilogue_of(ctx)); };
  def.tuning = linear_tuning(epilogue_of);
  def.reference = fused_linear_reference;
  def.backward = fused_linear_backward;
  def.conformance_cases = fused_linear_cases;
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
