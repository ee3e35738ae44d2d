#include "ops/conformance.h"

#include <fmt/format.h>

namespace teeny::ops {

std::string case_graph(const std::vector<std::string>& dims, const std::vector<CaseInput>& inputs,
                       const std::vector<CaseNode>& nodes) {
  std::string text = "name: conformance\n";
  if (!dims.empty()) {
    text += "dims:\n";
    for (const std::string& dim : dims) text += fmt::format("  {}: {{min: 1, max: 1048576, default: 4}}\n", dim);
  }
  text += "inputs:\n";
  for (const CaseInput& in : inputs)
    text += fmt::format("  {}: {{dtype: {}, shape: {}}}\n", in.name, dtype_name(in.dtype), in.shape);
  text += "nodes:\n";
  for (const CaseNode& node : nodes) {
    text += fmt::format("  - {{name: {}, op: {}, inputs: [{}]", node.name, node.op, fmt::join(node.inputs, ", "));
    if (!node.attrs.empty()) text += ", attrs: " + node.attrs.dump();  // JSON is YAML flow
    if (!node.dtype.empty()) text += ", dtype: " + node.dtype;
    text += "}\n";
  }
  text += fmt::format("outputs: [{}]\n", nodes.back().name);
  return text;
}

std::vector<ConformanceCase> row_cases(const std::string& op, DType dtype, const std::vector<int>& widths) {
  const std::string dt = dtype_name(dtype);
  std::vector<ConformanceCase> cases;
  cases.push_back(
      {"rows [B, W] " + dt, case_graph({"B", "W"}, {{"x", dtype, "[B, W]"}}, {{"y", op, {"x"}}}), awkward_rows()});
  for (int width : widths) {
    cases.push_back({fmt::format("rows [B, {}] {}", width, dt),
                     case_graph({"B"}, {{"x", dtype, fmt::format("[B, {}]", width)}}, {{"y", op, {"x"}}}),
                     {{{"B", 1}}, {{"B", 129}}}});
  }
  return cases;
}

std::vector<Bindings> awkward_rows() {
  return {{{"B", 1}, {"W", 1}},     {{"B", 1}, {"W", 4097}},   {{"B", 7}, {"W", 3}},    {{"B", 3}, {"W", 17}},
          {{"B", 64}, {"W", 1000}}, {{"B", 300}, {"W", 4097}}, {{"B", 5000}, {"W", 17}}};
}

}  // namespace teeny::ops
