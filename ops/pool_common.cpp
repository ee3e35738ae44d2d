#include "ops/pool_common.h"

#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/kernel_util.h"

namespace teeny::ops {

std::vector<AttrSpec> pool_attr_specs() {
  return {
      {"kernel_size", AttrType::kIntPair, "window: n or [kH, kW]", std::nullopt, {}, false, 1.0, false, kMaxWindow},
      {"stride",
       AttrType::kIntPair,
       "step: n or [sH, sW]; default = kernel_size",
       std::nullopt,
       {},
       true,
       1.0,
       false,
       kMaxWindow},
      {"padding",
       AttrType::kIntPair,
       "implicit padding: n or [pH, pW], at most half the kernel",
       nlohmann::json(0),
       {},
       false,
       0.0,
       false,
       kMaxWindow},
  };
}

Window2d pool_window(const Attrs& attrs) {
  Window2d p;
  std::tie(p.kh, p.kw) = attrs.pair("kernel_size");
  std::tie(p.sh, p.sw) = attrs.has("stride") ? attrs.pair("stride") : std::pair{p.kh, p.kw};
  std::tie(p.ph, p.pw) = attrs.pair("padding");
  return p;
}

Shape pooled_shape(const Shape& x, const Attrs& attrs) {
  const Window2d p = pool_window(attrs);
  if (2 * p.ph > p.kh || 2 * p.pw > p.kw)
    throw OpError("attrs.padding",
                  fmt::format("padding [{}, {}] must be at most half the kernel [{}, {}]", p.ph, p.pw, p.kh, p.kw));
  return {x[0], x[1], window_extent("height", x[2], p.kh, p.sh, p.ph, 1),
          window_extent("width", x[3], p.kw, p.sw, p.pw, 1)};
}

Lowering pool_grad_lowering(const OpContext& ctx, const std::string& kernel_name, const std::string& function,
                            const std::string& shape_argument, std::vector<KernelArg> inputs,
                            const Expr& per_element_loads, const Expr& per_element_flops) {
  constexpr int kThreads = 256;
  const Shape& in = ctx.output.shape;
  const Shape& out = ctx.inputs.at(0).shape;
  const DType dtype = ctx.output.dtype;
  std::vector<KernelArg> args = std::move(inputs);
  for (KernelArg arg : {output("dx", dtype), i64("count", product(in)), i32("in_h", in[2]), i32("in_w", in[3]),
                        i32("out_h", out[2]), i32("out_w", out[3])})
    args.push_back(std::move(arg));
  KernelSource kernel =
      template_kernel(kernel_name, "grad_pool2d.cuh",
                      fmt::format("{}<{}, {}, {}>", function, dtype_c_type(dtype), kThreads, shape_argument), args,
                      kThreads, TEENY_KERNEL_ORIGIN);
  Launch launch;
  launch.block = {kThreads, 1, 1};
  launch.grid = {ceil_div(product(in), Expr(kThreads)), Expr(1), Expr(1)};
  launch.args = std::move(args);
  launch.bytes = Expr(static_cast<int64_t>(dtype_size(dtype))) * product(in) * (per_element_loads + Expr(1));
  launch.flops = per_element_flops * product(in);
  return Lowering{{std::move(kernel)}, {launch}};
}

std::vector<ConformanceCase> pool_grad_cases(const std::string& op, bool reads_x,
                                             const std::vector<PoolGradCase>& cases) {
  std::vector<ConformanceCase> out;
  for (DType dtype : float_dtypes())
    for (const PoolGradCase& c : cases) {
      std::vector<CaseInput> inputs = {{"dy", dtype, fmt::format("[B, {}, {}, {}]", c.channels, c.out_h, c.out_w)}};
      std::vector<std::string> args = {"dy"};
      if (reads_x) {
        inputs.push_back({"x", dtype, fmt::format("[B, {}, {}, {}]", c.channels, c.h, c.w)});
        args.push_back("x");
      }
      out.push_back({fmt::format("{} {}", c.label, dtype_name(dtype)),
                     case_graph({"B"}, inputs, {{"dx", op, args, c.attrs}}),
                     {{{"B", 1}}, {{"B", 5}}}});
    }
  return out;
}

}  // namespace teeny::ops
