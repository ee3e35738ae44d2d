// grad.conv2d_dweight (ops.md, "Gradients"): conv2d's weight gradient, from dy [B, Co, OH, OW] and
// the forward input x [B, C, H, W] -> [Co, C/groups, kH, kW]: per weight element, the sum over
// every image and output pixel of dy times the x value the tap read.
//
// Two launches (ops/kernels/grad_conv2d.cuh, grad_columns.cuh): the pixels B·OH·OW split into
// parts of a fixed size, each part's sums of every weight element into the scratch buffer
// "partials" (an implicit GEMM per group, dW [Co/groups, C/groups·kH·kW] = dy · Xᵀ with X
// gathered from x; for depthwise convs a block per channel), then tn_column_sums adding the parts
// in order. The part size is a constant, so the bits do not depend on the GPU.
#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/grad_conv2d_common.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr const char* kOp = "grad.conv2d_dweight";
// Pixels a part: enough that a part's reads dwarf its partials, few enough that a batch of small
// images still spreads over many blocks.
constexpr int kPartPixels = 1024;
constexpr int kDepthwisePartPixels = 4096;  // a block a channel: 16 pixels a thread a part
constexpr int kDepthwiseThreads = 256;
constexpr int kSumThreads = 256;

ConvGeometry geometry(const OpContext& ctx) { return grad_conv_geometry(kOp, ctx, ctx.inputs.at(1), "inputs"); }

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  return contiguous(output_float_dtype(def, ctx, dtype), geometry(ctx).weight_shape());
}

Lowering lower(const OpContext& ctx) {
  const ConvGeometry g = geometry(ctx);
  const char* c_type = dtype_c_type(g.dtype);
  const std::string shape = grad_conv_shape_template(g);
  const Expr pixels = g.batch * g.out_h * g.out_w;
  const int part_pixels = g.depthwise() ? kDepthwisePartPixels : kPartPixels;
  const Expr parts = ceil_div(pixels, Expr(part_pixels));
  const int64_t weights = g.a.out_channels * g.reduction();
  Lowering lowering;
  lowering.scratch.push_back({"partials", DType::kF32, parts * Expr(weights)});

  Launch partials;
  partials.args = {input(0, "dy", g.dtype), input(1, "x", g.dtype), scratch("partials", "partials", DType::kF32),
                   i32("batch", g.batch),   i32("in_h", g.in_h),    i32("in_w", g.in_w),
                   i32("out_h", g.out_h),   i32("out_w", g.out_w)};
  if (g.depthwise()) {
    lowering.kernels.push_back(template_kernel(
        fmt::format("grad_conv2d_dweight_{}_dw_{}", dtype_name(g.dtype), grad_conv_name(g)), "grad_conv2d.cuh",
        fmt::format("tn_conv2d_dweight_partials<{}, tn_conv2d_wgrad_depthwise<{}, {}, {}>>", c_type, shape,
                    kDepthwiseThreads, part_pixels),
        partials.args, kDepthwiseThreads, TEENY_KERNEL_ORIGIN));
    partials.block = {kDepthwiseThreads, 1, 1};
    partials.grid = {parts, Expr(g.a.out_channels), Expr(1)};
  } else {
    // Rows: the group's output channels; columns: the weight's (c, kh, kw), 32 when that is all.
    const GradConvTile tile = grad_conv_tile(g.cout_per_group(), g.reduction() <= 32 ? 32 : 64);
    lowering.kernels.push_back(template_kernel(
        fmt::format("grad_conv2d_dweight_{}_igemm_{}_{}", dtype_name(g.dtype), grad_conv_name(g), tile.name()),
        "grad_conv2d.cuh",
        fmt::format("tn_conv2d_dweight_partials<{}, tn_conv2d_wgrad<{}, {}, {}>>", c_type, shape, tile.tn_template(),
                    part_pixels),
        partials.args, kGradConvTileThreads, TEENY_KERNEL_ORIGIN));
    const int64_t row_tiles = (g.cout_per_group() + tile.block_rows - 1) / tile.block_rows;
    const int64_t col_tiles = (g.reduction() + tile.block_cols - 1) / tile.block_cols;
    partials.block = {kGradConvTileThreads, 1, 1};
    partials.grid = {parts, Expr(row_tiles * col_tiles), Expr(g.a.groups)};
  }
  const Expr elem(static_cast<int64_t>(dtype_size(g.dtype)));
  partials.bytes =
      elem * (product(g.output_shape()) + g.batch * Expr(g.in_channels) * g.in_h * g.in_w) + parts * Expr(weights * 4);
  partials.flops = conv_flops(g);
  lowering.launches.push_back(std::move(partials));

  Launch total;
  total.kernel = 1;
  total.args = {scratch("partials", "partials", DType::kF32), output("out", g.dtype), i32("parts", parts),
                i32("cols", Expr(weights))};
  total.block = {kSumThreads, 1, 1};
  total.grid[0] = Expr((weights + kSumThreads - 1) / kSumThreads);
  total.bytes = parts * Expr(weights * 4) + elem * Expr(weights);
  total.flops = parts * Expr(weights);
  lowering.kernels.push_back(template_kernel(
      fmt::format("grad_conv2d_dweight_sums_{}", dtype_name(g.dtype)), "grad_columns.cuh",
      fmt::format("tn_column_sums<{}, {}>", c_type, kSumThreads), total.args, kSumThreads, TEENY_KERNEL_ORIGIN));
  lowering.launches.push_back(std::move(total));
  return lowering;
}

// Each dy element times each x value its window read, added at the weight tap that read it.
HostTensor reference(const RefContext& ref) {
  const ConvAttrs a = conv_attrs(ref.op.attrs);
  const HostTensor& dy = ref.inputs[0];
  const HostTensor& x = ref.inputs[1];
  HostTensor dw{ref.op.output.dtype, ref.output_shape, {}};
  dw.data.assign(static_cast<size_t>(dw.numel()), 0.0);
  for_each_conv_tap(a, x.shape, dy.shape,
                    [&](int64_t gi, int64_t xi, int64_t wi) { dw.data[wi] += dy.data[gi] * x.data[xi]; });
  return dw;
}

std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (const GradConvCase& c : grad_conv_cases()) {
    const auto [x_shape, dy_shape] = grad_conv_case_shapes(c);
    cases.push_back(
        {fmt::format("{} {}", c.label, dtype_name(c.dtype)),
         case_graph({"B"}, {{"dy", c.dtype, dy_shape}, {"x", c.dtype, x_shape}}, {{"dw", kOp, {"dy", "x"}, c.attrs}}),
         c.bindings});
  }
  return cases;
}

}  // namespace

OpDef grad_conv2d_dweight_op() {
  OpDef def;
  def.name = kOp;
  def.doc = "conv2d's weight gradient: Σ over images and output pixels of dy times the x each tap read";
  def.inputs = {{"dy", "dL/dy [B, Co, OH, OW]"}, {"x", "the forward input [B, C, H, W]"}};
  def.attrs = grad_conv_attr_specs();
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
