// Reverse-mode differentiation over the node DAG (design.md, "Training"; docs/training.md).
//
// A graph with a `train:` section gains, after its forward nodes, the backward nodes each op's
// rule (OpDef::backward) adds and one update node per trained param. Backward nodes are ordinary
// nodes of registered ops: they are lowered, verified, planned and checked like forward ones, and
// the forward tensors they read are what the forward pass saves (liveness keeps them).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "core/registry.h"

namespace teeny {

class Differentiator;

// What an op's backward rule sees of its forward node, and how it adds nodes.
class GradBuilder {
 public:
  const OpContext& ctx() const { return forward_.ctx; }
  const std::string& node() const { return forward_.name; }
  const std::string& input(size_t i) const { return forward_.inputs.at(i); }
  const std::string& output() const { return forward_.name; }
  // dL/d(output), of the output's type; "" at the loss node, whose gradient is 1.
  const std::string& grad_output() const { return grad_output_; }
  bool needs_input_grad(size_t i) const { return needs_input_.at(i); }
  bool needs_param_grad(const std::string& slot) const;
  // The full name of the forward node's param `slot` ("fc1.weight").
  std::string param(const std::string& slot) const;
  // The type of a graph input, forward tensor or node added so far.
  const TensorType& type(const std::string& tensor) const;

  // Adds a node of `op` (attrs not given take their defaults; `param_refs` bind its slots to
  // existing params, read only); returns its tensor's name.
  std::string add(const std::string& op, std::vector<std::string> inputs,
                  nlohmann::json attrs = nlohmann::json::object(), std::map<std::string, std::string> param_refs = {});
  // The rule's results: dL/d(input i), dL/d(param slot), each of that tensor's or param's type.
  void input_grad(size_t i, const std::string& tensor);
  void param_grad(const std::string& slot, const std::string& tensor);

 private:
  friend class Differentiator;
  GradBuilder(Differentiator& owner, const Node& forward, std::string grad_output, std::vector<bool> needs_input,
              std::vector<std::string> trained_slots);

  Differentiator& owner_;
  const Node& forward_;
  std::string grad_output_;
  std::vector<bool> needs_input_;
  std::vector<std::string> trained_slots_;
  std::map<size_t, std::string> input_grads_;
  std::map<std::string, std::string> param_grads_;
};

// What an op's training-mode hook (OpDef::train_mode) sees of its forward node, and how it changes
// it.
class TrainModeBuilder {
 public:
  const OpContext& ctx() const { return forward_.ctx; }
  const std::string& node() const { return forward_.name; }
  const std::string& input(size_t i) const { return forward_.inputs.at(i); }
  // The full name of the forward node's param `slot` ("bn1.running_mean").
  std::string param(const std::string& slot) const;
  // Sets the forward node's attr `name` (its output type inferred again).
  void set_attr(const std::string& name, nlohmann::json value);
  // Adds an update node of `op` (attrs not given take their defaults) reading `inputs`, its slots
  // bound by `param_refs` to existing params it writes in place, named `<op without its
  // namespace>_<node>` ("batchnorm_stats_bn1"), and its slot "step" to the step counter (it must
  // change nothing where that halted: ops/train_step.cpp). Update nodes exist where the train
  // section has an optimizer; these run after the optimizer's.
  void add_update(const std::string& op, std::vector<std::string> inputs, nlohmann::json attrs,
                  std::map<std::string, std::string> param_refs);

 private:
  friend class Differentiator;
  TrainModeBuilder(Differentiator& owner, Node& forward) : owner_(owner), forward_(forward) {}

  Differentiator& owner_;
  Node& forward_;
};

// Puts the forward nodes in training mode (OpDef::train_mode), then appends the backward nodes of
// `graph.train` and, where it names an optimizer, the update nodes (nothing without a `train:`
// section). Throws Error located at the `train:` key or the node
// concerned: an op without a gradient on the way to the loss, a listed param that does not
// affect the loss.
void add_training(Graph& graph, const Registry& registry);

// The trained params of a graph with a `train:` section, by full name in graph order (buffers,
// ParamHints::buffer, are not: no optimizer steps them).
std::vector<std::string> trained_params(const Graph& graph);

}  // namespace teeny
