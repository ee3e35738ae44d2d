// fused.conv2d: y = activation(batchnorm(conv2d(x) + bias) + residual) in one kernel, the
// epilogue of ops/vision_common.h's ConvEpilogue: a bias or an inference batch norm (folded per
// channel from the running statistics), a residual after a batch norm (ResNet's block end), an
// activation. Made by the fuse_conv_epilogue pass (ops/fuse_conv_epilogue.cpp), which keeps the
// original nodes' param names. Lowering: ops/vision_common.cpp; kernels: ops/kernels/conv2d.cuh.
#include <cmath>

#include <fmt/format.h>

#include "ops/activation.h"
#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/vision_common.h"

namespace teeny::ops {
namespace {

constexpr const char* kOp = "fused.conv2d";

ConvEpilogue epilogue_of(const OpContext& ctx) {
  ConvEpilogue e;
  e.bias = ctx.attrs.boolean("bias");
  e.bn = ctx.attrs.boolean("bn");
  e.eps = ctx.attrs.real("eps");
  e.residual = ctx.inputs.size() == 2;
  e.activation = ctx.attrs.text("activation");
  return e;
}

TensorType infer_fused_conv2d(const OpDef& meta, const OpContext& ctx) {
  const ConvEpilogue e = epilogue_of(ctx);
  if (e.bias && e.bn) throw OpError("attrs.bn", "fused.conv2d takes a bias or a batch norm, not both");
  const DType dtype = output_float_dtype(meta, ctx, common_float_dtype(meta, ctx));
  const TensorType out = contiguous(dtype, conv_geometry(kOp, ctx).output_shape());
  if (e.residual) {
    if (!e.bn) throw OpError("inputs", "fused.conv2d adds a residual after a batch norm only (bn: true)");
    const TensorType& r = ctx.inputs[1];
    if (r.shape != out.shape || r.dtype != out.dtype || r.row_stride != out.row_stride)
      throw OpError("inputs",
                    fmt::format("the residual must match the conv's output {} {}; got {} {}", dtype_name(out.dtype),
                                shape_str(out.shape), dtype_name(r.dtype), shape_str(r.shape)));
  }
  return out;
}

std::vector<ParamSpec> fused_conv2d_params(const OpContext& ctx) {
  const ConvGeometry g = conv_geometry(kOp, ctx);
  const ConvEpilogue e = epilogue_of(ctx);
  return conv_params(g, e.bias, e.bn);
}

HostTensor fused_conv2d_reference(const RefContext& ref) {
  const ConvAttrs a = conv_attrs(ref.op.attrs);
  const ConvEpilogue e = epilogue_of(ref.op);
  HostTensor y{ref.op.output.dtype, ref.output_shape,
               conv_reference(a, ref.inputs.at(0), ref.params.at(0), ref.output_shape)};
  const int64_t plane = ref.output_shape[2] * ref.output_shape[3];
  for (size_t i = 0; i < y.data.size(); ++i) {
    const size_t c = (i / plane) % a.out_channels;
    double v = y.data[i];
    if (e.bias) v += ref.params.at(1).data[c];
    if (e.bn) {
      const double gamma = ref.params.at(1).data[c], beta = ref.params.at(2).data[c];
      const double mean = ref.params.at(3).data[c], var = ref.params.at(4).data[c];
      v = (v - mean) / std::sqrt(var + e.eps) * gamma + beta;
    }
    if (e.residual) v += ref.inputs.at(1).data[i];
    y.data[i] = e.activation == "none" ? v : activation(e.activation).host(v);
  }
  return y;
}

// Each epilogue on the implicit GEMM, its 1x1 path and the depthwise kernel, odd sizes, f32 and
// 16-bit; a residual of the output's shape is the second input.
std::vector<ConformanceCase> fused_conv2d_cases() {
  struct Shape {
    const char* label;
    const char* x;
    const char* out;  // the output's shape, for a residual
    nlohmann::json conv;
  };
  const std::vector<Shape> shapes = {
      {"3x3 p1 8 -> 16, odd 15x13",
       "[B, 8, 15, 13]",
       "[B, 16, 15, 13]",
       {{"out_channels", 16}, {"kernel_size", 3}, {"padding", 1}}},
      {"3x3 s2 p1 8 -> 24, odd 17x13",
       "[B, 8, 17, 13]",
       "[B, 24, 9, 7]",
       {{"out_channels", 24}, {"kernel_size", 3}, {"stride", 2}, {"padding", 1}}},
      {"1x1 s2 16 -> 32 (ResNet's downsample)",
       "[B, 16, 14, 14]",
       "[B, 32, 7, 7]",
       {{"out_channels", 32}, {"kernel_size", 1}, {"stride", 2}}},
      {"1x1 16 -> 24, 64-pixel planes", "[B, 16, 8, 8]", "[B, 24, 8, 8]", {{"out_channels", 24}, {"kernel_size", 1}}},
      {"depthwise 3x3 p1",
       "[B, 12, 17, 13]",
       "[B, 12, 17, 13]",
       {{"out_channels", 12}, {"kernel_size", 3}, {"padding", 1}, {"groups", 12}}}};
  struct Epilogue {
    const char* label;
    bool bias, bn, residual;
    const char* activation;
  };
  const std::vector<Epilogue> epilogues = {{"bias relu", true, false, false, "relu"},
                                           {"bn", false, true, false, "none"},
                                           {"bn relu", false, true, false, "relu"},
                                           {"bn + residual relu", false, true, true, "relu"},
                                           {"bn + residual silu", false, true, true, "silu"}};
  std::vector<ConformanceCase> cases;
  for (DType dtype : float_dtypes())
    for (size_t s = 0; s < shapes.size(); ++s)
      for (size_t k = 0; k < epilogues.size(); ++k) {
        // Every shape with every epilogue in f32; in 16-bit each shape with one epilogue.
        if (dtype != DType::kF32 && k != (s + 2) % epilogues.size()) continue;
        const Shape& sh = shapes[s];
        const Epilogue& ep = epilogues[k];
        nlohmann::json attrs = sh.conv;
        attrs["bias"] = ep.bias;
        attrs["bn"] = ep.bn;
        attrs["activation"] = ep.activation;
        std::vector<CaseInput> inputs = {{"x", dtype, sh.x}};
        std::vector<std::string> node_inputs = {"x"};
        if (ep.residual) {
          inputs.push_back({"r", dtype, sh.out});
          node_inputs.push_back("r");
        }
        cases.push_back({fmt::format("{}: {} {}", sh.label, ep.label, dtype_name(dtype)),
                         case_graph({"B"}, inputs, {{"y", kOp, node_inputs, attrs, ""}}),
                         {{{"B", 1}}, {{"B", 5}}}});
      }
  return cases;
}

}  // namespace

OpDef fused_conv2d_op() {
  OpDef def;
  def.name = kOp;
  def.doc =
      "y = activation(batchnorm(conv2d(x) + bias) + residual) in one kernel (a bias or an inference batch norm, "
      "a residual after a batch norm); made by the fuse_conv_epilogue pass from conv2d -> batchnorm2d -> add -> "
      "relu/silu/... chains";
  def.inputs = {{"x", "[B, C, H, W]"}, {"residual", "optional, the output's shape and dtype: added after the bn"}};
  def.optional_inputs = 1;
  std::vector<std::string> names = {"none"};
  for (const Activation& a : activations()) names.push_back(a.name);
  def.attrs = conv_attr_specs();
  def.attrs.push_back(attr_spec("bias", AttrType::kBool, "conv.bias [Co] added", nlohmann::json(false)));
  def.attrs.push_back(attr_spec("bn", AttrType::kBool, "inference batch norm (bn.* params)", nlohmann::json(false)));
  def.attrs.push_back(attr_spec("eps", AttrType::kFloat, "batch-norm epsilon", nlohmann::json(1e-5)));
  def.attrs.push_back(
      attr_spec("activation", AttrType::kEnum, "applied last (gelu: erf form)", nlohmann::json("none"), names));
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_fused_conv2d(meta, ctx); };
  def.params = fused_conv2d_params;
  def.param_slots = {"conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"};
  def.lower = [](const OpContext& ctx) {
    return lower_conv("conv2d", conv_geometry(kOp, ctx), "conv.weight", "conv.bias", epilogue_of(ctx));
  };
  def.reference = fused_conv2d_reference;
  def.tuning = conv_tuning();
  def.conformance_cases = fused_conv2d_cases;
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
