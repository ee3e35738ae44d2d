// grad.avgpool2d (ops.md, "Gradients"): avgpool2d's backward as the forward computes it
// (count_include_pad, floor mode: every window divides by kH * kW). Each dx element gathers dy /
// (kH * kW) over the windows covering it, in window order (ops/kernels/grad_pool2d.cuh): no atomics
// where windows overlap. dy alone is read; `shape` (x's) gives dx's extents, which the pooled ones
// do not determine.
#include <fmt/format.h>

#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/pool_common.h"

namespace teeny::ops {
namespace {

constexpr const char* kOp = "grad.avgpool2d";

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  const TensorType& dy = ctx.inputs[0];
  const Shape x = ctx.attrs.shape("shape");
  if (x.size() != 4)
    throw OpError("attrs.shape", fmt::format("{}: shape {} is not x's [B, C, H, W]", kOp, shape_str(x)));
  const Shape pooled = pooled_shape(x, ctx.attrs);
  if (dy.shape != pooled)
    throw OpError("inputs", fmt::format("{}: dy has shape {}; x {} pooled is {}", kOp, shape_str(dy.shape),
                                        shape_str(x), shape_str(pooled)));
  if (is_padded(dy))
    throw OpError("inputs", fmt::format("{} needs a contiguous dy, got row stride {} for width {}", kOp,
                                        dy.row_stride.str(), dy.shape[3].str()));
  return contiguous(output_float_dtype(def, ctx, dtype), x);
}

Lowering lower(const OpContext& ctx) {
  const Window2d p = pool_window(ctx.attrs);
  const DType dtype = ctx.output.dtype;
  const int64_t windows = ((p.kh + p.sh - 1) / p.sh) * ((p.kw + p.sw - 1) / p.sw);
  return pool_grad_lowering(ctx, fmt::format("grad_avgpool2d_{}_{}", dtype_name(dtype), window_name(p)),
                            "tn_avgpool2d_grad", window_template(p), {input(0, "dy", dtype)}, Expr(windows),
                            Expr(2 * windows));
}

HostTensor reference(const RefContext& ref) {
  const Window2d p = pool_window(ref.op.attrs);
  const HostTensor& dy = ref.inputs.at(0);
  const std::vector<int64_t>& x = ref.output_shape;
  const int64_t planes = x[0] * x[1], in_h = x[2], in_w = x[3];
  const int64_t out_h = dy.shape[2], out_w = dy.shape[3];
  const double size = static_cast<double>(p.kh * p.kw);
  HostTensor dx{ref.op.output.dtype, x, std::vector<double>(planes * in_h * in_w, 0.0)};
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oh = 0; oh < out_h; ++oh)
      for (int64_t ow = 0; ow < out_w; ++ow)
        for (int64_t kh = 0; kh < p.kh; ++kh)
          for (int64_t kw = 0; kw < p.kw; ++kw) {
            const int64_t ih = oh * p.sh - p.ph + kh, iw = ow * p.sw - p.pw + kw;
            if (ih < 0 || ih >= in_h || iw < 0 || iw >= in_w) continue;
            dx.data[(pl * in_h + ih) * in_w + iw] += dy.data[(pl * out_h + oh) * out_w + ow] / size;
          }
  return dx;
}

}  // namespace

OpDef grad_avgpool2d_op() {
  OpDef def;
  def.name = kOp;
  def.doc =
      "avgpool2d's backward: dy / (kH * kW) to every element of each window (padding counted, as the forward "
      "does), summed where windows overlap; shape is x's";
  def.inputs = {{"dy", "dL/dy [B, C, Ho, Wo]"}};
  def.attrs = pool_attr_specs();
  def.attrs.push_back(attr_spec("shape", AttrType::kShape, "x's shape [B, C, H, W]: ints, dim names or expressions"));
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.lower = lower;
  def.reference = reference;
  def.conformance_cases = [] {
    auto with_shape = [](nlohmann::json attrs, int64_t c, int64_t h, int64_t w) {
      attrs["shape"] = nlohmann::json::array({"B", c, h, w});
      return attrs;
    };
    return pool_grad_cases(
        kOp, false,
        {{"k1 on 1x1", 3, 1, 1, 1, 1, with_shape({{"kernel_size", 1}}, 3, 1, 1)},
         {"k3 s2 p1 (overlapping), 7x7", 5, 7, 7, 4, 4,
          with_shape({{"kernel_size", 3}, {"stride", 2}, {"padding", 1}}, 5, 7, 7)},
         {"k3 s2 p1 (overlapping), odd 17x13", 6, 17, 13, 9, 7,
          with_shape({{"kernel_size", 3}, {"stride", 2}, {"padding", 1}}, 6, 17, 13)},
         {"k2 (floor drops the last row and column), 17x13", 12, 17, 13, 8, 6,
          with_shape({{"kernel_size", 2}}, 12, 17, 13)},
         {"k5 s1 p2 (SPPF)", 3, 8, 8, 8, 8, with_shape({{"kernel_size", 5}, {"stride", 1}, {"padding", 2}}, 3, 8, 8)},
         {"k[2,3] s[1,2] p[1,1], 7x7", 5, 7, 7, 8, 4,
          with_shape({{"kernel_size", {2, 3}}, {"stride", {1, 2}}, {"padding", {1, 1}}}, 5, 7, 7)}});
  };
  return def;
}

}  // namespace teeny::ops
