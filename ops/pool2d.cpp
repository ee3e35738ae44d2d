// maxpool2d, avgpool2d (count_include_pad = true) and global_avgpool over x [B, C, H, W].
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/vision_common.h"

namespace teeny::ops {
namespace {

constexpr int kThreads = 256;

struct PoolWindow {
  int64_t kh, kw, sh, sw, ph, pw;
};

PoolWindow pool_window(const Attrs& attrs) {
  PoolWindow p;
  std::tie(p.kh, p.kw) = attrs.pair("kernel_size");
  std::tie(p.sh, p.sw) = attrs.has("stride") ? attrs.pair("stride") : std::pair{p.kh, p.kw};
  std::tie(p.ph, p.pw) = attrs.pair("padding");
  return p;
}

std::vector<AttrSpec> pool_attr_specs() {
  return {
      {"kernel_size", AttrType::kIntPair, "window: n or [kH, kW]", std::nullopt, {}, false, {}},
      {"stride", AttrType::kIntPair, "step: n or [sH, sW]; default = kernel_size", std::nullopt, {}, true, {}},
      {"padding", AttrType::kIntPair, "implicit padding: n or [pH, pW], at most half the kernel",
       nlohmann::json(0), {}, false, {}},
  };
}

TensorType infer_pool(const OpDef& meta, const OpContext& ctx) {
  const DType dtype = output_float_dtype(meta, ctx, common_float_dtype(meta, ctx));
  const TensorType& x = ctx.inputs.at(0);
  check_nchw(meta.name, x);
  const PoolWindow p = pool_window(ctx.attrs);
  require_at_least("kernel_size", p.kh, p.kw, 1);
  require_at_least("stride", p.sh, p.sw, 1);
  require_at_least("padding", p.ph, p.pw, 0);
  // PyTorch's rule: a window must always overlap the input.
  if (2 * p.ph > p.kh || 2 * p.pw > p.kw)
    throw OpError("attrs.padding", fmt::format("padding [{}, {}] must be at most half the kernel [{}, {}]", p.ph,
                                               p.pw, p.kh, p.kw));
  return contiguous(dtype, {x.shape[0], x.shape[1], window_extent("height", x.shape[2], p.kh, p.sh, p.ph, 1),
                            window_extent("width", x.shape[3], p.kw, p.sw, p.pw, 1)});
}

// One output per thread, flat over [B, C, Ho, Wo] so stores are coalesced.
Lowering lower_window_pool(const std::string& op, bool is_max, const OpContext& ctx) {
  const PoolWindow p = pool_window(ctx.attrs);
  const Shape& in = ctx.inputs.at(0).shape;
  const Shape& out = ctx.output.shape;
  std::vector<KernelArg> args = {input(0, "x", DType::kF32), output("y", DType::kF32),
                                 i64("count", product(out)),  i32("in_h", in[2]),
                                 i32("in_w", in[3]),          i32("out_h", out[2]),
                                 i32("out_w", out[3])};
  std::string src = kernel_prelude();
  src += kernel_constant("THREADS", kThreads);
  src += kernel_constant("KH", p.kh) + kernel_constant("KW", p.kw) + kernel_constant("SH", p.sh) +
         kernel_constant("SW", p.sw) + kernel_constant("PH", p.ph) + kernel_constant("PW", p.pw);
  src += kernel_entry(args, kThreads) + " {\n" + R"CUDA(  const long long i = (long long)blockIdx.x * THREADS + threadIdx.x;
  if (i >= count) return;
  const int ow = (int)(i % out_w);
  const long long rows = i / out_w;
  const int oh = (int)(rows % out_h);
  const float* plane = x + (rows / out_h) * in_h * in_w;
  const int ih0 = oh * SH - PH, iw0 = ow * SW - PW;
)CUDA";
  if (is_max) {
    src += R"CUDA(  float acc = __int_as_float(0xff800000);  // -inf (NVRTC has no INFINITY macro)
#pragma unroll
  for (int kh = 0; kh < KH; ++kh)
#pragma unroll
    for (int kw = 0; kw < KW; ++kw) {
      const int ih = ih0 + kh, iw = iw0 + kw;
      if ((unsigned)ih < (unsigned)in_h && (unsigned)iw < (unsigned)in_w) {
        const float v = __ldg(plane + ih * in_w + iw);
        acc = (v > acc || v != v) ? v : acc;  // NaN propagates, as in PyTorch
      }
    }
  y[i] = acc;
}
)CUDA";
  } else {
    src += R"CUDA(  float acc = 0.f;
#pragma unroll
  for (int kh = 0; kh < KH; ++kh)
#pragma unroll
    for (int kw = 0; kw < KW; ++kw) {
      const int ih = ih0 + kh, iw = iw0 + kw;
      if ((unsigned)ih < (unsigned)in_h && (unsigned)iw < (unsigned)in_w) acc += __ldg(plane + ih * in_w + iw);
    }
  y[i] = acc / (KH * KW);  // padding counts (count_include_pad = true)
}
)CUDA";
  }
  Launch launch;
  launch.block = {kThreads, 1, 1};
  launch.grid = {ceil_div(product(out), Expr(kThreads)), Expr(1), Expr(1)};
  launch.args = std::move(args);
  launch.bytes = Expr(4) * (product(in) + product(out));
  launch.flops = Expr(p.kh * p.kw) * product(out);
  return Lowering{{KernelSource{fmt::format("{}_k{}x{}s{}x{}", op, p.kh, p.kw, p.sh, p.sw), src, TEENY_KERNEL_ORIGIN}},
                  {launch}};
}

HostTensor window_pool_reference(bool is_max, const RefContext& ref) {
  const PoolWindow p = pool_window(ref.op.attrs);
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
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_pool(meta, ctx); };
  def.lower = [name, is_max](const OpContext& ctx) { return lower_window_pool(name, is_max, ctx); };
  def.reference = [is_max](const RefContext& ref) { return window_pool_reference(is_max, ref); };
  def.conformance_cases = [name] {
    return vision_cases(name, {{"k3 s2 p1, odd 15x13", "[B, 8, 15, 13]", {{"kernel_size", 3}, {"stride", 2}, {"padding", 1}}},
                               {"k5 s1 p2 (SPPF)", "[B, 16, 8, 8]", {{"kernel_size", 5}, {"stride", 1}, {"padding", 2}}},
                               {"k2, default stride", "[B, 6, 28, 28]", {{"kernel_size", 2}}},
                               {"k[2,3] s[1,2], odd 15x13", "[B, 8, 15, 13]", {{"kernel_size", {2, 3}}, {"stride", {1, 2}}}}});
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

// ---- global_avgpool ------------------------------------------------------------------------

// A warp per plane for small planes (8 planes per CTA), the whole CTA for large ones; partial
// sums are combined with warp shuffles (and shared memory across warps).
Lowering lower_global_avgpool(const OpContext& ctx) {
  const Shape& in = ctx.inputs.at(0).shape;
  const Expr plane = in[2] * in[3];
  const auto plane_size = plane.const_value();
  const int plane_threads = plane_size && *plane_size < 2048 ? 32 : kThreads;
  const int vec = plane_size && *plane_size % 4 == 0 ? 4 : 1;
  const Expr planes = in[0] * in[1];
  std::vector<KernelArg> args = {input(0, "x", DType::kF32), output("y", DType::kF32), i32("planes", planes),
                                 i32("plane", plane)};
  std::string src = kernel_prelude() + kernel_constant("THREADS", kThreads) +
                    kernel_constant("PLANE_THREADS", plane_threads) + kernel_constant("VEC", vec);
  src += kernel_entry(args, kThreads) + R"CUDA( {
  constexpr int PLANES_PER_CTA = THREADS / PLANE_THREADS;
  __shared__ float smem32[32];
  const int lane = threadIdx.x % PLANE_THREADS;
  const int p = blockIdx.x * PLANES_PER_CTA + threadIdx.x / PLANE_THREADS;
  float sum = 0.f;
  if (p < planes) {
    const float* src = x + (long long)p * plane;
    if (VEC == 4 && tn_aligned16(x)) {
      for (int i = lane * 4; i < plane; i += PLANE_THREADS * 4) {
        float v[4];
        tn_load16<float>(src + i, v);
        sum += (v[0] + v[1]) + (v[2] + v[3]);
      }
    } else {
      for (int i = lane; i < plane; i += PLANE_THREADS) sum += __ldg(src + i);
    }
  }
  if constexpr (PLANE_THREADS == 32) sum = tn_warp_sum(sum);
  else sum = tn_block_sum<THREADS>(sum, smem32);
  if (lane == 0 && p < planes) y[p] = sum / plane;
}
)CUDA";
  Launch launch;
  launch.block = {kThreads, 1, 1};
  launch.grid = {ceil_div(planes, Expr(kThreads / plane_threads)), Expr(1), Expr(1)};
  launch.args = std::move(args);
  launch.bytes = Expr(4) * (product(in) + planes);
  launch.flops = product(in);
  return Lowering{{KernelSource{fmt::format("global_avgpool_t{}_v{}", plane_threads, vec), src, TEENY_KERNEL_ORIGIN}},
                  {launch}};
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
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = output_float_dtype(meta, ctx, common_float_dtype(meta, ctx));
    const TensorType& x = ctx.inputs.at(0);
    check_nchw(meta.name, x);
    return contiguous(dtype, {x.shape[0], x.shape[1], Expr(1), Expr(1)});
  };
  def.lower = lower_global_avgpool;
  def.reference = global_avgpool_reference;
  def.conformance_cases = [] {
    return vision_cases("global_avgpool", {{"195-pixel planes (a warp each)", "[B, 8, 15, 13]"},
                                           {"4096-pixel planes (a block each)", "[B, 4, 64, 64]"}});
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
