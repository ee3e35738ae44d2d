// Reverse-mode differentiation (core/autodiff.h) and the spec's `train:` section, on test ops
// whose backward rules are simple enough to state the expected graph by hand: which nodes are
// added, in what order, reading which forward tensors (the saved ones), fan-out sums, param
// gradients and the update pass; and the exact text of every user-facing error.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/autodiff.h"
#include "core/graph.h"
#include "tests/error_test_util.h"
#include "tests/spec_test_ops.h"

namespace teeny {
namespace {

using testing::rendered;
using testing::same_as_input;
using testing::test_op;

AttrSpec float_attr(const std::string& name, std::optional<double> default_value) {
  AttrSpec spec{name, AttrType::kFloat, name, std::nullopt, {}, false};
  if (default_value) spec.default_value = nlohmann::json(*default_value);
  return spec;
}

// lin: x [..., in] -> [..., out] with a trained weight [out, in]. Its rule reads x and the
// weight (dx) and x (dweight): the forward input is what it saves.
OpDef lin_op() {
  OpDef def = test_op("lin", {{"x", ""}}, {{"out", AttrType::kInt, "features", std::nullopt, {}, false}},
                      [](const OpContext& ctx) {
                        Shape shape = ctx.inputs[0].shape;
                        shape.back() = Expr(ctx.attrs.integer("out"));
                        return contiguous(ctx.inputs[0].dtype, shape);
                      });
  def.params = [](const OpContext& ctx) {
    return std::vector<ParamSpec>{{"weight",
                                   {ctx.output.shape.back(), ctx.inputs[0].shape.back()},
                                   ctx.inputs[0].dtype,
                                   ParamInit::kTrained,
                                   {}}};
  };
  def.backward = [](GradBuilder& g) {
    if (g.needs_input_grad(0))
      g.input_grad(0, g.add("lin_dx", {g.grad_output()}, {{"in", *g.type(g.input(0)).shape.back().const_value()}},
                            {{"weight", g.param("weight")}}));
    if (g.needs_param_grad("weight")) g.param_grad("weight", g.add("lin_dw", {g.grad_output(), g.input(0)}));
  };
  return def;
}

// dy -> dx for lin, reading lin's weight through a param ref.
OpDef lin_dx_op() {
  OpDef def = test_op("lin_dx", {{"dy", ""}}, {{"in", AttrType::kInt, "features", std::nullopt, {}, false}},
                      [](const OpContext& ctx) {
                        Shape shape = ctx.inputs[0].shape;
                        shape.back() = Expr(ctx.attrs.integer("in"));
                        return contiguous(ctx.inputs[0].dtype, shape);
                      });
  def.params = [](const OpContext& ctx) {
    return std::vector<ParamSpec>{
        {"weight", {ctx.inputs[0].shape.back(), ctx.output.shape.back()}, ctx.output.dtype, ParamInit::kTrained, {}}};
  };
  return def;
}

OpDef lin_dw_op() {
  return test_op("lin_dw", {{"dy", ""}, {"x", ""}}, {}, [](const OpContext& ctx) {
    return contiguous(ctx.inputs[0].dtype, {ctx.inputs[0].shape.back(), ctx.inputs[1].shape.back()});
  });
}

// act: elementwise; its rule reads its own output (as relu's does).
OpDef act_op() {
  OpDef def = test_op("act", {{"x", ""}}, {}, same_as_input);
  def.backward = [](GradBuilder& g) { g.input_grad(0, g.add("act_grad", {g.grad_output(), g.output()})); };
  return def;
}

// loss: any tensor -> [1]; its rule seeds from the tensor alone.
OpDef loss_op() {
  OpDef def = test_op("loss", {{"x", ""}}, {}, [](const OpContext&) { return contiguous(DType::kF32, {Expr(1)}); });
  def.loss = true;
  def.backward = [](GradBuilder& g) {
    EXPECT_EQ(g.grad_output(), "");
    g.input_grad(0, g.add("loss_grad", {g.input(0)}));
  };
  return def;
}

OpDef optimizer_op(const std::string& name, std::vector<AttrSpec> attrs) {
  OpDef def = test_op(name, {{"grad", ""}, {"clip", ""}}, std::move(attrs), same_as_input);
  def.optional_inputs = 1;
  def.update = true;
  def.update_reference = [](const RefContext&) { return std::map<std::string, HostTensor>{}; };
  def.params = [](const OpContext& ctx) {
    return std::vector<ParamSpec>{{"param", ctx.inputs[0].shape, ctx.inputs[0].dtype, ParamInit::kTrained, {}},
                                  {"step", {Expr(1)}, DType::kI32, ParamInit::kZero, {}},
                                  {"momentum_buffer", ctx.inputs[0].shape, DType::kF32, ParamInit::kZero, {}}};
  };
  return def;
}

Registry training_registry() {
  Registry registry;
  for (OpDef def : {lin_op(), lin_dx_op(), lin_dw_op(), act_op(), loss_op()}) registry.add(std::move(def));
  registry.add(test_op("act_grad", {{"dy", ""}, {"y", ""}}, {}, same_as_input));
  registry.add(test_op("loss_grad", {{"x", ""}}, {}, same_as_input));
  OpDef add = test_op("add", {{"a", ""}, {"b", ""}}, {}, same_as_input);
  add.backward = [](GradBuilder& g) {
    for (size_t i = 0; i < 2; ++i)
      if (g.needs_input_grad(i)) g.input_grad(i, g.grad_output());
  };
  registry.add(add);
  registry.add(test_op("frozen", {{"x", ""}}, {}, same_as_input));  // no gradient
  registry.add(optimizer_op("optim.sgd", {float_attr("lr", std::nullopt), float_attr("momentum", 0.0)}));
  registry.add(optimizer_op("optim.adamw", {float_attr("lr", std::nullopt)}));
  OpDef step =
      test_op("train.step", {{"loss", ""}}, {}, [](const OpContext&) { return contiguous(DType::kI32, {Expr(1)}); });
  step.update = true;
  step.update_reference = [](const RefContext&) { return std::map<std::string, HostTensor>{}; };
  step.params = [](const OpContext&) {
    return std::vector<ParamSpec>{{"count", {Expr(1)}, DType::kI32, ParamInit::kZero, {}}};
  };
  registry.add(step);
  OpDef clip = test_op("train.clip_grad_norm", {{"grads", ""}}, {float_attr("max_norm", std::nullopt)},
                       [](const OpContext&) { return contiguous(DType::kF32, {Expr(2)}); });
  clip.variadic = true;
  clip.min_inputs = 1;
  registry.add(clip);
  return registry;
}

// x -> fc1 -> a1 -> fc2, and both = fc2 + a1: a1 fans out to fc2 and to `both`.
const char* kNet = R"(name: net
dims:
  B: {min: 1, max: 64, default: 8}
inputs:
  x: {dtype: f32, shape: [B, 4]}
nodes:
  - {name: fc1, op: lin, inputs: [x], attrs: {out: 3}}
  - {name: a1, op: act, inputs: [fc1]}
  - {name: fc2, op: lin, inputs: [a1], attrs: {out: 3}}
  - {name: both, op: add, inputs: [fc2, a1]}
  - {name: loss, op: loss, inputs: [both]}
outputs: [loss]
)";

std::string net_with(const std::string& train, const std::string& net = kNet) { return net + "train:\n" + train; }

Graph trained(const std::string& text) {
  static const Registry registry = training_registry();  // the graph's nodes point at its ops
  Graph graph = parse_graph(text, "net.yaml", registry);
  add_training(graph, registry);
  return graph;
}

// One line per node: "name = op(inputs) [role of grad_of] {slot->param}".
std::vector<std::string> describe(const Graph& graph) {
  std::vector<std::string> lines;
  for (const Node& node : graph.nodes) {
    std::string line = fmt::format("{} = {}({})", node.name, node.op->name, fmt::join(node.inputs, ", "));
    if (node.role != NodeRole::kForward)
      line += node.grad_of.empty() ? fmt::format(" [{}]", node_role_name(node.role))
                                   : fmt::format(" [{} of {}]", node_role_name(node.role), node.grad_of);
    for (const auto& [slot, param] : node.param_refs) line += fmt::format(" {{{}->{}}}", slot, param);
    lines.push_back(line);
  }
  return lines;
}

TEST(Autodiff, AddsBackwardNodesFanOutSumsAndUpdates) {
  const Graph graph = trained(net_with("  loss: loss\n  optimizer: {type: sgd, lr: 0.1, momentum: 0.9}\n"));
  const std::vector<std::string> expected{
      "fc1 = lin(x)",
      "a1 = act(fc1)",
      "fc2 = lin(a1)",
      "both = add(fc2, a1)",
      "loss = loss(both)",
      // The loss seeds itself; `add` passes its gradient to both inputs unchanged.
      "bwd_loss = loss_grad(both) [backward of loss]",
      "bwd_fc2 = lin_dx(bwd_loss) [backward of fc2] {weight->fc2.weight}",
      "bwd_fc2_1 = lin_dw(bwd_loss, a1) [backward of fc2]",
      // a1 feeds fc2 and both: its gradient is the sum, in the order the consumers were reached.
      "grad_a1 = add(bwd_loss, bwd_fc2) [backward of a1]",
      "bwd_a1 = act_grad(grad_a1, a1) [backward of a1]",
      // x is a graph input: fc1 needs only its weight's gradient.
      "bwd_fc1 = lin_dw(bwd_a1, x) [backward of fc1]",
      "optim_step = train.step(loss) [update]",
      "sgd_fc1_weight = optim.sgd(bwd_fc1) [update of fc1.weight] {param->fc1.weight} {step->optim_step.count}",
      "sgd_fc2_weight = optim.sgd(bwd_fc2_1) [update of fc2.weight] {param->fc2.weight} {step->optim_step.count}",
  };
  EXPECT_EQ(describe(graph), expected);
  EXPECT_EQ(trained_params(graph), (std::vector<std::string>{"fc1.weight", "fc2.weight"}));
  // The optimizer's keys are its attrs, defaults filled in.
  const Node& update = graph.nodes.back();
  EXPECT_EQ(update.ctx.attrs.real("lr"), 0.1);
  EXPECT_EQ(update.ctx.attrs.real("momentum"), 0.9);
  // Gradients have their tensors' types.
  EXPECT_EQ(graph.find_node("bwd_fc1")->ctx.output.shape, (Shape{Expr(3), Expr(4)}));
  EXPECT_EQ(graph.find_node("grad_a1")->ctx.output.shape, graph.find_node("a1")->ctx.output.shape);
}

TEST(Autodiff, ListedParamsAloneAreTrained) {
  const Graph graph = trained(net_with("  loss: loss\n  params: [fc2.weight]\n  optimizer: {type: sgd, lr: 0.1}\n"));
  const std::vector<std::string> expected{
      "fc1 = lin(x)",
      "a1 = act(fc1)",
      "fc2 = lin(a1)",
      "both = add(fc2, a1)",
      "loss = loss(both)",
      "bwd_loss = loss_grad(both) [backward of loss]",
      // fc2's input depends on no trained param: no dx, and nothing before fc2 is differentiated.
      "bwd_fc2 = lin_dw(bwd_loss, a1) [backward of fc2]",
      "optim_step = train.step(loss) [update]",
      "sgd_fc2_weight = optim.sgd(bwd_fc2) [update of fc2.weight] {param->fc2.weight} {step->optim_step.count}",
  };
  EXPECT_EQ(describe(graph), expected);
}

TEST(Autodiff, ClippingAddsTheCoefficientEveryUpdateReads) {
  const Graph graph = trained(net_with("  loss: loss\n  optimizer: {type: adamw, lr: 0.001}\n  clip_grad_norm: 1.5\n"));
  const std::vector<std::string> lines = describe(graph);
  ASSERT_GE(lines.size(), 4u);
  const std::vector<std::string> tail(lines.end() - 4, lines.end());
  const std::vector<std::string> expected{
      "optim_step = train.step(loss) [update]",
      "clip_grad_norm = train.clip_grad_norm(bwd_fc1, bwd_fc2_1) [update]",
      "adamw_fc1_weight = optim.adamw(bwd_fc1, clip_grad_norm) [update of fc1.weight] {param->fc1.weight} "
      "{step->optim_step.count}",
      "adamw_fc2_weight = optim.adamw(bwd_fc2_1, clip_grad_norm) [update of fc2.weight] {param->fc2.weight} "
      "{step->optim_step.count}",
  };
  EXPECT_EQ(tail, expected);
  EXPECT_EQ(graph.find_node("clip_grad_norm")->ctx.attrs.real("max_norm"), 1.5);
}

TEST(Autodiff, WithoutAnOptimizerOnlyGradients) {
  const std::vector<std::string> lines = describe(trained(net_with("  loss: loss\n  params: [fc2]\n")));
  EXPECT_EQ(lines.back(), "bwd_fc2 = lin_dw(bwd_loss, a1) [backward of fc2]");
}

TEST(Autodiff, ListedInputsGetGradientsToo) {
  const Graph graph = trained(net_with("  loss: loss\n  inputs: [x]\n"));
  // fc1 now passes a gradient to x; x has one consumer, so its gradient is that node's.
  EXPECT_EQ(graph.find_node("bwd_fc1")->op->name, "lin_dx");
  EXPECT_EQ(graph.gradients, (std::map<std::string, std::string>{
                                 {"fc1.weight", "bwd_fc1_1"}, {"fc2.weight", "bwd_fc2_1"}, {"x", "bwd_fc1"}}));
  EXPECT_EQ(rendered([] { trained(net_with("  loss: loss\n  inputs: [y]\n")); }),
            "teeny: error: net.yaml:15:12: train: inputs: undefined graph input 'y' (did you mean 'x'?)\n"
            "    inputs: [y]\n"
            "             ^\n");
}

TEST(Autodiff, AddedNamesNeverCollide) {
  const std::string net = R"(name: net
inputs:
  x: {dtype: f32, shape: [2, 4]}
nodes:
  - {name: fc1, op: lin, inputs: [x], attrs: {out: 3}}
  - {name: bwd_fc1, op: act, inputs: [fc1]}
  - {name: loss, op: loss, inputs: [bwd_fc1]}
outputs: [loss]
)";
  const Graph graph = trained(net_with("  loss: loss\n  optimizer: {type: sgd, lr: 1}\n", net));
  EXPECT_NE(graph.find_node("bwd_fc1_1"), nullptr);
  EXPECT_EQ(graph.find_node("bwd_fc1_1")->grad_of, "fc1");
}

TEST(Autodiff, Errors) {
  auto error = [](const std::string& train, const std::string& net = kNet) {
    return rendered([&] { trained(net_with(train, net)); });
  };
  EXPECT_EQ(error("  loss: fc2\n  optimizer: {type: sgd, lr: 1}\n"),
            "teeny: error: net.yaml:14:9: train: node 'fc2' (op 'lin') is not a loss\n"
            "    loss: fc2\n"
            "          ^\n"
            "note: the loss ops: loss\n");
  EXPECT_EQ(error("  loss: los\n  optimizer: {type: sgd, lr: 1}\n"),
            "teeny: error: net.yaml:14:9: train: undefined loss node 'los' (did you mean 'loss'?)\n"
            "    loss: los\n"
            "          ^\n");
  EXPECT_EQ(error("  loss: loss\n  optimizer: {type: adam, lr: 1}\n"),
            "teeny: error: net.yaml:15:21: train: optimizer: unknown optimizer 'adam' (did you mean 'adamw'?)\n"
            "    optimizer: {type: adam, lr: 1}\n"
            "                      ^\n"
            "note: optimizers: adamw, sgd\n");
  EXPECT_EQ(
      error("  loss: loss\n  optimizer: {type: sgd, lr: 1, momentun: 0.9}\n"),
      "teeny: error: net.yaml:15:33: train: optimizer: unknown key 'momentun' for sgd (did you mean 'momentum'?)\n"
      "    optimizer: {type: sgd, lr: 1, momentun: 0.9}\n"
      "                                  ^\n"
      "note: sgd takes: lr, momentum\n");
  EXPECT_EQ(error("  loss: loss\n  optimizer: {type: sgd}\n"),
            "teeny: error: net.yaml:15:14: train: optimizer: missing key 'lr' for sgd\n"
            "    optimizer: {type: sgd}\n"
            "               ^\n");
  EXPECT_EQ(error("  loss: loss\n  optimizer: {type: sgd, lr: 1}\n  clip_grad_norm: 0\n"),
            "teeny: error: net.yaml:16:19: train: 'clip_grad_norm' must be a number greater than 0, got '0'\n"
            "    clip_grad_norm: 0\n"
            "                    ^\n");
  EXPECT_EQ(error("  loss: loss\n  params: [fc1.bias]\n  optimizer: {type: sgd, lr: 1}\n"),
            "teeny: error: net.yaml:15:12: train: params: node 'fc1' has no trained param 'bias'\n"
            "    params: [fc1.bias]\n"
            "             ^\n"
            "note: its trained params: weight\n");
  EXPECT_EQ(error("  loss: loss\n  params: [a1]\n  optimizer: {type: sgd, lr: 1}\n"),
            "teeny: error: net.yaml:15:12: train: params: node 'a1' (op 'act') has no trained params\n"
            "    params: [a1]\n"
            "             ^\n");
  EXPECT_EQ(error("  loss: loss\n  optimizer: {type: sgd, lr: 1}\n  epochs: 3\n"),
            "teeny: error: net.yaml:16:3: train: unknown key 'epochs'\n"
            "    epochs: 3\n"
            "    ^\n"
            "note: valid keys: loss, params, inputs, optimizer, clip_grad_norm\n");

  // A param that does not reach the loss, and an op without a gradient on the way to it.
  const std::string side = R"(name: net
inputs:
  x: {dtype: f32, shape: [2, 4]}
nodes:
  - {name: fc1, op: lin, inputs: [x], attrs: {out: 3}}
  - {name: side, op: lin, inputs: [x], attrs: {out: 3}}
  - {name: cut, op: frozen, inputs: [fc1]}
  - {name: loss, op: loss, inputs: [cut]}
outputs: [loss, side]
)";
  EXPECT_EQ(error("  loss: loss\n  params: [side]\n  optimizer: {type: sgd, lr: 1}\n", side),
            "teeny: error: net.yaml:12:12: train: params: 'side' does not affect the loss 'loss'\n"
            "    params: [side]\n"
            "             ^\n");
  EXPECT_EQ(error("  loss: loss\n  optimizer: {type: sgd, lr: 1}\n", side),
            "teeny: error: net.yaml:7:21: node 'cut': op 'frozen' has no gradient, and the loss 'loss' depends on a "
            "trained param through it\n"
            "    - {name: cut, op: frozen, inputs: [fc1]}\n"
            "                      ^\n");
}

TEST(Autodiff, UpdateOpsAreNoNodesToWrite) {
  std::string net = kNet;
  net.insert(net.find("outputs:"), "  - {name: step, op: optim.sgd, inputs: [fc2], attrs: {lr: 1}}\n");
  EXPECT_EQ(rendered([&] { trained(net); }),
            "teeny: error: net.yaml:12:22: node 'step': op 'optim.sgd' updates params in place, so it is not a node "
            "to write; a train: section adds the update nodes\n"
            "    - {name: step, op: optim.sgd, inputs: [fc2], attrs: {lr: 1}}\n"
            "                       ^\n"
            "note: docs/training.md describes the train: section\n");
}

}  // namespace
}  // namespace teeny
