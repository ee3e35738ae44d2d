// softmax and log_softmax over one axis (ops.md, "Dense"): numerically stable, any row length.
//
// Last axis: a group of threads (a warp for short rows, a block otherwise; plan_rows) owns a
// row. Rows that fit the group's registers are read once (max, sum of exp, write); longer rows
// stream twice: an online max/sum pass, then the write pass. Any other axis: one thread per
// (outer, inner) column, coalesced across inner, with the same online two-pass scheme.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "ops/conformance.h"
#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kColumnBlock = 256;

OpDef softmax_family(const std::string& name, bool log_form) {
  OpDef def;
  def.name = name;
  def.doc = log_form ? "log(softmax(x)) along `axis`, computed as x - max - log(sum(exp))"
                     : "exp(x - max) / sum(exp(x - max)) along `axis`";
  def.inputs = {{"x", "input tensor (rank >= 1)"}};
  def.attrs = {
      attr_spec("axis", AttrType::kInt, "the axis to normalise (negative counts from the end)", nlohmann::json(-1))};
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;

  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = common_float_dtype(meta, ctx);
    const TensorType& x = ctx.inputs[0];
    if (x.shape.empty()) throw OpError("inputs", meta.name + " needs an input of rank >= 1");
    normalize_axis(ctx.attrs.integer("axis"), x.shape.size(), "attrs.axis");
    return contiguous(output_float_dtype(meta, ctx, dtype), x.shape);
  };

  def.lower = [name, log_form](const OpContext& ctx) {
    const TensorType& x = ctx.inputs[0];
    const size_t rank = x.shape.size();
    const size_t axis = normalize_axis(ctx.attrs.integer("axis"), rank, "attrs.axis");
    const DType dtype = x.dtype;
    const char* c_type = dtype_c_type(dtype);
    const Expr numel = product(x.shape);
    Lowering lowering;
    Launch launch;
    if (axis + 1 == rank) {
      const RowPlan plan = plan_rows(x.shape.back(), dtype);
      launch.args = {input(0, "x", dtype), output("y", dtype), i64("rows", product_range(x.shape, 0, rank - 1)),
                     i32("cols", x.shape.back()), i32("x_stride", x.row_stride)};
      lowering.kernels.push_back(template_kernel(
          fmt::format("{}_rows_{}_t{}_i{}", name, dtype_name(dtype), plan.threads, plan.items), "softmax.cuh",
          fmt::format("tn_softmax_rows<{}, {}, {}, {}, {}>", c_type, log_form, plan.threads, plan.rows_per_block,
                      plan.items),
          launch.args, plan.block(), TEENY_KERNEL_ORIGIN));
      launch.block = {plan.block(), 1, 1};
      launch.grid[0] = ceil_div(product_range(x.shape, 0, rank - 1), Expr(plan.rows_per_block));
    } else {
      launch.args = {input(0, "x", dtype),
                     output("y", dtype),
                     i64("outer", product_range(x.shape, 0, axis)),
                     i32("axis_len", x.shape[axis]),
                     i64("inner", product_range(x.shape, axis + 1, rank)),
                     i32("last", x.shape.back()),
                     i32("x_stride", x.row_stride)};
      lowering.kernels.push_back(
          template_kernel(fmt::format("{}_columns_{}", name, dtype_name(dtype)), "softmax.cuh",
                          fmt::format("tn_softmax_columns<{}, {}, {}>", c_type, log_form, kColumnBlock), launch.args,
                          kColumnBlock, TEENY_KERNEL_ORIGIN));
      launch.block = {kColumnBlock, 1, 1};
      launch.grid[0] = ceil_div(numel / x.shape[axis], Expr(kColumnBlock));
    }
    launch.bytes = numel * Expr(static_cast<int64_t>(2 * dtype_size(dtype)));
    launch.flops = numel * Expr(5);  // max, sub, exp, add, scale per element
    lowering.launches.push_back(std::move(launch));
    return lowering;
  };

  def.conformance_cases = [name] {
    std::vector<ConformanceCase> cases;
    for (DType dtype : float_dtypes()) {
      const std::string dt = dtype_name(dtype);
      // Constant widths pick the register-cached plans: warp (17), block (1000, 4096), and
      // streaming beyond the cache (20000).
      const std::vector<ConformanceCase> rows = row_cases(name, dtype, {17, 1000, 4096, 20000});
      cases.insert(cases.end(), rows.begin(), rows.end());
      cases.push_back({"middle axis [B, W, 3] " + dt,
                       case_graph({"B", "W"}, {{"x", dtype, "[B, W, 3]"}}, {{"y", name, {"x"}, {{"axis", 1}}}}),
                       awkward_rows()});
    }
    cases.push_back({"first axis of padded rows (linear, 17 of 20)",
                     case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}},
                                {{"p", "linear", {"x"}, {{"out_features", 17}}}, {"y", name, {"p"}, {{"axis", 0}}}}),
                     {{{"B", 1}}, {{"B", 999}}}});
    cases.push_back({"padded rows (linear, 17 of 20)",
                     case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}},
                                {{"p", "linear", {"x"}, {{"out_features", 17}}}, {"y", name, {"p"}}}),
                     {{{"B", 1}}, {{"B", 999}}}});
    return cases;
  };

  def.backward = [log_form](GradBuilder& g) {
    g.input_grad(0, g.add("grad.softmax", {g.grad_output(), g.output()},
                          {{"axis", g.ctx().attrs.integer("axis")}, {"log", log_form}}));
  };
  def.reference = [log_form](const RefContext& ref) {
    const std::vector<int64_t>& shape = ref.output_shape;
    const size_t axis = normalize_axis(ref.op.attrs.integer("axis"), shape.size(), "attrs.axis");
    const auto [outer, len, inner] = host_axis_view(shape, axis);
    const std::vector<double>& x = ref.inputs[0].data;
    HostTensor out;
    out.dtype = ref.op.output.dtype;
    out.shape = shape;
    out.data.assign(x.size(), 0.0);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = o * len * inner + i;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t d = 0; d < len; ++d) m = std::max(m, x[base + d * inner]);
        double s = 0.0;
        for (int64_t d = 0; d < len; ++d) s += std::exp(x[base + d * inner] - m);
        for (int64_t d = 0; d < len; ++d) {
          const double v = x[base + d * inner];
          out.data[base + d * inner] = log_form ? v - m - std::log(s) : std::exp(v - m) / s;
        }
      }
    }
    return out;
  };
  return def;
}

}  // namespace

OpDef softmax_op() { return softmax_family("softmax", false); }
OpDef log_softmax_op() { return softmax_family("log_softmax", true); }

}  // namespace teeny::ops
