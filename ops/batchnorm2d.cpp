// batchnorm2d over x [B, C, H, W] with PyTorch's slots weight, bias, running_mean, running_var [C]
// in x's dtype, computed in f32. Inference (training: false): y = (x - running_mean) /
// sqrt(running_var + eps) * weight + bias. Training (training: true, which a training graph's
// train mode sets, as model.train() does): the batch's per-channel mean and biased variance
// instead, and an update node train.batchnorm_stats (ops/train_batchnorm_stats.cpp) moves the
// running statistics once a step. The running statistics are buffers (ParamHints::buffer): saved
// and loaded by name, never trained by gradient.
//
// The backward (training mode only: a training graph has no other) recomputes the batch
// statistics from x rather than saving them, as layernorm's does: a node has one output, and x
// is kept for dx anyway. Kernels: ops/kernels/vision.cuh (inference), batchnorm_train.cuh.
#include <fmt/format.h>

#include <cmath>

#include "ops/batchnorm_common.h"
#include "ops/conformance.h"
#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/vision_common.h"

namespace teeny::ops {
namespace {

constexpr int kThreads = 256;

std::vector<ParamSpec> batchnorm2d_params(const OpContext& ctx) {
  const TensorType& x = ctx.inputs.at(0);
  const Shape channels = {x.shape.at(1)};
  std::vector<ParamSpec> params;
  for (const char* slot : {"weight", "bias", "running_mean", "running_var"})
    params.push_back({slot, channels, x.dtype, ParamInit::kTrained, {}});
  params[3].hints.random_range = std::array<double, 2>{0.5, 1.5};  // a variance: positive
  params[2].hints.unused_state = {"num_batches_tracked"};          // PyTorch's step counter
  params[2].hints.buffer = params[3].hints.buffer = true;
  return params;
}

Lowering inference_lower(const OpContext& ctx) {
  const Shape& shape = ctx.inputs.at(0).shape;
  const DType dtype = ctx.inputs.at(0).dtype;
  const Expr plane = shape[2] * shape[3];
  // 16-byte accesses when every channel plane is a whole number of 16-byte vectors.
  const int width = vector_width(dtype);
  const int vec = plane.const_value() && *plane.const_value() % width == 0 ? width : 1;
  const Expr count = product(shape) / Expr(vec);
  std::vector<KernelArg> args = {input(0, "x", dtype),
                                 param("weight", "weight", dtype),
                                 param("bias", "bias", dtype),
                                 param("running_mean", "running_mean", dtype),
                                 param("running_var", "running_var", dtype),
                                 output("y", dtype),
                                 f32("eps", ctx.attrs.real("eps")),
                                 i64("count", count),
                                 i32("plane", plane / Expr(vec)),
                                 i32("channels", shape[1])};
  KernelSource kernel = template_kernel(fmt::format("batchnorm2d_{}_v{}", dtype_name(dtype), vec), "vision.cuh",
                                        fmt::format("tn_batchnorm2d<{}, {}, {}>", dtype_c_type(dtype), kThreads, vec),
                                        args, kThreads, TEENY_KERNEL_ORIGIN);
  Launch launch;
  launch.block = {kThreads, 1, 1};
  launch.grid = {ceil_div(count, Expr(kThreads)), Expr(1), Expr(1)};
  launch.args = std::move(args);
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  launch.bytes = Expr(2 * size) * product(shape) + Expr(4 * size) * shape[1];
  launch.flops = Expr(2) * product(shape);
  return Lowering{{std::move(kernel)}, {launch}};
}

// The batch's statistics (a block per channel), then one element per thread.
Lowering training_lower(const OpContext& ctx) {
  const Shape& shape = ctx.inputs.at(0).shape;
  const DType dtype = ctx.inputs.at(0).dtype;
  Lowering lowering;
  add_batch_stats(lowering, ctx, 0, "batchnorm2d");
  Launch apply;
  apply.args = {input(0, "x", dtype),
                param("weight", "weight", dtype),
                param("bias", "bias", dtype),
                stats_arg(),
                output("y", dtype),
                i64("count", product(shape)),
                i32("plane", shape[2] * shape[3]),
                i32("channels", shape[1])};
  lowering.kernels.push_back(
      template_kernel(fmt::format("batchnorm2d_train_{}", dtype_name(dtype)), "batchnorm_train.cuh",
                      fmt::format("tn_bn_train_apply<{}, {}>", dtype_c_type(dtype), kBatchNormThreads), apply.args,
                      kBatchNormThreads, TEENY_KERNEL_ORIGIN));
  apply.kernel = 1;
  apply.block = {kBatchNormThreads, 1, 1};
  apply.grid = {ceil_div(product(shape), Expr(kBatchNormThreads)), Expr(1), Expr(1)};
  apply.bytes = Expr(2 * static_cast<int64_t>(dtype_size(dtype))) * product(shape);
  apply.flops = Expr(2) * product(shape);
  lowering.launches.push_back(std::move(apply));
  return lowering;
}

HostTensor batchnorm2d_reference(const RefContext& ref) {
  const HostTensor& x = ref.inputs.at(0);
  const double eps = ref.op.attrs.real("eps");
  const int64_t channels = x.shape[1], plane = x.shape[2] * x.shape[3];
  std::vector<double> mean = ref.params[2].data, var = ref.params[3].data;
  if (ref.op.attrs.boolean("training")) {
    ChannelMoments m = channel_moments(x);
    mean = std::move(m.mean);
    var = std::move(m.var);
  }
  HostTensor y{ref.op.output.dtype, ref.output_shape, std::vector<double>(x.data.size())};
  for (size_t i = 0; i < x.data.size(); ++i) {
    const size_t c = (i / plane) % channels;
    y.data[i] = (x.data[i] - mean[c]) / std::sqrt(var[c] + eps) * ref.params[0].data[c] + ref.params[1].data[c];
  }
  return y;
}

// model.train(): batch statistics, and the running statistics' update once a step.
void train_mode(TrainModeBuilder& t) {
  t.set_attr("training", true);
  t.add_update("train.batchnorm_stats", {t.input(0)}, {{"momentum", t.ctx().attrs.real("momentum")}},
               {{"running_mean", t.param("running_mean")}, {"running_var", t.param("running_var")}});
}

// dx (grad.batchnorm2d_dx, through the batch statistics), dweight = Σ dy x̂
// (grad.batchnorm2d_dweight), dbias = Σ dy per channel (grad.sum_to to [1, C, 1, 1], viewed as
// [C]); the running statistics are buffers, with no gradient.
void backward(GradBuilder& g) {
  if (!g.ctx().attrs.boolean("training"))
    throw Error(fmt::format("internal: batchnorm2d node '{}' is differentiated outside training mode", g.node()));
  const std::string& dy = g.grad_output();
  const std::string& x = g.input(0);
  const double eps = g.ctx().attrs.real("eps");
  if (g.needs_input_grad(0))
    g.input_grad(0, g.add("grad.batchnorm2d_dx", {dy, x}, {{"eps", eps}}, {{"weight", g.param("weight")}}));
  if (g.needs_param_grad("weight")) g.param_grad("weight", g.add("grad.batchnorm2d_dweight", {dy, x}, {{"eps", eps}}));
  if (g.needs_param_grad("bias")) {
    const Expr channels = g.type(x).shape.at(1);
    const std::string sum = g.add("grad.sum_to", {dy}, {{"shape", shape_attr({Expr(1), channels, Expr(1), Expr(1)})}});
    g.param_grad("bias", g.add("reshape", {sum}, {{"shape", shape_attr({channels})}}));
  }
}

// Training mode: as a forward node alone (batch statistics), and in a training graph trained
// one step with SGD, which checks its backward nodes and the running statistics' update too.
std::vector<ConformanceCase> training_cases() {
  std::vector<ConformanceCase> cases;
  const struct {
    const char* label;
    const char* shape;
  } shapes[] = {{"1x1 images (B values a channel)", "[B, 5, 1, 1]"},
                {"7x7, 3 channels", "[B, 3, 7, 7]"},
                {"odd 17x13, 12 channels", "[B, 12, 17, 13]"}};
  for (DType dtype : float_dtypes())
    for (const auto& s : shapes) {
      const std::string dt = dtype_name(dtype);
      cases.push_back({fmt::format("training: true, {} {}", s.label, dt),
                       case_graph({"B"}, {{"x", dtype, s.shape}},
                                  {{"y", "batchnorm2d", {"x"}, {{"training", true}, {"momentum", 0.3}}}}),
                       {{{"B", 2}}, {{"B", 5}}}});
      cases.push_back(
          {fmt::format("trained one SGD step, {} {}", s.label, dt),
           case_graph({"B"}, {{"x", dtype, s.shape}, {"target", dtype, s.shape}},
                      {{"bn", "batchnorm2d", {"x"}, {{"eps", 1e-3}}}, {"loss", "mse_loss", {"bn", "target"}}}) +
               "train:\n  loss: loss\n  inputs: [x]\n  optimizer: {type: sgd, lr: 0.1}\n",
           {{{"B", 2}}, {{"B", 5}}}});
    }
  return cases;
}

}  // namespace

OpDef batchnorm2d_op() {
  OpDef def;
  def.name = "batchnorm2d";
  def.doc =
      "batch norm over x [B, C, H, W]: (x - mean) / sqrt(var + eps) * weight + bias with the running statistics, "
      "or with training the batch's (a training graph sets it and updates the running statistics); params [C]";
  def.inputs = {{"x", "[B, C, H, W]"}};
  AttrSpec momentum = attr_spec("momentum", AttrType::kFloat,
                                "training: the running statistics' update, (1 - momentum) * running + momentum * "
                                "batch (PyTorch's momentum)",
                                0.1);
  momentum.min_value = 0;
  momentum.max_value = 1;
  def.attrs = {
      {"eps", AttrType::kFloat, "added to the variance", nlohmann::json(1e-5), {}, false, 0.0, true},
      momentum,
      attr_spec("training", AttrType::kBool,
                "normalize by the batch's statistics (PyTorch's model.train()); a training graph sets it", false)};
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = output_float_dtype(meta, ctx, common_float_dtype(meta, ctx));
    check_nchw(meta.name, ctx.inputs.at(0));
    if (ctx.attrs.boolean("training")) check_batch_statistics(meta.name, ctx.inputs.at(0));
    return contiguous(dtype, ctx.inputs.at(0).shape);
  };
  def.params = batchnorm2d_params;
  def.param_slots = {"weight", "bias", "running_mean", "running_var"};
  def.lower = [](const OpContext& ctx) {
    return ctx.attrs.boolean("training") ? training_lower(ctx) : inference_lower(ctx);
  };
  def.reference = batchnorm2d_reference;
  def.train_mode = train_mode;
  def.backward = backward;
  def.conformance_cases = [] {
    std::vector<VisionCase> cases = {{"195-pixel planes (scalar)", "[B, 8, 15, 13]", {{"eps", 1e-3}}},
                                     {"64-pixel planes (16-byte)", "[B, 16, 8, 8]"}};
    // 12-pixel planes take 16-byte vectors in f32 only (8 elements a vector in 16-bit).
    for (VisionCase& c : in_16bit_dtypes({{"221-pixel planes (scalar)", "[B, 6, 17, 13]", {{"eps", 1e-3}}},
                                          {"12-pixel planes (scalar)", "[B, 5, 3, 4]"},
                                          {"64-pixel planes (16-byte)", "[B, 16, 8, 8]"}}))
      cases.push_back(std::move(c));
    std::vector<ConformanceCase> out = vision_cases("batchnorm2d", cases);
    for (ConformanceCase& c : training_cases()) out.push_back(std::move(c));
    return out;
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
