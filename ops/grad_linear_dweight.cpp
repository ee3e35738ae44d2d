// grad.linear_dweight (ops.md, "Gradients"): linear's weight gradient dW = dyᵀ · x, summed over
// every row: dy [..., N], x [..., K] (the forward input) -> [N, K].
//
// One GEMM (ops/grad_gemm.h) whose sum runs over the rows: A = dyᵀ, read in place as stored
// [rows, N] (the GEMM's transposed-A tiles), B = x [rows, K]; no transpose node, so dy makes
// one trip through memory.
#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/grad_gemm.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

Shape leading(const Shape& shape) { return Shape(shape.begin(), shape.end() - 1); }

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const DType dtype = output_float_dtype(def, ctx, common_float_dtype(def, ctx));
  const TensorType& dy = ctx.inputs[0];
  const TensorType& x = ctx.inputs[1];
  if (dy.shape.empty() || x.shape.empty() || leading(dy.shape) != leading(x.shape)) {
    throw OpError("inputs", fmt::format("grad.linear_dweight needs dy [..., N] and x [..., K] with the same leading "
                                        "dims; got {} and {}",
                                        shape_str(dy.shape), shape_str(x.shape)));
  }
  return contiguous(dtype, {dy.shape.back(), x.shape.back()});
}

GradGemm gemm_of(const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  const TensorType& x = ctx.inputs[1];
  GradGemm gemm;
  gemm.op = "grad_linear_dweight";
  gemm.dtype = ctx.output.dtype;
  gemm.a_layout = GemmALayout::kKM;
  gemm.a = input(0, "a", gemm.dtype);
  gemm.b = input(1, "b", gemm.dtype);
  gemm.m = dy.shape.back();
  gemm.n = x.shape.back();
  gemm.k = product(leading(dy.shape));
  gemm.lda = dy.row_stride;
  gemm.ldb = x.row_stride;
  gemm.a_elements = gemm.k * gemm.m;
  gemm.b_elements = gemm.k * gemm.n;
  gemm.sums_rows = true;
  return gemm;
}

Lowering lower(const OpContext& ctx) { return lower_grad_gemm(gemm_of(ctx), ctx.target_sm, ctx.variant); }

HostTensor reference(const RefContext& ref) {
  const HostTensor& dy = ref.inputs[0];
  const HostTensor& x = ref.inputs[1];
  HostGemm g;
  g.m = dy.shape.back();
  g.n = x.shape.back();
  g.k = g.m == 0 ? 0 : dy.numel() / g.m;
  g.a_row = 1;
  g.a_col = g.m;
  g.b_row = g.n;
  g.b_col = 1;
  return {ref.op.output.dtype, ref.output_shape, host_gemm(g, dy.data, x.data, {0}, {0})};
}

std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  auto dw_case = [](DType dtype, const std::string& dy, const std::string& x, std::vector<Bindings> bindings) {
    return ConformanceCase{
        fmt::format("dy {}, x {} {}", dy, x, dtype_name(dtype)),
        case_graph({"B", "W"}, {{"dy", dtype, dy}, {"x", dtype, x}}, {{"dw", "grad.linear_dweight", {"dy", "x"}}}),
        std::move(bindings)};
  };
  for (DType dtype : float_dtypes()) {
    // The sum runs over B rows (1, odd, many tiles); N and K of 1, 7 and 1000-ish.
    const std::vector<Bindings> rows = {{{"B", 1}, {"W", 1}}, {{"B", 7}, {"W", 7}}, {{"B", 1000}, {"W", 999}}};
    cases.push_back(dw_case(dtype, "[B, W]", "[B, 7]", rows));
    cases.push_back(dw_case(dtype, "[B, 1]", "[B, W]", rows));
    cases.push_back(dw_case(dtype, "[B, 1003]", "[B, W]", {{{"B", 3}, {"W", 1}}, {{"B", 257}, {"W", 768}}}));
    cases.push_back(dw_case(dtype, "[B, 3, 64]", "[B, 3, W]", {{{"B", 1}, {"W", 17}}, {{"B", 700}, {"W", 130}}}));
    // Few output tiles over a long sum: split over the rows, and ragged M, N and K (one k-step
    // past a whole number of them).
    cases.push_back(dw_case(dtype, "[B, 64]", "[B, 48]", {{{"B", 4097}}, {{"B", 20000}}}));
    cases.push_back(dw_case(dtype, "[B, 770]", "[B, 17]", {{{"B", 1}}, {{"B", 4097}}}));
    // Rows of 16-byte multiples (16-bit on sm_90: wgmma by TMA, both operands MN-major): ragged
    // tiles, then 4 tiles over 12000 rows, split.
    cases.push_back(dw_case(dtype, "[B, 200]", "[B, 136]", {{{"B", 1}}, {{"B", 1000}}, {{"B", 4097}}}));
    cases.push_back(dw_case(dtype, "[B, 256]", "[B, 256]", {{{"B", 12000}}}));
  }
  // 16-bit dy with padded rows (20 of 24) and x of 16: TMA reads dy's stride.
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    cases.push_back({fmt::format("padded dy (linear, 20 of 24), x 16 {}", dtype_name(dtype)),
                     case_graph({"B"}, {{"x", dtype, "[B, 8]"}},
                                {{"p", "linear", {"x"}, {{"out_features", 20}}},
                                 {"q", "linear", {"x"}, {{"out_features", 16}}},
                                 {"dw", "grad.linear_dweight", {"p", "q"}}}),
                     {{{"B", 1}}, {{"B", 999}}, {{"B", 4097}}}});
  }
  // Both operands with padded rows (two linears' 17 of 20 and 9 of 12).
  cases.push_back({"padded dy and x (linears 17 of 20, 9 of 12)",
                   case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}},
                              {{"p", "linear", {"x"}, {{"out_features", 17}}},
                               {"q", "linear", {"x"}, {{"out_features", 9}}},
                               {"dw", "grad.linear_dweight", {"p", "q"}}}),
                   {{{"B", 1}}, {{"B", 999}}}});
  return cases;
}

}  // namespace

OpDef grad_linear_dweight_op() {
  OpDef def;
  def.name = "grad.linear_dweight";
  def.doc = "linear's weight gradient dyᵀ · x over every row: dy [..., N], x [..., K] -> [N, K]";
  def.inputs = {{"dy", "dL/dy [..., N]"}, {"x", "the forward input [..., K]"}};
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.lower = lower;
  def.reference = reference;
  def.conformance_cases = conformance_cases;
  def.tuning = grad_gemm_tuning(gemm_of);
  return def;
}

}  // namespace teeny::ops
