// The graph IR produced by the spec parser: dims, inputs, nodes in topological order,
// outputs, with symbolic types inferred and source positions kept for errors.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
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

struct Node {
  std::string name;
  const OpDef* op = nullptr;
  std::vector<std::string> inputs;          // graph-input or earlier node names
  OpContext ctx;                            // attrs, input types, output type
  Position pos;                             // the node's map
  std::map<std::string, Position> key_pos;  // "op", "inputs", "inputs.0", "attrs", "attrs.k", "dtype"
  // Graph passes (fusion) may rename param buffers: slot -> full dotted name, so a fused
  // node's params keep the names of the nodes it replaced. Absent slot: "<node>.<slot>".
  std::map<std::string, std::string> param_names;
  std::vector<std::string> fused_from;  // names of the nodes a pass replaced with this one
};

struct Graph {
  std::string name;
  std::shared_ptr<const SourceFile> source;
  std::vector<DimDecl> dims;
  std::vector<GraphInput> inputs;
  std::vector<Node> nodes;  // topological (spec order; forward references are errors)
  std::vector<std::string> outputs;

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
