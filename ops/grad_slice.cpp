// grad.slice (ops.md, "Gradients"): piece `index` of dy split along `axis` into extents
// `sizes`, the gradient of concat's input `index`.
//
// dy viewed as [outer, in_cols] with in_cols = extent * inner; the piece is columns
// [start * inner, (start + size) * inner), copied by ops/kernels/grad_shape.cuh's tn_slice.
#include <fmt/format.h>

#include <optional>

#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kBlock = 256;

struct SliceGeometry {
  size_t axis = 0;
  Expr outer, inner, start, size;
};

SliceGeometry geometry(const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  const size_t rank = dy.shape.size();
  if (rank == 0) throw OpError("inputs", "grad.slice needs dy of rank >= 1");
  SliceGeometry g;
  g.axis = normalize_axis(ctx.attrs.integer("axis"), rank, "attrs.axis");
  const Shape sizes = ctx.attrs.shape("sizes");
  const int64_t index = ctx.attrs.integer("index");
  if (index >= static_cast<int64_t>(sizes.size()))
    throw OpError("attrs.index", fmt::format("grad.slice: index {} is past the {} sizes", index, sizes.size()));
  Expr total(0);
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (static_cast<int64_t>(k) == index) g.start = total;
    total = total + sizes[k];
  }
  if (total != dy.shape[g.axis])
    throw OpError("attrs.sizes", fmt::format("grad.slice: sizes {} add up to {}, but dy's axis {} is {}",
                                             shape_str(sizes), total.str(), g.axis, dy.shape[g.axis].str()));
  g.size = sizes[index];
  g.outer = product_range(dy.shape, 0, g.axis);
  g.inner = product_range(dy.shape, g.axis + 1, rank);
  return g;
}

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  const SliceGeometry g = geometry(ctx);
  Shape shape = ctx.inputs[0].shape;
  shape[g.axis] = g.size;
  return contiguous(output_float_dtype(def, ctx, dtype), shape);
}

Lowering lower(const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  const DType dtype = dy.dtype;
  const SliceGeometry g = geometry(ctx);
  const Expr cols = g.size * g.inner;
  Launch launch;
  launch.args = {input(0, "dy", dtype),
                 output("y", dtype),
                 i64("outer", g.outer),
                 i32("cols", cols),
                 i32("last", dy.shape.back()),
                 i32("dy_stride", dy.row_stride),
                 i64("in_cols", dy.shape[g.axis] * g.inner),
                 i64("col_offset", g.start * g.inner)};
  Lowering lowering;
  lowering.kernels.push_back(template_kernel(fmt::format("grad_slice_{}", dtype_name(dtype)), "grad_shape.cuh",
                                             fmt::format("tn_slice<{}, {}>", dtype_c_type(dtype), kBlock), launch.args,
                                             kBlock, TEENY_KERNEL_ORIGIN));
  const Expr n = g.outer * cols;
  launch.block = {kBlock, 1, 1};
  launch.grid[0] = grid_stride_blocks(ceil_div(n, Expr(kBlock * vector_width(dtype))), kBlock);
  launch.bytes = Expr(2) * n * Expr(static_cast<int64_t>(dtype_size(dtype)));
  launch.flops = Expr(0);
  lowering.launches.push_back(std::move(launch));
  return lowering;
}

// The reference sees concrete shapes but not the run's dims: those that are a whole extent of
// dy or of the output are read off their symbolic shapes.
Bindings visible_dims(const RefContext& ref) {
  Bindings dims;
  auto read = [&](const Shape& symbolic, const std::vector<int64_t>& concrete) {
    for (size_t k = 0; k < symbolic.size() && k < concrete.size(); ++k)
      if (symbolic[k].kind() == Expr::Kind::kDim) dims[symbolic[k].dim_name()] = concrete[k];
  };
  read(ref.op.inputs[0].shape, ref.inputs[0].shape);
  read(ref.op.output.shape, ref.output_shape);
  return dims;
}

// The sum of sizes [begin, end) where every dim in them is bound.
std::optional<int64_t> bound_sum(const Shape& sizes, size_t begin, size_t end, const Bindings& dims) {
  int64_t sum = 0;
  for (size_t k = begin; k < end; ++k) {
    for (const std::string& dim : sizes[k].dims())
      if (!dims.count(dim)) return std::nullopt;
    sum += sizes[k].eval(dims);
  }
  return sum;
}

// Where the piece starts along the axis: the pieces before it, or the axis less the pieces from it
// on (its own extent is the output's), whichever the visible dims bind.
int64_t piece_start(const RefContext& ref, size_t axis) {
  const Shape sizes = ref.op.attrs.shape("sizes");
  const size_t index = static_cast<size_t>(ref.op.attrs.integer("index"));
  const Bindings dims = visible_dims(ref);
  if (std::optional<int64_t> before = bound_sum(sizes, 0, index, dims)) return *before;
  if (std::optional<int64_t> after = bound_sum(sizes, index + 1, sizes.size(), dims))
    return ref.inputs[0].shape[axis] - ref.output_shape[axis] - *after;
  throw Error(
      fmt::format("grad.slice: the host reference cannot bind the sizes {} around piece {} from the shapes "
                  "of dy and the output",
                  shape_str(sizes), index));
}

HostTensor reference(const RefContext& ref) {
  const HostTensor& dy = ref.inputs[0];
  const size_t axis = normalize_axis(ref.op.attrs.integer("axis"), dy.shape.size(), "attrs.axis");
  const int64_t size = ref.output_shape[axis], start = piece_start(ref, axis);
  const auto [outer, len, inner] = host_axis_view(dy.shape, axis);
  HostTensor out{ref.op.output.dtype, ref.output_shape, std::vector<double>(outer * size * inner)};
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < size * inner; ++c) out.data[o * size * inner + c] = dy.data[(o * len + start) * inner + c];
  return out;
}

ConformanceCase pieces_case(const std::string& label, DType dtype, const std::string& dy_shape, int axis,
                            nlohmann::json sizes) {
  std::vector<CaseNode> nodes;
  for (size_t i = 0; i < sizes.size(); ++i)
    nodes.push_back(
        {fmt::format("piece{}", i), "grad.slice", {"dy"}, {{"axis", axis}, {"sizes", sizes}, {"index", i}}});
  return {fmt::format("{} {}", label, dtype_name(dtype)), case_graph({"B", "W"}, {{"dy", dtype, dy_shape}}, nodes),
          awkward_rows()};
}

// Every piece of concat's cases in every dtype, and of dy with padded rows.
std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (DType dtype : float_dtypes()) {
    cases.push_back(pieces_case("axis 1: [B, W + 9] into W, 8, 1", dtype, "[B, W + 9]", 1, {"W", 8, 1}));
    cases.push_back(pieces_case("axis 0: [B + 2, W] into B, 2", dtype, "[B + 2, W]", 0, {"B", 2}));
    cases.push_back(
        pieces_case("axis -1 of rank 3: [B, 2, W + 16] into W, 16", dtype, "[B, 2, W + 16]", -1, {"W", 16}));
  }
  cases.push_back({"padded dy rows (linear, 17 of 20) into 9, 8",
                   case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}},
                              {{"p", "linear", {"x"}, {{"out_features", 17}}},
                               {"a", "grad.slice", {"p"}, {{"axis", 1}, {"sizes", {9, 8}}, {"index", 0}}},
                               {"b", "grad.slice", {"p"}, {{"axis", 1}, {"sizes", {9, 8}}, {"index", 1}}}}),
                   {{{"B", 1}}, {{"B", 999}}}});
  return cases;
}

}  // namespace

OpDef grad_slice_op() {
  OpDef def;
  def.name = "grad.slice";
  def.doc = "piece `index` of dy split along `axis` into extents `sizes` (a concat input's gradient)";
  def.inputs = {{"dy", "the tensor to cut (rank >= 1)"}};
  AttrSpec index = attr_spec("index", AttrType::kInt, "which piece, from 0");
  index.min_value = 0;
  def.attrs = {attr_spec("axis", AttrType::kInt, "the axis to cut along (negative counts from the end)"),
               attr_spec("sizes", AttrType::kShape, "the pieces' extents along axis, adding up to dy's"), index};
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
