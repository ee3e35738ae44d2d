// grad.linear_dx (ops.md, "Gradients"): linear's input gradient dx = dy · W, dy [..., N] and the
// forward node's weight [N, K] (a param ref in a training graph) -> [..., K], contiguous.
//
// One GEMM (ops/grad_gemm.h): A = dy [rows, N] at its row stride, B = W read as [K, N] in
// place.
#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/grad_gemm.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  if (dy.shape.empty()) throw OpError("inputs", "grad.linear_dx needs dy of rank >= 1, got a scalar");
  Shape shape = dy.shape;
  shape.back() = Expr(ctx.attrs.integer("in_features"));
  return contiguous(output_float_dtype(def, ctx, common_float_dtype(def, ctx)), shape);
}

std::vector<ParamSpec> params(const OpContext& ctx) {
  return {{"weight", {ctx.inputs[0].shape.back(), ctx.output.shape.back()}, ctx.output.dtype, ParamInit::kTrained, {}}};
}

Lowering lower(const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  GradGemm gemm;
  gemm.op = "grad_linear_dx";
  gemm.dtype = ctx.output.dtype;
  gemm.a = input(0, "a", gemm.dtype);
  gemm.b = param("weight", "b", gemm.dtype);
  gemm.m = product(Shape(dy.shape.begin(), dy.shape.end() - 1));
  gemm.n = ctx.output.shape.back();
  gemm.k = dy.shape.back();
  gemm.lda = dy.row_stride;
  gemm.ldb = gemm.n;
  gemm.a_elements = gemm.m * gemm.k;
  gemm.b_elements = gemm.k * gemm.n;
  return lower_grad_gemm(gemm, ctx.target_sm);
}

HostTensor reference(const RefContext& ref) {
  const HostTensor& dy = ref.inputs[0];
  const int64_t n = dy.shape.back(), k = ref.output_shape.back();
  HostGemm g;
  g.m = n == 0 ? 0 : dy.numel() / n;
  g.n = k;
  g.k = n;
  g.a_row = n;
  g.a_col = 1;
  g.b_row = k;
  g.b_col = 1;
  return {ref.op.output.dtype, ref.output_shape, host_gemm(g, dy.data, ref.params[0].data, {0}, {0})};
}

std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (DType dtype : float_dtypes()) {
    const std::string dt = dtype_name(dtype);
    // N = W over awkward widths; K of one element, odd, and over one wide tile.
    for (int k : {1, 7, 1000}) {
      cases.push_back(
          {fmt::format("dy [B, W] -> {} {}", k, dt),
           case_graph({"B", "W"}, {{"dy", dtype, "[B, W]"}}, {{"dx", "grad.linear_dx", {"dy"}, {{"in_features", k}}}}),
           awkward_rows()});
    }
    cases.push_back(
        {"dy [B, 3, 768] -> 1001 " + dt,
         case_graph({"B"}, {{"dy", dtype, "[B, 3, 768]"}}, {{"dx", "grad.linear_dx", {"dy"}, {{"in_features", 1001}}}}),
         {{{"B", 1}}, {{"B", 130}}}});
    // Ragged N and K over many rows; a long K over few rows (split); rows of 16-byte multiples
    // (16-bit on sm_90: wgmma by TMA, the weight read N-major).
    const std::vector<std::pair<int, int>> shapes = {{770, 17}, {4096, 72}, {264, 136}};
    for (auto [n, k] : shapes) {
      cases.push_back({fmt::format("dy [B, {}] -> {} {}", n, k, dt),
                       case_graph({"B"}, {{"dy", dtype, fmt::format("[B, {}]", n)}},
                                  {{"dx", "grad.linear_dx", {"dy"}, {{"in_features", k}}}}),
                       {{{"B", 1}}, {{"B", 130}}, {{"B", 4097}}}});
    }
    // dy with padded rows (a linear's 20 of 24 in 16-bit, of 20 in f32).
    cases.push_back({"padded dy (linear 20) -> 16 " + dt,
                     case_graph({"B"}, {{"x", dtype, "[B, 8]"}},
                                {{"p", "linear", {"x"}, {{"out_features", 20}}},
                                 {"dx", "grad.linear_dx", {"p"}, {{"in_features", 16}}}}),
                     {{{"B", 1}}, {{"B", 999}}}});
  }
  // dy with padded rows (a linear's 17 of 20).
  cases.push_back({"padded dy (linear, 17 of 20) -> 9",
                   case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}},
                              {{"p", "linear", {"x"}, {{"out_features", 17}}},
                               {"dx", "grad.linear_dx", {"p"}, {{"in_features", 9}}}}),
                   {{{"B", 1}}, {{"B", 999}}}});
  return cases;
}

}  // namespace

OpDef grad_linear_dx_op() {
  OpDef def;
  def.name = "grad.linear_dx";
  def.doc = "linear's input gradient dy · W: dy [..., N], weight [N, K] -> [..., K]";
  def.inputs = {{"dy", "dL/dy [..., N]"}};
  def.attrs = {attr_spec("in_features", AttrType::kInt, "K: the forward input's last dim")};
  def.attrs[0].min_value = 1;
  def.dtypes = float_dtypes();
  def.param_slots = {"weight"};
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.params = params;
  def.lower = lower;
  def.reference = reference;
  def.conformance_cases = conformance_cases;
  return def;
}

}  // namespace teeny::ops
