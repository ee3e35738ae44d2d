// grad.matmul_da, grad.matmul_db (ops.md, "Gradients"): matmul's operand gradients per batch of
// the output, c = a · b with a [..., M, K], b [..., K, N] and dc [..., M, N]:
//   da = dc · bᵀ -> [batch..., M, K]     db = aᵀ · dc -> [batch..., K, N]
// where batch is dc's (the broadcast batch); an operand that broadcast is read at stride 0, and
// the backward rule sums its gradient over the broadcast dims afterwards (ops/matmul.cpp).
// With `sum_batches`, db is summed over every batch in one GEMM over all rows: [K, N] (x @ W
// with a 2-D W).
//
// One batched GEMM each (ops/grad_gemm.h): da reads b as [N, K] (its rows are K, N contiguous),
// db reads a transposed in place.
#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/grad_gemm.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

Shape batch_dims(const Shape& shape) { return Shape(shape.begin(), shape.end() - 2); }
Expr at_end(const Shape& shape, size_t from_end) { return shape[shape.size() - 1 - from_end]; }

// `operand`'s batch dims broadcast to `batch` (dc's); throws OpError otherwise.
void check_broadcasts_to(const std::string& op, const TensorType& operand, const TensorType& dc) {
  const Shape batch = batch_dims(dc.shape);
  bool broadcasts = false;
  try {
    broadcasts = broadcast_shapes(batch_dims(operand.shape), batch) == batch;
  } catch (const OpError&) {
    // dims that do not match: reported below, naming both batch shapes
  }
  if (!broadcasts) {
    throw OpError("inputs", fmt::format("{}: the operand's batch dims {} do not broadcast to dc's {}", op,
                                        shape_str(batch_dims(operand.shape)), shape_str(batch)));
  }
}

void check_ranks(const std::string& op, const TensorType& a, const TensorType& b) {
  if (a.shape.size() < 2 || b.shape.size() < 2) {
    throw OpError("inputs", fmt::format("{} needs inputs of rank >= 2; got {} and {}", op, shape_str(a.shape),
                                        shape_str(b.shape)));
  }
}

TensorType infer_da(const OpDef& def, const OpContext& ctx) {
  const DType dtype = output_float_dtype(def, ctx, common_float_dtype(def, ctx));
  const TensorType& dc = ctx.inputs[0];
  const TensorType& b = ctx.inputs[1];
  check_ranks(def.name, dc, b);
  if (at_end(dc.shape, 0) != at_end(b.shape, 0)) {
    throw OpError("inputs", fmt::format("grad.matmul_da needs dc [..., M, N] and b [..., K, N]; got {} and {}",
                                        shape_str(dc.shape), shape_str(b.shape)));
  }
  check_broadcasts_to(def.name, b, dc);
  Shape shape = batch_dims(dc.shape);
  shape.push_back(at_end(dc.shape, 1));
  shape.push_back(at_end(b.shape, 1));
  return contiguous(dtype, shape);
}

TensorType infer_db(const OpDef& def, const OpContext& ctx) {
  const DType dtype = output_float_dtype(def, ctx, common_float_dtype(def, ctx));
  const TensorType& a = ctx.inputs[0];
  const TensorType& dc = ctx.inputs[1];
  check_ranks(def.name, a, dc);
  if (at_end(a.shape, 1) != at_end(dc.shape, 1)) {
    throw OpError("inputs", fmt::format("grad.matmul_db needs a [..., M, K] and dc [..., M, N]; got {} and {}",
                                        shape_str(a.shape), shape_str(dc.shape)));
  }
  check_broadcasts_to(def.name, a, dc);
  const bool sum_batches = ctx.attrs.boolean("sum_batches");
  if (sum_batches && batch_dims(a.shape) != batch_dims(dc.shape)) {
    throw OpError("inputs",
                  fmt::format("grad.matmul_db with sum_batches needs a's batch dims to be dc's; got {} and {}",
                              shape_str(a.shape), shape_str(dc.shape)));
  }
  Shape shape = sum_batches ? Shape{} : batch_dims(dc.shape);
  shape.push_back(at_end(a.shape, 0));
  shape.push_back(at_end(dc.shape, 0));
  return contiguous(dtype, shape);
}

// Each of dc's batch dims with dc's and `operand`'s element strides (0 where it broadcasts).
std::vector<GradGemm::BatchDim> batch_of(const TensorType& dc, const TensorType& operand, bool operand_is_a) {
  const Shape batch = batch_dims(dc.shape);
  const std::vector<Expr> dc_strides = element_strides(dc);
  const std::vector<Expr> op_strides = element_strides(operand);
  const Shape op_batch = batch_dims(operand.shape);
  const size_t offset = batch.size() - op_batch.size();
  std::vector<GradGemm::BatchDim> dims;
  for (size_t i = 0; i < batch.size(); ++i) {
    Expr op_stride(0);
    if (i >= offset && op_batch[i - offset].const_value() != 1) op_stride = op_strides[i - offset];
    dims.push_back(operand_is_a ? GradGemm::BatchDim{batch[i], op_stride, dc_strides[i]}
                                : GradGemm::BatchDim{batch[i], dc_strides[i], op_stride});
  }
  return dims;
}

GradGemm da_gemm(const OpContext& ctx) {
  const TensorType& dc = ctx.inputs[0];
  const TensorType& b = ctx.inputs[1];
  GradGemm gemm;
  gemm.op = "grad_matmul_da";
  gemm.dtype = ctx.output.dtype;
  gemm.b_layout = GemmBLayout::kNK;
  gemm.a = input(0, "a", gemm.dtype);
  gemm.b = input(1, "b", gemm.dtype);
  gemm.m = at_end(dc.shape, 1);
  gemm.n = at_end(b.shape, 1);
  gemm.k = at_end(dc.shape, 0);
  gemm.lda = dc.row_stride;
  gemm.ldb = b.row_stride;
  gemm.batch = batch_of(dc, b, false);
  gemm.a_elements = product(dc.shape);
  gemm.b_elements = product(b.shape);
  return gemm;
}

GradGemm db_gemm(const OpContext& ctx) {
  const TensorType& a = ctx.inputs[0];
  const TensorType& dc = ctx.inputs[1];
  const bool sum_batches = ctx.attrs.boolean("sum_batches");
  GradGemm gemm;
  gemm.op = sum_batches ? "grad_matmul_db_sum" : "grad_matmul_db";
  gemm.dtype = ctx.output.dtype;
  gemm.a_layout = GemmALayout::kKM;
  gemm.a = input(0, "a", gemm.dtype);
  gemm.b = input(1, "b", gemm.dtype);
  gemm.m = at_end(a.shape, 0);
  gemm.n = at_end(dc.shape, 0);
  // Summed over the batches: their rows are one run of rows at a's and dc's row strides.
  gemm.k = sum_batches ? product(batch_dims(dc.shape)) * at_end(dc.shape, 1) : at_end(dc.shape, 1);
  gemm.lda = a.row_stride;
  gemm.ldb = dc.row_stride;
  if (!sum_batches) gemm.batch = batch_of(dc, a, true);
  gemm.a_elements = product(a.shape);
  gemm.b_elements = product(dc.shape);
  gemm.sums_rows = true;
  return gemm;
}

Lowering lower_da(const OpContext& ctx) { return lower_grad_gemm(da_gemm(ctx), ctx.target_sm, ctx.variant); }
Lowering lower_db(const OpContext& ctx) { return lower_grad_gemm(db_gemm(ctx), ctx.target_sm, ctx.variant); }

// The element offset of `operand`'s matrix for each batch of dc (row-major over dc's batch dims;
// 0 along dims where the operand broadcasts), contiguous host data.
std::vector<int64_t> host_offsets(const std::vector<int64_t>& dc_shape, const std::vector<int64_t>& shape) {
  const std::vector<int64_t> batch(dc_shape.begin(), dc_shape.end() - 2);
  const std::vector<int64_t> op_batch(shape.begin(), shape.end() - 2);
  const int64_t matrix = shape[shape.size() - 2] * shape.back();
  int64_t batches = 1;
  for (int64_t d : batch) batches *= d;
  std::vector<int64_t> offsets;
  for (int64_t z = 0; z < batches; ++z) {
    int64_t index = 0, scale = 1, rest = z;
    for (size_t i = batch.size(); i-- > 0;) {
      const int64_t idx = rest % batch[i];
      rest /= batch[i];
      if (i < batch.size() - op_batch.size()) continue;
      const int64_t extent = op_batch[i - (batch.size() - op_batch.size())];
      index += (extent == 1 ? 0 : idx) * scale;
      scale *= extent;
    }
    offsets.push_back(index * matrix);
  }
  return offsets;
}

HostTensor reference_da(const RefContext& ref) {
  const HostTensor& dc = ref.inputs[0];
  const HostTensor& b = ref.inputs[1];
  HostGemm g;
  g.m = dc.shape[dc.shape.size() - 2];
  g.k = dc.shape.back();
  g.n = b.shape[b.shape.size() - 2];
  g.a_row = g.k;
  g.a_col = 1;
  g.b_row = 1;  // bᵀ: element (n, k) of b [K, N] at k * N + n
  g.b_col = g.k;
  return {ref.op.output.dtype, ref.output_shape,
          host_gemm(g, dc.data, b.data, host_offsets(dc.shape, dc.shape), host_offsets(dc.shape, b.shape))};
}

HostTensor reference_db(const RefContext& ref) {
  const HostTensor& a = ref.inputs[0];
  const HostTensor& dc = ref.inputs[1];
  HostGemm g;
  g.m = a.shape.back();
  g.n = dc.shape.back();
  g.k = dc.shape[dc.shape.size() - 2];
  g.a_row = 1;  // aᵀ: element (k, m) of a [M, K] at m * K + k
  g.a_col = g.m;
  g.b_row = g.n;
  g.b_col = 1;
  std::vector<double> c =
      host_gemm(g, a.data, dc.data, host_offsets(dc.shape, a.shape), host_offsets(dc.shape, dc.shape));
  if (ref.op.attrs.boolean("sum_batches")) {
    std::vector<double> sum(g.m * g.n, 0.0);
    for (size_t i = 0; i < c.size(); ++i) sum[i % sum.size()] += c[i];
    c = std::move(sum);
  }
  return {ref.op.output.dtype, ref.output_shape, std::move(c)};
}

ConformanceCase pair_case(const std::string& op, DType dtype, const std::string& first, const std::string& second,
                          std::vector<Bindings> bindings, nlohmann::json attrs = nlohmann::json::object()) {
  const bool da = op == "grad.matmul_da";
  return {
      fmt::format("{} {}, {} {}{} {}", da ? "dc" : "a", first, da ? "b" : "dc", second,
                  attrs.empty() ? "" : " " + attrs.dump(), dtype_name(dtype)),
      case_graph({"B", "W"}, {{"p", dtype, first}, {"q", dtype, second}}, {{"g", op, {"p", "q"}, std::move(attrs)}}),
      std::move(bindings)};
}

std::vector<ConformanceCase> da_cases() {
  std::vector<ConformanceCase> cases;
  for (DType dtype : float_dtypes()) {
    // K = W (1, 3, 17, 1000, 4097) with N = 7 and N = 1000; b broadcast in one dim, then both
    // batch dims (a 2-D b).
    cases.push_back(pair_case("grad.matmul_da", dtype, "[B, 19, 7]", "[W, 7]", awkward_rows()));
    cases.push_back(pair_case("grad.matmul_da", dtype, "[B, 19, 1000]", "[B, W, 1000]",
                              {{{"B", 1}, {"W", 1}}, {{"B", 3}, {"W", 130}}}));
    cases.push_back(pair_case("grad.matmul_da", dtype, "[B, 3, 20, 600]", "[1, 3, 17, 600]",
                              {{{"B", 1}, {"W", 1}}, {{"B", 5}, {"W", 1}}}));
    // 2-D, rows of 16-byte multiples (16-bit on sm_90: wgmma by TMA, both operands K-major); a
    // long K over one tile (split).
    cases.push_back(pair_case("grad.matmul_da", dtype, "[W, 264]", "[136, 264]", {{{"W", 1000}}, {{"W", 4097}}}));
    cases.push_back(pair_case("grad.matmul_da", dtype, "[W, 4096]", "[72, 4096]", {{{"W", 1}}, {{"W", 100}}}));
  }
  return cases;
}

std::vector<ConformanceCase> db_cases() {
  std::vector<ConformanceCase> cases;
  for (DType dtype : float_dtypes()) {
    // The sum runs over M = 19, then over B x W rows; K of 1, 7 and 1000-ish, N odd.
    cases.push_back(pair_case("grad.matmul_db", dtype, "[B, 19, W]", "[B, 19, 7]", awkward_rows()));
    cases.push_back(pair_case("grad.matmul_db", dtype, "[19, 1]", "[B, 19, W]", awkward_rows()));
    cases.push_back(pair_case("grad.matmul_db", dtype, "[B, W, 1001]", "[B, W, 33]",
                              {{{"B", 1}, {"W", 1}}, {{"B", 4}, {"W", 300}}}, {{"sum_batches", true}}));
    cases.push_back(pair_case("grad.matmul_db", dtype, "[1, 3, 20, 17]", "[B, 3, 20, 600]",
                              {{{"B", 1}, {"W", 1}}, {{"B", 5}, {"W", 1}}}));
    // 2-D and summed over batches, rows of 16-byte multiples (16-bit on sm_90: wgmma by TMA,
    // both operands MN-major): one tile over many rows, split.
    cases.push_back(pair_case("grad.matmul_db", dtype, "[W, 72]", "[W, 136]", {{{"W", 1}}, {{"W", 12000}}}));
    cases.push_back(pair_case("grad.matmul_db", dtype, "[B, W, 72]", "[B, W, 136]", {{{"B", 3}, {"W", 4097}}},
                              {{"sum_batches", true}}));
  }
  return cases;
}

}  // namespace

OpDef grad_matmul_da_op() {
  OpDef def;
  def.name = "grad.matmul_da";
  def.doc = "matmul's gradient of a per output batch: dc [..., M, N] · bᵀ (b [..., K, N]) -> [..., M, K]";
  def.inputs = {{"dc", "dL/dc [..., M, N]"}, {"b", "the forward b [..., K, N], broadcasting to dc's batch"}};
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_da(meta, ctx); };
  def.lower = lower_da;
  def.reference = reference_da;
  def.conformance_cases = da_cases;
  // The outputs are checked whole: b may be batched, so dc's rows alone do not give da's.
  def.tuning = grad_gemm_tuning(da_gemm);
  return def;
}

OpDef grad_matmul_db_op() {
  OpDef def;
  def.name = "grad.matmul_db";
  def.doc = "matmul's gradient of b per output batch: aᵀ (a [..., M, K]) · dc [..., M, N] -> [..., K, N]";
  def.inputs = {{"a", "the forward a [..., M, K], broadcasting to dc's batch"}, {"dc", "dL/dc [..., M, N]"}};
  def.attrs = {attr_spec("sum_batches", AttrType::kBool,
                         "sum over every batch (a's batch dims are dc's): [K, N] in one GEMM over all rows",
                         nlohmann::json(false))};
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_db(meta, ctx); };
  def.lower = lower_db;
  def.reference = reference_db;
  def.conformance_cases = db_cases;
  def.tuning = grad_gemm_tuning(db_gemm);
  return def;
}

}  // namespace teeny::ops
