#include "ops/loss_common.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "ops/conformance.h"
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

AttrSpec ignore_index_attr(const std::string& doc) {
  AttrSpec spec = attr_spec("ignore_index", AttrType::kInt, doc, nlohmann::json(-100));
  spec.min_value = std::numeric_limits<int32_t>::min();
  spec.max_value = std::numeric_limits<int32_t>::max();
  return spec;
}

namespace {

ConformanceCase logits_case(const std::string& op, const std::string& node, const std::string& label, DType dtype,
                            const std::vector<std::string>& dims, const std::string& logits_shape,
                            const std::string& targets_shape, const std::vector<Bindings>& bindings,
                            nlohmann::json attrs = nlohmann::json::object()) {
  return {fmt::format("{} {}", label, dtype_name(dtype)),
          case_graph(dims, {{"logits", dtype, logits_shape}, {"targets", DType::kI32, targets_shape}},
                     {{node, op, {"logits", "targets"}, std::move(attrs)}}),
          bindings};
}

}  // namespace

std::vector<ConformanceCase> logits_cases(const std::string& op, const std::string& node,
                                          const std::vector<std::pair<int, int64_t>>& vocabularies) {
  std::vector<ConformanceCase> cases;
  const std::vector<Bindings> rows = {{{"B", 1}}, {{"B", 7}}, {{"B", 4099}}};
  auto add = [&](const std::string& label, DType dtype, const std::vector<std::string>& dims,
                 const std::string& logits_shape, const std::string& targets_shape,
                 const std::vector<Bindings>& bindings, nlohmann::json attrs = nlohmann::json::object()) {
    cases.push_back(logits_case(op, node, label, dtype, dims, logits_shape, targets_shape, bindings, std::move(attrs)));
  };
  for (DType dtype : float_dtypes()) {
    for (int classes : {1, 7, 1000})
      add(fmt::format("rows [B, {}]", classes), dtype, {"B"}, fmt::format("[B, {}]", classes), "[B]", rows);
    for (const auto& [classes, batch] : vocabularies)
      add(fmt::format("vocab [B, {}]", classes), dtype, {"B"}, fmt::format("[B, {}]", classes), "[B]",
          {{{"B", 1}}, {{"B", batch}}});
    add("rows [B, W]", dtype, {"B", "W"}, "[B, W]", "[B]", awkward_rows());
    add("tokens [B, S, 1000]", dtype, {"B", "S"}, "[B, S, 1000]", "[B, S]",
        {{{"B", 1}, {"S", 1}}, {{"B", 3}, {"S", 17}}, {{"B", 8}, {"S", 512}}});
    add("ignore_index 0 [B, 7]", dtype, {"B"}, "[B, 7]", "[B]", rows, {{"ignore_index", 0}});
    add("all ignored [B, 1]", dtype, {"B"}, "[B, 1]", "[B]", {{{"B", 1}}, {{"B", 999}}}, {{"ignore_index", 0}});
  }
  cases.push_back({"padded logits (linear, 17 of 20)",
                   case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}, {"targets", DType::kI32, "[B]"}},
                              {{"p", "linear", {"x"}, {{"out_features", 17}}},
                               {node, op, {"p", "targets"}, {{"ignore_index", 3}}}}),
                   {{{"B", 1}}, {{"B", 999}}}});
  return cases;
}

}  // namespace teeny::ops
