// grad.maxpool2d (ops.md, "Gradients"): maxpool2d's backward. Each window's dy goes to the
// element PyTorch's CUDA maxpool picks for it, recomputed from x (the window clipped to the input,
// scanned row by row: the first max, or the last NaN where the window holds one); every other
// element gets 0, and one picked by several overlapping windows gets their sum, gathered per
// element in window order (ops/kernels/grad_pool2d.cuh), so the bits never vary.
#include <fmt/format.h>

#include <limits>

#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/pool_common.h"

namespace teeny::ops {
namespace {

constexpr const char* kOp = "grad.maxpool2d";

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  const TensorType& dy = ctx.inputs[0];
  const TensorType& x = ctx.inputs[1];
  check_nchw(kOp, x);
  const Shape pooled = pooled_shape(x.shape, ctx.attrs);
  if (dy.shape != pooled)
    throw OpError("inputs", fmt::format("{}: dy has shape {}; x {} pooled is {}", kOp, shape_str(dy.shape),
                                        shape_str(x.shape), shape_str(pooled)));
  if (is_padded(dy))
    throw OpError("inputs", fmt::format("{} needs a contiguous dy, got row stride {} for width {}", kOp,
                                        dy.row_stride.str(), dy.shape[3].str()));
  return contiguous(output_float_dtype(def, ctx, dtype), x.shape);
}

Lowering lower(const OpContext& ctx) {
  const Window2d p = pool_window(ctx.attrs);
  const DType dtype = ctx.output.dtype;
  // Each element rescans the windows covering it: about ceil(k/s)^2 of them, k^2 loads each.
  const int64_t windows = ((p.kh + p.sh - 1) / p.sh) * ((p.kw + p.sw - 1) / p.sw);
  return pool_grad_lowering(ctx, fmt::format("grad_maxpool2d_{}_{}", dtype_name(dtype), window_name(p)),
                            "tn_maxpool2d_grad", window_template(p), {input(0, "dy", dtype), input(1, "x", dtype)},
                            Expr(windows * (p.kh * p.kw + 1)), Expr(windows * p.kh * p.kw));
}

// The flat index in its plane of the element window (oh, ow) picks, as the kernel's
// tn_window_argmax.
int64_t window_argmax(const double* plane, int64_t in_h, int64_t in_w, const Window2d& p, int64_t oh, int64_t ow) {
  const int64_t h0 = std::max<int64_t>(oh * p.sh - p.ph, 0), w0 = std::max<int64_t>(ow * p.sw - p.pw, 0);
  const int64_t h1 = std::min(oh * p.sh - p.ph + p.kh, in_h), w1 = std::min(ow * p.sw - p.pw + p.kw, in_w);
  int64_t best = h0 * in_w + w0;
  double best_value = -std::numeric_limits<double>::infinity();
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t w = w0; w < w1; ++w) {
      const double v = plane[h * in_w + w];
      if (v > best_value || std::isnan(v)) {
        best = h * in_w + w;
        best_value = v;
      }
    }
  return best;
}

// Scatters each window's dy into its pick: the same sums as the kernel's gather, and the same
// order per element (windows in row-major order).
HostTensor reference(const RefContext& ref) {
  const Window2d p = pool_window(ref.op.attrs);
  const HostTensor& dy = ref.inputs.at(0);
  const HostTensor& x = ref.inputs.at(1);
  const int64_t planes = x.shape[0] * x.shape[1], in_h = x.shape[2], in_w = x.shape[3];
  const int64_t out_h = dy.shape[2], out_w = dy.shape[3];
  HostTensor dx{ref.op.output.dtype, ref.output_shape, std::vector<double>(x.data.size(), 0.0)};
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oh = 0; oh < out_h; ++oh)
      for (int64_t ow = 0; ow < out_w; ++ow) {
        const int64_t pick = window_argmax(x.data.data() + pl * in_h * in_w, in_h, in_w, p, oh, ow);
        dx.data[pl * in_h * in_w + pick] += dy.data[(pl * out_h + oh) * out_w + ow];
      }
  return dx;
}

}  // namespace

OpDef grad_maxpool2d_op() {
  OpDef def;
  def.name = kOp;
  def.doc =
      "maxpool2d's backward: each window's dy to the element maxpool2d picks in x (the first max, or the last "
      "NaN), summed where windows overlap";
  def.inputs = {{"dy", "dL/dy [B, C, Ho, Wo]"}, {"x", "maxpool2d's input [B, C, H, W]"}};
  def.attrs = pool_attr_specs();
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.lower = lower;
  def.reference = reference;
  def.conformance_cases = [] {
    // Random x in 16-bit holds ties: both sides take the first of them.
    return pool_grad_cases(
        kOp, true,
        {{"k1 on 1x1", 3, 1, 1, 1, 1, {{"kernel_size", 1}}},
         {"k3 s2 p1 (overlapping), 7x7", 5, 7, 7, 4, 4, {{"kernel_size", 3}, {"stride", 2}, {"padding", 1}}},
         {"k3 s2 p1 (overlapping), odd 17x13", 6, 17, 13, 9, 7, {{"kernel_size", 3}, {"stride", 2}, {"padding", 1}}},
         {"k2 (floor drops the last row and column), 17x13", 12, 17, 13, 8, 6, {{"kernel_size", 2}}},
         {"k5 s1 p2 (SPPF)", 3, 8, 8, 8, 8, {{"kernel_size", 5}, {"stride", 1}, {"padding", 2}}},
         {"k[2,3] s[1,2] p[1,1], 7x7",
          5,
          7,
          7,
          8,
          4,
          {{"kernel_size", {2, 3}}, {"stride", {1, 2}}, {"padding", {1, 1}}}}});
  };
  return def;
}

}  // namespace teeny::ops
