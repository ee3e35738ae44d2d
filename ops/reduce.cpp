// reduce_sum, reduce_mean, reduce_max over one axis (ops.md, "Dense"), any extent.
//
// Last axis: a warp or a block per row (plan_rows), streaming the row in 16-byte packs with
// several packs in flight per thread, then a shuffle/shared-memory reduction. Any other
// axis: one thread per (outer, inner) output element, coalesced across inner. f32 accumulation.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "ops/conformance.h"
#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kColumnBlock = 256;

enum class Reduction { kSum, kMean, kMax };

// The reduction's functor type in ops/kernels/reduce.cuh.
const char* reduction_functor(Reduction kind) {
  switch (kind) {
    case Reduction::kSum:
      return "tn_reduce_sum";
    case Reduction::kMean:
      return "tn_reduce_mean";
    case Reduction::kMax:
      return "tn_reduce_max";
  }
  return "";
}

// dx: dy copied back along the axis (divided by its extent for the mean); for the max, dy goes to
// the first position holding the max only (grad.reduce_max says why).
void reduce_backward(GradBuilder& g, Reduction kind) {
  const Attrs& attrs = g.ctx().attrs;
  const Shape& x = g.type(g.input(0)).shape;
  const int axis = normalize_axis(attrs.integer("axis"), x.size(), "attrs.axis");
  if (kind == Reduction::kMax) {
    g.input_grad(0, g.add("grad.reduce_max", {g.grad_output(), g.input(0), g.output()}, {{"axis", axis}}));
    return;
  }
  nlohmann::json spread = {{"shape", shape_attr(x)}, {"mean", kind == Reduction::kMean}};
  if (!attrs.boolean("keepdim")) spread["axis"] = axis;
  g.input_grad(0, g.add("grad.broadcast", {g.grad_output()}, spread));
}

OpDef reduce_op(const std::string& name, Reduction kind, std::string doc) {
  OpDef def;
  def.name = name;
  def.doc = std::move(doc);
  def.inputs = {{"x", "input tensor (rank >= 1)"}};
  def.attrs = {attr_spec("axis", AttrType::kInt, "the axis to reduce (negative counts from the end)"),
               attr_spec("keepdim", AttrType::kBool, "keep the reduced axis with extent 1", nlohmann::json(false))};
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;

  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = common_float_dtype(meta, ctx);
    const TensorType& x = ctx.inputs[0];
    if (x.shape.empty()) throw OpError("inputs", meta.name + " needs an input of rank >= 1");
    const size_t axis = normalize_axis(ctx.attrs.integer("axis"), x.shape.size(), "attrs.axis");
    Shape shape = x.shape;
    if (ctx.attrs.boolean("keepdim"))
      shape[axis] = Expr(1);
    else
      shape.erase(shape.begin() + axis);
    return contiguous(output_float_dtype(meta, ctx, dtype), shape);
  };

  def.lower = [name, kind](const OpContext& ctx) {
    const TensorType& x = ctx.inputs[0];
    const size_t rank = x.shape.size();
    const size_t axis = normalize_axis(ctx.attrs.integer("axis"), rank, "attrs.axis");
    const DType dtype = x.dtype;
    const Expr len = x.shape[axis];
    const Expr out_numel = product(ctx.output.shape);
    const char* c_type = dtype_c_type(dtype);
    const char* functor = reduction_functor(kind);
    Lowering lowering;
    Launch launch;
    if (axis + 1 == rank) {
      const RowPlan plan = plan_rows(len, dtype);
      launch.args = {input(0, "x", dtype), output("y", dtype), i64("rows", out_numel), i32("len", len),
                     i32("x_stride", x.row_stride)};
      lowering.kernels.push_back(template_kernel(
          fmt::format("{}_rows_{}_t{}_i{}", name, dtype_name(dtype), plan.threads, plan.items), "reduce.cuh",
          fmt::format("tn_reduce_rows<{}, {}, {}, {}, {}>", c_type, functor, plan.threads, plan.rows_per_block,
                      plan.items),
          launch.args, plan.block(), TEENY_KERNEL_ORIGIN));
      launch.block = {plan.block(), 1, 1};
      launch.grid[0] = ceil_div(out_numel, Expr(plan.rows_per_block));
    } else {
      launch.args = {input(0, "x", dtype),
                     output("y", dtype),
                     i64("outer", product_range(x.shape, 0, axis)),
                     i32("len", len),
                     i64("inner", product_range(x.shape, axis + 1, rank)),
                     i32("last", x.shape.back()),
                     i32("x_stride", x.row_stride)};
      lowering.kernels.push_back(
          template_kernel(fmt::format("{}_columns_{}", name, dtype_name(dtype)), "reduce.cuh",
                          fmt::format("tn_reduce_columns<{}, {}, {}>", c_type, functor, kColumnBlock), launch.args,
                          kColumnBlock, TEENY_KERNEL_ORIGIN));
      launch.block = {kColumnBlock, 1, 1};
      launch.grid[0] = ceil_div(out_numel, Expr(kColumnBlock));
    }
    const Expr numel = product(x.shape);
    launch.bytes = (numel + out_numel) * Expr(static_cast<int64_t>(dtype_size(dtype)));
    launch.flops = numel;
    lowering.launches.push_back(std::move(launch));
    return lowering;
  };

  def.conformance_cases = [name] {
    std::vector<ConformanceCase> cases;
    for (DType dtype : float_dtypes()) {
      const std::string dt = dtype_name(dtype);
      cases.push_back({"last axis [B, W] " + dt,
                       case_graph({"B", "W"}, {{"x", dtype, "[B, W]"}}, {{"y", name, {"x"}, {{"axis", -1}}}}),
                       awkward_rows()});
      cases.push_back(
          {"first axis, keepdim [B, W] " + dt,
           case_graph({"B", "W"}, {{"x", dtype, "[B, W]"}}, {{"y", name, {"x"}, {{"axis", 0}, {"keepdim", true}}}}),
           awkward_rows()});
      cases.push_back({"middle axis [3, B, W] " + dt,
                       case_graph({"B", "W"}, {{"x", dtype, "[3, B, W]"}}, {{"y", name, {"x"}, {{"axis", 1}}}}),
                       awkward_rows()});
      cases.push_back({"last axis [B, 17] " + dt,
                       case_graph({"B"}, {{"x", dtype, "[B, 17]"}}, {{"y", name, {"x"}, {{"axis", -1}}}}),
                       {{{"B", 1}}, {{"B", 5000}}}});
    }
    cases.push_back({"padded rows (linear, 17 of 20), both axes",
                     case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}},
                                {{"p", "linear", {"x"}, {{"out_features", 17}}},
                                 {"r", name, {"p"}, {{"axis", 1}}},
                                 {"y", name, {"p"}, {{"axis", 0}}}}),
                     {{{"B", 1}}, {{"B", 999}}}});
    return cases;
  };

  def.backward = [kind](GradBuilder& g) { reduce_backward(g, kind); };
  def.reference = [kind](const RefContext& ref) {
    const std::vector<int64_t>& in_shape = ref.inputs[0].shape;
    const size_t axis = normalize_axis(ref.op.attrs.integer("axis"), in_shape.size(), "attrs.axis");
    const auto [outer, len, inner] = host_axis_view(in_shape, axis);
    const std::vector<double>& x = ref.inputs[0].data;
    HostTensor out;
    out.dtype = ref.op.output.dtype;
    out.shape = ref.output_shape;
    out.data.resize(outer * inner);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        double acc = kind == Reduction::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
        for (int64_t d = 0; d < len; ++d) {
          const double v = x[(o * len + d) * inner + i];
          acc = kind == Reduction::kMax ? std::max(acc, v) : acc + v;
        }
        out.data[o * inner + i] = kind == Reduction::kMean ? acc / len : acc;
      }
    }
    return out;
  };
  return def;
}

}  // namespace

OpDef reduce_sum_op() { return reduce_op("reduce_sum", Reduction::kSum, "sum over `axis`"); }
OpDef reduce_mean_op() { return reduce_op("reduce_mean", Reduction::kMean, "mean over `axis`"); }
OpDef reduce_max_op() { return reduce_op("reduce_max", Reduction::kMax, "maximum over `axis`"); }

}  // namespace teeny::ops
