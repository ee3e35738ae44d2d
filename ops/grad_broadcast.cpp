// grad.broadcast (ops.md, "Gradients"): dy copied out to `shape`, the gradient of reduce_sum's
// and (with `mean`) reduce_mean's input. dy is the reduced tensor: with `axis`, `shape` without
// that axis (a reduction without keepdim); without, any shape that broadcasts to `shape`.
//
// One grid-stride gather over the output (ops/kernels/grad_shape.cuh): the output's dims
// collapsed to the fewest evenly strided ones, dy's stride 0 along those it is broadcast along;
// 16-byte stores when the innermost dim allows.
#include <fmt/format.h>

#include <algorithm>

#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kBlock = 256;

struct CopyDim {
  Expr size;
  std::optional<Expr> stride;  // dy's; absent: dy is broadcast along this dim
};

Shape target_shape(const OpContext& ctx) {
  const Shape shape = ctx.attrs.shape("shape");
  for (const Expr& dim : shape)
    if (dim.is_const() && *dim.const_value() < 1)
      throw OpError("attrs.shape", fmt::format("grad.broadcast: shape {} has an extent below 1", shape_str(shape)));
  return shape;
}

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  const TensorType& dy = ctx.inputs[0];
  const Shape target = target_shape(ctx);
  if (ctx.attrs.has("axis")) {
    const int axis = normalize_axis(ctx.attrs.integer("axis"), target.size(), "attrs.axis");
    Shape reduced = target;
    reduced.erase(reduced.begin() + axis);
    if (dy.shape != reduced)
      throw OpError("inputs", fmt::format("grad.broadcast: dy has shape {}; shape {} without axis {} is {}",
                                          shape_str(dy.shape), shape_str(target), axis, shape_str(reduced)));
  } else {
    bool broadcasts = false;
    try {
      broadcasts = broadcast_shapes(dy.shape, target) == target;
    } catch (const OpError&) {
      // dims that do not match: reported below, naming the attr rather than the inputs
    }
    if (!broadcasts)
      throw OpError("attrs.shape", fmt::format("grad.broadcast: dy's shape {} does not broadcast to shape {}",
                                               shape_str(dy.shape), shape_str(target)));
  }
  return contiguous(output_float_dtype(def, ctx, dtype), target);
}

// dy's element strides over the output's dims; absent where dy is broadcast.
std::vector<std::optional<Expr>> aligned_strides(const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  const Shape& out = ctx.output.shape;
  const std::vector<Expr> strides = element_strides(dy);
  std::vector<std::optional<Expr>> result(out.size());
  if (ctx.attrs.has("axis")) {
    const size_t axis = normalize_axis(ctx.attrs.integer("axis"), out.size(), "attrs.axis");
    for (size_t k = 0, j = 0; k < out.size(); ++k)
      if (k != axis) result[k] = strides[j++];
    return result;
  }
  const size_t lead = out.size() - dy.shape.size();
  for (size_t k = lead; k < out.size(); ++k)
    if (!(dy.shape[k - lead].const_value() == 1 && out[k].const_value() != 1)) result[k] = strides[k - lead];
  return result;
}

// The output's dims without its size-1 ones, neighbours merged where both are broadcast or dy's
// strides run on across them; a scalar output keeps one dim.
std::vector<CopyDim> collapse(const Shape& out, const std::vector<std::optional<Expr>>& strides) {
  std::vector<CopyDim> dims;  // innermost first while merging
  for (size_t k = out.size(); k-- > 0;) {
    if (out[k].const_value() == 1) continue;
    CopyDim* inner = dims.empty() ? nullptr : &dims.back();
    const bool merges = inner && (strides[k] && inner->stride ? *strides[k] == *inner->stride * inner->size
                                                              : !strides[k] && !inner->stride);
    if (merges)
      inner->size = inner->size * out[k];
    else
      dims.push_back({out[k], strides[k]});
  }
  if (dims.empty()) dims.push_back({Expr(1), Expr(0)});
  std::reverse(dims.begin(), dims.end());
  return dims;
}

Lowering lower(const OpContext& ctx) {
  const DType dtype = ctx.inputs[0].dtype;
  const Shape& out = ctx.output.shape;
  const std::vector<std::optional<Expr>> strides = aligned_strides(ctx);
  Expr count(1);  // output elements a dy element fills
  for (size_t k = 0; k < out.size(); ++k)
    if (!strides[k]) count = count * out[k];
  const std::vector<CopyDim> dims = collapse(out, strides);
  const bool mean = ctx.attrs.boolean("mean");
  const Expr n = product(out);
  Launch launch;
  launch.args = {input(0, "dy", dtype), output("y", dtype), i64("n", n), i64("count", count)};
  for (size_t j = 0; j < dims.size(); ++j) {
    launch.args.push_back(i64(fmt::format("d{}", j), dims[j].size));
    launch.args.push_back(i64(fmt::format("s{}", j), dims[j].stride.value_or(Expr(0))));
  }
  Lowering lowering;
  lowering.kernels.push_back(
      template_kernel(fmt::format("grad_broadcast_{}_d{}{}", dtype_name(dtype), dims.size(), mean ? "_mean" : ""),
                      "grad_shape.cuh", fmt::format("tn_broadcast<{}, {}, {}>", dtype_c_type(dtype), kBlock, mean),
                      launch.args, kBlock, TEENY_KERNEL_ORIGIN));
  launch.block = {kBlock, 1, 1};
  launch.grid[0] = grid_stride_blocks(ceil_div(n, Expr(kBlock * vector_width(dtype))), kBlock);
  launch.bytes = (product(ctx.inputs[0].shape) + n) * Expr(static_cast<int64_t>(dtype_size(dtype)));
  launch.flops = mean ? n : Expr(0);
  lowering.launches.push_back(std::move(launch));
  return lowering;
}

HostTensor reference(const RefContext& ref) {
  const HostTensor& dy = ref.inputs[0];
  const std::vector<int64_t>& out_shape = ref.output_shape;
  const size_t rank = out_shape.size();
  // dy's strides over the output's index space: 0 where it is broadcast.
  const std::vector<int64_t> natural = host_strides(dy.shape);
  std::vector<int64_t> strides(rank, 0);
  if (ref.op.attrs.has("axis")) {
    const size_t axis = normalize_axis(ref.op.attrs.integer("axis"), rank, "attrs.axis");
    for (size_t k = 0, j = 0; k < rank; ++k)
      if (k != axis) strides[k] = natural[j++];
  } else {
    const size_t lead = rank - dy.shape.size();
    for (size_t k = lead; k < rank; ++k) strides[k] = dy.shape[k - lead] == 1 ? 0 : natural[k - lead];
  }
  int64_t n = 1;
  for (int64_t d : out_shape) n *= d;
  const double count = static_cast<double>(n) / static_cast<double>(dy.data.size());
  const bool mean = ref.op.attrs.boolean("mean");
  HostTensor out{ref.op.output.dtype, out_shape, std::vector<double>(n)};
  for (int64_t e = 0; e < n; ++e) {
    int64_t rest = e, offset = 0;
    for (size_t k = rank; k-- > 0;) {
      offset += (rest % out_shape[k]) * strides[k];
      rest /= out_shape[k];
    }
    out.data[e] = mean ? dy.data[offset] / count : dy.data[offset];
  }
  return out;
}

ConformanceCase copy_case(const std::string& label, DType dtype, const std::string& dy_shape, nlohmann::json attrs) {
  return {fmt::format("{} {}", label, dtype_name(dtype)),
          case_graph({"B", "W"}, {{"dy", dtype, dy_shape}}, {{"y", "grad.broadcast", {"dy"}, std::move(attrs)}}),
          awkward_rows()};
}

// Every dtype: broadcast along the leading dims (16-byte loads), along the innermost (one value a
// pack), a middle axis put back (reduce_mean without keepdim), a scalar filling everything; and
// dy with padded rows.
std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (DType dtype : float_dtypes()) {
    cases.push_back(copy_case("[W] to [B, W]", dtype, "[W]", {{"shape", {"B", "W"}}}));
    cases.push_back(copy_case("[B, 1] to [B, W], mean", dtype, "[B, 1]", {{"shape", {"B", "W"}}, {"mean", true}}));
    cases.push_back(copy_case("[B, W] axis 1 to [B, 3, W], mean", dtype, "[B, W]",
                              {{"shape", {"B", 3, "W"}}, {"axis", 1}, {"mean", true}}));
    cases.push_back(copy_case("[B] axis -1 to [B, W]", dtype, "[B]", {{"shape", {"B", "W"}}, {"axis", -1}}));
    cases.push_back(copy_case("[] to [B, W], mean", dtype, "[]", {{"shape", {"B", "W"}}, {"mean", true}}));
  }
  cases.push_back({"padded dy rows (linear, 17 of 20) axis 0 to [2, B, 17]",
                   case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}},
                              {{"p", "linear", {"x"}, {{"out_features", 17}}},
                               {"y", "grad.broadcast", {"p"}, {{"shape", {2, "B", 17}}, {"axis", 0}}}}),
                   {{{"B", 1}}, {{"B", 999}}}});
  return cases;
}

}  // namespace

OpDef grad_broadcast_op() {
  OpDef def;
  def.name = "grad.broadcast";
  def.doc = "dy copied out to `shape` (a reduction's input gradient); `mean` divides by the copies of each value";
  def.inputs = {{"dy", "the reduced gradient: `shape` without `axis`, or a shape that broadcasts to it"}};
  AttrSpec axis = attr_spec("axis", AttrType::kInt, "the axis of `shape` dy lacks (a reduction without keepdim)");
  axis.optional = true;
  def.attrs = {
      attr_spec("shape", AttrType::kShape, "the output's shape: ints, dim names or expressions"), axis,
      attr_spec("mean", AttrType::kBool, "divide by the output elements each dy element fills", nlohmann::json(false))};
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
