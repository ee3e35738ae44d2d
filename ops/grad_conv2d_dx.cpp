// grad.conv2d_dx (ops.md, "Gradients"): conv2d's input gradient, from dy [B, Co, OH, OW] and the
// forward node's weight [Co, C/groups, kH, kW] (a param ref in a training graph) -> dx of the
// forward input's shape (the attr `shape`, since a strided conv's output does not determine it).
//
// One launch (ops/kernels/grad_conv2d.cuh): the transposed implicit GEMM, per group dx [C/groups,
// B·H·W] = Wᵀ [C/groups, Co/groups·kH·kW] · dy gathered at the output pixels each input pixel
// feeds, tiled in shared memory; for depthwise convs a thread per dx element.
#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/grad_conv2d_common.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr const char* kOp = "grad.conv2d_dx";
constexpr int kDepthwiseThreads = 256;

ConvGeometry geometry(const OpContext& ctx, DType dtype) {
  const Shape shape = ctx.attrs.shape("shape");
  if (shape.size() != 4)
    throw OpError("attrs.shape",
                  fmt::format("{}: shape must be the forward input's [B, C, H, W], got {}", kOp, shape_str(shape)));
  for (const Expr& dim : shape)
    if (dim.is_const() && *dim.const_value() < 1)
      throw OpError("attrs.shape", fmt::format("{}: shape {} has an extent below 1", kOp, shape_str(shape)));
  return grad_conv_geometry(kOp, ctx, contiguous(dtype, shape), "attrs.shape");
}

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  geometry(ctx, dtype);
  return contiguous(output_float_dtype(def, ctx, dtype), ctx.attrs.shape("shape"));
}

std::vector<ParamSpec> params(const OpContext& ctx) {
  const ConvGeometry g = geometry(ctx, ctx.inputs[0].dtype);
  return {{"weight", g.weight_shape(), g.dtype, ParamInit::kTrained, {}}};
}

Lowering lower(const OpContext& ctx) {
  const ConvGeometry g = geometry(ctx, ctx.inputs[0].dtype);
  const char* c_type = dtype_c_type(g.dtype);
  const std::string shape = grad_conv_shape_template(g);
  std::vector<KernelArg> args = {input(0, "dy", g.dtype), param("weight", "weight", g.dtype), output("dx", g.dtype)};
  const Expr dx_elements = g.batch * Expr(g.in_channels) * g.in_h * g.in_w;
  Launch launch;
  Lowering lowering;
  if (g.depthwise()) {
    args.push_back(i64("count", dx_elements));
    for (KernelArg arg : {i32("in_h", g.in_h), i32("in_w", g.in_w), i32("out_h", g.out_h), i32("out_w", g.out_w)})
      args.push_back(std::move(arg));
    lowering.kernels.push_back(template_kernel(
        fmt::format("grad_conv2d_dx_{}_dw_{}", dtype_name(g.dtype), grad_conv_name(g)), "grad_conv2d.cuh",
        fmt::format("tn_conv2d_dx<{}, tn_conv2d_dgrad_depthwise<{}, {}>>", c_type, shape, kDepthwiseThreads), args,
        kDepthwiseThreads, TEENY_KERNEL_ORIGIN));
    launch.block = {kDepthwiseThreads, 1, 1};
    launch.grid[0] = ceil_div(dx_elements, Expr(kDepthwiseThreads));
  } else {
    for (KernelArg arg : {i32("batch", g.batch), i32("in_h", g.in_h), i32("in_w", g.in_w), i32("out_h", g.out_h),
                          i32("out_w", g.out_w)})
      args.push_back(std::move(arg));
    // Rows: the group's input channels; columns: 64 input pixels.
    const GradConvTile tile = grad_conv_tile(g.cin_per_group(), 64);
    lowering.kernels.push_back(template_kernel(
        fmt::format("grad_conv2d_dx_{}_igemm_{}_{}", dtype_name(g.dtype), grad_conv_name(g), tile.name()),
        "grad_conv2d.cuh", fmt::format("tn_conv2d_dx<{}, tn_conv2d_dgrad<{}, {}>>", c_type, shape, tile.tn_template()),
        args, kGradConvTileThreads, TEENY_KERNEL_ORIGIN));
    launch.block = {kGradConvTileThreads, 1, 1};
    launch.grid = {ceil_div(g.batch * g.in_h * g.in_w, Expr(tile.block_cols)),
                   Expr((g.cin_per_group() + tile.block_rows - 1) / tile.block_rows), Expr(g.a.groups)};
  }
  launch.args = std::move(args);
  const Expr elem(static_cast<int64_t>(dtype_size(g.dtype)));
  launch.bytes = elem * (product(g.output_shape()) + product(g.weight_shape()) + dx_elements);
  launch.flops = conv_flops(g);
  lowering.launches.push_back(std::move(launch));
  return lowering;
}

// Each dy element times each weight tap, added at the input pixel the tap read.
HostTensor reference(const RefContext& ref) {
  const ConvAttrs a = conv_attrs(ref.op.attrs);
  const HostTensor& dy = ref.inputs[0];
  const std::vector<double>& w = ref.params[0].data;
  const std::vector<int64_t>& x_shape = ref.output_shape;
  HostTensor dx{ref.op.output.dtype, x_shape, {}};
  dx.data.assign(static_cast<size_t>(dx.numel()), 0.0);
  for_each_conv_tap(a, x_shape, dy.shape,
                    [&](int64_t gi, int64_t xi, int64_t wi) { dx.data[xi] += dy.data[gi] * w[wi]; });
  return dx;
}

std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (const GradConvCase& c : grad_conv_cases()) {
    const std::string dy_shape = grad_conv_case_shapes(c)[1];
    nlohmann::json attrs = c.attrs;
    attrs["shape"] = {"B", c.chw[0], c.chw[1], c.chw[2]};
    cases.push_back({fmt::format("{} {}", c.label, dtype_name(c.dtype)),
                     case_graph({"B"}, {{"dy", c.dtype, dy_shape}}, {{"dx", kOp, {"dy"}, attrs}}), c.bindings});
  }
  return cases;
}

}  // namespace

OpDef grad_conv2d_dx_op() {
  OpDef def;
  def.name = kOp;
  def.doc = "conv2d's input gradient from dy [B, Co, OH, OW] and weight [Co, C/groups, kH, kW] -> x's `shape`";
  def.inputs = {{"dy", "dL/dy [B, Co, OH, OW]"}};
  def.attrs = grad_conv_attr_specs();
  def.attrs.push_back(attr_spec("shape", AttrType::kShape, "the forward input's shape [B, C, H, W]"));
  def.dtypes = float_dtypes();
  def.param_slots = {"weight"};
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.params = params;
  def.lower = lower;
  def.reference = reference;
  def.conformance_cases = conformance_cases;
  return def;
}

}  // namespace teeny::ops
