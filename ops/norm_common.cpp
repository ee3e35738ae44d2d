#include "ops/norm_common.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "ops/kernel_util.h"

namespace teeny::ops {

AttrSpec norm_eps_attr(bool rms, const std::string& doc) {
  AttrSpec spec = attr_spec("eps", AttrType::kFloat, doc, nlohmann::json(rms ? 1e-6 : 1e-5));
  spec.min_value = 0.0;
  spec.min_exclusive = true;
  return spec;
}

NormRowStats norm_row_stats(const double* row, int64_t cols, double eps, bool rms) {
  NormRowStats stats;
  if (!rms) {
    for (int64_t c = 0; c < cols; ++c) stats.mean += row[c];
    stats.mean /= cols;
  }
  double second = 0.0;
  for (int64_t c = 0; c < cols; ++c) second += (row[c] - stats.mean) * (row[c] - stats.mean);
  stats.rstd = 1.0 / std::sqrt(second / cols + eps);
  return stats;
}

DType norm_grad_dtype(const OpDef& def, const OpContext& ctx) {
  const DType dtype = common_float_dtype(def, ctx);
  const TensorType& dy = ctx.inputs[0];
  const TensorType& x = ctx.inputs[1];
  if (x.shape.empty() || dy.shape != x.shape) {
    throw OpError("inputs", fmt::format("{} needs dy and x of one shape [..., D]; got {} and {}", def.name,
                                        shape_str(dy.shape), shape_str(x.shape)));
  }
  return dtype;
}

ConformanceCase norm_grad_rows_case(const CaseNode& node, DType dtype, const std::vector<std::string>& dims,
                                    const std::string& shape, std::vector<Bindings> bindings) {
  return {fmt::format("rows {} {}", shape, dtype_name(dtype)),
          case_graph(dims, {{"dy", dtype, shape}, {"x", dtype, shape}}, {node}), std::move(bindings)};
}

ConformanceCase norm_grad_padded_case(const CaseNode& node) {
  return {"padded dy and x (linears, 17 of 20)",
          case_graph(
              {"B"}, {{"a", DType::kF32, "[B, 8]"}},
              {{"dy", "linear", {"a"}, {{"out_features", 17}}}, {"x", "linear", {"a"}, {{"out_features", 17}}}, node}),
          {{{"B", 1}}, {{"B", 999}}}};
}

}  // namespace teeny::ops
