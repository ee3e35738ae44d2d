#include "ops/loss_common.h"

#include <algorithm>

#include <fmt/format.h>

#include "ops/kernel_util.h"

namespace teeny::ops {
namespace {

constexpr int kMeanThreads = 256;
constexpr int kThreadsInFlight = 1 << 18;
// Packs a thread holds at once: a row streams in chunks of this many 16-byte packs a thread.
// Eight of 16-bit logits (a whole 32000-class row in a 512-thread block) fill the registers so
// that one block holds an SM, its loads never overlapping its math; four leave room for two.
constexpr int kMaxItems = 4;

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

void check_logits_and_targets(const OpDef& def, const OpContext& ctx) {
  const TensorType& logits = ctx.inputs[0];
  const TensorType& targets = ctx.inputs[1];
  bool supported = false;
  for (DType d : def.dtypes) supported |= d == logits.dtype;
  if (!supported) {
    throw OpError("inputs",
                  fmt::format("{} needs f32, bf16 or f16 logits, got {}", def.name, dtype_name(logits.dtype)));
  }
  if (logits.shape.empty())
    throw OpError("inputs", fmt::format("{} needs logits of rank >= 1 ([..., classes])", def.name));
  if (targets.dtype != DType::kI32) {
    throw OpError("inputs",
                  fmt::format("{} targets must be i32 class indices, got {}", def.name, dtype_name(targets.dtype)));
  }
  const Shape expected(logits.shape.begin(), logits.shape.end() - 1);
  if (targets.shape != expected) {
    throw OpError("inputs", fmt::format("targets have shape {} but logits {} need {} (the logits' shape without the "
                                        "class dim)",
                                        shape_str(targets.shape), shape_str(logits.shape), shape_str(expected)));
  }
}

Expr logit_rows(const Shape& logits) { return product(Shape(logits.begin(), logits.end() - 1)); }

RowPlan cross_entropy_plan(const Expr& classes, DType dtype) {
  RowPlan plan = plan_rows(classes, dtype);
  const std::optional<int64_t> n = classes.const_value();
  const bool fits = n && *n <= int64_t{plan.threads} * plan.items * vector_width(dtype);
  plan.items = fits ? std::min(plan.items, kMaxItems) : kMaxItems;
  return plan;
}

void require_loss_root(const GradBuilder& g, const std::string& op) {
  if (g.grad_output().empty()) return;
  throw Error(
      fmt::format("node '{}': {} is differentiated only as the train: loss, but the loss depends on it "
                  "through other nodes",
                  g.node(), op));
}

}  // namespace teeny::ops
