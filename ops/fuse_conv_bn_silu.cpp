// Graph pass: conv2d (bias: false) -> batchnorm2d (inference) -> silu, each intermediate used
// once, becomes one conv2d_bn_silu node. A batchnorm2d in training mode (every one of a training
// graph, whose train mode compile sets before the passes run) normalizes by batch statistics,
// which the fused kernel's folded running statistics cannot: it is left alone. The fused node takes the silu node's
// name (so its consumers and the graph outputs are unchanged), keeps the original param names (c1.weight,
// bn1.running_mean,
// ...) through Node::param_names, and lists the nodes it replaced in Node::fused_from.
#include <fmt/format.h>

#include "core/graph.h"
#include "ops/ops.h"
#include "ops/pass_util.h"

namespace teeny::ops {
namespace {

Node fuse(const Node& conv, const Node& bn, const Node& silu, const OpDef& fused) {
  Node node;
  node.name = silu.name;
  node.op = &fused;
  node.inputs = conv.inputs;
  node.pos = conv.pos;  // errors about the conv attrs point at the conv node
  node.key_pos = conv.key_pos;
  nlohmann::json attrs = conv.ctx.attrs.json();
  attrs.erase("bias");
  attrs["eps"] = bn.ctx.attrs.real("eps");
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
  node.fused_from = fused_from({&conv, &bn, &silu});
  return node;
}

int fuse_conv_bn_silu(Graph& graph, const Registry& registry) {
  const OpDef& fused = fused_op(registry, "fuse_conv_bn_silu", "conv2d_bn_silu");
  return fuse_patterns(graph, "silu", [&](const Node& silu, const GraphUses& uses) -> std::optional<Fusion> {
    // silu and batchnorm2d have one input.
    const Node* bn = uses.single_use_producer(silu.inputs.at(0), "batchnorm2d");
    if (bn && bn->ctx.attrs.boolean("training")) return std::nullopt;
    const Node* conv = bn ? uses.single_use_producer(bn->inputs.at(0), "conv2d") : nullptr;
    if (conv == nullptr || conv->ctx.attrs.boolean("bias")) return std::nullopt;
    return Fusion{fuse(*conv, *bn, silu, fused), {conv, bn}};
  });
}

}  // namespace

GraphPass fuse_conv_bn_silu_pass() {
  return GraphPass{"fuse_conv_bn_silu",
                   "conv2d (bias: false) -> batchnorm2d (not training) -> silu, intermediates used once, into "
                   "one conv2d_bn_silu node keeping the original param names",
                   fuse_conv_bn_silu, false};
}

}  // namespace teeny::ops
