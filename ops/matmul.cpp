// matmul: a [..., M, K] · b [..., K, N] -> [..., M, N], batch dims broadcast (NumPy rules).
// One launch over all batches: the block id picks the batch and the output tile; per-batch
// offsets come from each operand's batch strides (0 where it broadcasts).
#include <fmt/format.h>

#include "core/autodiff.h"
#include "ops/conformance.h"
#include "ops/dense_gemm.h"
#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

Shape batch_dims(const Shape& shape) { return Shape(shape.begin(), shape.end() - 2); }

TensorType infer_matmul(const OpDef& meta, const OpContext& ctx) {
  const TensorType& a = ctx.inputs.at(0);
  const TensorType& b = ctx.inputs.at(1);
  if (a.shape.size() < 2 || b.shape.size() < 2) {
    throw OpError("inputs", fmt::format("matmul needs inputs of rank >= 2 ([..., M, K] and [..., K, N]); "
                                        "got {} and {}",
                                        shape_str(a.shape), shape_str(b.shape)));
  }
  const DType dtype = common_float_dtype(meta, ctx);
  output_float_dtype(meta, ctx, dtype);
  const Expr& ka = a.shape.back();
  const Expr& kb = b.shape[b.shape.size() - 2];
  if (ka != kb) {
    throw OpError("inputs", fmt::format("matmul: a's last dim ({}) must equal b's second-to-last dim ({}); "
                                        "a is {}, b is {}",
                                        ka.str(), kb.str(), shape_str(a.shape), shape_str(b.shape)));
  }
  Shape out = broadcast_shapes(batch_dims(a.shape), batch_dims(b.shape));
  out.push_back(a.shape[a.shape.size() - 2]);
  out.push_back(b.shape.back());
  return contiguous(dtype, out);
}

// Element stride of each output batch dim in `operand` (0 where the operand broadcasts).
std::vector<Expr> batch_strides(const TensorType& operand, const Shape& out_batch) {
  const std::vector<Expr> strides = element_strides(operand);
  const Shape batch = batch_dims(operand.shape);
  std::vector<Expr> result(out_batch.size(), Expr(0));
  const size_t offset = out_batch.size() - batch.size();
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].const_value() != 1) result[offset + i] = strides[i];
  }
  return result;
}

// The tile of the context's variant, or the heuristic's.
GemmTile matmul_tile(const OpContext& ctx, const Expr& n, const Expr& k) {
  const DType dtype = ctx.output.dtype;
  if (ctx.variant.empty()) return choose_gemm_tile(dtype, GemmBLayout::kKN, n, k, ctx.target_sm);
  for (const GemmTile& tile : gemm_tile_candidates(dtype, GemmBLayout::kKN, ctx.target_sm, false)) {
    if (gemm_tile_name(tile) == ctx.variant) return tile;
  }
  throw OpError("op", fmt::format("matmul has no variant '{}' here", ctx.variant));
}

// matmul's tuning: dims Batch (the output's batch elements), M, N, K; a variant per GEMM tile.
// The reference cannot be sampled by rows (b may be batched), so tune checks whole outputs.
OpTuning matmul_tuning() {
  OpTuning tuning;
  tuning.dims = [](const OpContext& ctx) {
    const TensorType& a = ctx.inputs.at(0);
    return std::vector<std::pair<std::string, Expr>>{{"Batch", product(batch_dims(ctx.output.shape))},
                                                     {"M", a.shape[a.shape.size() - 2]},
                                                     {"N", ctx.inputs.at(1).shape.back()},
                                                     {"K", a.shape.back()}};
  };
  tuning.variants = [](const OpContext& ctx) {
    std::vector<OpVariant> variants;
    for (const GemmTile& tile : gemm_tile_candidates(ctx.output.dtype, GemmBLayout::kKN, ctx.target_sm, false))
      variants.push_back({gemm_tile_name(tile)});
    return variants;
  };
  return tuning;
}

Lowering lower_matmul(const OpContext& ctx) {
  const TensorType& a = ctx.inputs.at(0);
  const TensorType& b = ctx.inputs.at(1);
  const DType dtype = ctx.output.dtype;
  const Shape out_batch = batch_dims(ctx.output.shape);
  const Expr m = a.shape[a.shape.size() - 2];
  const Expr k = a.shape.back();
  const Expr n = b.shape.back();
  const Expr batches = product(out_batch);
  const GemmTile tile = matmul_tile(ctx, n, k);
  const std::vector<Expr> a_strides = batch_strides(a, out_batch);
  const std::vector<Expr> b_strides = batch_strides(b, out_batch);

  Launch launch;
  launch.args = {input(0, "a", dtype), input(1, "b", dtype), output("c", dtype),       i32("M", m),
                 i32("N", n),          i32("K", k),          i32("lda", a.row_stride), i32("ldb", b.row_stride)};
  // Per output batch dim, innermost first (tn_matmul_batch_offsets): its extent and the
  // operands' strides.
  for (size_t i = out_batch.size(); i-- > 0;) {
    launch.args.push_back(i32(fmt::format("batch{}", i), out_batch[i]));
    launch.args.push_back(i64(fmt::format("a_stride{}", i), a_strides[i]));
    launch.args.push_back(i64(fmt::format("b_stride{}", i), b_strides[i]));
  }
  launch.block = {tile.threads, 1, 1};
  launch.grid = {gemm_tiles(tile, m, n) * batches, Expr(1), Expr(1)};
  const Expr elem(static_cast<int64_t>(dtype_size(dtype)));
  launch.bytes = (product(a.shape) + product(b.shape) + product(ctx.output.shape)) * elem;
  launch.flops = Expr(2) * batches * m * n * k;

  KernelSource kernel = template_kernel(
      gemm_kernel_name("matmul", dtype, GemmBLayout::kKN, false, tile) + fmt::format("_b{}", out_batch.size()),
      "gemm.cuh", fmt::format("tn_matmul<{}>", gemm_kernel_class(dtype, GemmBLayout::kKN, false, tile)), launch.args,
      tile.threads, TEENY_KERNEL_ORIGIN, tile.min_blocks);
  return Lowering{{kernel}, {launch}};
}

// Index of the operand element for output batch index `z` (row-major over `out_batch`).
int64_t operand_batch(int64_t z, const std::vector<int64_t>& out_batch, const std::vector<int64_t>& batch) {
  int64_t index = 0, scale = 1;
  for (size_t i = out_batch.size(); i-- > 0;) {
    const int64_t idx = z % out_batch[i];
    z /= out_batch[i];
    const size_t offset = out_batch.size() - batch.size();
    if (i >= offset) {
      const int64_t extent = batch[i - offset];
      index += (extent == 1 ? 0 : idx) * scale;
      scale *= extent;
    }
  }
  return index;
}

HostTensor matmul_reference(const RefContext& ref) {
  const HostTensor& a = ref.inputs.at(0);
  const HostTensor& b = ref.inputs.at(1);
  const size_t rank = ref.output_shape.size();
  const int64_t m = ref.output_shape[rank - 2], n = ref.output_shape[rank - 1];
  const int64_t k = a.shape.back();
  const std::vector<int64_t> out_batch(ref.output_shape.begin(), ref.output_shape.end() - 2);
  const std::vector<int64_t> a_batch(a.shape.begin(), a.shape.end() - 2);
  const std::vector<int64_t> b_batch(b.shape.begin(), b.shape.end() - 2);
  int64_t batches = 1;
  for (int64_t d : out_batch) batches *= d;
  HostTensor c{ref.op.output.dtype, ref.output_shape, std::vector<double>(batches * m * n)};
  for (int64_t z = 0; z < batches; ++z) {
    const double* pa = a.data.data() + operand_batch(z, out_batch, a_batch) * m * k;
    const double* pb = b.data.data() + operand_batch(z, out_batch, b_batch) * k * n;
    double* pc = c.data.data() + z * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) acc += pa[i * k + p] * pb[p * n + j];
        pc[i * n + j] = acc;
      }
  }
  return c;
}

// da = dc · bᵀ and db = aᵀ · dc per batch of the output (grad.matmul_da, grad.matmul_db, reading
// b and a: what the forward pass saves), each summed over the batch dims its operand broadcast
// along (grad.sum_to). A 2-D b under a batched a (x @ W) takes its gradient in one GEMM whose sum
// runs over every row of every batch.
void matmul_backward(GradBuilder& g) {
  const std::string& dc = g.grad_output();
  const Shape& a = g.type(g.input(0)).shape;
  const Shape& b = g.type(g.input(1)).shape;
  if (g.needs_input_grad(0)) g.input_grad(0, sum_to(g, g.add("grad.matmul_da", {dc, g.input(1)}), g.input(0)));
  if (!g.needs_input_grad(1)) return;
  const bool one_gemm = b.size() == 2 && batch_dims(a) == batch_dims(g.type(dc).shape);
  g.input_grad(1, one_gemm ? g.add("grad.matmul_db", {g.input(0), dc}, {{"sum_batches", true}})
                           : sum_to(g, g.add("grad.matmul_db", {g.input(0), dc}), g.input(1)));
}

}  // namespace

OpDef matmul_op() {
  OpDef def;
  def.name = "matmul";
  def.doc = "a [..., M, K] · b [..., K, N] -> [..., M, N]; batch dims broadcast";
  def.inputs = {{"a", "[..., M, K]"}, {"b", "[..., K, N]"}};
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_matmul(meta, ctx); };
  def.lower = lower_matmul;
  def.tuning = matmul_tuning();
  def.reference = matmul_reference;
  def.backward = matmul_backward;
  def.conformance_cases = [] {
    std::vector<ConformanceCase> cases;
    for (DType dtype : float_dtypes()) {
      const std::string dt = dtype_name(dtype);
      cases.push_back(
          {"[B, 19, W] @ [W, 33] " + dt,
           case_graph({"B", "W"}, {{"a", dtype, "[B, 19, W]"}, {"b", dtype, "[W, 33]"}}, {{"c", "matmul", {"a", "b"}}}),
           awkward_rows()});
      cases.push_back({"[B, 1, 20, 17] @ [3, 17, 600] (broadcast both ways) " + dt,
                       case_graph({"B"}, {{"a", dtype, "[B, 1, 20, 17]"}, {"b", dtype, "[3, 17, 600]"}},
                                  {{"c", "matmul", {"a", "b"}}}),
                       {{{"B", 1}}, {{"B", 5}}}});
      cases.push_back({"[B, S, 64] @ [B, 64, S] " + dt,
                       case_graph({"B", "S"}, {{"a", dtype, "[B, S, 64]"}, {"b", dtype, "[B, 64, S]"}},
                                  {{"c", "matmul", {"a", "b"}}}),
                       {{{"B", 1}, {"S", 1}}, {{"B", 3}, {"S", 130}}, {{"B", 2}, {"S", 257}}}});
      cases.push_back({"padded a (linear 17 of 20/24) @ [17, 70] " + dt,
                       case_graph({"B"}, {{"x", dtype, "[B, 8]"}, {"b", dtype, "[17, 70]"}},
                                  {{"p", "linear", {"x"}, {{"out_features", 17}}}, {"c", "matmul", {"p", "b"}}}),
                       {{{"B", 1}}, {{"B", 300}}}});
    }
    return cases;
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
