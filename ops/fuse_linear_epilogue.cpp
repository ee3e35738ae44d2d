// Graph pass: a linear whose output feeds only an activation (relu, silu, sigmoid, tanh,
// gelu; 16-bit linears only) or only an add becomes one fused.linear, which applies them in
// the GEMM's epilogue: linear -> gelu, linear -> add(other, ·) and linear -> gelu -> add all
// become one node. The
// fused node takes the last replaced node's name (consumers and graph outputs unchanged) and
// keeps the linear's param names. A rewrite is made only when the fused output has exactly the
// replaced node's type (dtype, shape and row stride: no broadcasting add, no new row padding),
// so nothing downstream changes.
#include <algorithm>
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

// The rewrite of a consumer (an activation or an add reading the linear) into a fused.linear.
struct Rewrite {
  size_t linear;                        // its position in graph.nodes
  std::string activation;               // set for an activation consumer
  std::optional<std::string> residual;  // set for an add consumer
};

// A linear, or a fused.linear whose epilogue can still take what `rewrite` adds. f32 linears
// take no activation: it would turn off their split-K, and then a small batch leaves most SMs
// idle (mnist_mlp at B=1 took twice as long fused as unfused).
bool can_extend(const Node& node, bool adds_activation) {
  if (adds_activation && node.ctx.output.dtype == DType::kF32) return false;
  if (node.op->name == "linear") return true;
  if (node.op->name != "fused.linear" || node.inputs.size() == 2) return false;  // already has a residual
  return !adds_activation || node.ctx.attrs.text("activation") == "none";
}

Node fused_node(const Node& linear, const Node& consumer, const Rewrite& rewrite, const OpDef& fused) {
  Node node;
  node.name = consumer.name;
  node.op = &fused;
  node.inputs = {linear.inputs.at(0)};
  if (rewrite.residual) node.inputs.push_back(*rewrite.residual);
  node.pos = linear.pos;  // errors about the linear's attrs point at the linear
  node.key_pos = linear.key_pos;
  nlohmann::json attrs = linear.ctx.attrs.json();
  if (!rewrite.activation.empty())
    attrs["activation"] = rewrite.activation;
  else if (!attrs.contains("activation"))
    attrs["activation"] = "none";
  node.ctx = linear.ctx;
  node.ctx.node = consumer.name;
  node.ctx.attrs = Attrs(std::move(attrs));
  if (rewrite.residual) node.ctx.inputs.push_back(consumer.ctx.inputs.at(consumer.inputs[0] == linear.name ? 1 : 0));
  node.ctx.output = fused.infer(node.ctx);
  node.param_names = {{"weight", param_name(linear, "weight")}};
  if (linear.ctx.attrs.boolean("bias")) node.param_names["bias"] = param_name(linear, "bias");
  node.fused_from = fused_from({&linear, &consumer});
  return node;
}

// The rewrite of graph.nodes[i], if it is an activation or an add reading a linear it can absorb.
std::optional<Rewrite> rewrite_at(const Graph& graph, const GraphUses& uses, size_t i) {
  auto sole_linear = [&](const std::string& name, bool adds_activation) -> std::optional<size_t> {
    const Node* producer = uses.single_use_producer(name, "linear");
    if (producer == nullptr) producer = uses.single_use_producer(name, "fused.linear");
    if (producer == nullptr || !can_extend(*producer, adds_activation)) return std::nullopt;
    return uses.position(*producer);
  };
  const Node& node = graph.nodes[i];
  if (auto act = activation_of_op(node.op->name, node.ctx.attrs); act && node.inputs.size() == 1) {
    if (auto linear = sole_linear(node.inputs[0], true);
        linear && same_type(graph.nodes[*linear].ctx.output, node.ctx.output))
      return Rewrite{*linear, *act, std::nullopt};
  }
  if (node.op->name == "add" && node.inputs.size() == 2) {
    for (int side : {1, 0}) {
      auto linear = sole_linear(node.inputs[side], false);
      if (linear && same_type(graph.nodes[*linear].ctx.output, node.ctx.output) &&
          same_type(node.ctx.inputs[1 - side], node.ctx.output))
        return Rewrite{*linear, "", node.inputs[1 - side]};
    }
  }
  return std::nullopt;
}

int fuse_linear_epilogue(Graph& graph, const Registry& registry) {
  const OpDef& fused = fused_op(registry, "fuse_linear_epilogue", "fused.linear");
  auto is_linear = [](const Node& node) { return node.op->name == "linear" || node.op->name == "fused.linear"; };
  return fuse_chains(
      graph, is_linear, [&](const Graph& g, const GraphUses& uses, size_t i) -> std::optional<ChainStep> {
        std::optional<Rewrite> rewrite = rewrite_at(g, uses, i);
        if (!rewrite) return std::nullopt;
        return ChainStep{fused_node(g.nodes[rewrite->linear], g.nodes[i], *rewrite, fused), rewrite->linear};
      });
}

}  // namespace

GraphPass fuse_linear_epilogue_pass() {
  return GraphPass{"fuse_linear_epilogue",
                   "linear -> activation (relu, silu, sigmoid, tanh, gelu; 16-bit) and linear -> add, intermediates "
                   "used once, into one fused.linear applying them in the GEMM epilogue; only where the "
                   "output type (row stride included) stays the same",
                   fuse_linear_epilogue, false};
}

}  // namespace teeny::ops
