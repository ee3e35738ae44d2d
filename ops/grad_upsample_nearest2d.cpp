// grad.upsample_nearest2d (ops.md, "Gradients"): upsample_nearest2d's backward. Each dx element
// is the sum of the s x s block of dy it was copied to, added row by row
// (ops/kernels/grad_pool2d.cuh). dy alone is read; `shape` is x's.
#include <fmt/format.h>

#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/pool_common.h"

namespace teeny::ops {
namespace {

constexpr const char* kOp = "grad.upsample_nearest2d";

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  const TensorType& dy = ctx.inputs[0];
  const Shape x = ctx.attrs.shape("shape");
  if (x.size() != 4)
    throw OpError("attrs.shape", fmt::format("{}: shape {} is not x's [B, C, H, W]", kOp, shape_str(x)));
  const Expr s(ctx.attrs.integer("scale_factor"));
  const Shape upsampled = {x[0], x[1], x[2] * s, x[3] * s};
  if (dy.shape != upsampled)
    throw OpError("inputs", fmt::format("{}: dy has shape {}; x {} upsampled by {} is {}", kOp, shape_str(dy.shape),
                                        shape_str(x), s.str(), shape_str(upsampled)));
  if (is_padded(dy))
    throw OpError("inputs", fmt::format("{} needs a contiguous dy, got row stride {} for width {}", kOp,
                                        dy.row_stride.str(), dy.shape[3].str()));
  return contiguous(output_float_dtype(def, ctx, dtype), x);
}

Lowering lower(const OpContext& ctx) {
  const int64_t s = ctx.attrs.integer("scale_factor");
  const DType dtype = ctx.output.dtype;
  return pool_grad_lowering(ctx, fmt::format("grad_upsample_nearest2d_{}_s{}", dtype_name(dtype), s),
                            "tn_upsample_nearest2d_grad", std::to_string(s), {input(0, "dy", dtype)}, Expr(s * s),
                            Expr(s * s));
}

HostTensor reference(const RefContext& ref) {
  const int64_t s = ref.op.attrs.integer("scale_factor");
  const HostTensor& dy = ref.inputs.at(0);
  const std::vector<int64_t>& x = ref.output_shape;
  const int64_t planes = x[0] * x[1], in_h = x[2], in_w = x[3];
  const int64_t out_h = in_h * s, out_w = in_w * s;
  HostTensor dx{ref.op.output.dtype, x, std::vector<double>(planes * in_h * in_w, 0.0)};
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oh = 0; oh < out_h; ++oh)
      for (int64_t ow = 0; ow < out_w; ++ow)
        dx.data[(pl * in_h + oh / s) * in_w + ow / s] += dy.data[(pl * out_h + oh) * out_w + ow];
  return dx;
}

}  // namespace

OpDef grad_upsample_nearest2d_op() {
  OpDef def;
  def.name = kOp;
  def.doc = "upsample_nearest2d's backward: each element the sum of the s x s block of dy it was copied to";
  def.inputs = {{"dy", "dL/dy [B, C, H*s, W*s]"}};
  def.attrs = {{"scale_factor", AttrType::kInt, "the forward's integer scale s", nlohmann::json(2), {}, false, 1.0},
               attr_spec("shape", AttrType::kShape, "x's shape [B, C, H, W]: ints, dim names or expressions")};
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.lower = lower;
  def.reference = reference;
  def.conformance_cases = [] {
    auto attrs = [](int64_t s, int64_t c, int64_t h, int64_t w) {
      return nlohmann::json{{"scale_factor", s}, {"shape", nlohmann::json::array({"B", c, h, w})}};
    };
    return pool_grad_cases(kOp, false,
                           {{"x2 on 1x1", 3, 1, 1, 2, 2, attrs(2, 3, 1, 1)},
                            {"x2, 7x7", 5, 7, 7, 14, 14, attrs(2, 5, 7, 7)},
                            {"x2, odd 17x13", 6, 17, 13, 34, 26, attrs(2, 6, 17, 13)},
                            {"x3, odd 7x5", 12, 7, 5, 21, 15, attrs(3, 12, 7, 5)}});
  };
  return def;
}

}  // namespace teeny::ops
