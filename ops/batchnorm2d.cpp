// batchnorm2d: inference batch norm over x [B, C, H, W] with PyTorch's slots weight, bias,
// running_mean, running_var [C] in x's dtype: y = (x - mean) / sqrt(var + eps) * weight + bias,
// computed in f32.
#include <fmt/format.h>

#include <cmath>

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
  return params;
}

Lowering batchnorm2d_lower(const OpContext& ctx) {
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

HostTensor batchnorm2d_reference(const RefContext& ref) {
  const HostTensor& x = ref.inputs.at(0);
  const double eps = ref.op.attrs.real("eps");
  const int64_t channels = x.shape[1], plane = x.shape[2] * x.shape[3];
  HostTensor y{ref.op.output.dtype, ref.output_shape, std::vector<double>(x.data.size())};
  for (size_t i = 0; i < x.data.size(); ++i) {
    const size_t c = (i / plane) % channels;
    y.data[i] = (x.data[i] - ref.params[2].data[c]) / std::sqrt(ref.params[3].data[c] + eps) * ref.params[0].data[c] +
                ref.params[1].data[c];
  }
  return y;
}

}  // namespace

OpDef batchnorm2d_op() {
  OpDef def;
  def.name = "batchnorm2d";
  def.doc =
      "inference batch norm over x [B, C, H, W]: (x - running_mean) / sqrt(running_var + eps) * "
      "weight + bias; params [C]";
  def.inputs = {{"x", "[B, C, H, W]"}};
  def.attrs = {{"eps", AttrType::kFloat, "added to the variance", nlohmann::json(1e-5), {}, false, 0.0, true}};
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = output_float_dtype(meta, ctx, common_float_dtype(meta, ctx));
    check_nchw(meta.name, ctx.inputs.at(0));
    return contiguous(dtype, ctx.inputs.at(0).shape);
  };
  def.params = batchnorm2d_params;
  def.param_slots = {"weight", "bias", "running_mean", "running_var"};
  def.lower = batchnorm2d_lower;
  def.reference = batchnorm2d_reference;
  def.conformance_cases = [] {
    std::vector<VisionCase> cases = {{"195-pixel planes (scalar)", "[B, 8, 15, 13]", {{"eps", 1e-3}}},
                                     {"64-pixel planes (16-byte)", "[B, 16, 8, 8]"}};
    // 12-pixel planes take 16-byte vectors in f32 only (8 elements a vector in 16-bit).
    for (VisionCase& c : in_16bit_dtypes({{"221-pixel planes (scalar)", "[B, 6, 17, 13]", {{"eps", 1e-3}}},
                                          {"12-pixel planes (scalar)", "[B, 5, 3, 4]"},
                                          {"64-pixel planes (16-byte)", "[B, 16, 8, 8]"}}))
      cases.push_back(std::move(c));
    return vision_cases("batchnorm2d", cases);
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
