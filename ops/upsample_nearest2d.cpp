// upsample_nearest2d: x [B, C, H, W] -> [B, C, H*s, W*s], each input element copied (in any float
// dtype, never converted) to an s x s block.
#include <fmt/format.h>

#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/vision_common.h"

namespace teeny::ops {
namespace {

constexpr int kThreads = 256;

// ops/kernels/vision.cuh's tn_upsample_nearest2d: one input element per thread.
Lowering upsample_lower(const OpContext& ctx) {
  const int64_t scale = ctx.attrs.integer("scale_factor");
  const Shape& in = ctx.inputs.at(0).shape;
  const DType dtype = ctx.inputs.at(0).dtype;
  std::vector<KernelArg> args = {input(0, "x", dtype), output("y", dtype), i64("count", product(in)),
                                 i32("in_h", in[2]), i32("in_w", in[3])};
  KernelSource kernel =
      template_kernel(fmt::format("upsample_nearest2d_{}_s{}", dtype_name(dtype), scale), "vision.cuh",
                      fmt::format("tn_upsample_nearest2d<{}, {}, {}>", dtype_c_type(dtype), kThreads, scale), args,
                      kThreads, TEENY_KERNEL_ORIGIN);
  Launch launch;
  launch.block = {kThreads, 1, 1};
  launch.grid = {ceil_div(product(in), Expr(kThreads)), Expr(1), Expr(1)};
  launch.args = std::move(args);
  launch.bytes = Expr(static_cast<int64_t>(dtype_size(dtype)) * (1 + scale * scale)) * product(in);
  launch.flops = Expr(0);
  return Lowering{{std::move(kernel)}, {launch}};
}

HostTensor upsample_reference(const RefContext& ref) {
  const int64_t s = ref.op.attrs.integer("scale_factor");
  const HostTensor& x = ref.inputs.at(0);
  const int64_t planes = x.shape[0] * x.shape[1], in_h = x.shape[2], in_w = x.shape[3];
  const int64_t out_h = in_h * s, out_w = in_w * s;
  HostTensor y{ref.op.output.dtype, ref.output_shape, std::vector<double>(planes * out_h * out_w)};
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < out_h; ++oh)
      for (int64_t ow = 0; ow < out_w; ++ow)
        y.data[(p * out_h + oh) * out_w + ow] = x.data[(p * in_h + oh / s) * in_w + ow / s];
  return y;
}

}  // namespace

OpDef upsample_nearest2d_op() {
  OpDef def;
  def.name = "upsample_nearest2d";
  def.doc = "nearest-neighbour upsampling of x [B, C, H, W] by an integer factor -> [B, C, H*s, W*s]";
  def.inputs = {{"x", "[B, C, H, W]"}};
  def.attrs = {{"scale_factor", AttrType::kInt, "integer scale s", nlohmann::json(2), {}, false, 1.0}};
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = output_float_dtype(meta, ctx, common_float_dtype(meta, ctx));
    const TensorType& x = ctx.inputs.at(0);
    check_nchw(meta.name, x);
    const Expr s(ctx.attrs.integer("scale_factor"));
    return contiguous(dtype, {x.shape[0], x.shape[1], x.shape[2] * s, x.shape[3] * s});
  };
  def.lower = upsample_lower;
  def.reference = upsample_reference;
  // grad.upsample_nearest2d: each element the sum of its s x s block of dy.
  def.backward = [](GradBuilder& g) {
    g.input_grad(0, g.add("grad.upsample_nearest2d", {g.grad_output()},
                          {{"scale_factor", g.ctx().attrs.integer("scale_factor")},
                           {"shape", shape_attr(g.type(g.input(0)).shape)}}));
  };
  def.conformance_cases = [] {
    std::vector<VisionCase> cases = {{"x2, odd 15x13", "[B, 8, 15, 13]"},
                                     {"x3", "[B, 16, 8, 8]", {{"scale_factor", 3}}}};
    for (VisionCase& c :
         in_16bit_dtypes({{"x2, odd 17x13", "[B, 6, 17, 13]"}, {"x3, odd 7x5", "[B, 5, 7, 5]", {{"scale_factor", 3}}}}))
      cases.push_back(std::move(c));
    return vision_cases("upsample_nearest2d", cases);
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
