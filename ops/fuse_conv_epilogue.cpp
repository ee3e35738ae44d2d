// Graph pass: a conv2d and what follows it -- a batchnorm2d (inference), an add of a residual (after
// a batch norm), an activation -- each intermediate used once, become one fused.conv2d applying
// them in the conv's epilogue: ResNet's conv -> bn -> relu and conv -> bn -> add -> relu, a YOLO
// conv -> bn -> silu, LeNet's conv (bias) -> relu. A batchnorm2d in training mode (every one of a
// training graph, whose train mode compile sets before the passes run) normalizes by batch
// statistics, which the fused kernel's folded running statistics cannot: it is left alone. A
// rewrite is made only where the output type stays the same (no broadcasting add). The fused node
// takes the last replaced node's name (so its consumers and the graph outputs are unchanged), keeps
// the original param names (c1.weight, bn1.running_mean, ...) through Node::param_names, and lists
// the nodes it replaced in Node::fused_from.
#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "core/graph.h"
#include "ops/activation.h"
#include "ops/ops.h"
#include "ops/pass_util.h"

namespace teeny::ops {
namespace {

bool same_type(const TensorType& a, const TensorType& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.row_stride == b.row_stride;
}

// What a consumer of a conv (or of a fused.conv2d) adds to its epilogue.
struct Step {
  size_t conv;  // the producer's position in graph.nodes
  enum Kind { kBn, kResidual, kActivation } kind;
  std::optional<std::string> residual;  // kResidual: the other operand
  std::string activation;               // kActivation
};

// Whether the epilogue of `node` (a conv2d or fused.conv2d) can still take `kind`: steps come in
// the order bn, residual, activation, a residual only after a batch norm, a batch norm only on a
// conv without a bias.
bool can_take(const Node& node, Step::Kind kind) {
  const bool fused = node.op->name == "fused.conv2d";
  const bool bias = node.ctx.attrs.boolean("bias");
  const bool bn = fused && node.ctx.attrs.boolean("bn");
  const bool residual = fused && node.inputs.size() == 2;
  const bool act = fused && node.ctx.attrs.text("activation") != "none";
  switch (kind) {
    case Step::kBn:
      return !bias && !bn && !residual && !act;
    case Step::kResidual:
      return bn && !residual && !act;
    case Step::kActivation:
      return !act;
  }
  return false;
}

// The step graph.nodes[i] makes, if it consumes a conv whose epilogue can take it.
std::optional<Step> step_at(const Graph& graph, const GraphUses& uses, size_t i) {
  const Node& node = graph.nodes[i];
  auto sole_conv = [&](const std::string& tensor, Step::Kind kind) -> std::optional<size_t> {
    const Node* producer = uses.single_use_producer(tensor, "conv2d");
    if (producer == nullptr) producer = uses.single_use_producer(tensor, "fused.conv2d");
    if (producer == nullptr || !can_take(*producer, kind) || !same_type(producer->ctx.output, node.ctx.output))
      return std::nullopt;
    return uses.position(*producer);
  };
  if (node.op->name == "batchnorm2d" && !node.ctx.attrs.boolean("training")) {
    if (auto conv = sole_conv(node.inputs[0], Step::kBn)) return Step{*conv, Step::kBn, std::nullopt, ""};
  }
  if (auto act = activation_of_op(node.op->name, node.ctx.attrs); act && node.inputs.size() == 1) {
    if (auto conv = sole_conv(node.inputs[0], Step::kActivation))
      return Step{*conv, Step::kActivation, std::nullopt, *act};
  }
  if (node.op->name == "add" && node.inputs.size() == 2) {
    for (int side : {0, 1}) {
      auto conv = sole_conv(node.inputs[side], Step::kResidual);
      if (conv && same_type(node.ctx.inputs[1 - side], node.ctx.output))
        return Step{*conv, Step::kResidual, node.inputs[1 - side], ""};
    }
  }
  return std::nullopt;
}

// A conv2d's params under fused.conv2d's slots, or a fused node's as they are.
std::map<std::string, std::string> conv_param_names(const Node& conv) {
  if (conv.op->name == "fused.conv2d") return conv.param_names;
  std::map<std::string, std::string> names = {{"conv.weight", param_name(conv, "weight")}};
  if (conv.ctx.attrs.boolean("bias")) names["conv.bias"] = param_name(conv, "bias");
  return names;
}

Node fused_node(const Node& conv, const Node& consumer, const Step& step, const OpDef& fused) {
  Node node;
  node.name = consumer.name;
  node.op = &fused;
  node.inputs = {conv.inputs.at(0)};
  node.pos = conv.pos;  // errors about the conv attrs point at the conv node
  node.key_pos = conv.key_pos;
  nlohmann::json attrs = conv.ctx.attrs.json();
  if (conv.op->name == "conv2d") {  // fused.conv2d's attrs at their defaults
    attrs["bn"] = false;
    attrs["eps"] = 1e-5;
    attrs["activation"] = "none";
  }
  node.ctx = conv.ctx;
  node.param_names = conv_param_names(conv);
  switch (step.kind) {
    case Step::kBn:
      attrs["bn"] = true;
      attrs["eps"] = consumer.ctx.attrs.real("eps");
      for (const char* slot : {"weight", "bias", "running_mean", "running_var"})
        node.param_names[std::string("bn.") + slot] = param_name(consumer, slot);
      break;
    case Step::kResidual:
      node.inputs.push_back(*step.residual);
      node.ctx.inputs.push_back(consumer.ctx.inputs.at(consumer.inputs[0] == conv.name ? 1 : 0));
      break;
    case Step::kActivation:
      attrs["activation"] = step.activation;
      break;
  }
  if (conv.inputs.size() == 2) node.inputs.push_back(conv.inputs[1]);  // a residual it already adds
  node.ctx.node = consumer.name;
  node.ctx.attrs = Attrs(std::move(attrs));
  node.ctx.requested_dtype = consumer.ctx.requested_dtype;
  node.ctx.output = fused.infer(node.ctx);
  node.fused_from = fused_from({&conv, &consumer});
  return node;
}

int fuse_conv_epilogue(Graph& graph, const Registry& registry) {
  const OpDef& fused = fused_op(registry, "fuse_conv_epilogue", "fused.conv2d");
  auto is_conv = [](const Node& node) { return node.op->name == "conv2d"; };
  return fuse_chains(graph, is_conv, [&](const Graph& g, const GraphUses& uses, size_t i) -> std::optional<ChainStep> {
    std::optional<Step> step = step_at(g, uses, i);
    if (!step) return std::nullopt;
    return ChainStep{fused_node(g.nodes[step->conv], g.nodes[i], *step, fused), step->conv};
  });
}

}  // namespace

GraphPass fuse_conv_epilogue_pass() {
  return GraphPass{"fuse_conv_epilogue",
                   "conv2d -> batchnorm2d (not training) -> add (a residual, after a batch norm) -> activation, "
                   "any of them, intermediates used once, into one fused.conv2d applying them in the conv's "
                   "epilogue and keeping the original param names",
                   fuse_conv_epilogue, false};
}

}  // namespace teeny::ops
