// The graph IR produced by the spec parser: dims, inputs, nodes in topological order,
// outputs, with symbolic types inferred and source positions kept for errors.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/expr.h"
#include "core/op.h"
#include "core/registry.h"

namespace teeny {

// The text of a spec file, kept so any later error can show the line with a caret.
struct SourceFile {
  std::string path;
  std::vector<std::string> lines;
  // 1-based line/col; col 0 = no caret.
  SourceLocation location(int line, int column) const;
};

struct Position {
  int line = 0;  // 1-based
  int column = 0;
};

struct DimDecl {
  std::string name;
  int64_t min = 1;
  int64_t max = 0;
  int64_t default_value = 0;
  Position pos;
};

struct GraphInput {
  std::string name;
  TensorType type;
  Position pos;
};

// Where each key of a node's map is, by key ("op", "inputs.0", "attrs.k"): a node has a few, so
// they are a sorted vector rather than a std::map, which took an allocation per key of 10^5 nodes.
class KeyPositions {
 public:
  using value_type = std::pair<std::string, Position>;
  using const_iterator = std::vector<value_type>::const_iterator;

  const_iterator begin() const { return entries_.begin(); }
  const_iterator end() const { return entries_.end(); }
  size_t size() const { return entries_.size(); }
  void reserve(size_t keys) { entries_.reserve(keys); }
  const_iterator find(std::string_view key) const {
    auto it = lower_bound(key);
    return it != entries_.end() && it->first == key ? it : entries_.end();
  }
  const Position& at(std::string_view key) const {
    auto it = find(key);
    if (it == entries_.end()) throw std::out_of_range("KeyPositions::at");
    return it->second;
  }
  // The key's position, added (at {0, 0}) if it has none.
  Position& operator[](std::string_view key) {
    auto it = entries_.begin() + (lower_bound(key) - entries_.begin());
    if (it == entries_.end() || it->first != key) it = entries_.insert(it, {std::string(key), Position{}});
    return it->second;
  }

 private:
  const_iterator lower_bound(std::string_view key) const {
    return std::lower_bound(entries_.begin(), entries_.end(), key,
                            [](const value_type& entry, std::string_view k) { return entry.first < k; });
  }

  std::vector<value_type> entries_;
};

struct Node {
  std::string name;
  const OpDef* op = nullptr;
  std::vector<std::string> inputs;  // graph-input or earlier node names
  OpContext ctx;                    // attrs, input types, output type
  Position pos;                     // the node's map
  KeyPositions key_pos;             // "op", "inputs", "inputs.0", "attrs", "attrs.k", "dtype"
  // Graph passes (fusion) may rename param buffers: slot -> full dotted name, so a fused
  // node's params keep the names of the nodes it replaced. Absent slot: "<node>.<slot>".
  std::map<std::string, std::string> param_names;
  std::vector<std::string> fused_from;  // names of the nodes a pass replaced with this one
  // Training (core/autodiff.h). Slots bound to a param another node owns, by its full name: a
  // backward node reads it (linear's weight), an update node writes it.
  std::map<std::string, std::string> param_refs;
  NodeRole role = NodeRole::kForward;
  // A backward node: the forward node whose rule added it; an update node: the param it updates.
  std::string grad_of;
};

// The `train:` section of a spec (docs/training.md): what compile differentiates and how it
// updates the params.
struct TrainSpec {
  std::string loss;                 // a node whose op is a loss (OpDef::loss)
  std::vector<std::string> params;  // node names (all their trained params) or "<node>.<slot>"; empty: all
  // An "optim.<type>" op, whose attrs the optimizer map sets; none: the graph computes the
  // gradients and updates nothing (gradient checks, conformance).
  const OpDef* optimizer = nullptr;
  nlohmann::json optimizer_attrs;        // validated against its attrs, defaults filled in
  std::optional<double> clip_grad_norm;  // clip by global norm; absent: no clipping
  std::vector<std::string> inputs;       // graph inputs whose gradients are wanted too
  std::vector<Position> inputs_pos;
  Position pos, loss_pos, optimizer_pos, clip_pos;  // the section, its keys' values
  std::vector<Position> params_pos;                 // per entry of `params`
};

struct Graph {
  std::string name;
  std::shared_ptr<const SourceFile> source;
  std::vector<DimDecl> dims;
  std::vector<GraphInput> inputs;
  std::vector<Node> nodes;  // topological (spec order; forward references are errors)
  std::vector<std::string> outputs;
  std::optional<TrainSpec> train;
  // After add_training: each trained param's and listed input's gradient tensor, by name.
  std::map<std::string, std::string> gradients;

  const DimDecl* find_dim(const std::string& name) const;
  // The type of a graph input or node output; nullptr if unknown.
  const TensorType* find_tensor(const std::string& name) const;
  const Node* find_node(const std::string& name) const;
  Bindings default_bindings() const;
  // An error at a node key ("attrs.axis", "inputs.1", ...), falling back to the node's map.
  // The message is prefixed with "node '<name>': ".
  Error error_at(const Node& node, const std::string& key, std::string message) const;
};

// Parses and validates a spec file: YAML, keys, ops, attrs, names, shapes. Throws Error.
Graph load_graph(const std::string& path, const Registry& registry);
Graph parse_graph(const std::string& text, const std::string& path, const Registry& registry);

// Parses "--bind D=N" values against the graph's dims (range-checked); unmentioned dims
// take their defaults.
Bindings bind_dims(const std::vector<DimDecl>& dims, const std::vector<std::string>& binds);

// Every graph input's and node's concrete shape under `bindings`. Throws Error at the input
// or node whose shape cannot be evaluated or has a size <= 0.
std::map<std::string, std::vector<int64_t>> bind_shapes(const Graph& graph, const Bindings& bindings);

}  // namespace teeny
