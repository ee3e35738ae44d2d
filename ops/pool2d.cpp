// maxpool2d, avgpool2d (count_include_pad = true) and global_avgpool over x [B, C, H, W], in any
// float dtype (sums and means in f32), and their backward rules: grad.maxpool2d (reading x, whose
// picks it recomputes), grad.avgpool2d (dy alone), and for global_avgpool grad.broadcast with
// mean (dy / (H * W) over each plane).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/pool_common.h"

namespace teeny::ops {
namespace {

constexpr int kThreads = 256;

TensorType infer_pool(const OpDef& meta, const OpContext& ctx) {
  const DType dtype = output_float_dtype(meta, ctx, common_float_dtype(meta, ctx));
  const TensorType& x = ctx.inputs.at(0);
  check_nchw(meta.name, x);
  return contiguous(dtype, pooled_shape(x.shape, ctx.attrs));
}

// ops/kernels/pool2d.cuh's tn_pool2d: one output per thread, flat over [B, C, Ho, Wo].
Lowering lower_window_pool(const std::string& op, bool is_max, const OpContext& ctx) {
  const Window2d p = pool_window(ctx.attrs);
  const Shape& in = ctx.inputs.at(0).shape;
  const Shape& out = ctx.output.shape;
  const DType dtype = ctx.inputs.at(0).dtype;
  std::vector<KernelArg> args = {input(0, "x", dtype), output("y", dtype), i64("count", product(out)),
                                 i32("in_h", in[2]),   i32("in_w", in[3]), i32("out_h", out[2]),
                                 i32("out_w", out[3])};
  KernelSource kernel = template_kernel(fmt::format("{}_{}_{}", op, dtype_name(dtype), window_name(p)), "pool2d.cuh",
                                        fmt::format("tn_pool2d<{}, {}, {}, {}>", dtype_c_type(dtype), kThreads,
                                                    window_template(p), is_max ? "tn_pool_max" : "tn_pool_avg"),
                                        args, kThreads, TEENY_KERNEL_ORIGIN);
  Launch launch;
  launch.block = {kThreads, 1, 1};
  launch.grid = {ceil_div(product(out), Expr(kThreads)), Expr(1), Expr(1)};
  launch.args = std::move(args);
  launch.bytes = Expr(static_cast<int64_t>(dtype_size(dtype))) * (product(in) + product(out));
  launch.flops = Expr(p.kh * p.kw) * product(out);
  return Lowering{{std::move(kernel)}, {launch}};
}

HostTensor window_pool_reference(bool is_max, const RefContext& ref) {
  const Window2d p = pool_window(ref.op.attrs);
  const HostTensor& x = ref.inputs.at(0);
  const int64_t planes = x.shape[0] * x.shape[1], in_h = x.shape[2], in_w = x.shape[3];
  const int64_t out_h = ref.output_shape[2], out_w = ref.output_shape[3];
  HostTensor y{ref.op.output.dtype, ref.output_shape, std::vector<double>(planes * out_h * out_w)};
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oh = 0; oh < out_h; ++oh)
      for (int64_t ow = 0; ow < out_w; ++ow) {
        double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
        for (int64_t kh = 0; kh < p.kh; ++kh)
          for (int64_t kw = 0; kw < p.kw; ++kw) {
            const int64_t ih = oh * p.sh - p.ph + kh, iw = ow * p.sw - p.pw + kw;
            if (ih < 0 || ih >= in_h || iw < 0 || iw >= in_w) continue;
            const double v = x.data[(pl * in_h + ih) * in_w + iw];
            acc = is_max ? std::max(acc, v) : acc + v;
          }
        y.data[(pl * out_h + oh) * out_w + ow] = is_max ? acc : acc / static_cast<double>(p.kh * p.kw);
      }
  return y;
}

OpDef window_pool_op(const std::string& name, bool is_max, const std::string& doc) {
  OpDef def;
  def.name = name;
  def.doc = doc;
  def.inputs = {{"x", "[B, C, H, W]"}};
  def.attrs = pool_attr_specs();
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_pool(meta, ctx); };
  def.lower = [name, is_max](const OpContext& ctx) { return lower_window_pool(name, is_max, ctx); };
  def.reference = [is_max](const RefContext& ref) { return window_pool_reference(is_max, ref); };
  def.backward = [is_max](GradBuilder& g) {
    nlohmann::json attrs = g.ctx().attrs.json();
    if (is_max) {
      g.input_grad(0, g.add("grad.maxpool2d", {g.grad_output(), g.input(0)}, attrs));
      return;
    }
    attrs["shape"] = shape_attr(g.type(g.input(0)).shape);
    g.input_grad(0, g.add("grad.avgpool2d", {g.grad_output()}, attrs));
  };
  def.conformance_cases = [name] {
    std::vector<VisionCase> cases = {
        {"k3 s2 p1, odd 15x13", "[B, 8, 15, 13]", {{"kernel_size", 3}, {"stride", 2}, {"padding", 1}}},
        {"k5 s1 p2 (SPPF)", "[B, 16, 8, 8]", {{"kernel_size", 5}, {"stride", 1}, {"padding", 2}}},
        {"k2, default stride", "[B, 6, 28, 28]", {{"kernel_size", 2}}},
        {"k[2,3] s[1,2], odd 15x13", "[B, 8, 15, 13]", {{"kernel_size", {2, 3}}, {"stride", {1, 2}}}}};
    for (VisionCase& c : in_16bit_dtypes(
             {{"k3 s2 p1, odd 17x13", "[B, 6, 17, 13]", {{"kernel_size", 3}, {"stride", 2}, {"padding", 1}}},
              {"k5 s1 p2 (SPPF)", "[B, 12, 8, 8]", {{"kernel_size", 5}, {"stride", 1}, {"padding", 2}}},
              {"k[2,3] s[1,2], odd 17x13", "[B, 6, 17, 13]", {{"kernel_size", {2, 3}}, {"stride", {1, 2}}}}}))
      cases.push_back(std::move(c));
    return vision_cases(name, cases);
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

// ---- global_avgpool ------------------------------------------------------------------------

// ops/kernels/pool2d.cuh's tn_global_avgpool: a warp per plane for small planes (8 planes per
// CTA), the whole CTA for large ones; 16-byte loads when every plane is a whole number of them.
Lowering lower_global_avgpool(const OpContext& ctx) {
  const Shape& in = ctx.inputs.at(0).shape;
  const DType dtype = ctx.inputs.at(0).dtype;
  const Expr plane = in[2] * in[3];
  const auto plane_size = plane.const_value();
  const int plane_threads = plane_size && *plane_size < 2048 ? 32 : kThreads;
  const int width = vector_width(dtype);
  const int vec = plane_size && *plane_size % width == 0 ? width : 1;
  const Expr planes = in[0] * in[1];
  std::vector<KernelArg> args = {input(0, "x", dtype), output("y", dtype), i32("planes", planes), i32("plane", plane)};
  KernelSource kernel = template_kernel(
      fmt::format("global_avgpool_{}_t{}_v{}", dtype_name(dtype), plane_threads, vec), "pool2d.cuh",
      fmt::format("tn_global_avgpool<{}, {}, {}, {}>", dtype_c_type(dtype), kThreads, plane_threads, vec), args,
      kThreads, TEENY_KERNEL_ORIGIN);
  Launch launch;
  launch.block = {kThreads, 1, 1};
  launch.grid = {ceil_div(planes, Expr(kThreads / plane_threads)), Expr(1), Expr(1)};
  launch.args = std::move(args);
  launch.bytes = Expr(static_cast<int64_t>(dtype_size(dtype))) * (product(in) + planes);
  launch.flops = product(in);
  return Lowering{{std::move(kernel)}, {launch}};
}

HostTensor global_avgpool_reference(const RefContext& ref) {
  const HostTensor& x = ref.inputs.at(0);
  const int64_t planes = x.shape[0] * x.shape[1], plane = x.shape[2] * x.shape[3];
  HostTensor y{ref.op.output.dtype, ref.output_shape, std::vector<double>(planes)};
  for (int64_t p = 0; p < planes; ++p) {
    double sum = 0.0;
    for (int64_t i = 0; i < plane; ++i) sum += x.data[p * plane + i];
    y.data[p] = sum / static_cast<double>(plane);
  }
  return y;
}

}  // namespace

OpDef maxpool2d_op() {
  return window_pool_op("maxpool2d", true,
                        "max over kH x kW windows of x [B, C, H, W]; padding is ignored (never the max)");
}

OpDef avgpool2d_op() {
  return window_pool_op("avgpool2d", false,
                        "mean over kH x kW windows of x [B, C, H, W]; padding counts as zeros "
                        "(count_include_pad = true)");
}

OpDef global_avgpool_op() {
  OpDef def;
  def.name = "global_avgpool";
  def.doc = "mean over each channel plane of x [B, C, H, W] -> [B, C, 1, 1]";
  def.inputs = {{"x", "[B, C, H, W]"}};
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = output_float_dtype(meta, ctx, common_float_dtype(meta, ctx));
    const TensorType& x = ctx.inputs.at(0);
    check_nchw(meta.name, x);
    return contiguous(dtype, {x.shape[0], x.shape[1], Expr(1), Expr(1)});
  };
  def.lower = lower_global_avgpool;
  def.reference = global_avgpool_reference;
  def.backward = [](GradBuilder& g) {
    g.input_grad(0, g.add("grad.broadcast", {g.grad_output()},
                          {{"shape", shape_attr(g.type(g.input(0)).shape)}, {"mean", true}}));
  };
  def.conformance_cases = [] {
    std::vector<VisionCase> cases = {{"195-pixel planes (a warp each)", "[B, 8, 15, 13]"},
                                     {"4096-pixel planes (a block each)", "[B, 4, 64, 64]"}};
    // 2052 pixels: a block each, scalar loads in 16-bit (not a whole number of 8-element vectors).
    for (VisionCase& c : in_16bit_dtypes({{"221-pixel planes (a warp each)", "[B, 6, 17, 13]"},
                                          {"2052-pixel planes (a block each, scalar)", "[B, 3, 38, 54]"},
                                          {"4096-pixel planes (a block each, 16-byte)", "[B, 4, 64, 64]"}}))
      cases.push_back(std::move(c));
    return vision_cases("global_avgpool", cases);
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
