// grad.softmax (ops.md, "Gradients"): the backward of softmax and (with `log`) log_softmax
// along `axis`, from dy and the forward output y:
//   softmax:      dx = y (dy - sum(dy y))
//   log_softmax:  dx = dy - exp(y) sum(dy)
// (PyTorch's _softmax_backward_data and _log_softmax_backward_data).
//
// Last axis: a group of threads per row as softmax's plan (ops/kernel_util.h, plan_rows), at
// most 16 elements of each of the two rows a thread in registers; rows longer than that stream
// twice (the sum, then the write). Any other axis: one thread per column. Kernels:
// ops/kernels/grad_rows.cuh.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kColumnBlock = 256;
constexpr int kElementsPerThread = 16;  // of each row: dy's and y's together fill 32 registers

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  const TensorType& dy = ctx.inputs[0];
  const TensorType& y = ctx.inputs[1];
  require_same_shape("grad.softmax", dy, "dy", y, "y");
  if (dy.shape.empty()) throw OpError("inputs", "grad.softmax needs inputs of rank >= 1");
  normalize_axis(ctx.attrs.integer("axis"), dy.shape.size(), "attrs.axis");
  return contiguous(output_float_dtype(def, ctx, dtype), dy.shape);
}

Lowering lower(const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  const TensorType& y = ctx.inputs[1];
  const size_t rank = dy.shape.size();
  const size_t axis = normalize_axis(ctx.attrs.integer("axis"), rank, "attrs.axis");
  const bool log_form = ctx.attrs.boolean("log");
  const DType dtype = dy.dtype;
  const char* c_type = dtype_c_type(dtype);
  const std::string name = log_form ? "grad_log_softmax" : "grad_softmax";
  const Expr numel = product(dy.shape);
  Lowering lowering;
  Launch launch;
  if (axis + 1 == rank) {
    RowPlan plan = plan_rows(dy.shape.back(), dtype);
    plan.items = std::min(plan.items, std::max(1, kElementsPerThread / vector_width(dtype)));
    const Expr rows = product_range(dy.shape, 0, rank - 1);
    launch.args = {input(0, "dy", dtype),        input(1, "y", dtype),
                   output("dx", dtype),          i64("rows", rows),
                   i32("cols", dy.shape.back()), i32("dy_stride", dy.row_stride),
                   i32("y_stride", y.row_stride)};
    lowering.kernels.push_back(template_kernel(
        fmt::format("{}_rows_{}_t{}_i{}", name, dtype_name(dtype), plan.threads, plan.items), "grad_rows.cuh",
        fmt::format("tn_softmax_grad_rows<{}, {}, {}, {}, {}>", c_type, log_form, plan.threads, plan.rows_per_block,
                    plan.items),
        launch.args, plan.block(), TEENY_KERNEL_ORIGIN));
    launch.block = {plan.block(), 1, 1};
    launch.grid[0] = ceil_div(rows, Expr(plan.rows_per_block));
  } else {
    launch.args = {input(0, "dy", dtype),
                   input(1, "y", dtype),
                   output("dx", dtype),
                   i64("outer", product_range(dy.shape, 0, axis)),
                   i32("axis_len", dy.shape[axis]),
                   i64("inner", product_range(dy.shape, axis + 1, rank)),
                   i32("last", dy.shape.back()),
                   i32("dy_stride", dy.row_stride),
                   i32("y_stride", y.row_stride)};
    lowering.kernels.push_back(
        template_kernel(fmt::format("{}_columns_{}", name, dtype_name(dtype)), "grad_rows.cuh",
                        fmt::format("tn_softmax_grad_columns<{}, {}, {}>", c_type, log_form, kColumnBlock), launch.args,
                        kColumnBlock, TEENY_KERNEL_ORIGIN));
    launch.block = {kColumnBlock, 1, 1};
    launch.grid[0] = ceil_div(numel / dy.shape[axis], Expr(kColumnBlock));
  }
  launch.bytes = numel * Expr(static_cast<int64_t>(3 * dtype_size(dtype)));
  launch.flops = numel * Expr(4);  // the product and sum, then the difference and product
  lowering.launches.push_back(std::move(launch));
  return lowering;
}

HostTensor reference(const RefContext& ref) {
  const std::vector<int64_t>& shape = ref.output_shape;
  const size_t axis = normalize_axis(ref.op.attrs.integer("axis"), shape.size(), "attrs.axis");
  const bool log_form = ref.op.attrs.boolean("log");
  const auto [outer, len, inner] = host_axis_view(shape, axis);
  const std::vector<double>& dy = ref.inputs[0].data;
  const std::vector<double>& y = ref.inputs[1].data;
  HostTensor out{ref.op.output.dtype, shape, std::vector<double>(dy.size())};
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * len * inner + i;
      double s = 0.0;
      for (int64_t d = 0; d < len; ++d) {
        const int64_t e = base + d * inner;
        s += log_form ? dy[e] : dy[e] * y[e];
      }
      for (int64_t d = 0; d < len; ++d) {
        const int64_t e = base + d * inner;
        out.data[e] = log_form ? dy[e] - std::exp(y[e]) * s : y[e] * (dy[e] - s);
      }
    }
  }
  return out;
}

ConformanceCase pair_case(const std::string& label, const std::vector<std::string>& dims, DType dtype,
                          const std::string& shape, nlohmann::json attrs, std::vector<Bindings> bindings) {
  return {fmt::format("{} {}", label, dtype_name(dtype)),
          case_graph(dims, {{"dy", dtype, shape}, {"y", dtype, shape}},
                     {{"dx", "grad.softmax", {"dy", "y"}, std::move(attrs)}}),
          std::move(bindings)};
}

// Both forms in every dtype: rows of symbolic width, the constant widths that pick the warp, block
// and streaming plans, a middle axis; and y with padded rows on both axes.
std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (bool log_form : {false, true}) {
    const std::string form = log_form ? "log" : "softmax";
    for (DType dtype : float_dtypes()) {
      cases.push_back(
          pair_case(form + " rows [B, W]", {"B", "W"}, dtype, "[B, W]", {{"log", log_form}}, awkward_rows()));
      for (int width : {17, 1000, 4096, 20000})
        cases.push_back(pair_case(fmt::format("{} rows [B, {}]", form, width), {"B"}, dtype,
                                  fmt::format("[B, {}]", width), {{"log", log_form}}, {{{"B", 1}}, {{"B", 129}}}));
      cases.push_back(pair_case(form + " middle axis [B, W, 3]", {"B", "W"}, dtype, "[B, W, 3]",
                                {{"axis", 1}, {"log", log_form}}, awkward_rows()));
    }
    for (int axis : {0, 1})
      cases.push_back({fmt::format("{} axis {} of padded y rows (linear, 17 of 20)", form, axis),
                       case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}, {"dy", DType::kF32, "[B, 17]"}},
                                  {{"p", "linear", {"x"}, {{"out_features", 17}}},
                                   {"dx", "grad.softmax", {"dy", "p"}, {{"axis", axis}, {"log", log_form}}}}),
                       {{{"B", 1}}, {{"B", 999}}}});
  }
  return cases;
}

}  // namespace

OpDef grad_softmax_op() {
  OpDef def;
  def.name = "grad.softmax";
  def.doc = "softmax's backward y (dy - sum(dy y)), or with `log` log_softmax's dy - exp(y) sum(dy), along `axis`";
  def.inputs = {{"dy", "dL/dy"}, {"y", "the forward output (softmax or log_softmax), dy's shape"}};
  def.attrs = {
      attr_spec("axis", AttrType::kInt, "the forward op's axis (negative counts from the end)", nlohmann::json(-1)),
      attr_spec("log", AttrType::kBool, "the forward op is log_softmax", nlohmann::json(false))};
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.lower = lower;
  def.reference = reference;
  def.conformance_cases = conformance_cases;
  return def;
}

}  // namespace teeny::ops
