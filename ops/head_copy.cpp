#include "ops/head_copy.h"

#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/kernel_util.h"

namespace teeny::ops {

namespace {
constexpr int kThreads = 256;
}  // namespace

AttrSpec heads_attr_spec() {
  AttrSpec heads = attr_spec("heads", AttrType::kInt, "number of heads H");
  heads.min_value = 1;
  return heads;
}

Lowering lower_head_copy(const OpContext& ctx, const std::string& op, const Expr& head_dim, const char* layout) {
  const TensorType& x = ctx.inputs.at(0);
  const DType dtype = x.dtype;
  const Expr heads(ctx.attrs.integer("heads"));
  const int vec = vector_width(dtype);
  // 16-byte units never straddle a head or a row when both widths are multiples of them.
  const bool vectorised = head_dim.is_const() && *head_dim.const_value() % vec == 0 && x.row_stride.is_const() &&
                          *x.row_stride.const_value() % vec == 0;
  const int unit = vectorised ? vec : 1;
  const Expr units = product(ctx.output.shape) / Expr(unit);

  Launch launch;
  launch.args = {input(0, "x", dtype), output("y", dtype),        i64("units", units),     i32("S", x.shape[1]),
                 i32("heads", heads),  i32("head_dim", head_dim), i32("ldx", x.row_stride)};
  launch.block = {kThreads, 1, 1};
  launch.grid = {ceil_div(units, Expr(kThreads)), Expr(1), Expr(1)};
  launch.bytes = Expr(2) * product(ctx.output.shape) * Expr(static_cast<int64_t>(dtype_size(dtype)));
  launch.flops = Expr(0);

  KernelSource kernel = template_kernel(fmt::format("{}_{}_u{}", op, dtype_name(dtype), unit), "head_copy.cuh",
                                        fmt::format("tn_head_copy<{}, {}, {}>", dtype_c_type(dtype), unit, layout),
                                        launch.args, kThreads, TEENY_KERNEL_ORIGIN);
  return Lowering{{kernel}, {launch}};
}

std::vector<ConformanceCase> head_copy_cases(const std::string& op, const std::vector<std::string>& shapes,
                                             const std::string& padded_input) {
  std::vector<ConformanceCase> cases;
  const std::vector<Bindings> sizes = {{{"B", 1}, {"S", 1}}, {{"B", 3}, {"S", 17}}, {{"B", 2}, {"S", 129}}};
  for (DType dtype : float_dtypes()) {
    const std::string dt = dtype_name(dtype);
    for (const std::string& shape : shapes) {
      cases.push_back({fmt::format("{} heads 12 {}", shape, dt),
                       case_graph({"B", "S"}, {{"x", dtype, shape}}, {{"y", op, {"x"}, {{"heads", 12}}}}), sizes});
    }
    cases.push_back({"padded input (linear 18 of 20/24), heads 2 " + dt,
                     case_graph({"B", "S"}, {{"x", dtype, padded_input}},
                                {{"p", "linear", {"x"}, {{"out_features", 18}}}, {"y", op, {"p"}, {{"heads", 2}}}}),
                     sizes});
  }
  return cases;
}

}  // namespace teeny::ops
