#include "ops/batchnorm_common.h"

#include <fmt/format.h>

#include "ops/kernel_util.h"

namespace teeny::ops {

void check_batch_statistics(const std::string& op, const TensorType& x) {
  const Expr values = x.shape.at(0) * x.shape.at(2) * x.shape.at(3);
  if (values.const_value() == 1)
    throw OpError("inputs",
                  fmt::format("{} in training mode needs more than one value per channel (B * H * W), got x {}", op,
                              shape_str(x.shape)));
}

KernelArg stats_arg() { return scratch("stats", "stats", DType::kF32); }

void add_batch_stats(Lowering& lowering, const OpContext& ctx, int x_input, const std::string& kernel_prefix) {
  const TensorType& x = ctx.inputs.at(x_input);
  const Shape& s = x.shape;
  lowering.scratch.push_back({"stats", DType::kF32, Expr(2) * s[1]});
  Launch launch;
  launch.args = {input(x_input, "x", x.dtype), stats_arg(),
                 i32("batch", s[0]),           i32("channels", s[1]),
                 i32("plane", s[2] * s[3]),    f32("eps", ctx.attrs.real("eps"))};
  lowering.kernels.push_back(
      template_kernel(fmt::format("{}_batch_stats_{}", kernel_prefix, dtype_name(x.dtype)), "batchnorm_train.cuh",
                      fmt::format("tn_bn_batch_stats<{}, {}>", dtype_c_type(x.dtype), kBatchNormThreads), launch.args,
                      kBatchNormThreads, TEENY_KERNEL_ORIGIN));
  launch.kernel = static_cast<int>(lowering.kernels.size()) - 1;
  launch.block = {kBatchNormThreads, 1, 1};
  launch.grid = {s[1], Expr(1), Expr(1)};
  launch.bytes = Expr(2 * static_cast<int64_t>(dtype_size(x.dtype))) * product(s) + Expr(8) * s[1];
  launch.flops = Expr(4) * product(s);
  lowering.launches.push_back(std::move(launch));
}

ChannelMoments channel_moments(const HostTensor& x) {
  const int64_t batch = x.shape[0], channels = x.shape[1], plane = x.shape[2] * x.shape[3];
  ChannelMoments m{std::vector<double>(channels, 0.0), std::vector<double>(channels, 0.0), batch * plane};
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t p = 0; p < plane; ++p) m.mean[c] += x.data[(b * channels + c) * plane + p];
    m.mean[c] /= static_cast<double>(m.count);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t p = 0; p < plane; ++p) {
        const double d = x.data[(b * channels + c) * plane + p] - m.mean[c];
        m.var[c] += d * d;
      }
    m.var[c] /= static_cast<double>(m.count);
  }
  return m;
}

}  // namespace teeny::ops
