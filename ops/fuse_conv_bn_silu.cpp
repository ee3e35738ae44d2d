// Graph pass: conv2d (bias: false) -> batchnorm2d -> silu, each intermediate used once, becomes
// one conv2d_bn_silu node. The fused node takes the silu node's name (so its consumers and the
// graph outputs are unchanged), keeps the original param names (c1.weight, bn1.running_mean,
// ...) through Node::param_names, and lists the nodes it replaced in Node::fused_from.
#include <fmt/format.h>

#include <map>
#include <set>

#include "core/graph.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

std::string param_name(const Node& node, const std::string& slot) {
  auto it = node.param_names.find(slot);
  return it != node.param_names.end() ? it->second : node.name + "." + slot;
}

Node fuse(const Node& conv, const Node& bn, const Node& silu, const OpDef& fused) {
  Node node;
  node.name = silu.name;
  node.op = &fused;
  node.inputs = conv.inputs;
  node.pos = conv.pos;          // errors about the conv attrs point at the conv node
  node.key_pos = conv.key_pos;
  nlohmann::json attrs = conv.ctx.attrs.json();
  attrs.erase("bias");
  attrs["eps"] = bn.ctx.attrs.f("eps");
  node.ctx.node = silu.name;
  node.ctx.attrs = Attrs(std::move(attrs));
  node.ctx.inputs = conv.ctx.inputs;
  node.ctx.requested_dtype = silu.ctx.requested_dtype;
  node.ctx.output = fused.infer(node.ctx);
  node.param_names = {{"conv.weight", param_name(conv, "weight")},
                      {"bn.weight", param_name(bn, "weight")},
                      {"bn.bias", param_name(bn, "bias")},
                      {"bn.running_mean", param_name(bn, "running_mean")},
                      {"bn.running_var", param_name(bn, "running_var")}};
  for (const Node* original : {&conv, &bn, &silu}) {
    if (original->fused_from.empty()) node.fused_from.push_back(original->name);
    else node.fused_from.insert(node.fused_from.end(), original->fused_from.begin(), original->fused_from.end());
  }
  return node;
}

int fuse_conv_bn_silu(Graph& graph, const Registry& registry) {
  const OpDef* fused = registry.find("conv2d_bn_silu");
  if (fused == nullptr) throw Error("graph pass fuse_conv_bn_silu: op 'conv2d_bn_silu' is not registered");
  // Uses of each tensor; a graph output counts as a use, so it is never fused away.
  std::map<std::string, int> uses;
  for (const Node& node : graph.nodes)
    for (const std::string& input : node.inputs) ++uses[input];
  for (const std::string& output : graph.outputs) ++uses[output];
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < graph.nodes.size(); ++i) index[graph.nodes[i].name] = i;
  auto single_use_producer = [&](const Node& node, const char* op) -> const Node* {
    if (node.inputs.size() != 1) return nullptr;
    auto it = index.find(node.inputs[0]);
    if (it == index.end()) return nullptr;  // a graph input
    const Node& producer = graph.nodes[it->second];
    return producer.op->name == op && uses[producer.name] == 1 ? &producer : nullptr;
  };

  std::set<std::string> removed;
  int rewrites = 0;
  for (Node& node : graph.nodes) {
    if (node.op->name != "silu") continue;
    const Node* bn = single_use_producer(node, "batchnorm2d");
    const Node* conv = bn ? single_use_producer(*bn, "conv2d") : nullptr;
    if (conv == nullptr || conv->ctx.attrs.b("bias")) continue;
    Node replacement = fuse(*conv, *bn, node, *fused);
    removed.insert(conv->name);
    removed.insert(bn->name);
    node = std::move(replacement);  // in the silu node's place: after the conv's inputs
    ++rewrites;
  }
  std::vector<Node> kept;
  for (Node& node : graph.nodes)
    if (!removed.count(node.name)) kept.push_back(std::move(node));
  graph.nodes = std::move(kept);
  return rewrites;
}

}  // namespace

GraphPass fuse_conv_bn_silu_pass() {
  return GraphPass{"fuse_conv_bn_silu",
                   "conv2d (bias: false) -> batchnorm2d -> silu, intermediates used once, into one "
                   "conv2d_bn_silu node keeping the original param names",
                   fuse_conv_bn_silu};
}

}  // namespace teeny::ops
