// What the backward-rule tests share (tests/test_gradients.cpp, tests/test_gradients_dense.cpp,
// tests/test_gradients_losses.cpp): a graph whose last node feeds mse_loss, with a `train:`
// section; that graph differentiated against the real ops; and the backward nodes the rules of
// some forward nodes added, one line each.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/autodiff.h"
#include "tests/op_test_util.h"

namespace teeny::testing {

// A spec: `dims` (a dims: section, or ""), then `body` (inputs: and nodes: lines) whose last node
// `out` feeds mse_loss against a `target` input of `out`'s shape, and a train: section with
// `train` (its params: and inputs: lines, e.g. "  inputs: [x]\n").
inline std::string loss_graph(const std::string& body, const std::string& target_shape, const std::string& train,
                              const std::string& dims = "") {
  return fmt::format(
      "name: grads\n{}"
      "inputs:\n"
      "  target: {{dtype: f32, shape: {}}}\n"
      "{}"
      "  - {{name: loss, op: mse_loss, inputs: [out, target]}}\n"
      "outputs: [loss]\n"
      "train:\n"
      "  loss: loss\n"
      "{}",
      dims, target_shape, body, train);
}

// `spec` (file grads.yaml) parsed and differentiated against the real ops.
inline Graph trained(const std::string& spec) {
  Graph graph = parse_graph(spec, "grads.yaml", op_testing::registry());
  add_training(graph, op_testing::registry());
  return graph;
}

// The backward nodes the rules of `forward` nodes added, one line each:
// "name = op(inputs) {attrs} {slot->param}".
inline std::vector<std::string> backward_of(const Graph& graph, const std::set<std::string>& forward) {
  std::vector<std::string> lines;
  for (const Node& node : graph.nodes) {
    if (node.role != NodeRole::kBackward || !forward.count(node.grad_of)) continue;
    const nlohmann::json& attrs = node.ctx.attrs.json();
    std::string line = fmt::format("{} = {}({}){}", node.name, node.op->name, fmt::join(node.inputs, ", "),
                                   attrs.empty() ? "" : " " + attrs.dump());
    for (const auto& [slot, param] : node.param_refs) line += fmt::format(" {{{}->{}}}", slot, param);
    lines.push_back(line);
  }
  return lines;
}

}  // namespace teeny::testing
