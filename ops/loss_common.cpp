#include "ops/loss_common.h"

#include <fmt/format.h>

#include "ops/kernel_util.h"

namespace teeny::ops {
namespace {

constexpr int kMeanThreads = 256;
constexpr int kThreadsInFlight = 1 << 18;

}  // namespace

TensorType loss_output(const OpDef& def, const OpContext& ctx) {
  if (ctx.requested_dtype && *ctx.requested_dtype != DType::kF32) {
    throw OpError("dtype", fmt::format("op '{}' produces an f32 loss whatever its inputs' dtype; it cannot produce {}",
                                       def.name, dtype_name(*ctx.requested_dtype)));
  }
  return contiguous(DType::kF32, {});
}

Expr loss_parts(const Expr& blocks, int threads) { return min(blocks, Expr(kThreadsInFlight / threads)); }

void add_loss_mean(Lowering& lowering, const std::string& op, const Expr& parts, bool counted, const Expr& n) {
  lowering.scratch.push_back({"partials", DType::kF32, parts * Expr(counted ? 2 : 1)});
  Launch launch;
  launch.kernel = static_cast<int>(lowering.kernels.size());
  launch.args = {scratch("partials", "partials", DType::kF32), output("loss", DType::kF32), i32("parts", parts),
                 i64("n", n)};
  lowering.kernels.push_back(template_kernel(fmt::format("{}_mean", op), "loss.cuh",
                                             fmt::format("tn_loss_mean<{}, {}>", kMeanThreads, counted), launch.args,
                                             kMeanThreads, TEENY_KERNEL_ORIGIN));
  launch.block = {kMeanThreads, 1, 1};
  launch.grid = {Expr(1), Expr(1), Expr(1)};
  launch.bytes = parts * Expr(counted ? 8 : 4) + Expr(4);
  launch.flops = parts * Expr(counted ? 2 : 1);
  lowering.launches.push_back(std::move(launch));
}

}  // namespace teeny::ops
