// grad.batchnorm2d_dx, grad.batchnorm2d_dweight (ops.md, "Gradients"): batchnorm2d's backward in
// training mode, over dy and x [B, C, H, W], the batch statistics recomputed from x (mean, biased
// var, x̂ = (x - mean) / sqrt(var + eps)). With n = B * H * W values per channel:
//   dx = weight / sqrt(var + eps) * (dy - Σdy / n - x̂ Σ(dy x̂) / n)
//   dweight = Σ dy x̂
// the sums per channel. Launches (ops/kernels/batchnorm_train.cuh): the statistics, then for dx
// the channel sums and one element per thread, for dweight the sums written as the output. Every
// sum in a fixed order: the same bits on every run.
#include <fmt/format.h>

#include <cmath>

#include "ops/batchnorm_common.h"
#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/vision_common.h"

namespace teeny::ops {
namespace {

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  const TensorType& dy = ctx.inputs[0];
  const TensorType& x = ctx.inputs[1];
  check_nchw(def.name, x);
  if (dy.shape != x.shape || is_padded(dy))
    throw OpError("inputs", fmt::format("{} needs dy and x of one shape [B, C, H, W], both contiguous; got {} and {}",
                                        def.name, shape_str(dy.shape), shape_str(x.shape)));
  check_batch_statistics(def.name, x);
  const bool dx = def.name == "grad.batchnorm2d_dx";
  return contiguous(output_float_dtype(def, ctx, dtype), dx ? x.shape : Shape{x.shape[1]});
}

// The channel sums' launch: into scratch "sums" (dx) or the output (dweight).
Launch channel_sums(Lowering& lowering, const OpContext& ctx, bool into_output) {
  const TensorType& x = ctx.inputs[1];
  const Shape& s = x.shape;
  const DType dtype = x.dtype;
  Launch launch;
  launch.args = {input(0, "dy", dtype),
                 input(1, "x", dtype),
                 stats_arg(),
                 into_output ? output("dweight", dtype) : scratch("sums", "sums", DType::kF32),
                 i32("batch", s[0]),
                 i32("channels", s[1]),
                 i32("plane", s[2] * s[3])};
  const std::string function = into_output ? "tn_bn_dweight" : "tn_bn_grad_sums";
  lowering.kernels.push_back(template_kernel(
      fmt::format("grad_batchnorm2d_{}_{}", into_output ? "dweight" : "sums", dtype_name(dtype)), "batchnorm_train.cuh",
      fmt::format("{}<{}, {}>", function, dtype_c_type(dtype), kBatchNormThreads), launch.args, kBatchNormThreads,
      TEENY_KERNEL_ORIGIN));
  launch.kernel = static_cast<int>(lowering.kernels.size()) - 1;
  launch.block = {kBatchNormThreads, 1, 1};
  launch.grid = {s[1], Expr(1), Expr(1)};
  launch.bytes = Expr(4 * static_cast<int64_t>(dtype_size(dtype))) * product(s);
  launch.flops = Expr(4) * product(s);
  return launch;
}

Lowering lower_dx(const OpContext& ctx) {
  const TensorType& x = ctx.inputs[1];
  const Shape& s = x.shape;
  const DType dtype = x.dtype;
  Lowering lowering;
  add_batch_stats(lowering, ctx, 1, "grad_batchnorm2d");
  lowering.scratch.push_back({"sums", DType::kF32, Expr(2) * s[1]});
  lowering.launches.push_back(channel_sums(lowering, ctx, false));
  Launch apply;
  apply.args = {input(0, "dy", dtype),
                input(1, "x", dtype),
                param("weight", "weight", dtype),
                stats_arg(),
                scratch("sums", "sums", DType::kF32),
                output("dx", dtype),
                i64("count", product(s)),
                i32("plane", s[2] * s[3]),
                i32("channels", s[1]),
                i64("n", s[0] * s[2] * s[3])};
  lowering.kernels.push_back(
      template_kernel(fmt::format("grad_batchnorm2d_dx_{}", dtype_name(dtype)), "batchnorm_train.cuh",
                      fmt::format("tn_bn_train_dx<{}, {}>", dtype_c_type(dtype), kBatchNormThreads), apply.args,
                      kBatchNormThreads, TEENY_KERNEL_ORIGIN));
  apply.kernel = static_cast<int>(lowering.kernels.size()) - 1;
  apply.block = {kBatchNormThreads, 1, 1};
  apply.grid = {ceil_div(product(s), Expr(kBatchNormThreads)), Expr(1), Expr(1)};
  apply.bytes = Expr(3 * static_cast<int64_t>(dtype_size(dtype))) * product(s);
  apply.flops = Expr(6) * product(s);
  lowering.launches.push_back(std::move(apply));
  return lowering;
}

Lowering lower_dweight(const OpContext& ctx) {
  Lowering lowering;
  add_batch_stats(lowering, ctx, 1, "grad_batchnorm2d");
  lowering.launches.push_back(channel_sums(lowering, ctx, true));
  return lowering;
}

// x̂ and the per-channel sums Σdy, Σ dy x̂, in double.
struct GradSums {
  std::vector<double> xhat, rstd, sum_dy, sum_dy_xhat;
  int64_t count = 0;
};
GradSums grad_sums(const RefContext& ref) {
  const HostTensor& dy = ref.inputs.at(0);
  const HostTensor& x = ref.inputs.at(1);
  const double eps = ref.op.attrs.real("eps");
  const int64_t channels = x.shape[1], plane = x.shape[2] * x.shape[3];
  const ChannelMoments m = channel_moments(x);
  GradSums s{std::vector<double>(x.data.size()), std::vector<double>(channels), std::vector<double>(channels, 0.0),
             std::vector<double>(channels, 0.0), m.count};
  for (int64_t c = 0; c < channels; ++c) s.rstd[c] = 1 / std::sqrt(m.var[c] + eps);
  for (size_t i = 0; i < x.data.size(); ++i) {
    const size_t c = (i / plane) % channels;
    s.xhat[i] = (x.data[i] - m.mean[c]) * s.rstd[c];
    s.sum_dy[c] += dy.data[i];
    s.sum_dy_xhat[c] += dy.data[i] * s.xhat[i];
  }
  return s;
}

HostTensor reference_dx(const RefContext& ref) {
  const HostTensor& dy = ref.inputs.at(0);
  const std::vector<double>& weight = ref.params.at(0).data;
  const int64_t channels = dy.shape[1], plane = dy.shape[2] * dy.shape[3];
  const GradSums s = grad_sums(ref);
  const double n = static_cast<double>(s.count);
  HostTensor dx{ref.op.output.dtype, ref.output_shape, std::vector<double>(dy.data.size())};
  for (size_t i = 0; i < dy.data.size(); ++i) {
    const size_t c = (i / plane) % channels;
    dx.data[i] = weight[c] * s.rstd[c] * (dy.data[i] - s.sum_dy[c] / n - s.xhat[i] * s.sum_dy_xhat[c] / n);
  }
  return dx;
}

HostTensor reference_dweight(const RefContext& ref) {
  return {ref.op.output.dtype, ref.output_shape, grad_sums(ref).sum_dy_xhat};
}

std::vector<ConformanceCase> conformance_cases(const std::string& op) {
  std::vector<ConformanceCase> cases;
  const char* shapes[] = {"[B, 5, 1, 1]", "[B, 3, 7, 7]", "[B, 12, 17, 13]"};
  for (DType dtype : float_dtypes())
    for (const char* shape : shapes)
      cases.push_back(
          {fmt::format("{} {}", shape, dtype_name(dtype)),
           case_graph({"B"}, {{"dy", dtype, shape}, {"x", dtype, shape}}, {{"d", op, {"dy", "x"}, {{"eps", 1e-3}}}}),
           {{{"B", 2}}, {{"B", 5}}}});
  return cases;
}

OpDef grad_batchnorm2d_op(const std::string& name, const std::string& doc) {
  OpDef def;
  def.name = name;
  def.doc = doc;
  def.inputs = {{"dy", "dL/dy [B, C, H, W]"}, {"x", "the forward input [B, C, H, W]"}};
  def.attrs = {{"eps", AttrType::kFloat, "the forward node's eps", nlohmann::json(1e-5), {}, false, 0.0, true}};
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.conformance_cases = [name] { return conformance_cases(name); };
  return def;
}

}  // namespace

OpDef grad_batchnorm2d_dx_op() {
  OpDef def = grad_batchnorm2d_op(
      "grad.batchnorm2d_dx",
      "batchnorm2d's input gradient in training mode: weight / sqrt(var + eps) (dy - mean(dy) - x̂ mean(dy x̂)) per "
      "channel, the batch statistics recomputed from x");
  def.params = [](const OpContext& ctx) {
    return std::vector<ParamSpec>{
        {"weight", {ctx.inputs.at(1).shape.at(1)}, ctx.output.dtype, ParamInit::kTrained, {}}};
  };
  def.param_slots = {"weight"};
  def.lower = lower_dx;
  def.reference = reference_dx;
  return def;
}

OpDef grad_batchnorm2d_dweight_op() {
  OpDef def = grad_batchnorm2d_op(
      "grad.batchnorm2d_dweight",
      "batchnorm2d's weight gradient in training mode: Σ dy x̂ per channel -> [C], x̂ from the batch statistics");
  def.lower = lower_dweight;
  def.reference = reference_dweight;
  return def;
}

}  // namespace teeny::ops
