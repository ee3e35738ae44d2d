// concat (ops.md, "Shape and data movement"): joins N >= 2 tensors along `axis`, one launch
// per input (every launch runs the same kernel).
//
// Input i viewed as [outer, cols_i] with cols_i = extent_i * inner lands in the output viewed
// as [outer, out_cols] at column offset_i * inner, copied by ops/kernels/concat.cuh's tn_concat.
#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kBlock = 256;

struct ConcatGeometry {
  size_t axis;
  Expr outer, inner;
  std::vector<Expr> offsets;  // along axis, per input
  Expr total;
};

ConcatGeometry geometry(const OpContext& ctx) {
  const TensorType& first = ctx.inputs[0];
  const size_t rank = first.shape.size();
  if (rank == 0) throw OpError("inputs", "concat needs inputs of rank >= 1");
  ConcatGeometry g;
  g.axis = normalize_axis(ctx.attrs.integer("axis"), rank, "attrs.axis");
  g.outer = product_range(first.shape, 0, g.axis);
  g.inner = product_range(first.shape, g.axis + 1, rank);
  Expr offset(0);
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const Shape& shape = ctx.inputs[i].shape;
    bool matches = shape.size() == rank;
    for (size_t k = 0; matches && k < rank; ++k) matches = k == g.axis || shape[k] == first.shape[k];
    if (!matches)
      throw OpError(fmt::format("inputs.{}", i),
                    fmt::format("concat: input {} has shape {} but input 0 has {}; all dims but "
                                "axis {} must match",
                                i, shape_str(shape), shape_str(first.shape), g.axis));
    g.offsets.push_back(offset);
    offset = offset + shape[g.axis];
  }
  g.total = offset;
  return g;
}

}  // namespace

OpDef concat_op() {
  OpDef def;
  def.name = "concat";
  def.doc = "joins the inputs along `axis` (one launch per input)";
  def.inputs = {{"x", "tensors to join (2 or more), equal in every dim but axis"}};
  def.variadic = true;
  def.min_inputs = 2;
  def.attrs = {attr_spec("axis", AttrType::kInt, "the axis to join along", nlohmann::json(1))};
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;

  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = common_float_dtype(meta, ctx);
    const ConcatGeometry g = geometry(ctx);
    Shape shape = ctx.inputs[0].shape;
    shape[g.axis] = g.total;
    return contiguous(output_float_dtype(meta, ctx, dtype), shape);
  };

  def.lower = [](const OpContext& ctx) {
    const ConcatGeometry g = geometry(ctx);
    const DType dtype = ctx.inputs[0].dtype;
    Lowering lowering;
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      const TensorType& x = ctx.inputs[i];
      const Expr cols = x.shape[g.axis] * g.inner;
      Launch launch;
      launch.args = {input(static_cast<int>(i), "x", dtype),
                     output("y", dtype),
                     i64("outer", g.outer),
                     i32("cols", cols),
                     i32("last", x.shape.back()),
                     i32("x_stride", x.row_stride),
                     i64("out_cols", g.total * g.inner),
                     i64("col_offset", g.offsets[i] * g.inner)};
      if (i == 0)
        lowering.kernels.push_back(template_kernel(fmt::format("concat_{}", dtype_name(dtype)), "concat.cuh",
                                                   fmt::format("tn_concat<{}, {}>", dtype_c_type(dtype), kBlock),
                                                   launch.args, kBlock, TEENY_KERNEL_ORIGIN));
      launch.kernel = 0;
      launch.block = {kBlock, 1, 1};
      const Expr n = g.outer * cols;
      launch.grid[0] = grid_stride_blocks(ceil_div(n, Expr(kBlock * vector_width(dtype))), kBlock);
      launch.bytes = Expr(2) * n * Expr(static_cast<int64_t>(dtype_size(dtype)));
      launch.flops = Expr(0);
      lowering.launches.push_back(std::move(launch));
    }
    return lowering;
  };

  def.conformance_cases = [] {
    std::vector<ConformanceCase> cases;
    for (DType dtype : float_dtypes()) {
      const std::string dt = dtype_name(dtype);
      cases.push_back({"axis 1: [B, W] [B, 8] [B, 1] " + dt,
                       case_graph({"B", "W"}, {{"a", dtype, "[B, W]"}, {"b", dtype, "[B, 8]"}, {"c", dtype, "[B, 1]"}},
                                  {{"y", "concat", {"a", "b", "c"}, {{"axis", 1}}}}),
                       awkward_rows()});
      cases.push_back({"axis 0: [B, W] [2, W] " + dt,
                       case_graph({"B", "W"}, {{"a", dtype, "[B, W]"}, {"b", dtype, "[2, W]"}},
                                  {{"y", "concat", {"a", "b"}, {{"axis", 0}}}}),
                       awkward_rows()});
      cases.push_back({"axis -1 of rank 3: [B, 2, W] [B, 2, 16] " + dt,
                       case_graph({"B", "W"}, {{"a", dtype, "[B, 2, W]"}, {"b", dtype, "[B, 2, 16]"}},
                                  {{"y", "concat", {"a", "b"}, {{"axis", -1}}}}),
                       awkward_rows()});
    }
    cases.push_back({"padded rows (linear, 17 of 20) on both axes",
                     case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}, {"b", DType::kF32, "[B, 17]"}},
                                {{"p", "linear", {"x"}, {{"out_features", 17}}},
                                 {"c", "concat", {"b", "p"}, {{"axis", 0}}},
                                 {"y", "concat", {"p", "b"}, {{"axis", 1}}}}),
                     {{{"B", 1}}, {{"B", 999}}}});
    return cases;
  };

  // Each input's gradient is its piece of the output's (grad.slice).
  def.backward = [](GradBuilder& g) {
    const ConcatGeometry geo = geometry(g.ctx());
    Shape sizes;
    for (const TensorType& input : g.ctx().inputs) sizes.push_back(input.shape[geo.axis]);
    for (size_t i = 0; i < g.ctx().inputs.size(); ++i) {
      if (!g.needs_input_grad(i)) continue;
      g.input_grad(
          i, g.add("grad.slice", {g.grad_output()}, {{"axis", geo.axis}, {"sizes", shape_attr(sizes)}, {"index", i}}));
    }
  };
  def.reference = [](const RefContext& ref) {
    const std::vector<int64_t>& out_shape = ref.output_shape;
    const size_t axis = normalize_axis(ref.op.attrs.integer("axis"), out_shape.size(), "attrs.axis");
    const auto [outer, len, inner] = host_axis_view(out_shape, axis);
    HostTensor out;
    out.dtype = ref.op.output.dtype;
    out.shape = out_shape;
    out.data.resize(outer * len * inner);
    int64_t offset = 0;
    for (const HostTensor& x : ref.inputs) {
      const int64_t cols = x.shape[axis] * inner;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < cols; ++c) out.data[o * len * inner + offset * inner + c] = x.data[o * cols + c];
      offset += x.shape[axis];
    }
    return out;
  };
  return def;
}

}  // namespace teeny::ops
