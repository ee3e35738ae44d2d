#include "ops/pass_util.h"

#include <algorithm>
#include <set>

namespace teeny::ops {

GraphUses::GraphUses(const Graph& graph) : graph_(graph) {
  for (const Node& node : graph.nodes)
    for (const std::string& input : node.inputs) ++uses_[input];
  for (const std::string& output : graph.outputs) ++uses_[output];
  for (const auto& [param, gradient] : graph.gradients) ++uses_[gradient];
  for (size_t i = 0; i < graph.nodes.size(); ++i) index_[graph.nodes[i].name] = i;
}

const Node* GraphUses::single_use_producer(const std::string& tensor, const std::string& op) const {
  auto it = index_.find(tensor);
  if (it == index_.end()) return nullptr;
  const Node& producer = graph_.nodes[it->second];
  auto use = uses_.find(tensor);
  return producer.op->name == op && use != uses_.end() && use->second == 1 ? &producer : nullptr;
}

size_t GraphUses::position(const Node& node) const { return index_.at(node.name); }

std::string param_name(const Node& node, const std::string& slot) {
  auto it = node.param_names.find(slot);
  return it != node.param_names.end() ? it->second : node.name + "." + slot;
}

std::vector<std::string> fused_from(const std::vector<const Node*>& originals) {
  std::vector<std::string> names;
  for (const Node* original : originals) {
    if (original->fused_from.empty())
      names.push_back(original->name);
    else
      names.insert(names.end(), original->fused_from.begin(), original->fused_from.end());
  }
  return names;
}

int fuse_patterns(Graph& graph, const std::string& last_op,
                  const std::function<std::optional<Fusion>(const Node& node, const GraphUses& uses)>& match) {
  // Most graphs have none of most patterns: then neither the uses nor a new node list are made.
  if (std::none_of(graph.nodes.begin(), graph.nodes.end(), [&](const Node& node) { return node.op->name == last_op; }))
    return 0;
  const GraphUses uses(graph);
  std::set<std::string> absorbed;
  int rewrites = 0;
  for (Node& node : graph.nodes) {
    if (node.op->name != last_op) continue;
    std::optional<Fusion> fusion = match(node, uses);
    if (!fusion) continue;
    for (const Node* original : fusion->absorbed) absorbed.insert(original->name);
    node = std::move(fusion->replacement);
    ++rewrites;
  }
  if (absorbed.empty()) return rewrites;
  std::vector<Node> kept;
  for (Node& node : graph.nodes)
    if (!absorbed.count(node.name)) kept.push_back(std::move(node));
  graph.nodes = std::move(kept);
  return rewrites;
}

int fuse_chains(
    Graph& graph, const std::function<bool(const Node& node)>& starts,
    const std::function<std::optional<ChainStep>(const Graph& graph, const GraphUses& uses, size_t i)>& step) {
  if (std::none_of(graph.nodes.begin(), graph.nodes.end(), starts)) return 0;
  const GraphUses uses(graph);
  std::vector<bool> absorbed(graph.nodes.size(), false);
  int rewrites = 0;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    std::optional<ChainStep> found = step(graph, uses, i);
    if (!found) continue;
    graph.nodes[i] = std::move(found->replacement);
    absorbed[found->absorbed] = true;
    ++rewrites;
  }
  if (rewrites == 0) return 0;
  std::vector<Node> kept;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (!absorbed[i]) kept.push_back(std::move(graph.nodes[i]));
  graph.nodes = std::move(kept);
  return rewrites;
}

const OpDef& fused_op(const Registry& registry, const std::string& pass, const std::string& op) {
  const OpDef* def = registry.find(op);
  if (def == nullptr) throw Error("graph pass " + pass + ": op '" + op + "' is not registered");
  return *def;
}

}  // namespace teeny::ops
