// split_heads: x [B, S, H*Dh] -> [B*H, S, Dh] (out[b*H + h, s, d] = x[b, s, h*Dh + d]).
// A copy kernel: one thread per 16-byte unit when head rows and the input row stride allow,
// else per element; reads honour a padded input row stride, the output is contiguous.
#include <fmt/format.h>

#include "core/autodiff.h"
#include "ops/head_copy.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

TensorType infer_split_heads(const OpDef& meta, const OpContext& ctx) {
  const TensorType& x = ctx.inputs.at(0);
  if (x.shape.size() != 3) {
    throw OpError("inputs", fmt::format("split_heads needs x of shape [B, S, H*Dh]; got {}", shape_str(x.shape)));
  }
  output_float_dtype(meta, ctx, x.dtype);
  const int64_t heads = ctx.attrs.integer("heads");
  const auto width = x.shape[2].const_value();
  if (width && *width % heads != 0) {
    throw OpError("attrs.heads",
                  fmt::format("split_heads: the last dim {} is not divisible by heads = {}", *width, heads));
  }
  return contiguous(x.dtype, {x.shape[0] * Expr(heads), x.shape[1], x.shape[2] / Expr(heads)});
}

Lowering lower_split_heads(const OpContext& ctx) {
  return lower_head_copy(ctx, "split_heads", ctx.output.shape[2], "tn_split_heads");
}

HostTensor split_heads_reference(const RefContext& ref) {
  const HostTensor& x = ref.inputs.at(0);
  const int64_t heads = ref.op.attrs.integer("heads");
  const int64_t batch = x.shape[0], seq = x.shape[1], width = x.shape[2], head_dim = width / heads;
  HostTensor y{ref.op.output.dtype, ref.output_shape, std::vector<double>(x.data.size())};
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t d = 0; d < head_dim; ++d)
          y.data[((b * heads + h) * seq + s) * head_dim + d] = x.data[(b * seq + s) * width + h * head_dim + d];
  return y;
}

}  // namespace

OpDef split_heads_op() {
  OpDef def;
  def.name = "split_heads";
  def.doc = "x [B, S, H*Dh] -> [B*H, S, Dh]";
  def.inputs = {{"x", "[B, S, H*Dh]"}};
  def.attrs = {heads_attr_spec()};
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_split_heads(meta, ctx); };
  def.lower = lower_split_heads;
  def.reference = split_heads_reference;
  // A permutation: the gradient goes back through its inverse, merge_heads with the same heads.
  def.backward = [](GradBuilder& g) {
    g.input_grad(0, g.add("merge_heads", {g.grad_output()}, {{"heads", g.ctx().attrs.integer("heads")}}));
  };
  def.conformance_cases = [] { return head_copy_cases("split_heads", {"[B, S, 768]", "[B, S, 36]"}, "[B, S, 8]"); };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
