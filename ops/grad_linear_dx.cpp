// grad.linear_dx (ops.md, "Gradients"): linear's input gradient dx = dy · W, dy [..., N] and the
// forward node's weight [N, K] (a param ref in a training graph) -> [..., K], contiguous.
//
// One GEMM (ops/grad_gemm.h): A = dy [rows, N] at its row stride, B = W read as [K, N] in
// place. Attr `epilogue` (set by the fuse_grad_linear_epilogue pass) applies what the next
// backward node did to dx in the GEMM's epilogue, reading input r of dx's shape: `add`, dx + r
// (a fan-out gradient summed in); an activation's name, grad.activation's dx · f'(r), r the
// forward tensor f' is written in. Then the sum over N never splits (ops/grad_gemm.h).
#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/grad_gemm.h"
#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr const char* kNoEpilogue = "none";
constexpr const char* kAdd = "add";

std::vector<std::string> epilogue_names() {
  std::vector<std::string> names = {kAdd};
  for (const std::string& name : activation_grad_names()) names.push_back(name);
  return names;
}

// The epilogue attr; absent: none.
std::string epilogue_of(const Attrs& attrs) { return attrs.has("epilogue") ? attrs.text("epilogue") : kNoEpilogue; }

GemmEpilogue gemm_epilogue(const std::string& epilogue) {
  if (epilogue == kNoEpilogue) return {};
  return {"", true, epilogue == kAdd ? "" : epilogue};
}

TensorType infer(const OpDef& def, const OpContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  if (dy.shape.empty()) throw OpError("inputs", "grad.linear_dx needs dy of rank >= 1, got a scalar");
  Shape shape = dy.shape;
  shape.back() = Expr(ctx.attrs.integer("in_features"));
  const TensorType out = contiguous(output_float_dtype(def, ctx, common_float_dtype(def, ctx)), shape);
  const std::string epilogue = epilogue_of(ctx.attrs);
  const bool reads_r = epilogue != kNoEpilogue;
  if (reads_r != (ctx.inputs.size() == 2))
    throw OpError("inputs", reads_r
                                ? fmt::format("grad.linear_dx: epilogue '{}' needs input r of dx's shape {}", epilogue,
                                              shape_str(out.shape))
                                : "grad.linear_dx reads input r only with an epilogue (add, or an activation's name)");
  if (reads_r && (ctx.inputs[1].shape != out.shape || ctx.inputs[1].dtype != out.dtype))
    throw OpError("inputs",
                  fmt::format("grad.linear_dx: r must be dx's {} {}; got {} {}", dtype_name(out.dtype),
                              shape_str(out.shape), dtype_name(ctx.inputs[1].dtype), shape_str(ctx.inputs[1].shape)));
  return out;
}

std::vector<ParamSpec> params(const OpContext& ctx) {
  return {{"weight", {ctx.inputs[0].shape.back(), ctx.output.shape.back()}, ctx.output.dtype, ParamInit::kTrained, {}}};
}

GradGemm gemm_of(const OpContext& ctx) {
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
  gemm.epilogue = gemm_epilogue(epilogue_of(ctx.attrs));
  if (gemm.epilogue.residual) {
    gemm.residual = input(1, "r", gemm.dtype);
    gemm.ldr = ctx.inputs[1].row_stride;
  }
  return gemm;
}

Lowering lower(const OpContext& ctx) { return lower_grad_gemm(gemm_of(ctx), ctx.target_sm, ctx.variant); }

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
  HostTensor dx{ref.op.output.dtype, ref.output_shape, host_gemm(g, dy.data, ref.params[0].data, {0}, {0})};
  const std::string epilogue = epilogue_of(ref.op.attrs);
  for (size_t i = 0; epilogue != kNoEpilogue && i < dx.data.size(); ++i) {
    const double r = ref.inputs[1].data[i];
    dx.data[i] = epilogue == kAdd ? dx.data[i] + r : activation_grad_host(epilogue, dx.data[i], r);
  }
  return dx;
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
    // Ragged N and K over many rows; a long K over few rows (split), narrow and a tile wide (f32 on
    // sm_90: 3xTF32 up to its longest K); rows of 16-byte multiples (16-bit on sm_90: wgmma by
    // TMA, the weight read N-major).
    const std::vector<std::pair<int, int>> shapes = {{770, 17}, {4096, 72}, {4096, 136}, {264, 136}};
    for (auto [n, k] : shapes) {
      cases.push_back({fmt::format("dy [B, {}] -> {} {}", n, k, dt),
                       case_graph({"B"}, {{"dy", dtype, fmt::format("[B, {}]", n)}},
                                  {{"dx", "grad.linear_dx", {"dy"}, {{"in_features", k}}}}),
                       {{{"B", 1}}, {{"B", 130}}, {{"B", 4097}}}});
    }
    // Epilogues (fuse_grad_linear_epilogue): every activation's derivative once across the
    // dtypes and a fan-out sum, on ragged tiles and (16-bit, 136 columns) wgmma by TMA, where r
    // is staged by TMA too.
    const std::vector<std::string> epilogues = {"add", "gelu_tanh",
                                                dtype == DType::kF32    ? "relu"
                                                : dtype == DType::kBF16 ? "silu"
                                                                        : "gelu"};
    for (const std::string& epilogue : epilogues)
      for (auto [n, k] : {std::pair{770, 17}, {264, 136}}) {
        const std::string dx_shape = fmt::format("[B, {}]", k);
        cases.push_back(
            {fmt::format("dy [B, {}] -> {}, epilogue {} {}", n, k, epilogue, dt),
             case_graph({"B"}, {{"dy", dtype, fmt::format("[B, {}]", n)}, {"r", dtype, dx_shape}},
                        {{"dx", "grad.linear_dx", {"dy", "r"}, {{"in_features", k}, {"epilogue", epilogue}}}}),
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
  // r with padded rows (a linear's 17 of 20), read at its own row stride; sigmoid and tanh.
  for (const char* epilogue : {"sigmoid", "tanh"})
    cases.push_back({fmt::format("padded r (linear, 17 of 20), epilogue {}", epilogue),
                     case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}, {"dy", DType::kF32, "[B, 33]"}},
                                {{"r", "linear", {"x"}, {{"out_features", 17}}},
                                 {"dx", "grad.linear_dx", {"dy", "r"}, {{"in_features", 17}, {"epilogue", epilogue}}}}),
                     {{{"B", 1}}, {{"B", 999}}}});
  return cases;
}

}  // namespace

OpDef grad_linear_dx_op() {
  OpDef def;
  def.name = "grad.linear_dx";
  def.doc = "linear's input gradient dy · W: dy [..., N], weight [N, K] -> [..., K]";
  def.inputs = {{"dy", "dL/dy [..., N]"},
                {"r", "read by the epilogue, dx's shape: added in, or the forward tensor f' is written in"}};
  def.optional_inputs = 1;
  def.attrs = {attr_spec("in_features", AttrType::kInt, "K: the forward input's last dim"),
               attr_spec("epilogue", AttrType::kEnum,
                         "add: dx + r; an activation: grad.activation's dx · f'(r) (fuse_grad_linear_epilogue); "
                         "absent: none",
                         std::nullopt, epilogue_names())};
  def.attrs[0].min_value = 1;
  def.attrs[1].optional = true;
  def.dtypes = float_dtypes();
  def.param_slots = {"weight"};
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.params = params;
  def.lower = lower;
  def.reference = reference;
  def.conformance_cases = conformance_cases;
  // dx's rows are dy's and r's.
  def.tuning = grad_gemm_tuning(gemm_of, {0, 1});
  return def;
}

}  // namespace teeny::ops
