// What the graph passes (ops/fuse_*.cpp) share: who uses a tensor, who produces it, and the
// bookkeeping of a rewrite.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/graph.h"
#include "core/registry.h"

namespace teeny::ops {

// A graph's uses and producers as they are when the pass starts. A graph output and a training
// graph's gradient tensor count as a use, so neither is fused away.
class GraphUses {
 public:
  explicit GraphUses(const Graph& graph);
  // The node producing `tensor` if it is an `op` node used once, else nullptr (a graph input
  // has no producer).
  const Node* single_use_producer(const std::string& tensor, const std::string& op) const;
  // Where `node` stands in graph.nodes.
  size_t position(const Node& node) const;

 private:
  const Graph& graph_;
  std::unordered_map<std::string, int> uses_;
  std::unordered_map<std::string, size_t> index_;
};

// A pattern found ending at one node: the node that takes its place and the earlier nodes it
// absorbs.
struct Fusion {
  Node replacement;
  std::vector<const Node*> absorbed;
};

// The loop of a fusion pass: `match` sees every node whose op is `last_op` (with the uses as
// they were before the pass) and may return a Fusion. Its replacement takes the matched node's
// place, which comes after all the pattern's inputs; the absorbed nodes are dropped. Returns the
// number of rewrites.
int fuse_patterns(Graph& graph, const std::string& last_op,
                  const std::function<std::optional<Fusion>(const Node& node, const GraphUses& uses)>& match);

// One step of an epilogue chain: the node that takes the matched node's place, and the position
// of the earlier node it absorbs (the chain's head so far).
struct ChainStep {
  Node replacement;
  size_t absorbed;
};

// The loop of an epilogue-chain pass (conv -> bn -> add -> relu): `step` sees every node in graph
// order, with the uses as they were before the pass, and may return a ChainStep. A rewrite keeps
// every name's use count (the replacement reads what both nodes read, in the consumer's place and
// under its name), so those uses stay true, and the replacement is seen again by its own consumer
// later in the scan: a chain fuses one step at a time. Without a node that `starts` a chain nothing
// is done. Returns the number of rewrites.
int fuse_chains(
    Graph& graph, const std::function<bool(const Node& node)>& starts,
    const std::function<std::optional<ChainStep>(const Graph& graph, const GraphUses& uses, size_t i)>& step);

// The op `pass` creates; throws Error if the registry lacks it.
const OpDef& fused_op(const Registry& registry, const std::string& pass, const std::string& op);

// The full name of `node`'s param `slot`: its entry in Node::param_names, else "<node>.<slot>".
std::string param_name(const Node& node, const std::string& slot);

// Node::fused_from for a node replacing `originals` (in graph order): their names, or, for one
// that is itself fused, the names it was fused from.
std::vector<std::string> fused_from(const std::vector<const Node*>& originals);

}  // namespace teeny::ops
