// conv2d: NCHW convolution with stride, padding, dilation and groups (depthwise when groups = C),
// PyTorch layout weight [Co, C/groups, kH, kW] and bias [Co], both in x's dtype. Lowering:
// ops/vision_common.cpp; kernels: ops/kernels/conv2d.cuh.
#include "core/autodiff.h"
#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/vision_common.h"

namespace teeny::ops {
namespace {

std::vector<ParamSpec> conv2d_params(const OpContext& ctx) {
  const ConvGeometry g = conv_geometry("conv2d", ctx);
  std::vector<ParamSpec> params = {{"weight", g.weight_shape(), g.dtype, ParamInit::kTrained, {}}};
  if (ctx.attrs.boolean("bias")) params.push_back({"bias", {Expr(g.a.out_channels)}, g.dtype, ParamInit::kTrained, {}});
  return params;
}

HostTensor conv2d_reference(const RefContext& ref) {
  const ConvAttrs a = conv_attrs(ref.op.attrs);
  HostTensor y{ref.op.output.dtype, ref.output_shape,
               conv_reference(a, ref.inputs.at(0), ref.params.at(0), ref.output_shape)};
  if (ref.op.attrs.boolean("bias")) {
    const std::vector<double>& bias = ref.params.at(1).data;
    const int64_t plane = ref.output_shape[2] * ref.output_shape[3];
    for (size_t i = 0; i < y.data.size(); ++i) y.data[i] += bias[(i / plane) % a.out_channels];
  }
  return y;
}

// dx (grad.conv2d_dx, the weight through a param ref, x's shape as an attr), dweight
// (grad.conv2d_dweight, reading x) and dbias: dy summed over images and pixels (grad.sum_to down
// to [Co, 1, 1], viewed as [Co]).
void conv2d_backward(GradBuilder& g) {
  const std::string& dy = g.grad_output();
  nlohmann::json attrs = g.ctx().attrs.json();
  attrs.erase("bias");
  if (g.needs_input_grad(0)) {
    nlohmann::json dx_attrs = attrs;
    dx_attrs["shape"] = shape_attr(g.type(g.input(0)).shape);
    g.input_grad(0, g.add("grad.conv2d_dx", {dy}, dx_attrs, {{"weight", g.param("weight")}}));
  }
  if (g.needs_param_grad("weight")) g.param_grad("weight", g.add("grad.conv2d_dweight", {dy, g.input(0)}, attrs));
  if (g.needs_param_grad("bias")) {
    const Expr channels(g.ctx().attrs.integer("out_channels"));
    const std::string sums = g.add("grad.sum_to", {dy}, {{"shape", shape_attr({channels, Expr(1), Expr(1)})}});
    g.param_grad("bias", g.add("reshape", {sums}, {{"shape", shape_attr({channels})}}));
  }
}

}  // namespace

OpDef conv2d_op() {
  OpDef def;
  def.name = "conv2d";
  def.doc =
      "2-D convolution over x [B, C, H, W]; weight [Co, C/groups, kH, kW], bias [Co]; "
      "implicit GEMM (on tensor cores as tune variant mma), depthwise kernel when groups = C";
  def.inputs = {{"x", "[B, C, H, W]"}};
  def.attrs = conv_attr_specs();
  def.attrs.push_back({"bias", AttrType::kBool, "add a bias [Co]", nlohmann::json(true), {}, false, std::nullopt});
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = output_float_dtype(meta, ctx, common_float_dtype(meta, ctx));
    return contiguous(dtype, conv_geometry(meta.name, ctx).output_shape());
  };
  def.params = conv2d_params;
  def.param_slots = {"weight", "bias"};
  def.lower = [](const OpContext& ctx) {
    ConvEpilogue epilogue;
    epilogue.bias = ctx.attrs.boolean("bias");
    return lower_conv("conv2d", conv_geometry("conv2d", ctx), "weight", "bias", epilogue);
  };
  def.reference = conv2d_reference;
  def.tuning = conv_tuning();
  def.backward = conv2d_backward;
  def.conformance_cases = [] {
    using nlohmann::json;
    const std::vector<Bindings> b1_b2 = {{{"B", 1}}, {{"B", 2}}};
    // 17 images of 1024 pixels: the tensor cores' tallest tile, 128 x 128, makes 136 CTAs.
    const VisionCase big_tiles = {"3x3 p1 16 -> 128, 17 images of 32x32 (128x128 tiles)",
                                  "[17, 16, 32, 32]",
                                  {{"out_channels", 128}, {"kernel_size", 3}, {"padding", 1}},
                                  {},
                                  {{}}};
    std::vector<VisionCase> cases = {
        {"3x3 s2 p1 groups 2, odd 15x13",
         "[B, 8, 15, 13]",
         {{"out_channels", 12}, {"kernel_size", 3}, {"stride", 2}, {"padding", 1}, {"groups", 2}}},
        {"3x3 dilation 2 p2, no bias",
         "[B, 8, 15, 13]",
         {{"out_channels", 16}, {"kernel_size", 3}, {"padding", 2}, {"dilation", 2}, {"bias", false}}},
        {"3x5 s[1,2] p[1,2], Co 72",
         "[B, 8, 15, 13]",
         {{"out_channels", 72}, {"kernel_size", {3, 5}}, {"stride", {1, 2}}, {"padding", {1, 2}}}},
        {"3x3 Co 3", "[B, 8, 15, 13]", {{"out_channels", 3}, {"kernel_size", 3}}},
        {"5x5 1 -> 6 (LeNet c1)", "[B, 1, 32, 32]", {{"out_channels", 6}, {"kernel_size", 5}}},
        {"1x1, 195-pixel planes (scalar loads)", "[B, 8, 15, 13]", {{"out_channels", 24}, {"kernel_size", 1}}},
        {"1x1, 64-pixel planes (16-byte loads)",
         "[B, 16, 8, 8]",
         {{"out_channels", 32}, {"kernel_size", 1}, {"bias", false}}},
        {"depthwise x2 multiplier, s2 p1",
         "[B, 8, 15, 13]",
         {{"out_channels", 16}, {"kernel_size", 3}, {"stride", 2}, {"padding", 1}, {"groups", 8}}},
        {"3x3 s2 p1, symbolic H and W",
         "[B, 3, H, W]",
         {{"out_channels", 8}, {"kernel_size", 3}, {"stride", 2}, {"padding", 1}},
         {"B", "H", "W"},
         {{{"B", 1}, {"H", 1}, {"W", 1}}, {{"B", 2}, {"H", 33}, {"W", 17}}, {{"B", 32}, {"H", 7}, {"W", 64}}}},
        {"3x3 p1 16 -> 128 at 96x96 (64x64 tiles)",
         "[B, 16, 96, 96]",
         {{"out_channels", 128}, {"kernel_size", 3}, {"padding", 1}},
         {"B"},
         b1_b2},
        {"1x1 16 -> 128 at 72x72 (64x64 tiles, 16-byte loads)",
         "[B, 16, 72, 72]",
         {{"out_channels", 128}, {"kernel_size", 1}},
         {"B"},
         b1_b2},
        big_tiles};
    // Each kernel path once more in 16-bit, with channel counts that are not multiples of 8.
    for (VisionCase& c : in_16bit_dtypes(
             {{"3x3 s2 p1 groups 2, 6 -> 10, odd 17x13",
               "[B, 6, 17, 13]",
               {{"out_channels", 10}, {"kernel_size", 3}, {"stride", 2}, {"padding", 1}, {"groups", 2}}},
              {"1x1, 221-pixel planes (scalar loads)", "[B, 12, 17, 13]", {{"out_channels", 20}, {"kernel_size", 1}}},
              {"1x1, 64-pixel planes (4-pixel loads)",
               "[B, 16, 8, 8]",
               {{"out_channels", 24}, {"kernel_size", 1}, {"bias", false}}},
              {"depthwise x2 multiplier, s2 p1, odd 17x13",
               "[B, 6, 17, 13]",
               {{"out_channels", 12}, {"kernel_size", 3}, {"stride", 2}, {"padding", 1}, {"groups", 6}}},
              {"3x3 p1 16 -> 128 at 96x96 (64x128 tiles)",
               "[B, 16, 96, 96]",
               {{"out_channels", 128}, {"kernel_size", 3}, {"padding", 1}},
               {"B"},
               b1_b2},
              big_tiles}))
      cases.push_back(std::move(c));
    return vision_cases("conv2d", cases);
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
