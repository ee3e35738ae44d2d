// grad.embedding_dweight (ops.md, "Gradients"): embedding's weight gradient, a scatter-add of dy's
// rows into the rows their ids pick: dy [..., D], ids [...] -> [num_embeddings, D]. Duplicate ids
// sum; ids outside [0, num_embeddings) add nothing (their forward rows are zeros).
//
// Deterministic (ops/kernels/grad_embedding.cuh): three launches sort the positions by id
// (a counting sort over blocks of whole tiles, each id's positions kept in increasing order) into
// the scratch buffers "ends" and "order", then a block per id and column range adds that id's rows
// in position order. No floating-point atomics: the same ids and dy give the same bits on every
// run and GPU.
#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

// The sorting blocks: a power of two (bitonic tiles of one position a thread). A block sorts a
// run of tiles; at most kMaxOrderBlocks of them bound the [blocks, num] counts, whose offsets
// one block then scans.
constexpr int kOrderThreads = 1024;
constexpr int kMaxOrderBlocks = 128;
constexpr int kRowThreads = 128;

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  const TensorType& ids = ctx.inputs[1];
  if (ids.dtype != DType::kI32)
    throw OpError("inputs", fmt::format("grad.embedding_dweight ids must be i32, got {}", dtype_name(ids.dtype)));
  Shape expected = ids.shape;
  if (!dy.shape.empty()) expected.push_back(dy.shape.back());
  if (dy.shape.empty() || dy.shape != expected) {
    throw OpError("inputs", fmt::format("grad.embedding_dweight needs dy [..., D] over ids [...]; got {} and {}",
                                        shape_str(dy.shape), shape_str(ids.shape)));
  }
  OpContext dy_only = ctx;  // the float input decides the dtype; ids are i32
  dy_only.inputs.resize(1);
  const DType dtype = common_float_dtype(def, dy_only);
  return contiguous(output_float_dtype(def, ctx, dtype), {Expr(ctx.attrs.integer("num_embeddings")), dy.shape.back()});
}

Lowering lower(const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  const TensorType& ids = ctx.inputs[1];
  const DType dtype = dy.dtype;
  const Expr count = product(ids.shape);
  const Expr num(ctx.attrs.integer("num_embeddings"));
  const Expr dim = dy.shape.back();
  const Expr blocks = min(ceil_div(count, Expr(kOrderThreads)), Expr(kMaxOrderBlocks));
  Lowering lowering;
  lowering.scratch.push_back({"counts", DType::kI32, blocks * num});
  lowering.scratch.push_back({"ends", DType::kI32, num});
  lowering.scratch.push_back({"order", DType::kI32, count});
  const KernelArg ids_arg = input(1, "ids", DType::kI32);
  const std::vector<KernelArg> ids_layout = {i32("count", count),
                                             i32("ids_last", ids.shape.empty() ? Expr(1) : ids.shape.back()),
                                             i32("ids_stride", ids.row_stride), i32("num", num)};
  const auto order_launch = [&](const char* name, std::vector<KernelArg> args, const Expr& grid, const Expr& bytes) {
    Launch launch;
    launch.kernel = static_cast<int>(lowering.kernels.size());
    launch.args = std::move(args);
    lowering.kernels.push_back(template_kernel(fmt::format("grad_embedding_{}", name), "grad_embedding.cuh",
                                               fmt::format("tn_embedding_grad_{}<{}>", name, kOrderThreads),
                                               launch.args, kOrderThreads, TEENY_KERNEL_ORIGIN));
    launch.block = {kOrderThreads, 1, 1};
    launch.grid = {grid, Expr(1), Expr(1)};
    launch.bytes = bytes;
    launch.flops = Expr(0);
    lowering.launches.push_back(std::move(launch));
  };
  const auto with_ids = [&](std::vector<KernelArg> buffers) {
    std::vector<KernelArg> args = {ids_arg};
    args.insert(args.end(), buffers.begin(), buffers.end());
    args.insert(args.end(), ids_layout.begin(), ids_layout.end());
    return args;
  };
  const KernelArg counts = scratch("counts", "counts", DType::kI32);
  order_launch("count", with_ids({counts}), blocks, count * Expr(4) + blocks * num * Expr(4));
  order_launch("offsets", {counts, scratch("ends", "ends", DType::kI32), i32("blocks", blocks), i32("num", num)},
               Expr(1), blocks * num * Expr(8) + num * Expr(4));
  order_launch("place", with_ids({counts, scratch("order", "order", DType::kI32)}), blocks,
               count * Expr(8) + blocks * num * Expr(4));

  Launch rows;
  rows.kernel = static_cast<int>(lowering.kernels.size());
  rows.args = {input(0, "dy", dtype),
               scratch("order", "order", DType::kI32),
               scratch("ends", "ends", DType::kI32),
               output("dweight", dtype),
               i32("dim", dim),
               i32("dy_stride", dy.row_stride)};
  lowering.kernels.push_back(
      template_kernel(fmt::format("grad_embedding_rows_{}", dtype_name(dtype)), "grad_embedding.cuh",
                      fmt::format("tn_embedding_grad_rows<{}, {}>", dtype_c_type(dtype), kRowThreads), rows.args,
                      kRowThreads, TEENY_KERNEL_ORIGIN));
  rows.block = {kRowThreads, 1, 1};
  rows.grid = {num, ceil_div(dim, Expr(kRowThreads)), Expr(1)};
  const Expr elem(static_cast<int64_t>(dtype_size(dtype)));
  rows.bytes = (count + num) * dim * elem + count * Expr(4);
  rows.flops = count * dim;
  lowering.launches.push_back(std::move(rows));
  return lowering;
}

HostTensor reference(const RefContext& ref) {
  const std::vector<double>& dy = ref.inputs[0].data;
  const std::vector<double>& ids = ref.inputs[1].data;
  const int64_t num = ref.op.attrs.integer("num_embeddings");
  const int64_t dim = ref.output_shape.back();
  HostTensor dw{ref.op.output.dtype, ref.output_shape, std::vector<double>(num * dim, 0.0)};
  for (size_t p = 0; p < ids.size(); ++p) {
    const int64_t id = static_cast<int64_t>(ids[p]);
    if (id < 0 || id >= num) continue;
    for (int64_t c = 0; c < dim; ++c) dw.data[id * dim + c] += dy[p * dim + c];
  }
  return dw;
}

std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (DType dtype : float_dtypes()) {
    for (int dim : {1, 17, 1000}) {
      // 50 ids: every row repeats from B x W = 51 on; 64 x 129 positions are nine tiles of the
      // sort, each id across all of them.
      cases.push_back(
          {fmt::format("dy [B, W, {}], ids [B, W] {}", dim, dtype_name(dtype)),
           case_graph({"B", "W"}, {{"dy", dtype, fmt::format("[B, W, {}]", dim)}, {"ids", DType::kI32, "[B, W]"}},
                      {{"dw", "grad.embedding_dweight", {"dy", "ids"}, {{"num_embeddings", 50}}}}),
           {{{"B", 1}, {"W", 1}}, {{"B", 3}, {"W", 17}}, {{"B", 64}, {"W", 129}}}});
    }
  }
  // More tiles of positions than order blocks: each block sorts a run of tiles.
  cases.push_back({"dy [W, 1], ids [W], 150 tiles of positions",
                   case_graph({"W"}, {{"dy", DType::kF32, "[W, 1]"}, {"ids", DType::kI32, "[W]"}},
                              {{"dw", "grad.embedding_dweight", {"dy", "ids"}, {{"num_embeddings", 50}}}}),
                   {{{"W", 150 * 1024 - 5}}}});
  // More ids than positions: most rows are zero.
  cases.push_back({"dy [W, 64], ids [W], 70000 ids",
                   case_graph({"W"}, {{"dy", DType::kF32, "[W, 64]"}, {"ids", DType::kI32, "[W]"}},
                              {{"dw", "grad.embedding_dweight", {"dy", "ids"}, {{"num_embeddings", 70000}}}}),
                   {{{"W", 1}}, {{"W", 3000}}}});
  return cases;
}

}  // namespace

OpDef grad_embedding_dweight_op() {
  OpDef def;
  def.name = "grad.embedding_dweight";
  def.doc =
      "embedding's weight gradient: dy's rows added into the rows their ids pick, duplicates summed in position order";
  def.inputs = {{"dy", "dL/dy [..., D]"}, {"ids", "the forward i32 ids [...]", "num_embeddings"}};
  def.attrs = {attr_spec("num_embeddings", AttrType::kInt, "rows of the table")};
  def.attrs[0].min_value = 1;
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
