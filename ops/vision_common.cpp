#include "ops/vision_common.h"

#include <fmt/format.h>

#include <algorithm>

#include "ops/conformance.h"
#include "ops/kernel_util.h"

namespace teeny::ops {

std::vector<AttrSpec> conv_attr_specs() {
  const auto one = nlohmann::json(1);
  return {
      {"out_channels", AttrType::kInt, "output channels (Co)", std::nullopt, {}, false, 1.0},
      {"kernel_size", AttrType::kIntPair, "kernel size: n or [kH, kW]", std::nullopt, {}, false, {}},
      {"stride", AttrType::kIntPair, "stride: n or [sH, sW]", one, {}, false, {}},
      {"padding", AttrType::kIntPair, "zero padding: n or [pH, pW]", nlohmann::json(0), {}, false, {}},
      {"dilation", AttrType::kIntPair, "dilation: n or [dH, dW]", one, {}, false, {}},
      {"groups", AttrType::kInt, "channel groups; groups = C is depthwise", one, {}, false, 1.0},
  };
}

ConvAttrs conv_attrs(const Attrs& attrs) {
  ConvAttrs a;
  a.out_channels = attrs.i("out_channels");
  a.groups = attrs.i("groups");
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

void require_at_least(const std::string& name, int64_t h, int64_t w, int64_t min) {
  if (h < min || w < min)
    throw OpError("attrs." + name, fmt::format("{} must be >= {}, got [{}, {}]", name, min, h, w));
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
    out.push_back({c.label, case_graph(c.dims, {{"x", DType::kF32, c.shape}}, {{"y", op, {"x"}, c.attrs, ""}}),
                   c.bindings});
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
  g.in_channels = *channels;
  const ConvAttrs& a = g.a;
  require_at_least("kernel_size", a.kh, a.kw, 1);
  require_at_least("stride", a.sh, a.sw, 1);
  require_at_least("padding", a.ph, a.pw, 0);
  require_at_least("dilation", a.dh, a.dw, 1);
  if (g.in_channels % a.groups != 0)
    throw OpError("attrs.groups",
                  fmt::format("in_channels {} is not divisible by groups {}", g.in_channels, a.groups));
  if (a.out_channels % a.groups != 0)
    throw OpError("attrs.groups",
                  fmt::format("out_channels {} is not divisible by groups {}", a.out_channels, a.groups));
  g.batch = x.shape[0];
  g.in_h = x.shape[2];
  g.in_w = x.shape[3];
  g.out_h = window_extent("height", g.in_h, a.kh, a.sh, a.ph, a.dh);
  g.out_w = window_extent("width", g.in_w, a.kw, a.sw, a.pw, a.dw);
  return g;
}

Expr conv_flops(const ConvGeometry& g) {
  return Expr(2 * g.reduction()) * product(g.output_shape());
}

Expr conv_bytes(const ConvGeometry& g) {
  const Expr in = g.batch * Expr(g.in_channels) * g.in_h * g.in_w;
  return Expr(4) * (in + product(g.weight_shape()) + product(g.output_shape()));
}

namespace {

// ---- epilogue --------------------------------------------------------------------------------

std::vector<KernelArg> epilogue_args(const ConvEpilogue& e) {
  switch (e.kind) {
    case ConvEpilogue::kNone: return {};
    case ConvEpilogue::kBias: return {param("bias", "bias", DType::kF32)};
    case ConvEpilogue::kBnSilu:
      return {param("bn.weight", "bn_weight", DType::kF32), param("bn.bias", "bn_bias", DType::kF32),
              param("bn.running_mean", "bn_mean", DType::kF32),
              param("bn.running_var", "bn_var", DType::kF32), f32("eps", e.eps)};
  }
  return {};
}

// Device code defining `scale` and `shift` for output channel `co`.
const char* epilogue_channel_code(const ConvEpilogue& e) {
  switch (e.kind) {
    case ConvEpilogue::kNone: return "";
    case ConvEpilogue::kBias: return "const float shift = __ldg(bias + co);";
    case ConvEpilogue::kBnSilu:
      // Inference batch norm folded per channel; sqrtf (IEEE) rather than rsqrtf to stay
      // within float rounding of PyTorch.
      return "const float scale = __ldg(bn_weight + co) / sqrtf(__ldg(bn_var + co) + eps);\n"
             "      const float shift = __ldg(bn_bias + co) - __ldg(bn_mean + co) * scale;";
  }
  return "";
}

// Device expression turning accumulator `acc` into the output value.
const char* epilogue_value(const ConvEpilogue& e) {
  switch (e.kind) {
    case ConvEpilogue::kNone: return "acc";
    case ConvEpilogue::kBias: return "acc + shift";
    case ConvEpilogue::kBnSilu: return "tn_silu(fmaf(acc, scale, shift))";
  }
  return "acc";
}

const char* kSiluDevice = R"CUDA(
__device__ __forceinline__ float tn_silu(float v) { return v / (1.f + expf(-v)); }
)CUDA";

std::string epilogue_tag(const ConvEpilogue& e) {
  switch (e.kind) {
    case ConvEpilogue::kNone: return "";
    case ConvEpilogue::kBias: return "_bias";
    case ConvEpilogue::kBnSilu: return "_bnsilu";
  }
  return "";
}

std::string geometry_constants(const ConvGeometry& g) {
  const ConvAttrs& a = g.a;
  std::string s;
  s += kernel_constant("C_IN", g.in_channels) + kernel_constant("CO", a.out_channels);
  s += kernel_constant("CG", g.cin_per_group()) + kernel_constant("COG", g.cout_per_group());
  s += kernel_constant("KH", a.kh) + kernel_constant("KW", a.kw);
  s += kernel_constant("SH", a.sh) + kernel_constant("SW", a.sw);
  s += kernel_constant("PH", a.ph) + kernel_constant("PW", a.pw);
  s += kernel_constant("DH", a.dh) + kernel_constant("DW", a.dw);
  return s;
}

int pow2_at_least(int64_t n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// ---- implicit GEMM ---------------------------------------------------------------------------
//
// Per group: y[co, n] = sum_k W[co, k] * X[k, n] with n = (b, oh, ow) flattened over the batch and
// k = (c, kh, kw); X is gathered from x on the fly (im2col never materialised). A CTA computes a
// BLOCK_CO x BLOCK_P output tile; each thread a THREAD_CO x THREAD_P register block of adjacent
// channels and adjacent pixels, so both operands come from shared memory as vectors (16-byte
// loads for 4 values) and a warp's stores cover consecutive addresses. Shared-memory tiles are
// double-buffered: the next K slice is fetched into registers while the current one is consumed.
struct GemmTile {
  int block_co, block_p, block_k, thread_co, thread_p;
  int threads() const { return (block_co / thread_co) * (block_p / thread_p); }
};

// Tiles from large to small, all 128 threads (the tile constants, not the block, set the work
// per CTA). A single image should still fill the GPU: the batch is usually symbolic, so tiles
// are sized for one image, and larger batches only add CTAs.
GemmTile choose_gemm_tile(const ConvGeometry& g) {
  static const GemmTile kMenu[] = {
      {64, 64, 16, 8, 4}, {32, 64, 16, 4, 4}, {32, 32, 16, 4, 2}, {16, 64, 16, 2, 4}, {8, 64, 16, 1, 4}};
  const GemmTile& smallest = kMenu[std::size(kMenu) - 1];
  // About one wave of the largest sm_90 part. The tile is a constant of the kernel's source, so
  // it is chosen from the shape alone when compiling, not per device: a GPU with fewer SMs runs
  // the same CTAs in more waves.
  constexpr int64_t kTargetCtas = 132;
  const int64_t images = g.batch.const_value().value_or(1);
  const int64_t pixels = images * (g.out_h * g.out_w).const_value().value_or(64 * 64);
  const int64_t cog = g.cout_per_group();
  const int64_t co_cap = pow2_at_least(cog);
  const GemmTile* chosen = nullptr;
  for (const GemmTile& t : kMenu) {
    if (t.block_co > co_cap && t.block_co > smallest.block_co) continue;  // taller than Co
    if (chosen && t.block_co < std::min<int64_t>(co_cap, 16)) break;      // thinner than needed
    chosen = &t;
    const int64_t ctas = (cog + t.block_co - 1) / t.block_co * ((pixels + t.block_p - 1) / t.block_p);
    if (ctas * g.a.groups >= kTargetCtas) break;
  }
  return *chosen;
}

KernelSource implicit_gemm_kernel(const std::string& op, const ConvGeometry& g, const GemmTile& t,
                                  const ConvEpilogue& e, const std::vector<KernelArg>& args) {
  const bool pointwise = g.pointwise();
  // 16-byte pixel loads need each image's plane to be a multiple of 4 pixels.
  const auto hw = (g.out_h * g.out_w).const_value();
  const int vec = pointwise && hw && *hw % 4 == 0 ? 4 : 1;

  std::string loader;
  if (pointwise) {
    loader = R"CUDA(
  // 1x1 GEMM path: X[k, n] is x[img, group*CG + k, p] directly.
  const float* x_pix = x + ((long long)img * C_IN + group * CG) * hw_out + pix;
)CUDA";
  } else {
    loader = R"CUDA(
  const int oh = pix / out_w, ow = pix - oh * out_w;
  const int ih0 = oh * SH - PH, iw0 = ow * SW - PW;
  const float* x_img = x + ((long long)img * C_IN + group * CG) * in_h * in_w;
)CUDA";
  }

  std::string load_b;
  if (pointwise && vec == 4) {
    load_b = R"CUDA(
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (n_ok && k < K_TOTAL) {
        const float* p = x_pix + (long long)k * hw_out;
        if (x_aligned) v = __ldg(reinterpret_cast<const float4*>(p));
        else v = make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
      }
      b_reg[i] = v;)CUDA";
  } else if (pointwise) {
    load_b = R"CUDA(
      b_reg[i] = n_ok && k < K_TOTAL ? __ldg(x_pix + (long long)k * hw_out) : 0.f;)CUDA";
  } else {
    load_b = R"CUDA(
      float v = 0.f;
      if (n_ok && k < K_TOTAL) {
        const int c = k / KHW, r = k - c * KHW;
        const int kh = r / KW, kw = r - kh * KW;
        const int ih = ih0 + kh * DH, iw = iw0 + kw * DW;
        if ((unsigned)ih < (unsigned)in_h && (unsigned)iw < (unsigned)in_w)
          v = __ldg(x_img + ((long long)c * in_h + ih) * in_w + iw);
      }
      b_reg[i] = v;)CUDA";
  }
  const std::string store_b = vec == 4
      ? "*reinterpret_cast<float4*>(&b_tile[s][b_row + i * B_ROW_STEP][b_col]) = b_reg[i];"
      : "b_tile[s][b_row + i * B_ROW_STEP][b_col] = b_reg[i];";

  std::string src = kernel_prelude() + kSiluDevice;
  src += "// " + op + ": implicit-GEMM convolution (ops/vision_common.cpp)\n";
  src += geometry_constants(g);
  src += kernel_constant("BLOCK_CO", t.block_co) + kernel_constant("BLOCK_P", t.block_p);
  src += kernel_constant("BLOCK_K", t.block_k) + kernel_constant("THREAD_CO", t.thread_co);
  src += kernel_constant("THREAD_P", t.thread_p) + kernel_constant("VEC", vec);
  src += fmt::format(R"CUDA(constexpr int KHW = KH * KW;
constexpr int K_TOTAL = CG * KHW;
constexpr int P_THREADS = BLOCK_P / THREAD_P;
constexpr int THREADS = (BLOCK_CO / THREAD_CO) * P_THREADS;
constexpr int A_M_STEP = THREADS / BLOCK_K;
constexpr int A_LOADS = BLOCK_CO / A_M_STEP;
constexpr int B_COLS = BLOCK_P / VEC;
constexpr int B_ROW_STEP = THREADS / B_COLS;
constexpr int B_LOADS = BLOCK_K / B_ROW_STEP;
static_assert(THREADS % BLOCK_K == 0 && BLOCK_CO % A_M_STEP == 0, "A tile loader");
static_assert(THREADS % B_COLS == 0 && BLOCK_K % B_ROW_STEP == 0, "B tile loader");
typedef {b_type} BVec;

{entry} {{
  __shared__ __align__(16) float a_tile[2][BLOCK_K][BLOCK_CO + 4];
  __shared__ __align__(16) float b_tile[2][BLOCK_K][BLOCK_P + 4];
  const int tid = threadIdx.x;
  const int group = blockIdx.z;
  const int m0 = blockIdx.y * BLOCK_CO;
  const int hw_out = out_h * out_w;
  const long long n_total = (long long)batch * hw_out;
  const long long n0 = (long long)blockIdx.x * BLOCK_P;
  const float* w_group = weight + (long long)group * COG * K_TOTAL;
  const bool x_aligned = tn_aligned16(x);

  // This thread's share of the tile loads: A at (a_m + i*A_M_STEP, a_k), B at (b_row + i*B_ROW_STEP, b_col).
  const int a_k = tid % BLOCK_K, a_m = tid / BLOCK_K;
  const int b_col = (tid % B_COLS) * VEC, b_row = tid / B_COLS;
  const long long n_load = n0 + b_col;
  const bool n_ok = n_load < n_total;
  const int img = n_ok ? (int)(n_load / hw_out) : 0;
  const int pix = n_ok ? (int)(n_load - (long long)img * hw_out) : 0;
{loader}
  float a_reg[A_LOADS];
  BVec b_reg[B_LOADS];
  auto load_tiles = [&](int k0) {{
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {{
      const int m = m0 + a_m + i * A_M_STEP, k = k0 + a_k;
      a_reg[i] = m < COG && k < K_TOTAL ? __ldg(w_group + (long long)m * K_TOTAL + k) : 0.f;
    }}
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {{
      const int k = k0 + b_row + i * B_ROW_STEP;{load_b}
    }}
  }};
  auto store_tiles = [&](int s) {{
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) a_tile[s][a_k][a_m + i * A_M_STEP] = a_reg[i];
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {store_b}
  }};

  const int tx = tid % P_THREADS, ty = tid / P_THREADS;
  float accs[THREAD_CO][THREAD_P];
#pragma unroll
  for (int i = 0; i < THREAD_CO; ++i)
#pragma unroll
    for (int j = 0; j < THREAD_P; ++j) accs[i][j] = 0.f;

  load_tiles(0);
  store_tiles(0);
  __syncthreads();
  int stage = 0;
  for (int k0 = 0; k0 < K_TOTAL; k0 += BLOCK_K) {{
    const bool more = k0 + BLOCK_K < K_TOTAL;
    if (more) load_tiles(k0 + BLOCK_K);
#pragma unroll
    for (int kk = 0; kk < BLOCK_K; ++kk) {{
      float a[THREAD_CO], b[THREAD_P];
#pragma unroll
      for (int i = 0; i < THREAD_CO; ++i) a[i] = a_tile[stage][kk][ty * THREAD_CO + i];
#pragma unroll
      for (int j = 0; j < THREAD_P; ++j) b[j] = b_tile[stage][kk][tx * THREAD_P + j];
#pragma unroll
      for (int i = 0; i < THREAD_CO; ++i)
#pragma unroll
        for (int j = 0; j < THREAD_P; ++j) accs[i][j] = fmaf(a[i], b[j], accs[i][j]);
    }}
    if (more) {{
      store_tiles(stage ^ 1);
      __syncthreads();
      stage ^= 1;
    }}
  }}

  long long out_off[THREAD_P];  // y offset of each pixel without the channel term; -1 = outside
#pragma unroll
  for (int j = 0; j < THREAD_P; ++j) {{
    const long long n = n0 + tx * THREAD_P + j;
    const long long im = n / hw_out;
    out_off[j] = n < n_total ? im * CO * hw_out + (n - im * hw_out) : -1;
  }}
#pragma unroll
  for (int i = 0; i < THREAD_CO; ++i) {{
    const int m = m0 + ty * THREAD_CO + i;
    if (m < COG) {{
      const int co = group * COG + m;
      {channel}
#pragma unroll
      for (int j = 0; j < THREAD_P; ++j) {{
        const float acc = accs[i][j];
        if (out_off[j] >= 0) y[out_off[j] + (long long)co * hw_out] = {value};
      }}
    }}
  }}
}}
)CUDA",
                     fmt::arg("b_type", vec == 4 ? "float4" : "float"), fmt::arg("entry", kernel_entry(args, t.threads())),
                     fmt::arg("loader", loader), fmt::arg("load_b", load_b), fmt::arg("store_b", store_b),
                     fmt::arg("channel", epilogue_channel_code(e)), fmt::arg("value", epilogue_value(e)));
  const std::string path = pointwise ? "gemm1x1" : fmt::format("igemm_k{}x{}s{}x{}", g.a.kh, g.a.kw, g.a.sh, g.a.sw);
  return KernelSource{fmt::format("{}_{}_{}x{}{}", op, path, t.block_co, t.block_p, epilogue_tag(e)), src,
                      TEENY_KERNEL_ORIGIN};
}

// ---- depthwise -------------------------------------------------------------------------------
//
// groups == C: each output channel reads one input channel, so there is no reduction over
// channels to tile. A CTA computes a TILE_H x TILE_W output tile of one (image, channel) plane,
// one output per thread, from an input patch (with halo) staged once in shared memory.
KernelSource depthwise_kernel(const std::string& op, const ConvGeometry& g, const ConvEpilogue& e,
                              const std::vector<KernelArg>& args, int tile_h, int tile_w) {
  std::string src = kernel_prelude() + kSiluDevice;
  src += "// " + op + ": depthwise convolution (ops/vision_common.cpp)\n";
  src += geometry_constants(g);
  src += kernel_constant("TILE_H", tile_h) + kernel_constant("TILE_W", tile_w);
  src += fmt::format(R"CUDA(constexpr int THREADS = TILE_H * TILE_W;
constexpr int MULT = CO / C_IN;  // output channels per input channel
constexpr int PATCH_H = (TILE_H - 1) * SH + (KH - 1) * DH + 1;
constexpr int PATCH_W = (TILE_W - 1) * SW + (KW - 1) * DW + 1;

{entry} {{
  __shared__ float patch[PATCH_H * PATCH_W];
  const int tid = threadIdx.x;
  const int plane = blockIdx.x;  // img * CO + co
  const int co = plane % CO, img = plane / CO;
  const int tiles_w = (out_w + TILE_W - 1) / TILE_W;
  const int oh0 = (blockIdx.y / tiles_w) * TILE_H, ow0 = (blockIdx.y % tiles_w) * TILE_W;
  const int ih0 = oh0 * SH - PH, iw0 = ow0 * SW - PW;
  const float* x_plane = x + ((long long)img * C_IN + co / MULT) * in_h * in_w;
  for (int i = tid; i < PATCH_H * PATCH_W; i += THREADS) {{
    const int ih = ih0 + i / PATCH_W, iw = iw0 + i % PATCH_W;
    patch[i] = (unsigned)ih < (unsigned)in_h && (unsigned)iw < (unsigned)in_w
                   ? __ldg(x_plane + (long long)ih * in_w + iw) : 0.f;
  }}
  float w[KH * KW];
#pragma unroll
  for (int i = 0; i < KH * KW; ++i) w[i] = __ldg(weight + co * KH * KW + i);
  __syncthreads();

  const int ty = tid / TILE_W, tx = tid % TILE_W;
  const int oh = oh0 + ty, ow = ow0 + tx;
  if (oh >= out_h || ow >= out_w) return;
  float acc = 0.f;
#pragma unroll
  for (int kh = 0; kh < KH; ++kh)
#pragma unroll
    for (int kw = 0; kw < KW; ++kw)
      acc = fmaf(patch[(ty * SH + kh * DH) * PATCH_W + tx * SW + kw * DW], w[kh * KW + kw], acc);
  {channel}
  y[(long long)plane * out_h * out_w + oh * out_w + ow] = {value};
}}
)CUDA",
                     fmt::arg("entry", kernel_entry(args, tile_h * tile_w)), fmt::arg("channel", epilogue_channel_code(e)),
                     fmt::arg("value", epilogue_value(e)));
  return KernelSource{fmt::format("{}_dw_k{}x{}s{}x{}_{}x{}{}", op, g.a.kh, g.a.kw, g.a.sh, g.a.sw, tile_h, tile_w,
                                  epilogue_tag(e)),
                      src, TEENY_KERNEL_ORIGIN};
}

}  // namespace

Lowering lower_conv(const std::string& op, const ConvGeometry& g, const std::string& weight_slot,
                    const ConvEpilogue& epilogue) {
  std::vector<KernelArg> args = {input(0, "x", DType::kF32), param(weight_slot, "weight", DType::kF32)};
  int64_t channel_params = 0;
  for (KernelArg& arg : epilogue_args(epilogue)) {
    channel_params += arg.kind == ArgKind::kParam;
    args.push_back(std::move(arg));
  }
  args.push_back(output("y", DType::kF32));
  if (!g.depthwise()) args.push_back(i32("batch", g.batch));  // the depthwise grid covers the batch
  args.push_back(i32("in_h", g.in_h));
  args.push_back(i32("in_w", g.in_w));
  args.push_back(i32("out_h", g.out_h));
  args.push_back(i32("out_w", g.out_w));

  Lowering lowering;
  Launch launch;
  if (g.depthwise()) {
    // Tiles sized to the feature map (when known) so small maps do not idle most threads.
    const int tile_w = std::clamp(pow2_at_least(g.out_w.const_value().value_or(32)), 8, 32);
    const int tile_h =
        std::clamp(pow2_at_least(g.out_h.const_value().value_or(256)), 32 / tile_w, 256 / tile_w);
    lowering.kernels.push_back(depthwise_kernel(op, g, epilogue, args, tile_h, tile_w));
    launch.block = {tile_h * tile_w, 1, 1};
    launch.grid = {g.batch * Expr(g.a.out_channels),
                   ceil_div(g.out_h, Expr(tile_h)) * ceil_div(g.out_w, Expr(tile_w)), Expr(1)};
  } else {
    const GemmTile tile = choose_gemm_tile(g);
    lowering.kernels.push_back(implicit_gemm_kernel(op, g, tile, epilogue, args));
    launch.block = {tile.threads(), 1, 1};
    launch.grid = {ceil_div(g.batch * g.out_h * g.out_w, Expr(tile.block_p)),
                   Expr((g.cout_per_group() + tile.block_co - 1) / tile.block_co), Expr(g.a.groups)};
  }
  launch.args = std::move(args);
  launch.bytes = conv_bytes(g) + Expr(4 * channel_params * g.a.out_channels);
  launch.flops = conv_flops(g);
  lowering.launches.push_back(std::move(launch));
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
