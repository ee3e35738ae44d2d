// A tunable op's conformance case (OpDef::conformance_cases) once per kernel variant of its
// nodes (OpDef::tuning), so every variant `teeny tune` may pick is held to the same cases as the
// heuristic's choice: each node of the op that offers the variant builds it
// (CompileOptions::variants), and the case runs at those of its bindings where every such node
// offers it (a small-M kernel only up to its rows).
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/compile.h"
#include "core/graph.h"
#include "core/tune.h"
#include "tests/op_test_util.h"

namespace teeny::op_testing {

struct VariantCase {
  std::string variant;
  std::map<std::string, std::string> nodes;  // node -> variant, as CompileOptions::variants
  std::vector<Bindings> bindings;            // where every node of `nodes` offers it
  // A variant the nodes offer only at some sizes (the TMA kernels need row strides of 16-byte
  // multiples, which a symbolic width cannot promise) is compiled at each binding, fixed there
  // (CompileOptions::fixed; `bindings` is then that one).
  Bindings fixed{};
};

// Whether every node of `op` in `graph` (prepared with symbolic dims) offers `variant`.
inline bool offered_symbolically(const OpDef& op, const Graph& prepared, const std::string& variant) {
  return std::all_of(prepared.nodes.begin(), prepared.nodes.end(), [&](const Node& node) {
    if (node.op != &op) return true;
    const std::vector<OpVariant> variants = op.tuning.variants(node.ctx);
    return std::any_of(variants.begin(), variants.end(), [&](const OpVariant& v) { return v.name == variant; });
  });
}

// The variants the nodes of `op` offer in `graph` at `bindings` (the graph's defaults for dims
// they leave out), each with the nodes that offer it; a variant some node of the op lacks there
// is left out at those bindings. `options` gives the arch and fusion.
inline std::vector<VariantCase> variant_cases(const OpDef& op, const Graph& graph,
                                              const std::vector<Bindings>& bindings, CompileOptions options) {
  std::vector<VariantCase> cases;
  const Graph symbolic = prepare_graph(graph, registry(), options);
  for (const Bindings& b : bindings.empty() ? std::vector<Bindings>{Bindings{}} : bindings) {
    options.fixed = graph.default_bindings();
    for (const auto& [dim, value] : b) options.fixed[dim] = value;
    const Graph prepared = prepare_graph(graph, registry(), options);
    std::vector<TuneProblem> problems = tune_problems(prepared);
    problems.erase(
        std::remove_if(problems.begin(), problems.end(), [&](const TuneProblem& p) { return p.op != op.name; }),
        problems.end());
    if (problems.empty()) continue;
    for (const std::string& variant : problems.front().variants) {
      const bool everywhere = std::all_of(problems.begin(), problems.end(), [&](const TuneProblem& p) {
        return std::find(p.variants.begin(), p.variants.end(), variant) != p.variants.end();
      });
      if (!everywhere) continue;
      std::map<std::string, std::string> nodes;
      for (const TuneProblem& p : problems)
        for (const std::string& node : p.nodes) nodes[node] = variant;
      if (!offered_symbolically(op, symbolic, variant)) {
        cases.push_back({variant, nodes, {b}, options.fixed});
        continue;
      }
      auto same = std::find_if(cases.begin(), cases.end(), [&](const VariantCase& c) {
        return c.variant == variant && c.nodes == nodes && c.fixed.empty();
      });
      if (same == cases.end()) same = cases.insert(cases.end(), VariantCase{variant, nodes, {}});
      same->bindings.push_back(b);
    }
  }
  return cases;
}

}  // namespace teeny::op_testing
