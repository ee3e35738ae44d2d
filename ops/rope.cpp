// rope: rotary position embedding on x [N, S, D] (split_heads's layout, N = batch x heads), as
// Hugging Face's apply_rotary_pos_emb applies it (rotate_half: pair i is (i, i + D/2)) at
// positions offset + s. The kernel (ops/kernels/rope.cuh) gives each thread one (s, i), whose
// cos and sin it computes once from an f64 angle and applies to every row n; reads honour a
// padded input row stride, the output is contiguous.
#include <cmath>

#include <fmt/format.h>

#include "core/autodiff.h"
#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kThreads = 256;

std::vector<AttrSpec> rope_attrs() {
  AttrSpec theta = attr_spec("theta", AttrType::kFloat, "base of the frequencies theta^(-2i/D)", 10000.0);
  theta.min_value = 0.0;
  theta.min_exclusive = true;
  AttrSpec offset = attr_spec("offset", AttrType::kInt, "position of the first of the S rows", 0);
  offset.min_value = 0;
  offset.max_value = 2147483647;
  return {theta, offset, attr_spec("inverse", AttrType::kBool, "rotate by the negated angle (the gradient)", false)};
}

int64_t head_dim(const TensorType& x) { return *x.shape[2].const_value(); }

TensorType infer_rope(const OpDef& meta, const OpContext& ctx) {
  const TensorType& x = ctx.inputs.at(0);
  if (x.shape.size() != 3)
    throw OpError("inputs", fmt::format("rope needs x of shape [N, S, D]; got {}", shape_str(x.shape)));
  output_float_dtype(meta, ctx, x.dtype);
  const auto dim = x.shape[2].const_value();
  if (!dim)
    throw OpError("inputs", fmt::format("rope needs a constant head dim D (x's last dim); got {}", x.shape[2].str()));
  if (*dim % 2 != 0)
    throw OpError("inputs", fmt::format("rope needs an even head dim D (x's last dim), to rotate the pairs "
                                        "(i, i + D/2); got {}",
                                        *dim));
  return contiguous(x.dtype, x.shape);
}

// log2(theta) as two f32 (kernel arguments carry no f64): hi + lo holds it to about 2^-48.
std::pair<float, float> log2_theta_parts(double theta) {
  const double log2_theta = std::log2(theta);
  const float hi = static_cast<float>(log2_theta);
  return {hi, static_cast<float>(log2_theta - hi)};
}

Lowering lower_rope(const OpContext& ctx) {
  const TensorType& x = ctx.inputs.at(0);
  const DType dtype = x.dtype;
  const int64_t dim = head_dim(x);
  const Expr pairs = x.shape[1] * Expr(dim / 2);
  const auto [hi, lo] = log2_theta_parts(ctx.attrs.real("theta"));

  Launch launch;
  launch.args = {input(0, "x", dtype),
                 output("y", dtype),
                 i32("N", x.shape[0]),
                 i32("S", x.shape[1]),
                 i32("D", Expr(dim)),
                 i32("ldx", x.row_stride),
                 i32("offset", Expr(ctx.attrs.integer("offset"))),
                 f32("log2_theta_hi", hi),
                 f32("log2_theta_lo", lo),
                 f32("sin_sign", ctx.attrs.boolean("inverse") ? -1.0 : 1.0)};
  launch.block = {kThreads, 1, 1};
  // Blocks over (s, i); rows split over grid y only as far as it takes to fill the device once
  // (2048 threads an SM), so each thread's cos and sin serve as many rows as possible.
  const Expr pair_blocks = ceil_div(pairs, Expr(kThreads));
  const Expr one_wave = device_sms() * Expr(2048 / kThreads);
  launch.grid = {pair_blocks, min(x.shape[0], ceil_div(one_wave, pair_blocks)), Expr(1)};
  const Expr elements = product(ctx.output.shape);
  launch.bytes = Expr(2) * elements * Expr(static_cast<int64_t>(dtype_size(dtype)));
  launch.flops = Expr(3) * elements;

  KernelSource kernel =
      template_kernel(fmt::format("rope_{}", dtype_name(dtype)), "rope.cuh",
                      fmt::format("tn_rope<{}>", dtype_c_type(dtype)), launch.args, kThreads, TEENY_KERNEL_ORIGIN);
  return Lowering{{kernel}, {launch}};
}

// y[n, s, i] and y[n, s, i + D/2] from the pair's rotation by (offset + s) theta^(-2i/D), in f64.
HostTensor rope_reference(const RefContext& ref) {
  const HostTensor& x = ref.inputs.at(0);
  const int64_t rows = x.shape[0], seq = x.shape[1], dim = x.shape[2], half = dim / 2;
  const double theta = ref.op.attrs.real("theta");
  const double sign = ref.op.attrs.boolean("inverse") ? -1.0 : 1.0;
  const int64_t offset = ref.op.attrs.integer("offset");
  HostTensor y{ref.op.output.dtype, ref.output_shape, std::vector<double>(x.data.size())};
  for (int64_t s = 0; s < seq; ++s) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(offset + s) * std::pow(theta, -2.0 * i / dim);
      const double c = std::cos(angle), sn = sign * std::sin(angle);
      for (int64_t n = 0; n < rows; ++n) {
        const int64_t at = (n * seq + s) * dim + i;
        const double a = x.data[at], b = x.data[at + half];
        y.data[at] = a * c - b * sn;
        y.data[at + half] = b * c + a * sn;
      }
    }
  }
  return y;
}

std::vector<ConformanceCase> rope_cases() {
  std::vector<ConformanceCase> cases;
  const std::vector<Bindings> sizes = {{{"N", 1}, {"S", 1}},
                                       {{"N", 3}, {"S", 7}},
                                       {{"N", 2}, {"S", 1000}},
                                       {{"N", 5}, {"S", 4097}},
                                       {{"N", 1200}, {"S", 3}}};
  for (DType dtype : float_dtypes()) {
    const std::string dt = dtype_name(dtype);
    for (int dim : {64, 128}) {
      const std::string shape = fmt::format("[N, S, {}]", dim);
      cases.push_back({fmt::format("{} {}", shape, dt),
                       case_graph({"N", "S"}, {{"x", dtype, shape}}, {{"y", "rope", {"x"}}}), sizes});
    }
    cases.push_back({"[N, S, 2] theta 500000, offset 100000, inverse " + dt,
                     case_graph({"N", "S"}, {{"x", dtype, "[N, S, 2]"}},
                                {{"y", "rope", {"x"}, {{"theta", 500000.0}, {"offset", 100000}, {"inverse", true}}}}),
                     sizes});
    cases.push_back({"padded input (linear 18 of 20/24) " + dt,
                     case_graph({"N", "S"}, {{"x", dtype, "[N, S, 8]"}},
                                {{"p", "linear", {"x"}, {{"out_features", 18}}}, {"y", "rope", {"p"}}}),
                     {{{"N", 1}, {"S", 1}}, {{"N", 3}, {"S", 129}}}});
  }
  return cases;
}

}  // namespace

OpDef rope_op() {
  OpDef def;
  def.name = "rope";
  def.doc = "rotary position embedding on x [N, S, D] (rotate_half pairs (i, i + D/2)), positions offset + s";
  def.inputs = {{"x", "[N, S, D], D even"}};
  def.attrs = rope_attrs();
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_rope(meta, ctx); };
  def.lower = lower_rope;
  def.reference = rope_reference;
  // A rotation per pair: its gradient is the transpose, the rotation by the negated angle.
  def.backward = [](GradBuilder& g) {
    const Attrs& attrs = g.ctx().attrs;
    g.input_grad(0, g.add("rope", {g.grad_output()},
                          {{"theta", attrs.real("theta")},
                           {"offset", attrs.integer("offset")},
                           {"inverse", !attrs.boolean("inverse")}}));
  };
  def.conformance_cases = rope_cases;
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
