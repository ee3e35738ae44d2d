// grad.sum_to (ops.md, "Gradients"): dy summed down to `shape`, which broadcasts to dy's shape
// (NumPy rules): the gradient of an operand that add, sub, mul or div broadcast.
//
// Lowering collapses dy's dims into the fewest evenly strided ones, each kept (one of the
// output's) or summed over, and picks the layout by the innermost one (ops/kernels/
// grad_shape.cuh): kept, a block takes 32 consecutive outputs and splits the sum over 8 rows of
// threads (reads coalesced along the kept dim); summed over, a warp per output (a block when
// there is one output) strides over the reduced elements. f32 sums in a fixed order.
#include <fmt/format.h>

#include <algorithm>

#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kBlock = 256;
constexpr int kParts = kBlock / 32;   // columns layout: rows of threads splitting each sum
constexpr int kGroups = kBlock / 32;  // rows layout: warps (outputs) a block

struct SumDim {
  Expr size, stride;  // dy's extent and element stride
  bool kept = false;  // one of the output's dims; else summed over
};

Shape target_shape(const OpContext& ctx) {
  const Shape shape = ctx.attrs.shape("shape");
  for (const Expr& dim : shape)
    if (dim.is_const() && *dim.const_value() < 1)
      throw OpError("attrs.shape", fmt::format("grad.sum_to: shape {} has an extent below 1", shape_str(shape)));
  return shape;
}

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  const TensorType& dy = ctx.inputs[0];
  const Shape target = target_shape(ctx);
  bool broadcasts = false;
  try {
    broadcasts = broadcast_shapes(target, dy.shape) == dy.shape;
  } catch (const OpError&) {
    // dims that do not match: reported below, naming the attr rather than the inputs
  }
  if (!broadcasts)
    throw OpError("attrs.shape", fmt::format("grad.sum_to: shape {} does not broadcast to dy's shape {}",
                                             shape_str(target), shape_str(dy.shape)));
  return contiguous(output_float_dtype(def, ctx, dtype), target);
}

// dy's dims without its size-1 ones, neighbours of one kind merged where dy's strides allow; at
// least one dim of each kind (a size-1 filler).
std::vector<SumDim> collapse(const TensorType& dy, const Shape& target) {
  const size_t rank = dy.shape.size(), lead = rank - target.size();
  const std::vector<Expr> strides = element_strides(dy);
  std::vector<SumDim> dims;  // innermost first while merging
  for (size_t k = rank; k-- > 0;) {
    if (dy.shape[k].const_value() == 1) continue;
    const bool kept = k >= lead && target[k - lead].const_value() != 1;
    SumDim* inner = dims.empty() ? nullptr : &dims.back();
    if (inner && inner->kept == kept && strides[k] == inner->stride * inner->size)
      inner->size = inner->size * dy.shape[k];
    else
      dims.push_back({dy.shape[k], strides[k], kept});
  }
  for (bool kept : {true, false}) {
    const bool present = std::any_of(dims.begin(), dims.end(), [&](const SumDim& d) { return d.kept == kept; });
    if (!present) dims.push_back({Expr(1), Expr(0), kept});  // outermost
  }
  std::reverse(dims.begin(), dims.end());
  return dims;
}

Lowering lower(const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  const DType dtype = dy.dtype;
  const std::vector<SumDim> dims = collapse(dy, ctx.output.shape);
  Expr outputs(1), reduced(1);
  std::string pattern, kinds;
  std::vector<KernelArg> args = {input(0, "dy", dtype), output("y", dtype)};
  std::vector<KernelArg> sizes;
  for (size_t j = 0; j < dims.size(); ++j) {
    Expr& count = dims[j].kept ? outputs : reduced;
    count = count * dims[j].size;
    pattern += dims[j].kept ? 'k' : 'r';
    kinds += fmt::format(", '{}'", pattern.back());
    sizes.push_back(i64(fmt::format("d{}", j), dims[j].size));
    sizes.push_back(i64(fmt::format("s{}", j), dims[j].stride));
  }
  args.push_back(i64("outputs", outputs));
  args.push_back(i64("reduced", reduced));
  args.insert(args.end(), sizes.begin(), sizes.end());

  const char* c_type = dtype_c_type(dtype);
  Launch launch;
  launch.block = {kBlock, 1, 1};
  std::string layout, function;
  if (dims.back().kept) {
    layout = "columns";
    function = fmt::format("tn_sum_to_columns<{}, {}{}>", c_type, kParts, kinds);
    launch.grid[0] = grid_stride_blocks(ceil_div(outputs, Expr(32)), kBlock);
  } else if (outputs.const_value() == 1) {
    layout = "block";
    function = fmt::format("tn_sum_to_rows<{}, {}, 1{}>", c_type, kBlock, kinds);
  } else {
    layout = "rows";
    function = fmt::format("tn_sum_to_rows<{}, 32, {}{}>", c_type, kGroups, kinds);
    launch.grid[0] = grid_stride_blocks(ceil_div(outputs, Expr(kGroups)), kBlock);
  }
  Lowering lowering;
  lowering.kernels.push_back(template_kernel(fmt::format("grad_sum_to_{}_{}_{}", dtype_name(dtype), pattern, layout),
                                             "grad_shape.cuh", function, args, kBlock, TEENY_KERNEL_ORIGIN));
  launch.args = std::move(args);
  const Expr numel = product(dy.shape);
  launch.bytes = (numel + outputs) * Expr(static_cast<int64_t>(dtype_size(dtype)));
  launch.flops = numel;
  lowering.launches.push_back(std::move(launch));
  return lowering;
}

HostTensor reference(const RefContext& ref) {
  const HostTensor& dy = ref.inputs[0];
  const std::vector<int64_t>& out_shape = ref.output_shape;
  const size_t rank = dy.shape.size(), lead = rank - out_shape.size();
  // The output's strides over dy's index space: 0 along the dims summed over.
  const std::vector<int64_t> natural = host_strides(out_shape);
  std::vector<int64_t> strides(rank, 0);
  for (size_t k = lead; k < rank; ++k) strides[k] = out_shape[k - lead] == 1 ? 0 : natural[k - lead];
  HostTensor out{ref.op.output.dtype, out_shape, {}};
  int64_t n = 1;
  for (int64_t d : out_shape) n *= d;
  out.data.assign(n, 0.0);
  for (int64_t e = 0; e < static_cast<int64_t>(dy.data.size()); ++e) {
    int64_t rest = e, offset = 0;
    for (size_t k = rank; k-- > 0;) {
      offset += (rest % dy.shape[k]) * strides[k];
      rest /= dy.shape[k];
    }
    out.data[offset] += dy.data[e];
  }
  return out;
}

ConformanceCase sum_case(const std::string& label, DType dtype, const std::string& dy_shape, nlohmann::json shape) {
  return {fmt::format("{} {}", label, dtype_name(dtype)),
          case_graph({"B", "W"}, {{"dy", dtype, dy_shape}}, {{"y", "grad.sum_to", {"dy"}, {{"shape", shape}}}}),
          awkward_rows()};
}

// Each layout in every dtype: leading dims summed (a bias's gradient), the innermost summed, both
// around a kept one, everything; and dy with padded rows.
std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (DType dtype : float_dtypes()) {
    cases.push_back(sum_case("[B, W] to [W] (columns)", dtype, "[B, W]", {"W"}));
    cases.push_back(sum_case("[B, W] to [B, 1] (rows)", dtype, "[B, W]", {"B", 1}));
    cases.push_back(sum_case("[3, B, W] to [3, 1, W] (columns, k r k)", dtype, "[3, B, W]", {3, 1, "W"}));
    cases.push_back(sum_case("[B, 2, W] to [2, 1] (rows, r k r)", dtype, "[B, 2, W]", {2, 1}));
    cases.push_back(sum_case("[B, W] to [] (block)", dtype, "[B, W]", nlohmann::json::array()));
  }
  cases.push_back({"padded dy rows (linear, 17 of 20) to [17] and to [B, 1]",
                   case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}},
                              {{"p", "linear", {"x"}, {{"out_features", 17}}},
                               {"r", "grad.sum_to", {"p"}, {{"shape", {"B", 1}}}},
                               {"y", "grad.sum_to", {"p"}, {{"shape", {17}}}}}),
                   {{{"B", 1}}, {{"B", 999}}}});
  return cases;
}

}  // namespace

OpDef grad_sum_to_op() {
  OpDef def;
  def.name = "grad.sum_to";
  def.doc = "dy summed down to `shape`, which broadcasts to dy's shape (a broadcast operand's gradient)";
  def.inputs = {{"dy", "the gradient of a broadcasting op's output"}};
  def.attrs = {attr_spec("shape", AttrType::kShape, "the operand's shape: ints, dim names or expressions")};
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
