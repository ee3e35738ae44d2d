// conv2d_bn_silu: Conv (no bias) -> inference BatchNorm -> SiLU in one kernel, the Ultralytics
// `Conv` block with its slot names (conv.weight, bn.*), every param in x's dtype. The batch norm
// is folded per output channel in the kernel's epilogue (in f32), and the SiLU is the silu op's
// functor. Lowering: ops/vision_common.cpp; kernels: ops/kernels/conv2d.cuh. The graph pass
// fuse_conv_epilogue makes the same kernel (a fused.conv2d) from the three nodes.
#include <cmath>

#include "core/autodiff.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/vision_common.h"

namespace teeny::ops {
namespace {

constexpr const char* kOp = "conv2d_bn_silu";

std::vector<ParamSpec> conv2d_bn_silu_params(const OpContext& ctx) {
  return conv_params(conv_geometry(kOp, ctx), false, true);
}

HostTensor conv2d_bn_silu_reference(const RefContext& ref) {
  const ConvAttrs a = conv_attrs(ref.op.attrs);
  const double eps = ref.op.attrs.real("eps");
  HostTensor y{ref.op.output.dtype, ref.output_shape,
               conv_reference(a, ref.inputs.at(0), ref.params.at(0), ref.output_shape)};
  const auto& gamma = ref.params.at(1).data;
  const auto& beta = ref.params.at(2).data;
  const auto& mean = ref.params.at(3).data;
  const auto& var = ref.params.at(4).data;
  const int64_t plane = ref.output_shape[2] * ref.output_shape[3];
  for (size_t i = 0; i < y.data.size(); ++i) {
    const size_t c = (i / plane) % a.out_channels;
    const double v = (y.data[i] - mean[c]) / std::sqrt(var[c] + eps) * gamma[c] + beta[c];
    y.data[i] = v / (1.0 + std::exp(-v));
  }
  return y;
}

}  // namespace

OpDef conv2d_bn_silu_op() {
  OpDef def;
  def.name = kOp;
  def.doc =
      "fused conv2d (no bias) -> batchnorm2d -> silu in one kernel (Ultralytics Conv block); "
      "params conv.weight [Co, C/groups, kH, kW], bn.weight/bias/running_mean/running_var [Co]";
  def.inputs = {{"x", "[B, C, H, W]"}};
  def.attrs = conv_attr_specs();
  def.attrs.push_back({"eps", AttrType::kFloat, "batch-norm epsilon", nlohmann::json(1e-3), {}, false, 0.0, true});
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = output_float_dtype(meta, ctx, common_float_dtype(meta, ctx));
    return contiguous(dtype, conv_geometry(meta.name, ctx).output_shape());
  };
  def.params = conv2d_bn_silu_params;
  def.param_slots = {"conv.weight", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"};
  def.lower = [](const OpContext& ctx) {
    ConvEpilogue epilogue;
    epilogue.bn = true;
    epilogue.eps = ctx.attrs.real("eps");
    epilogue.activation = "silu";
    return lower_conv(kOp, conv_geometry(kOp, ctx), "conv.weight", "", epilogue);
  };
  def.reference = conv2d_bn_silu_reference;
  def.tuning = conv_tuning();
  // Its batch norm is folded from running statistics; in a training graph batch norm normalizes by
  // the batch's (model.train()), which the fused kernel cannot, so it refuses rather than train
  // something else than PyTorch would.
  def.train_mode = [](TrainModeBuilder&) {
    throw OpError("op",
                  "conv2d_bn_silu cannot train: its batch norm uses running statistics, and a training graph's batch "
                  "norm uses the batch's (PyTorch's model.train()); write conv2d (bias: false), batchnorm2d and silu "
                  "as three nodes");
  };
  def.conformance_cases = [] {
    std::vector<VisionCase> cases = {
        {"3x3 p1 Co 64, odd 15x13", "[B, 8, 15, 13]", {{"out_channels", 64}, {"kernel_size", 3}, {"padding", 1}}},
        {"3x3 s2 p1 3 -> 16 (stem), odd 33x31",
         "[B, 3, 33, 31]",
         {{"out_channels", 16}, {"kernel_size", 3}, {"stride", 2}, {"padding", 1}}},
        {"depthwise 3x3 p1",
         "[B, 8, 15, 13]",
         {{"out_channels", 8}, {"kernel_size", 3}, {"padding", 1}, {"groups", 8}}},
        {"1x1, eps 1e-5", "[B, 16, 8, 8]", {{"out_channels", 16}, {"kernel_size", 1}, {"eps", 1e-5}}}};
    // The implicit GEMM, depthwise and 1x1 paths once more in 16-bit.
    for (VisionCase& c : in_16bit_dtypes(
             {{"3x3 s2 p1 3 -> 20 (stem), odd 33x31",
               "[B, 3, 33, 31]",
               {{"out_channels", 20}, {"kernel_size", 3}, {"stride", 2}, {"padding", 1}}},
              {"depthwise 3x3 p1, odd 17x13",
               "[B, 12, 17, 13]",
               {{"out_channels", 12}, {"kernel_size", 3}, {"padding", 1}, {"groups", 12}}},
              {"1x1, 64-pixel planes (4-pixel loads)", "[B, 16, 8, 8]", {{"out_channels", 24}, {"kernel_size", 1}}}}))
      cases.push_back(std::move(c));
    return vision_cases(kOp, cases);
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
