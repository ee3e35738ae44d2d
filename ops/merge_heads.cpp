// merge_heads: x [B*H, S, Dh] -> [B, S, H*Dh] (out[b, s, h*Dh + d] = x[b*H + h, s, d]), the
// inverse of split_heads. A copy kernel over 16-byte output units when head rows and the
// input row stride allow, else per element; reads honour a padded input row stride.
#include <fmt/format.h>

#include "core/autodiff.h"
#include "ops/head_copy.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

TensorType infer_merge_heads(const OpDef& meta, const OpContext& ctx) {
  const TensorType& x = ctx.inputs.at(0);
  if (x.shape.size() != 3) {
    throw OpError("inputs", fmt::format("merge_heads needs x of shape [B*H, S, Dh]; got {}", shape_str(x.shape)));
  }
  output_float_dtype(meta, ctx, x.dtype);
  const int64_t heads = ctx.attrs.integer("heads");
  const auto rows = x.shape[0].const_value();
  if (rows && *rows % heads != 0) {
    throw OpError("attrs.heads",
                  fmt::format("merge_heads: the first dim {} is not divisible by heads = {}", *rows, heads));
  }
  return contiguous(x.dtype, {x.shape[0] / Expr(heads), x.shape[1], x.shape[2] * Expr(heads)});
}

Lowering lower_merge_heads(const OpContext& ctx) {
  return lower_head_copy(ctx, "merge_heads", ctx.inputs.at(0).shape[2], "tn_merge_heads");
}

HostTensor merge_heads_reference(const RefContext& ref) {
  const HostTensor& x = ref.inputs.at(0);
  const int64_t heads = ref.op.attrs.integer("heads");
  const int64_t batch = x.shape[0] / heads, seq = x.shape[1], head_dim = x.shape[2];
  const int64_t width = heads * head_dim;
  HostTensor y{ref.op.output.dtype, ref.output_shape, std::vector<double>(x.data.size())};
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < head_dim; ++d)
          y.data[(b * seq + s) * width + h * head_dim + d] = x.data[((b * heads + h) * seq + s) * head_dim + d];
  return y;
}

}  // namespace

OpDef merge_heads_op() {
  OpDef def;
  def.name = "merge_heads";
  def.doc = "x [B*H, S, Dh] -> [B, S, H*Dh] (inverse of split_heads)";
  def.inputs = {{"x", "[B*H, S, Dh]"}};
  def.attrs = {heads_attr_spec()};
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_merge_heads(meta, ctx); };
  def.lower = lower_merge_heads;
  def.reference = merge_heads_reference;
  // A permutation: the gradient goes back through its inverse, split_heads with the same heads.
  def.backward = [](GradBuilder& g) {
    g.input_grad(0, g.add("split_heads", {g.grad_output()}, {{"heads", g.ctx().attrs.integer("heads")}}));
  };
  def.conformance_cases = [] {
    return head_copy_cases("merge_heads", {"[B*12, S, 64]", "[B*12, S, 3]"}, "[B*2, S, 8]");
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
