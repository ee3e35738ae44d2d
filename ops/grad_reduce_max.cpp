// grad.reduce_max (ops.md, "Gradients"): reduce_max's backward. Each reduced element's gradient
// goes to the first position along `axis` where x equals the max y, as PyTorch's max(dim), whose
// backward scatters into the index it returns (the first maximal one); every other position
// gets 0. A NaN max matches nothing and passes no gradient.
//
// Last axis: a warp per row finds the first match 32 columns at a time with a ballot, then
// writes the row. Any other axis: one thread per column. Kernels: ops/kernels/grad_rows.cuh.
#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kBlock = 256;
constexpr int kRowsPerBlock = kBlock / 32;

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  const TensorType& dy = ctx.inputs[0];
  const TensorType& x = ctx.inputs[1];
  const TensorType& y = ctx.inputs[2];
  if (x.shape.empty()) throw OpError("inputs", "grad.reduce_max needs x of rank >= 1");
  const size_t axis = normalize_axis(ctx.attrs.integer("axis"), x.shape.size(), "attrs.axis");
  Shape kept = x.shape, dropped = x.shape;
  kept[axis] = Expr(1);
  dropped.erase(dropped.begin() + axis);
  if (y.shape != kept && y.shape != dropped)
    throw OpError("inputs",
                  fmt::format("grad.reduce_max: y has shape {}; x {} reduced over axis {} is {} or {}",
                              shape_str(y.shape), shape_str(x.shape), axis, shape_str(dropped), shape_str(kept)));
  require_same_shape("grad.reduce_max", dy, "dy", y, "y");
  return contiguous(output_float_dtype(def, ctx, dtype), x.shape);
}

Lowering lower(const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  const TensorType& x = ctx.inputs[1];
  const TensorType& y = ctx.inputs[2];
  const size_t rank = x.shape.size();
  const size_t axis = normalize_axis(ctx.attrs.integer("axis"), rank, "attrs.axis");
  const DType dtype = x.dtype;
  const char* c_type = dtype_c_type(dtype);
  const Expr reduced_last = y.shape.empty() ? Expr(1) : y.shape.back();
  const Expr outputs = product(y.shape);
  Lowering lowering;
  Launch launch;
  launch.block = {kBlock, 1, 1};
  launch.args = {input(0, "dy", dtype), input(1, "x", dtype), input(2, "y", dtype), output("dx", dtype)};
  if (axis + 1 == rank) {
    for (KernelArg arg : {i64("rows", outputs), i32("len", x.shape[axis]), i32("x_stride", x.row_stride),
                          i32("r_last", reduced_last), i32("dy_stride", dy.row_stride), i32("y_stride", y.row_stride)})
      launch.args.push_back(std::move(arg));
    lowering.kernels.push_back(template_kernel(
        fmt::format("grad_reduce_max_rows_{}", dtype_name(dtype)), "grad_rows.cuh",
        fmt::format("tn_max_grad_rows<{}, {}>", c_type, kRowsPerBlock), launch.args, kBlock, TEENY_KERNEL_ORIGIN));
    launch.grid[0] = ceil_div(outputs, Expr(kRowsPerBlock));
  } else {
    for (KernelArg arg : {i64("outer", product_range(x.shape, 0, axis)), i32("len", x.shape[axis]),
                          i64("inner", product_range(x.shape, axis + 1, rank)), i32("x_last", x.shape.back()),
                          i32("x_stride", x.row_stride), i32("r_last", reduced_last), i32("dy_stride", dy.row_stride),
                          i32("y_stride", y.row_stride)})
      launch.args.push_back(std::move(arg));
    lowering.kernels.push_back(template_kernel(
        fmt::format("grad_reduce_max_columns_{}", dtype_name(dtype)), "grad_rows.cuh",
        fmt::format("tn_max_grad_columns<{}, {}>", c_type, kBlock), launch.args, kBlock, TEENY_KERNEL_ORIGIN));
    launch.grid[0] = ceil_div(outputs, Expr(kBlock));
  }
  const Expr numel = product(x.shape);
  launch.bytes = (Expr(2) * numel + Expr(2) * outputs) * Expr(static_cast<int64_t>(dtype_size(dtype)));
  launch.flops = numel;  // a comparison an element at most
  lowering.launches.push_back(std::move(launch));
  return lowering;
}

HostTensor reference(const RefContext& ref) {
  const std::vector<int64_t>& shape = ref.output_shape;
  const size_t axis = normalize_axis(ref.op.attrs.integer("axis"), shape.size(), "attrs.axis");
  const auto [outer, len, inner] = host_axis_view(shape, axis);
  const std::vector<double>& dy = ref.inputs[0].data;
  const std::vector<double>& x = ref.inputs[1].data;
  const std::vector<double>& y = ref.inputs[2].data;
  HostTensor out{ref.op.output.dtype, shape, std::vector<double>(x.size(), 0.0)};
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t d = 0; d < len; ++d) {
        const int64_t e = (o * len + d) * inner + i;
        if (x[e] == y[o * inner + i]) {
          out.data[e] = dy[o * inner + i];
          break;
        }
      }
    }
  }
  return out;
}

ConformanceCase max_case(DType dtype, const std::string& x_shape, int axis, bool keepdim, const std::string& y_shape) {
  return {fmt::format("{} axis {}{} {}", x_shape, axis, keepdim ? " keepdim" : "", dtype_name(dtype)),
          case_graph({"B", "W"}, {{"x", dtype, x_shape}, {"dy", dtype, y_shape}},
                     {{"y", "reduce_max", {"x"}, {{"axis", axis}, {"keepdim", keepdim}}},
                      {"dx", "grad.reduce_max", {"dy", "x", "y"}, {{"axis", axis}}}}),
          awkward_rows()};
}

// In every dtype: the last axis (rows) and others (columns), with and without keepdim, y the real
// reduce_max of x (with ties: bf16 and f16 round many inputs to one value); and x with padded
// rows.
std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (DType dtype : float_dtypes()) {
    cases.push_back(max_case(dtype, "[B, W]", 1, false, "[B]"));
    cases.push_back(max_case(dtype, "[B, W]", -1, true, "[B, 1]"));
    cases.push_back(max_case(dtype, "[B, W]", 0, false, "[W]"));
    cases.push_back(max_case(dtype, "[3, B, W]", 1, true, "[3, 1, W]"));
  }
  for (int axis : {0, 1})
    cases.push_back({fmt::format("axis {} of padded x rows (linear, 17 of 20)", axis),
                     case_graph({"B"}, {{"in", DType::kF32, "[B, 8]"}, {"dy", DType::kF32, axis == 0 ? "[17]" : "[B]"}},
                                {{"x", "linear", {"in"}, {{"out_features", 17}}},
                                 {"y", "reduce_max", {"x"}, {{"axis", axis}}},
                                 {"dx", "grad.reduce_max", {"dy", "x", "y"}, {{"axis", axis}}}}),
                     {{{"B", 1}}, {{"B", 999}}}});
  return cases;
}

}  // namespace

OpDef grad_reduce_max_op() {
  OpDef def;
  def.name = "grad.reduce_max";
  def.doc = "reduce_max's backward: dy to the first position along `axis` where x equals the max y, 0 elsewhere";
  def.inputs = {{"dy", "dL/dy, y's shape"}, {"x", "reduce_max's input"}, {"y", "reduce_max's output"}};
  def.attrs = {attr_spec("axis", AttrType::kInt, "reduce_max's axis (negative counts from the end)")};
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
