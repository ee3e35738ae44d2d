// flatten and reshape (ops.md, "Shape and data movement"): views with no kernel; the output
// aliases the input's buffer. A view of a tensor with padded rows keeps its row stride, so
// it may regroup the leading dims but not change the last one.
#include <fmt/format.h>

#include <set>

#include "ops/conformance.h"
#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

// Whether two element counts are equal for every binding of their dims. Structural equality
// decides most cases; otherwise both are evaluated under varied bindings (every dim bound to
// distinct primes, then all to a few common values), which separates any two different
// products, quotients or sums of dims met in practice.
bool same_count(const Expr& a, const Expr& b) {
  if (a == b) return true;
  std::set<std::string> names;
  for (const std::string& d : a.dims()) names.insert(d);
  for (const std::string& d : b.dims()) names.insert(d);
  const int64_t primes[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  std::vector<Bindings> trials;
  for (int shift = 0; shift < 3; ++shift) {
    Bindings bind;
    int k = shift;
    for (const std::string& name : names) bind[name] = primes[k++ % 12];
    trials.push_back(bind);
  }
  for (int64_t value : {1, 4, 64, 1000}) {
    Bindings bind;
    for (const std::string& name : names) bind[name] = value;
    trials.push_back(bind);
  }
  for (const Bindings& bind : trials)
    if (a.eval(bind) != b.eval(bind)) return false;
  return true;
}

TensorType view_type(const OpDef& def, const TensorType& x, Shape shape) {
  TensorType out = contiguous(x.dtype, shape);
  if (!is_padded(x)) return out;
  if (shape.empty() || shape.back() != x.shape.back())
    throw OpError("inputs", fmt::format("{} cannot view a tensor with padded rows (row stride {}, last dim "
                                        "{}) as {}: a view may not change the last dim",
                                        def.name, x.row_stride.str(), x.shape.back().str(), shape_str(shape)));
  out.row_stride = x.row_stride;
  return out;
}

// A view's gradient is its output's, viewed in the input's shape.
void view_backward(GradBuilder& g) {
  g.input_grad(0, g.add("reshape", {g.grad_output()}, {{"shape", shape_attr(g.type(g.input(0)).shape)}}));
}

HostTensor identity_reference(const RefContext& ref) {
  HostTensor out = ref.inputs[0];
  out.shape = ref.output_shape;
  return out;
}

}  // namespace

OpDef flatten_op() {
  OpDef def;
  def.name = "flatten";
  def.doc = "merges dims start_dim..end_dim into one (a view, no kernel)";
  def.inputs = {{"x", "input tensor"}};
  def.attrs = {attr_spec("start_dim", AttrType::kInt, "first dim to merge", nlohmann::json(1)),
               attr_spec("end_dim", AttrType::kInt, "last dim to merge", nlohmann::json(-1))};
  def.dtypes = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32};
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) {
    const TensorType& x = ctx.inputs[0];
    const size_t rank = std::max<size_t>(x.shape.size(), 1);
    const int start = normalize_axis(ctx.attrs.integer("start_dim"), rank, "attrs.start_dim");
    const int end = normalize_axis(ctx.attrs.integer("end_dim"), rank, "attrs.end_dim");
    if (start > end)
      throw OpError("attrs.start_dim", fmt::format("flatten: start_dim ({}) comes after end_dim ({})", start, end));
    if (x.shape.empty()) return view_type(meta, x, {Expr(1)});
    Shape shape(x.shape.begin(), x.shape.begin() + start);
    shape.push_back(product(Shape(x.shape.begin() + start, x.shape.begin() + end + 1)));
    shape.insert(shape.end(), x.shape.begin() + end + 1, x.shape.end());
    return view_type(meta, x, shape);
  };
  def.reference = identity_reference;
  def.backward = view_backward;
  def.conformance_cases = [] {
    std::vector<ConformanceCase> cases;
    for (DType dtype : float_dtypes())
      cases.push_back({fmt::format("relu then flatten [B, 3, W] {}", dtype_name(dtype)),
                       case_graph({"B", "W"}, {{"x", dtype, "[B, 3, W]"}},
                                  {{"r", "relu", {"x"}}, {"y", "flatten", {"r"}}, {"z", "relu", {"y"}}}),
                       awkward_rows()});
    cases.push_back({"flatten leading dims of padded rows (linear, 17 of 20)",
                     case_graph({"B"}, {{"x", DType::kF32, "[B, 3, 8]"}},
                                {{"p", "linear", {"x"}, {{"out_features", 17}}},
                                 {"y", "flatten", {"p"}, {{"start_dim", 0}, {"end_dim", 1}}},
                                 {"z", "relu", {"y"}}}),
                     {{{"B", 1}}, {{"B", 333}}}});
    return cases;
  };
  return def;
}

OpDef reshape_op() {
  OpDef def;
  def.name = "reshape";
  def.doc = "the same elements in a new shape (a view, no kernel); one entry may be -1";
  def.inputs = {{"x", "input tensor"}};
  def.attrs = {attr_spec("shape", AttrType::kShape, "the new shape: ints, dim names or expressions; one may be -1")};
  def.dtypes = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32};
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) {
    const TensorType& x = ctx.inputs[0];
    Shape shape = ctx.attrs.shape("shape");
    const Expr numel = product(x.shape);
    int inferred = -1;
    Expr known(1);
    for (size_t k = 0; k < shape.size(); ++k) {
      const std::optional<int64_t> value = shape[k].const_value();
      if (value == -1) {
        if (inferred >= 0) throw OpError("attrs.shape", "reshape: only one entry of `shape` may be -1");
        inferred = static_cast<int>(k);
        continue;
      }
      if (value && *value <= 0)
        throw OpError("attrs.shape", fmt::format("reshape: entry {} of `shape` is {}; sizes must be positive "
                                                 "(or one -1)",
                                                 k, *value));
      known = known * shape[k];
    }
    if (inferred >= 0) shape[inferred] = numel / known;
    if (!same_count(product(shape), numel))
      throw OpError("attrs.shape", fmt::format("reshape: {} does not have the element count of the input {}",
                                               shape_str(ctx.attrs.shape("shape")), shape_str(x.shape)));
    return view_type(meta, x, shape);
  };
  def.reference = identity_reference;
  def.backward = view_backward;
  def.conformance_cases = [] {
    std::vector<ConformanceCase> cases;
    for (DType dtype : float_dtypes())
      cases.push_back(
          {fmt::format("relu then reshape [B, 6, W] -> [-1, 3, 2, W] {}", dtype_name(dtype)),
           case_graph(
               {"B", "W"}, {{"x", dtype, "[B, 6, W]"}},
               {{"r", "relu", {"x"}}, {"y", "reshape", {"r"}, {{"shape", {-1, 3, 2, "W"}}}}, {"z", "relu", {"y"}}}),
           awkward_rows()});
    return cases;
  };
  return def;
}

}  // namespace teeny::ops
