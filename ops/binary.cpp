// add, sub, mul, div with NumPy broadcasting over symbolic dims (ops.md, "Elementwise").
//
// Lowering collapses the broadcast output shape into the fewest dims whose elements are
// evenly strided in both operands (size-1 dims dropped, neighbours merged when both operands
// are contiguous across them or both broadcast), then instantiates ops/kernels/binary.cuh's
// tn_binary for that pattern: a broadcast operand has no stride argument and reads one value
// per 16-byte output pack.
#include <fmt/format.h>

#include <algorithm>

#include "ops/conformance.h"
#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kBlock = 256;

struct CollapsedDim {
  Expr size;
  std::optional<Expr> stride_a, stride_b;  // absent: the operand broadcasts along this dim
};

// The operand's element strides aligned to the output's rank; absent where it broadcasts.
std::vector<std::optional<Expr>> aligned_strides(const TensorType& type, const Shape& out) {
  const size_t lead = out.size() - type.shape.size();
  const std::vector<Expr> strides = element_strides(type);
  std::vector<std::optional<Expr>> result(out.size());
  for (size_t k = lead; k < out.size(); ++k) {
    const Expr& dim = type.shape[k - lead];
    if (!(dim.const_value() == 1 && out[k].const_value() != 1)) result[k] = strides[k - lead];
  }
  return result;
}

std::vector<CollapsedDim> collapse(const TensorType& a, const TensorType& b, const Shape& out) {
  const auto sa = aligned_strides(a, out), sb = aligned_strides(b, out);
  std::vector<CollapsedDim> dims;  // outermost first
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k].const_value() == 1) continue;
    dims.push_back({out[k], sa[k], sb[k]});
  }
  // Merge from the inside out: dim j folds into its inner neighbour when each operand's
  // stride across j equals its stride across the neighbour times the neighbour's size.
  auto mergeable = [](const std::optional<Expr>& outer, const std::optional<Expr>& inner, const Expr& inner_size) {
    if (!outer || !inner) return !outer && !inner;
    return *outer == *inner * inner_size;
  };
  std::vector<CollapsedDim> merged;
  for (size_t k = dims.size(); k-- > 0;) {
    if (!merged.empty() && mergeable(dims[k].stride_a, merged.back().stride_a, merged.back().size) &&
        mergeable(dims[k].stride_b, merged.back().stride_b, merged.back().size)) {
      merged.back().size = merged.back().size * dims[k].size;
    } else {
      merged.push_back(dims[k]);
    }
  }
  std::reverse(merged.begin(), merged.end());
  if (merged.empty()) merged.push_back({Expr(1), Expr(1), Expr(1)});  // a scalar
  return merged;
}

struct BinaryFn {
  const char* functor;  // the functor template of ops/kernels/binary.cuh, applied as Op<T>(p, q)
  double (*host)(double, double);
  // Each operand's gradient: the output's (times the partial derivative), summed back over the
  // dims the operand was broadcast along (ops/grad_util.h, sum_to).
  BackwardFn backward;
};

OpDef binary_op(const std::string& name, std::string doc, BinaryFn fn) {
  OpDef def;
  def.name = name;
  def.doc = std::move(doc);
  def.inputs = {{"a", "first operand"}, {"b", "second operand (broadcast against a)"}};
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;

  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = common_float_dtype(meta, ctx);
    return contiguous(output_float_dtype(meta, ctx, dtype), broadcast_shapes(ctx.inputs[0].shape, ctx.inputs[1].shape));
  };

  def.lower = [name, fn](const OpContext& ctx) {
    const TensorType& a = ctx.inputs[0];
    const TensorType& b = ctx.inputs[1];
    const DType dtype = a.dtype;
    const std::vector<CollapsedDim> dims = collapse(a, b, ctx.output.shape);
    const int rank = static_cast<int>(dims.size());
    const Expr n = product(ctx.output.shape);

    std::vector<KernelArg> args = {input(0, "a", dtype), input(1, "b", dtype), output("y", dtype), i64("n", n)};
    std::string pattern;
    for (int j = 0; j < rank; ++j) {
      args.push_back(i64(fmt::format("d{}", j), dims[j].size));
      if (dims[j].stride_a) args.push_back(i64(fmt::format("sa{}", j), *dims[j].stride_a));
      if (dims[j].stride_b) args.push_back(i64(fmt::format("sb{}", j), *dims[j].stride_b));
      pattern += !dims[j].stride_a ? 'a' : !dims[j].stride_b ? 'b' : 'f';  // who broadcasts
    }
    std::string broadcast;  // the pattern as the template's chars: 'f', 'b'
    for (char who : pattern) broadcast += fmt::format(", '{}'", who);

    Lowering lowering;
    lowering.kernels.push_back(
        template_kernel(fmt::format("{}_{}_{}", name, dtype_name(dtype), pattern), "binary.cuh",
                        fmt::format("tn_binary<{}, {}, {}{}>", dtype_c_type(dtype), kBlock, fn.functor, broadcast),
                        args, kBlock, TEENY_KERNEL_ORIGIN));
    Launch launch;
    launch.block = {kBlock, 1, 1};
    launch.grid[0] = grid_stride_blocks(ceil_div(n, Expr(kBlock * vector_width(dtype))), kBlock);
    launch.args = std::move(args);
    const Expr elem = Expr(static_cast<int64_t>(dtype_size(dtype)));
    launch.bytes = (product(a.shape) + product(b.shape) + n) * elem;
    launch.flops = n;
    lowering.launches.push_back(std::move(launch));
    return lowering;
  };

  def.conformance_cases = [name] {
    std::vector<ConformanceCase> cases;
    for (DType dtype : float_dtypes()) {
      const std::string dt = dtype_name(dtype);
      cases.push_back(
          {"same shape " + dt,
           case_graph({"B", "W"}, {{"a", dtype, "[B, W]"}, {"b", dtype, "[B, W]"}}, {{"y", name, {"a", "b"}}}),
           awkward_rows()});
      cases.push_back({"row vector b " + dt,
                       case_graph({"B", "W"}, {{"a", dtype, "[B, W]"}, {"b", dtype, "[W]"}}, {{"y", name, {"a", "b"}}}),
                       awkward_rows()});
      cases.push_back(
          {"column a, outer broadcast " + dt,
           case_graph({"B", "W"}, {{"a", dtype, "[B, 1]"}, {"b", dtype, "[3, 1, W]"}}, {{"y", name, {"a", "b"}}}),
           awkward_rows()});
    }
    cases.push_back({"padded a rows (linear, 17 of 20)",
                     case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}, {"b", DType::kF32, "[B, 17]"}},
                                {{"p", "linear", {"x"}, {{"out_features", 17}}}, {"y", name, {"p", "b"}}}),
                     {{{"B", 1}}, {{"B", 999}}}});
    return cases;
  };

  def.backward = fn.backward;
  def.reference = [fn](const RefContext& ref) {
    const std::vector<int64_t>& out_shape = ref.output_shape;
    const size_t rank = out_shape.size();
    // Strides of each operand over the output's index space: 0 where it broadcasts.
    auto strides_for = [&](const HostTensor& t) {
      std::vector<int64_t> natural = host_strides(t.shape), result(rank, 0);
      const size_t lead = rank - t.shape.size();
      for (size_t k = lead; k < rank; ++k) result[k] = t.shape[k - lead] == 1 ? 0 : natural[k - lead];
      return result;
    };
    const std::vector<int64_t> sa = strides_for(ref.inputs[0]), sb = strides_for(ref.inputs[1]);
    HostTensor out;
    out.dtype = ref.op.output.dtype;
    out.shape = out_shape;
    int64_t n = 1;
    for (int64_t d : out_shape) n *= d;
    out.data.resize(n);
    for (int64_t e = 0; e < n; ++e) {
      int64_t rest = e, oa = 0, ob = 0;
      for (size_t k = rank; k-- > 0;) {
        const int64_t idx = rest % out_shape[k];
        rest /= out_shape[k];
        oa += idx * sa[k];
        ob += idx * sb[k];
      }
      out.data[e] = fn.host(ref.inputs[0].data[oa], ref.inputs[1].data[ob]);
    }
    return out;
  };
  return def;
}

// a + b: the output's gradient.
void add_backward(GradBuilder& g) {
  for (size_t i = 0; i < 2; ++i)
    if (g.needs_input_grad(i)) g.input_grad(i, sum_to(g, g.grad_output(), g.input(i)));
}

// a - b: the output's gradient, negated for b (after the sum: fewer elements).
void sub_backward(GradBuilder& g) {
  if (g.needs_input_grad(0)) g.input_grad(0, sum_to(g, g.grad_output(), g.input(0)));
  if (g.needs_input_grad(1))
    g.input_grad(1, g.add("scale", {sum_to(g, g.grad_output(), g.input(1))}, {{"value", -1.0}}));
}

// a * b: dy * b for a, dy * a for b.
void mul_backward(GradBuilder& g) {
  for (size_t i = 0; i < 2; ++i)
    if (g.needs_input_grad(i)) g.input_grad(i, sum_to(g, g.add("mul", {g.grad_output(), g.input(1 - i)}), g.input(i)));
}

// y = a / b: dy / b for a; -dy a / b^2 = -(dy / b) y for b, which reads the output, not a.
void div_backward(GradBuilder& g) {
  const std::string over_b = g.add("div", {g.grad_output(), g.input(1)});
  if (g.needs_input_grad(0)) g.input_grad(0, sum_to(g, over_b, g.input(0)));
  if (g.needs_input_grad(1))
    g.input_grad(1, g.add("scale", {sum_to(g, g.add("mul", {over_b, g.output()}), g.input(1))}, {{"value", -1.0}}));
}

}  // namespace

OpDef add_op() {
  return binary_op("add", "a + b", {"tn_add", [](double p, double q) { return p + q; }, add_backward});
}
OpDef sub_op() {
  return binary_op("sub", "a - b", {"tn_sub", [](double p, double q) { return p - q; }, sub_backward});
}
OpDef mul_op() {
  return binary_op("mul", "a * b", {"tn_mul", [](double p, double q) { return p * q; }, mul_backward});
}
OpDef div_op() {
  return binary_op("div", "a / b (IEEE: x/0 is inf or nan)",
                   {"tn_div", [](double p, double q) { return p / q; }, div_backward});
}

}  // namespace teeny::ops
