// Graph pass: a grad.linear_dx whose dx feeds only grad.activation (as its dy), or only an add of
// two gradients of one type (a fan-out sum, core/autodiff.h), becomes one grad.linear_dx with
// that step in its GEMM's epilogue (attr `epilogue`, input r: ops/grad_linear_dx.cpp), so dx
// makes no round trip through memory and the elementwise launch goes. The fused node takes the
// consumer's name and place (its readers and the recorded gradients are unchanged) and keeps the
// linear's weight reference. One epilogue a node: an activation's derivative first, so a dx
// both scaled and summed keeps its add.
#include <optional>

#include "core/graph.h"
#include "ops/ops.h"
#include "ops/pass_util.h"

namespace teeny::ops {
namespace {

constexpr const char* kPass = "fuse_grad_linear_epilogue";

bool same_type(const TensorType& a, const TensorType& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.row_stride == b.row_stride;
}

// The grad.linear_dx producing `tensor` if it is used once and has no epilogue yet.
const Node* plain_dx(const GraphUses& uses, const std::string& tensor) {
  const Node* dx = uses.single_use_producer(tensor, "grad.linear_dx");
  return dx != nullptr && !dx->ctx.attrs.has("epilogue") ? dx : nullptr;
}

// `dx` taking `consumer`'s place with `epilogue` reading input `r` (consumer's input `r_input`).
Fusion fuse(const Node& dx, const Node& consumer, const std::string& epilogue, size_t r_input) {
  Node node = dx;
  node.name = consumer.name;
  node.inputs.push_back(consumer.inputs.at(r_input));
  node.ctx.node = consumer.name;
  node.ctx.inputs.push_back(consumer.ctx.inputs.at(r_input));
  nlohmann::json attrs = dx.ctx.attrs.json();
  attrs["epilogue"] = epilogue;
  node.ctx.attrs = Attrs(std::move(attrs));
  node.ctx.output = dx.op->infer(node.ctx);
  node.role = consumer.role;
  node.grad_of = consumer.grad_of;
  node.fused_from = fused_from({&dx, &consumer});
  return {std::move(node), {&dx}};
}

std::optional<Fusion> activation_into_dx(const Node& grad, const GraphUses& uses) {
  const Node* dx = plain_dx(uses, grad.inputs.at(0));
  if (dx == nullptr || !same_type(dx->ctx.output, grad.ctx.output) ||
      !same_type(grad.ctx.inputs.at(1), grad.ctx.output))
    return std::nullopt;
  return fuse(*dx, grad, grad.ctx.attrs.text("activation"), 1);
}

std::optional<Fusion> sum_into_dx(const Node& add, const GraphUses& uses) {
  if (add.inputs.size() != 2 || add.role != NodeRole::kBackward) return std::nullopt;
  for (size_t side : {1, 0}) {
    const Node* dx = plain_dx(uses, add.inputs[side]);
    if (dx != nullptr && same_type(dx->ctx.output, add.ctx.output) &&
        same_type(add.ctx.inputs[1 - side], add.ctx.output))
      return fuse(*dx, add, "add", 1 - side);
  }
  return std::nullopt;
}

int fuse_grad_linear_epilogue(Graph& graph, const Registry& registry) {
  fused_op(registry, kPass, "grad.linear_dx");
  return fuse_patterns(graph, "grad.activation", activation_into_dx) + fuse_patterns(graph, "add", sum_into_dx);
}

}  // namespace

GraphPass fuse_grad_linear_epilogue_pass() {
  return GraphPass{kPass,
                   "grad.linear_dx -> grad.activation and grad.linear_dx -> add (a backward fan-out sum), dx used "
                   "once, into one grad.linear_dx applying the step in its GEMM epilogue",
                   fuse_grad_linear_epilogue, false};
}

}  // namespace teeny::ops
