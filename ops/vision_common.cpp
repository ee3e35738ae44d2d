#include "ops/vision_common.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "ops/activation.h"
#include "ops/conformance.h"
#include "ops/kernel_util.h"

namespace teeny::ops {

std::vector<AttrSpec> conv_attr_specs() {
  const auto one = nlohmann::json(1);
  return {
      {"out_channels", AttrType::kInt, "output channels (Co)", std::nullopt, {}, false, 1.0},
      {"kernel_size",
       AttrType::kIntPair,
       "kernel size: n or [kH, kW]",
       std::nullopt,
       {},
       false,
       1.0,
       false,
       kMaxWindow},
      {"stride", AttrType::kIntPair, "stride: n or [sH, sW]", one, {}, false, 1.0, false, kMaxWindow},
      {"padding",
       AttrType::kIntPair,
       "zero padding: n or [pH, pW]",
       nlohmann::json(0),
       {},
       false,
       0.0,
       false,
       kMaxWindow},
      {"dilation", AttrType::kIntPair, "dilation: n or [dH, dW]", one, {}, false, 1.0, false, kMaxWindow},
      {"groups", AttrType::kInt, "channel groups; groups = C is depthwise", one, {}, false, 1.0},
  };
}

ConvAttrs conv_attrs(const Attrs& attrs) {
  ConvAttrs a;
  a.out_channels = attrs.integer("out_channels");
  a.groups = attrs.integer("groups");
  std::tie(a.kh, a.kw) = attrs.pair("kernel_size");
  std::tie(a.sh, a.sw) = attrs.pair("stride");
  std::tie(a.ph, a.pw) = attrs.pair("padding");
  std::tie(a.dh, a.dw) = attrs.pair("dilation");
  return a;
}

Shape ConvGeometry::weight_shape() const {
  return {Expr(a.out_channels), Expr(cin_per_group()), Expr(a.kh), Expr(a.kw)};
}

Shape ConvGeometry::output_shape() const { return {batch, Expr(a.out_channels), out_h, out_w}; }

std::string window_template(const Window2d& w) {
  return fmt::format("tn_window<{}, {}, {}, {}, {}, {}, {}, {}>", w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, w.dh, w.dw);
}

std::string window_name(const Window2d& w) {
  std::string name = fmt::format("k{}x{}s{}x{}", w.kh, w.kw, w.sh, w.sw);
  if (w.ph != 0 || w.pw != 0) name += fmt::format("p{}x{}", w.ph, w.pw);
  if (w.dh != 1 || w.dw != 1) name += fmt::format("d{}x{}", w.dh, w.dw);
  return name;
}

Expr window_extent(const char* axis, const Expr& in, int64_t k, int64_t s, int64_t p, int64_t d) {
  const int64_t reach = d * (k - 1) + 1;  // the (dilated) window's extent
  if (auto n = in.const_value(); n && *n + 2 * p < reach)
    throw OpError("attrs.kernel_size", fmt::format("the {}kernel {} {} is larger than the padded input {} {} + 2*{}",
                                                   d > 1 ? "dilated " : "", axis, reach, axis, *n, p));
  return (in + Expr(2 * p - reach)) / Expr(s) + Expr(1);
}

void check_nchw(const std::string& op, const TensorType& x) {
  if (x.shape.size() != 4)
    throw OpError("inputs", fmt::format("{} expects x [B, C, H, W] (rank 4), got {}", op, shape_str(x.shape)));
  if (is_padded(x))
    throw OpError("inputs", fmt::format("{} needs a contiguous input, got row stride {} for width {}", op,
                                        x.row_stride.str(), x.shape[3].str()));
}

std::vector<ConformanceCase> vision_cases(const std::string& op, const std::vector<VisionCase>& cases) {
  std::vector<ConformanceCase> out;
  for (const VisionCase& c : cases)
    out.push_back(
        {c.label, case_graph(c.dims, {{"x", c.dtype, c.shape}}, {{"y", op, {"x"}, c.attrs, ""}}), c.bindings});
  return out;
}

std::vector<VisionCase> in_16bit_dtypes(const std::vector<VisionCase>& cases) {
  std::vector<VisionCase> out;
  for (DType dtype : {DType::kBF16, DType::kF16})
    for (VisionCase c : cases) {
      c.label += fmt::format(" {}", dtype_name(dtype));
      c.dtype = dtype;
      out.push_back(std::move(c));
    }
  return out;
}

ConvGeometry conv_geometry(const std::string& op, const OpContext& ctx) {
  const TensorType& x = ctx.inputs.at(0);
  check_nchw(op, x);
  const auto channels = x.shape[1].const_value();
  if (!channels)
    throw OpError("inputs", fmt::format("{} needs a constant channel count, got C = {}", op, x.shape[1].str()));

  ConvGeometry g;
  g.a = conv_attrs(ctx.attrs);
  g.dtype = x.dtype;
  g.in_channels = *channels;
  const ConvAttrs& a = g.a;
  if (g.in_channels % a.groups != 0)
    throw OpError("attrs.groups", fmt::format("in_channels {} is not divisible by groups {}", g.in_channels, a.groups));
  if (a.out_channels % a.groups != 0)
    throw OpError("attrs.groups",
                  fmt::format("out_channels {} is not divisible by groups {}", a.out_channels, a.groups));
  g.batch = x.shape[0];
  g.in_h = x.shape[2];
  g.in_w = x.shape[3];
  g.out_h = window_extent("height", g.in_h, a.kh, a.sh, a.ph, a.dh);
  g.out_w = window_extent("width", g.in_w, a.kw, a.sw, a.pw, a.dw);
  g.variant = ctx.variant;
  return g;
}

std::vector<ParamSpec> conv_params(const ConvGeometry& g, bool bias, bool bn) {
  const Shape channels = {Expr(g.a.out_channels)};
  std::vector<ParamSpec> params = {{"conv.weight", g.weight_shape(), g.dtype, ParamInit::kTrained, {}}};
  if (bias) params.push_back({"conv.bias", channels, g.dtype, ParamInit::kTrained, {}});
  if (!bn) return params;
  for (const char* slot : {"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"})
    params.push_back({slot, channels, g.dtype, ParamInit::kTrained, {}});
  ParamSpec &mean = params[params.size() - 2], &var = params.back();
  var.hints.random_range = std::array<double, 2>{0.5, 1.5};  // a variance: positive
  mean.hints.unused_state = {"num_batches_tracked"};         // PyTorch's step counter
  mean.hints.buffer = var.hints.buffer = true;
  return params;
}

Expr conv_flops(const ConvGeometry& g) { return Expr(2 * g.reduction()) * product(g.output_shape()); }

Expr conv_bytes(const ConvGeometry& g) {
  const Expr in = g.batch * Expr(g.in_channels) * g.in_h * g.in_w;
  return Expr(static_cast<int64_t>(dtype_size(g.dtype))) * (in + product(g.weight_shape()) + product(g.output_shape()));
}

namespace {

// ---- epilogue --------------------------------------------------------------------------------

// The epilogue's params after the weight, in the entry's order.
std::vector<KernelArg> epilogue_params(const ConvEpilogue& e, const std::string& bias_slot, DType dtype) {
  if (e.bias) return {param(bias_slot, "bias", dtype)};
  if (!e.bn) return {};
  return {param("bn.weight", "bn_weight", dtype), param("bn.bias", "bn_bias", dtype),
          param("bn.running_mean", "bn_mean", dtype), param("bn.running_var", "bn_var", dtype), f32("eps", e.eps)};
}

// The entry of ops/kernels/conv2d.cuh that takes the epilogue's params, for `kernel` (a
// tn_conv2d_igemm or tn_conv2d_depthwise) over elements of `dtype`.
std::string conv_entry(const ConvEpilogue& e, DType dtype, const std::string& kernel) {
  const char* entry = e.residual ? "tn_conv2d_bn_add_act"
                      : e.bn     ? "tn_conv2d_bn_act"
                      : e.bias   ? "tn_conv2d_bias"
                                 : "tn_conv2d";
  const std::string act = e.activation == "none" ? "tn_act_none" : activation(e.activation).functor;
  return fmt::format("{}<{}, {}, {}>", entry, dtype_c_type(dtype), kernel, act);
}

// The op and dtype that start the kernel names: "conv2d_bf16".
std::string kernel_prefix(const std::string& op, const ConvGeometry& g) {
  return fmt::format("{}_{}", op, dtype_name(g.dtype));
}

// The channels for kernel names: "16to32", "16to32g2" with groups.
std::string channels_name(const ConvGeometry& g) {
  std::string name = fmt::format("{}to{}", g.in_channels, g.a.out_channels);
  if (g.a.groups > 1) name += fmt::format("g{}", g.a.groups);
  return name;
}

// "_bias", "_bn_add_relu", ...: what the epilogue does, in order.
std::string epilogue_tag(const ConvEpilogue& e) {
  std::string tag = e.bias ? "_bias" : e.bn ? "_bn" : "";
  if (e.residual) tag += "_add";
  if (e.activation != "none") tag += "_" + e.activation;
  return tag;
}

// The conv's constants as the template argument tn_conv_shape<...> of conv2d.cuh.
std::string conv_shape_template(const ConvGeometry& g) {
  return fmt::format("tn_conv_shape<{}, {}, {}, {}>", g.in_channels, g.a.out_channels, g.a.groups,
                     window_template(g.a));
}

// About one wave of the largest sm_90 part. A tile is a constant of the kernel's source, so it is
// chosen from the shape alone when compiling, not per device: a GPU with fewer SMs runs the same
// CTAs in more waves.
constexpr int64_t kTargetCtas = 132;

// The CUDA-core kernel stays the default until the tensor-core one has passed the GPU conformance
// test; until then `teeny tune` (which rejects a variant failing its numerics check) may pick it.
constexpr const char* kConvMmaVariant = "mma";
constexpr const char* kConvSimtVariant = "simt";

// Per group, pixel tiles across x and channel tiles across y.
std::array<Expr, 3> conv_gemm_grid(const ConvGeometry& g, int block_co, int block_p) {
  return {ceil_div(g.batch * g.out_h * g.out_w, Expr(block_p)), Expr((g.cout_per_group() + block_co - 1) / block_co),
          Expr(g.a.groups)};
}

// The CTAs of that grid.
Expr conv_ctas(const ConvGeometry& g, int block_co, int block_p) {
  const std::array<Expr, 3> grid = conv_gemm_grid(g, block_co, block_p);
  return grid[0] * grid[1] * grid[2];
}

// So many images that any tile makes a wave.
constexpr int64_t kManyImages = 1 << 20;

int pow2_at_least(int64_t n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// ---- implicit GEMM ---------------------------------------------------------------------------
//
// The kernel is conv2d.cuh's tn_conv2d_igemm: per group, y[co, n] = sum_k W[co, k] * X[k, n]
// with n = (image, pixel) and k = (channel, kh, kw), X gathered from x on the fly. A CTA
// computes a block_co x block_p tile of y in thread_co x thread_p register blocks.
struct ConvTile {
  int block_co = 0, block_p = 0;    // a CTA's output tile: channels x pixels
  int block_k = 16;                 // the K slice staged in shared memory a step
  int thread_co = 0, thread_p = 0;  // a thread's register block of the tile

  static constexpr ConvTile block(int co, int p) {
    ConvTile t;
    t.block_co = co;
    t.block_p = p;
    return t;
  }
  constexpr ConvTile per_thread(int co, int p) const {
    ConvTile t = *this;
    t.thread_co = co;
    t.thread_p = p;
    return t;
  }
  int threads() const { return (block_co / thread_co) * (block_p / thread_p); }
};

// Tiles from large to small, all 128 threads (the tile constants, not the block, set the work
// per CTA). A single image should still fill the GPU: the batch is usually symbolic, so tiles
// are sized for one image, and larger batches only add CTAs.
ConvTile choose_conv_tile(const ConvGeometry& g) {
  static constexpr ConvTile kMenu[] = {
      ConvTile::block(64, 64).per_thread(8, 4), ConvTile::block(32, 64).per_thread(4, 4),
      ConvTile::block(32, 32).per_thread(4, 2), ConvTile::block(16, 64).per_thread(2, 4),
      ConvTile::block(8, 64).per_thread(1, 4)};
  const ConvTile& smallest = kMenu[std::size(kMenu) - 1];
  const int64_t images = g.batch.const_value().value_or(1);
  const int64_t pixels = images * (g.out_h * g.out_w).const_value().value_or(64 * 64);
  const int64_t cog = g.cout_per_group();
  const int64_t co_cap = pow2_at_least(cog);
  const ConvTile* chosen = nullptr;
  for (const ConvTile& t : kMenu) {
    if (t.block_co > co_cap && t.block_co > smallest.block_co) continue;  // taller than Co
    if (chosen && t.block_co < std::min<int64_t>(co_cap, 16)) break;      // thinner than needed
    chosen = &t;
    const int64_t ctas = (cog + t.block_co - 1) / t.block_co * ((pixels + t.block_p - 1) / t.block_p);
    if (ctas * g.a.groups >= kTargetCtas) break;
  }
  return *chosen;
}

KernelSource implicit_gemm_kernel(const std::string& op, const ConvGeometry& g, const ConvTile& t,
                                  const ConvEpilogue& e, const std::vector<KernelArg>& args) {
  const bool pointwise = g.pointwise();
  // Loads of 4 pixels (16 bytes in f32, 8 in 16-bit) need each image's plane to be a multiple of 4
  // pixels.
  const auto hw = (g.out_h * g.out_w).const_value();
  const int vec = pointwise && hw && *hw % 4 == 0 ? 4 : 1;
  const std::string kernel =
      fmt::format("tn_conv2d_igemm<{}, tn_conv_tile<{}, {}, {}, {}, {}>, {}>", conv_shape_template(g), t.block_co,
                  t.block_p, t.block_k, t.thread_co, t.thread_p, vec);
  const std::string path = pointwise ? fmt::format("gemm1x1{}", vec == 4 ? "v4" : "") : "igemm_" + window_name(g.a);
  return template_kernel(fmt::format("{}_{}_{}_{}x{}{}", kernel_prefix(op, g), path, channels_name(g), t.block_co,
                                     t.block_p, epilogue_tag(e)),
                         "conv2d.cuh", conv_entry(e, g.dtype, kernel), args, t.threads(), TEENY_KERNEL_ORIGIN);
}

// ---- implicit GEMM on tensor cores -----------------------------------------------------------
//
// conv2d_mma.cuh's tn_conv2d_mma: a CTA computes a block_co x block_p tile of y on warp MMAs, one
// pixel of the tile a thread gathering its X column.
struct ConvMmaTile {
  int block_co, block_p, warps_co, warps_p;
  int threads() const { return warps_co * warps_p * 32; }
};

// The first tile of the menu (large to small) whose CTAs over `images` images make about a wave,
// else the smallest the channels allow. X is gathered once per CTA for all of its channels, and
// the gather is what bounds the kernel, so tall tiles come first.
ConvMmaTile choose_conv_mma_tile(const ConvGeometry& g, int64_t images) {
  static constexpr ConvMmaTile kMenu[] = {
      {128, 128, 4, 2}, {64, 128, 2, 2}, {64, 64, 2, 2}, {32, 64, 2, 2}, {16, 64, 1, 4}};
  const int64_t pixels = images * (g.out_h * g.out_w).const_value().value_or(64 * 64);
  const int64_t cog = g.cout_per_group();
  const int64_t co_cap = std::max(16, pow2_at_least(cog));
  const ConvMmaTile* chosen = nullptr;
  for (const ConvMmaTile& t : kMenu) {
    if (t.block_co > co_cap) continue;
    chosen = &t;
    const int64_t ctas = (cog + t.block_co - 1) / t.block_co * ((pixels + t.block_p - 1) / t.block_p);
    if (ctas * g.a.groups >= kTargetCtas) break;
  }
  return *chosen;
}

bool operator==(const ConvMmaTile& a, const ConvMmaTile& b) {
  return a.block_co == b.block_co && a.block_p == b.block_p && a.warps_co == b.warps_co && a.warps_p == b.warps_p;
}

KernelSource mma_kernel(const std::string& op, const ConvGeometry& g, const ConvMmaTile& t, const ConvEpilogue& e,
                        const std::vector<KernelArg>& args) {
  const std::string kernel = fmt::format("tn_conv2d_mma<{}, tn_conv_mma_tile<{}, {}, {}, {}>>", conv_shape_template(g),
                                         t.block_co, t.block_p, t.warps_co, t.warps_p);
  const std::string path = g.pointwise() ? "1x1" : window_name(g.a);
  return template_kernel(fmt::format("{}_mma_{}_{}_{}x{}{}", kernel_prefix(op, g), path, channels_name(g), t.block_co,
                                     t.block_p, epilogue_tag(e)),
                         "conv2d_mma.cuh", conv_entry(e, g.dtype, kernel), args, t.threads(), TEENY_KERNEL_ORIGIN);
}

// ---- depthwise -------------------------------------------------------------------------------
//
// groups == C: conv2d.cuh's tn_conv2d_depthwise, a tile_h x tile_w output tile of one (image,
// channel) plane per CTA, one output per thread.
KernelSource depthwise_kernel(const std::string& op, const ConvGeometry& g, const ConvEpilogue& e,
                              const std::vector<KernelArg>& args, int tile_h, int tile_w) {
  const std::string kernel = fmt::format("tn_conv2d_depthwise<{}, {}, {}>", conv_shape_template(g), tile_h, tile_w);
  return template_kernel(fmt::format("{}_dw_{}_{}_{}x{}{}", kernel_prefix(op, g), window_name(g.a), channels_name(g),
                                     tile_h, tile_w, epilogue_tag(e)),
                         "conv2d.cuh", conv_entry(e, g.dtype, kernel), args, tile_h * tile_w, TEENY_KERNEL_ORIGIN);
}

}  // namespace

OpTuning conv_tuning() {
  OpTuning tuning;
  tuning.dims = [](const OpContext& ctx) {
    const TensorType& x = ctx.inputs.at(0);
    return std::vector<std::pair<std::string, Expr>>{{"B", x.shape[0]}, {"H", x.shape[2]}, {"W", x.shape[3]}};
  };
  tuning.variants = [](const OpContext& ctx) {
    if (conv_geometry("conv2d", ctx).depthwise()) return std::vector<OpVariant>{};
    return std::vector<OpVariant>{{kConvMmaVariant}, {kConvSimtVariant}};
  };
  return tuning;
}

Lowering lower_conv(const std::string& op, const ConvGeometry& g, const std::string& weight_slot,
                    const std::string& bias_slot, const ConvEpilogue& epilogue) {
  if (epilogue.residual && !epilogue.bn) throw Error("lower_conv: a residual comes after a batch norm");
  if (!g.variant.empty() && (g.depthwise() || (g.variant != kConvMmaVariant && g.variant != kConvSimtVariant)))
    throw OpError("op", fmt::format("a {}conv has no variant '{}'", g.depthwise() ? "depthwise " : "", g.variant));
  std::vector<KernelArg> args = {input(0, "x", g.dtype)};
  if (epilogue.residual) args.push_back(input(1, "residual", g.dtype));
  args.push_back(param(weight_slot, "weight", g.dtype));
  int64_t channel_params = 0;
  for (KernelArg& arg : epilogue_params(epilogue, bias_slot, g.dtype)) {
    channel_params += arg.kind == ArgKind::kParam;
    args.push_back(std::move(arg));
  }
  args.push_back(output("y", g.dtype));
  if (!g.depthwise()) args.push_back(i32("batch", g.batch));  // the depthwise grid covers the batch
  args.push_back(i32("in_h", g.in_h));
  args.push_back(i32("in_w", g.in_w));
  args.push_back(i32("out_h", g.out_h));
  args.push_back(i32("out_w", g.out_w));

  Lowering lowering;
  Launch launch;
  launch.args = args;
  const Expr elem(static_cast<int64_t>(dtype_size(g.dtype)));
  launch.bytes = conv_bytes(g) + elem * Expr(channel_params * g.a.out_channels) +
                 (epilogue.residual ? elem * product(g.output_shape()) : Expr(0));
  launch.flops = conv_flops(g);
  // Each kernel with its launch: `threads` a block, over `grid`, where `when` holds.
  auto add = [&](KernelSource kernel, int threads, std::array<Expr, 3> grid, Expr when) {
    launch.kernel = static_cast<int>(lowering.kernels.size());
    launch.block = {threads, 1, 1};
    launch.grid = std::move(grid);
    launch.when = std::move(when);
    lowering.kernels.push_back(std::move(kernel));
    lowering.launches.push_back(launch);
  };
  if (g.depthwise()) {
    // Tiles sized to the feature map (when known) so small maps do not idle most threads.
    const int tile_w = std::clamp(pow2_at_least(g.out_w.const_value().value_or(32)), 8, 32);
    const int tile_h = std::clamp(pow2_at_least(g.out_h.const_value().value_or(256)), 32 / tile_w, 256 / tile_w);
    add(depthwise_kernel(op, g, epilogue, args, tile_h, tile_w), tile_h * tile_w,
        {g.batch * Expr(g.a.out_channels), ceil_div(g.out_h, Expr(tile_h)) * ceil_div(g.out_w, Expr(tile_w)), Expr(1)},
        Expr(1));
  } else if (g.variant != kConvMmaVariant) {
    const ConvTile tile = choose_conv_tile(g);
    add(implicit_gemm_kernel(op, g, tile, epilogue, args), tile.threads(),
        conv_gemm_grid(g, tile.block_co, tile.block_p), Expr(1));
  } else {
    // The batch is usually symbolic: the tile is chosen for one image, so that B = 1 fills the
    // GPU, and where the tallest tile alone makes a wave, it takes over (X gathered fewer times).
    const ConvMmaTile first = choose_conv_mma_tile(g, g.batch.const_value().value_or(1));
    const ConvMmaTile tallest = choose_conv_mma_tile(g, kManyImages);
    const std::array<Expr, 3> first_grid = conv_gemm_grid(g, first.block_co, first.block_p);
    if (g.batch.const_value() || tallest == first) {
      add(mma_kernel(op, g, first, epilogue, args), first.threads(), first_grid, Expr(1));
    } else {
      const Expr tallest_runs = le(Expr(kTargetCtas), conv_ctas(g, tallest.block_co, tallest.block_p));
      add(mma_kernel(op, g, first, epilogue, args), first.threads(), first_grid, Expr(1) - tallest_runs);
      add(mma_kernel(op, g, tallest, epilogue, args), tallest.threads(),
          conv_gemm_grid(g, tallest.block_co, tallest.block_p), tallest_runs);
    }
  }
  return lowering;
}

std::vector<double> conv_reference(const ConvAttrs& a, const HostTensor& x, const HostTensor& weight,
                                   const std::vector<int64_t>& output_shape) {
  const int64_t batch = x.shape[0], channels = x.shape[1], in_h = x.shape[2], in_w = x.shape[3];
  const int64_t out_c = output_shape[1], out_h = output_shape[2], out_w = output_shape[3];
  const int64_t cg = channels / a.groups, cog = out_c / a.groups;
  std::vector<double> y(batch * out_c * out_h * out_w);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t co = 0; co < out_c; ++co)
      for (int64_t oh = 0; oh < out_h; ++oh)
        for (int64_t ow = 0; ow < out_w; ++ow) {
          double acc = 0.0;
          for (int64_t c = 0; c < cg; ++c) {
            const int64_t ci = (co / cog) * cg + c;
            for (int64_t kh = 0; kh < a.kh; ++kh)
              for (int64_t kw = 0; kw < a.kw; ++kw) {
                const int64_t ih = oh * a.sh - a.ph + kh * a.dh, iw = ow * a.sw - a.pw + kw * a.dw;
                if (ih < 0 || ih >= in_h || iw < 0 || iw >= in_w) continue;
                acc += x.data[((b * channels + ci) * in_h + ih) * in_w + iw] *
                       weight.data[((co * cg + c) * a.kh + kh) * a.kw + kw];
              }
          }
          y[((b * out_c + co) * out_h + oh) * out_w + ow] = acc;
        }
  return y;
}

}  // namespace teeny::ops
