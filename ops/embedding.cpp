// embedding (ops.md, "Dense"): i32 ids [...] -> rows of weight [num_embeddings, dim].
//
// One warp per id: the id is read once, bounds-checked (ids outside [0, num) give a zero row;
// the weight is never read out of bounds), and the row is copied in 16-byte packs when the
// weight and output rows are aligned, element by element otherwise.
#include <fmt/format.h>

#include "core/autodiff.h"
#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kWarpsPerBlock = 8;

}  // namespace

OpDef embedding_op() {
  OpDef def;
  def.name = "embedding";
  def.doc = "rows of weight picked by i32 ids; ids outside [0, num_embeddings) give a zero row";
  def.inputs = {{"ids", "i32 token ids, any shape", "num_embeddings"}};
  def.attrs = {attr_spec("num_embeddings", AttrType::kInt, "rows of the table"),
               attr_spec("dim", AttrType::kInt, "embedding width")};
  def.attrs[0].min_value = 1;
  def.attrs[1].min_value = 1;
  // Output (and weight) dtype: f32, or the node's `dtype:`.
  def.dtypes = float_dtypes();
  def.param_slots = {"weight"};
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;

  def.infer = [meta](const OpContext& ctx) {
    const TensorType& ids = ctx.inputs[0];
    if (ids.dtype != DType::kI32)
      throw OpError("inputs", fmt::format("embedding ids must be i32, got {}", dtype_name(ids.dtype)));
    Shape shape = ids.shape;
    shape.push_back(Expr(ctx.attrs.integer("dim")));
    return contiguous(chosen_float_dtype(meta, ctx, DType::kF32), shape);
  };
  def.params = [](const OpContext& ctx) {
    ParamSpec weight;
    weight.slot = "weight";
    weight.shape = {Expr(ctx.attrs.integer("num_embeddings")), Expr(ctx.attrs.integer("dim"))};
    weight.dtype = ctx.output.dtype;
    return std::vector<ParamSpec>{weight};
  };
  def.lower = [](const OpContext& ctx) {
    const TensorType& ids = ctx.inputs[0];
    const DType dtype = ctx.output.dtype;
    const Expr count = product(ids.shape);
    Launch launch;
    launch.args = {input(0, "ids", DType::kI32),
                   param("weight", "weight", dtype),
                   output("y", dtype),
                   i64("count", count),
                   i32("ids_last", ids.shape.empty() ? Expr(1) : ids.shape.back()),
                   i32("ids_stride", ids.row_stride),
                   i32("num", ctx.attrs.integer("num_embeddings")),
                   i32("dim", ctx.attrs.integer("dim"))};
    Lowering lowering;
    lowering.kernels.push_back(template_kernel(fmt::format("embedding_{}", dtype_name(dtype)), "embedding.cuh",
                                               fmt::format("tn_embedding<{}, {}>", dtype_c_type(dtype), kWarpsPerBlock),
                                               launch.args, 32 * kWarpsPerBlock, TEENY_KERNEL_ORIGIN));
    launch.block = {32 * kWarpsPerBlock, 1, 1};
    launch.grid[0] = ceil_div(count, Expr(kWarpsPerBlock));
    launch.bytes = count * Expr(4) +
                   Expr(2) * count * Expr(ctx.attrs.integer("dim")) * Expr(static_cast<int64_t>(dtype_size(dtype)));
    launch.flops = Expr(0);
    lowering.launches.push_back(std::move(launch));
    return lowering;
  };
  def.conformance_cases = [] {
    std::vector<ConformanceCase> cases;
    for (DType dtype : float_dtypes()) {
      for (int dim : {64, 17, 1000}) {
        CaseNode node{"y", "embedding", {"ids"}, {{"num_embeddings", 50}, {"dim", dim}}};
        if (dtype != DType::kF32) node.dtype = dtype_name(dtype);
        cases.push_back({fmt::format("ids [B, W], dim {} {}", dim, dtype_name(dtype)),
                         case_graph({"B", "W"}, {{"ids", DType::kI32, "[B, W]"}}, {node}),
                         {{{"B", 1}, {"W", 1}}, {{"B", 3}, {"W", 17}}, {{"B", 64}, {"W", 129}}}});
      }
    }
    return cases;
  };
  // dweight: dy's rows added into the rows the ids pick (grad.embedding_dweight, reading the ids).
  def.backward = [](GradBuilder& g) {
    if (g.needs_input_grad(0))
      throw Error(fmt::format("node '{}': embedding's ids are integers and have no gradient", g.node()));
    if (g.needs_param_grad("weight"))
      g.param_grad("weight", g.add("grad.embedding_dweight", {g.grad_output(), g.input(0)},
                                   {{"num_embeddings", g.ctx().attrs.integer("num_embeddings")}}));
  };
  def.reference = [](const RefContext& ref) {
    const int64_t num = ref.op.attrs.integer("num_embeddings");
    const int64_t dim = ref.op.attrs.integer("dim");
    const std::vector<double>& weight = ref.params[0].data;
    HostTensor out;
    out.dtype = ref.op.output.dtype;
    out.shape = ref.output_shape;
    out.data.assign(ref.inputs[0].data.size() * dim, 0.0);
    for (size_t r = 0; r < ref.inputs[0].data.size(); ++r) {
      const int64_t id = static_cast<int64_t>(ref.inputs[0].data[r]);
      if (id < 0 || id >= num) continue;
      for (int64_t c = 0; c < dim; ++c) out.data[r * dim + c] = weight[id * dim + c];
    }
    return out;
  };
  return def;
}

}  // namespace teeny::ops
