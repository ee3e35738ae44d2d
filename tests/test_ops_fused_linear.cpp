// fused.linear (host reference, shape rule) and the fuse_linear_epilogue pass that makes it.
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/graph.h"
#include "ops/activation.h"
#include "tests/op_test_util.h"

namespace teeny {
namespace {

using op_testing::HostIn;
using op_testing::reference;
using op_testing::registry;

Graph parse(const std::string& text) { return parse_graph(text, "fused_test.yaml", registry()); }

std::string parse_error(const std::string& text) { return op_testing::graph_error(text, "fused_test.yaml"); }

const GraphPass& epilogue_pass() {
  for (const GraphPass& pass : registry().passes())
    if (pass.name == "fuse_linear_epilogue") return pass;
  throw std::runtime_error("fuse_linear_epilogue is not registered");
}

// A graph over x [B, 16] (and r [B, 16]) with the given node lines and outputs.
std::string graph(const std::string& nodes, const std::string& outputs, const std::string& dtype = "bf16") {
  return fmt::format(R"(name: t
dims: {{B: {{min: 1, max: 64, default: 2}}}}
inputs: {{x: {{dtype: {}, shape: [B, 16]}}, r: {{dtype: {}, shape: [B, 16]}}}}
nodes:
{}outputs: {}
)",
                     dtype, dtype, nodes, outputs);
}

std::vector<std::string> names(const Graph& g) {
  std::vector<std::string> out;
  for (const Node& n : g.nodes) out.push_back(n.name + ":" + n.op->name);
  return out;
}

// ---- host reference -------------------------------------------------------------------------

TEST(FusedLinearReference, HandComputed) {
  // x = [[1, 2], [-3, 1]], W = [[1, 0], [0, 1], [1, 1]], b = [0, -1, 0.5]:
  // x Wᵀ + b = [[1, 1, 3.5], [-3, 0, -1.5]]; relu -> [[1, 1, 3.5], [0, 0, 0]]; + r.
  const HostTensor y = reference("fused.linear", {{"out_features", 3}, {"bias", true}, {"activation", "relu"}},
                                 {HostIn{{2, 2}, {1, 2, -3, 1}}, HostIn{{2, 3}, {10, 20, 30, 40, 50, 60}}},
                                 {{1, 0, 0, 1, 1, 1}, {0, -1, 0.5}});
  EXPECT_EQ(y.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(y.data, (std::vector<double>{11, 21, 33.5, 40, 50, 60}));
}

TEST(FusedLinearReference, EqualsLinearThenActivationThenAdd) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  auto values = [&](size_t n) {
    std::vector<double> v(n);
    for (double& e : v) e = normal(rng);
    return v;
  };
  const std::vector<double> x = values(3 * 5), w = values(4 * 5), b = values(4), r = values(3 * 4);
  const HostTensor linear = reference("linear", {{"out_features", 4}, {"bias", true}}, {HostIn{{3, 5}, x}}, {w, b});
  for (const ops::Activation& act : ops::activations()) {
    SCOPED_TRACE(act.name);
    // The unfused pair's references: the elementwise op (gelu_tanh is gelu, approximate: tanh)...
    const bool tanh_gelu = act.name == "gelu_tanh";
    const nlohmann::json act_attrs = tanh_gelu            ? nlohmann::json{{"approximate", "tanh"}}
                                     : act.name == "gelu" ? nlohmann::json{{"approximate", "none"}}
                                                          : nlohmann::json::object();
    const HostTensor activated = reference(tanh_gelu ? "gelu" : act.name, act_attrs, {HostIn{{3, 4}, linear.data}});
    const HostTensor added =
        reference("add", nlohmann::json::object(), {HostIn{{3, 4}, activated.data}, HostIn{{3, 4}, r}});
    const HostTensor fused = reference("fused.linear", {{"out_features", 4}, {"bias", true}, {"activation", act.name}},
                                       {HostIn{{3, 5}, x}, HostIn{{3, 4}, r}}, {w, b});
    ASSERT_EQ(fused.data.size(), added.data.size());
    for (size_t i = 0; i < fused.data.size(); ++i) EXPECT_DOUBLE_EQ(fused.data[i], added.data[i]) << i;
  }
}

TEST(FusedLinearShape, ResidualMustMatchTheOutput) {
  EXPECT_EQ(op_testing::infer_error("fused.linear", {{"out_features", 8}, {"bias", true}, {"activation", "none"}},
                                    {op_testing::tensor(DType::kF32, {Expr::dim("B"), Expr(16)}),
                                     op_testing::tensor(DType::kF32, {Expr::dim("B"), Expr(16)})}),
            "the residual must match the linear's output f32 [B, 8]; got f32 [B, 16]");
  EXPECT_EQ(
      parse_error(graph("  - {name: y, op: fused.linear, inputs: [x, r, r], attrs: {out_features: 16}}\n", "[y]")),
      "node 'y': op 'fused.linear' takes 1 to 2 inputs (x, residual?), got 3");
}

// ---- lowering --------------------------------------------------------------------------------

const KernelArg* find_arg(const Launch& launch, const std::string& name) {
  for (const KernelArg& a : launch.args)
    if (a.name == name) return &a;
  return nullptr;
}

TEST(FusedLinearLowering, ResidualIsAnInputWithItsStrideAndCost) {
  TensorType residual = op_testing::tensor(DType::kBF16, {Expr::dim("B"), Expr(768)});
  residual.row_stride = Expr(776);
  const OpContext ctx =
      op_testing::context("fused.linear", {{"out_features", 768}, {"bias", true}, {"activation", "gelu_tanh"}},
                          {op_testing::tensor(DType::kBF16, {Expr::dim("B"), Expr(3072)}), residual});
  const Lowering lowering = op_testing::tiled_linear(op_testing::op("fused.linear").lower(ctx));
  ASSERT_EQ(lowering.launches.size(), 1u);
  const Launch& launch = lowering.launches[0];
  EXPECT_EQ(lowering.kernels.at(0).name, "linear_bf16_nk_bias_128x128x64_wgmma_pp_tma_gelu_tanh_res");
  const KernelArg* r = find_arg(launch, "residual");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->kind, ArgKind::kInput);
  EXPECT_EQ(r->input_index, 1);
  EXPECT_EQ(find_arg(launch, "ldr")->value.eval({}), 776);
  const Bindings b = {{"B", 10}};
  // Reads x, W, bias and the residual, writes y; 2 FLOPs per multiply-add, then bias, GELU (8)
  // and the add per output.
  EXPECT_EQ(launch.bytes.eval(b), 2LL * (10 * 3072 + 768 * 3072 + 2 * 10 * 768 + 768));
  EXPECT_EQ(launch.flops.eval(b), 2LL * 10 * 768 * 3072 + 10LL * 768 * (1 + 1 + 8));
}

TEST(FusedLinearLowering, F32ActivationTurnsSplitKOffButAResidualKeepsIt) {
  const TensorType x = op_testing::tensor(DType::kF32, {Expr::dim("B"), Expr(3072)});
  const TensorType r = op_testing::tensor(DType::kF32, {Expr::dim("B"), Expr(768)});
  const Bindings rows100 = {{"B", 100}, {"SMS", 132}};
  const OpContext act =
      op_testing::context("fused.linear", {{"out_features", 768}, {"bias", true}, {"activation", "relu"}}, {x});
  // Two GEMMs, by the rows: CUDA cores for a small batch, else 3xTF32.
  const Lowering with_act = op_testing::tiled_linear(op_testing::op("fused.linear").lower(act));
  ASSERT_EQ(with_act.launches.size(), 2u);  // no zeroing: K is never split
  for (const Launch& gemm : with_act.launches) EXPECT_EQ(find_arg(gemm, "splits"), nullptr);
  const OpContext res =
      op_testing::context("fused.linear", {{"out_features", 768}, {"bias", true}, {"activation", "none"}}, {x, r});
  const Lowering with_res = op_testing::tiled_linear(op_testing::op("fused.linear").lower(res));
  // Each GEMM zeroes, then splits (split 0 adds the residual). 100 rows: the CUDA-core GEMM's 24
  // 64x64 tiles split min(ceil(1.5 * 264 / 24), 3072 / 128) = 17 ways.
  ASSERT_EQ(with_res.launches.size(), 4u);
  EXPECT_EQ(with_res.launches[1].when.eval(rows100), 1);
  EXPECT_EQ(find_arg(with_res.launches[1], "splits")->value.eval(rows100), 17);
  EXPECT_EQ(with_res.launches[3].when.eval(rows100), 0);
  EXPECT_NE(find_arg(with_res.launches[3], "splits"), nullptr);
}

// ---- the pass -------------------------------------------------------------------------------

TEST(LinearEpilogueFusion, RewritesAnMlpWithResidual) {
  Graph g = parse(graph(R"(  - {name: fc, op: linear, inputs: [x], attrs: {out_features: 32}}
  - {name: act, op: gelu, inputs: [fc], attrs: {approximate: tanh}}
  - {name: proj, op: linear, inputs: [act], attrs: {out_features: 16}}
  - {name: out, op: add, inputs: [x, proj]}
)",
                        "[out]"));
  EXPECT_EQ(epilogue_pass().apply(g, registry()), 2);
  ASSERT_EQ(names(g), (std::vector<std::string>{"act:fused.linear", "out:fused.linear"}));
  const Node& act = g.nodes[0];
  EXPECT_EQ(act.inputs, std::vector<std::string>{"x"});
  EXPECT_EQ(act.ctx.attrs.text("activation"), "gelu_tanh");
  EXPECT_EQ(act.ctx.attrs.integer("out_features"), 32);
  EXPECT_EQ(act.fused_from, (std::vector<std::string>{"fc", "act"}));
  EXPECT_EQ(act.param_names, (std::map<std::string, std::string>{{"weight", "fc.weight"}, {"bias", "fc.bias"}}));
  const Node& out = g.nodes[1];
  EXPECT_EQ(out.inputs, (std::vector<std::string>{"act", "x"}));  // x, then the residual
  EXPECT_EQ(out.ctx.attrs.text("activation"), "none");
  EXPECT_EQ(out.fused_from, (std::vector<std::string>{"proj", "out"}));
  EXPECT_EQ(out.param_names.at("weight"), "proj.weight");
  EXPECT_EQ(out.ctx.output.shape, (Shape{Expr::dim("B"), Expr(16)}));
}

TEST(LinearEpilogueFusion, F32LinearsTakeTheResidualButNoActivation) {
  Graph g = parse(graph(R"(  - {name: fc, op: linear, inputs: [x], attrs: {out_features: 16}}
  - {name: act, op: gelu, inputs: [fc]}
  - {name: proj, op: linear, inputs: [act], attrs: {out_features: 16}}
  - {name: out, op: add, inputs: [proj, r]}
)",
                        "[out]", "f32"));
  EXPECT_EQ(epilogue_pass().apply(g, registry()), 1);
  EXPECT_EQ(names(g), (std::vector<std::string>{"fc:linear", "act:gelu", "out:fused.linear"}));
  EXPECT_EQ(g.nodes[2].inputs, (std::vector<std::string>{"act", "r"}));
}

TEST(LinearEpilogueFusion, ActivationThenResidualBecomeOneNode) {
  Graph g = parse(graph(R"(  - {name: l, op: linear, inputs: [x], attrs: {out_features: 16, bias: false}}
  - {name: a, op: relu, inputs: [l]}
  - {name: y, op: add, inputs: [a, r]}
)",
                        "[y]"));
  EXPECT_EQ(epilogue_pass().apply(g, registry()), 2);
  ASSERT_EQ(names(g), std::vector<std::string>{"y:fused.linear"});
  EXPECT_EQ(g.nodes[0].inputs, (std::vector<std::string>{"x", "r"}));
  EXPECT_EQ(g.nodes[0].ctx.attrs.text("activation"), "relu");
  EXPECT_EQ(g.nodes[0].fused_from, (std::vector<std::string>{"l", "a", "y"}));
  EXPECT_EQ(g.nodes[0].param_names, (std::map<std::string, std::string>{{"weight", "l.weight"}}));
}

TEST(LinearEpilogueFusion, LeavesWhatCannotFuse) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      // the linear's output has a second use
      {"  - {name: l, op: linear, inputs: [x], attrs: {out_features: 16}}\n"
       "  - {name: a, op: silu, inputs: [l]}\n"
       "  - {name: y, op: add, inputs: [a, l]}\n",
       "[y]"},
      // the linear's output is a graph output
      {"  - {name: l, op: linear, inputs: [x], attrs: {out_features: 16}}\n"
       "  - {name: a, op: tanh, inputs: [l]}\n",
       "[a, l]"},
      // a broadcasting add: r's row is [16] against [B, 16]
      {"  - {name: l, op: linear, inputs: [x], attrs: {out_features: 16}}\n"
       "  - {name: v, op: reduce_sum, inputs: [r], attrs: {axis: 0, keepdim: false}}\n"
       "  - {name: y, op: add, inputs: [l, v]}\n",
       "[y]"},
      // 17 outputs pad the linear's rows to 24: fusing would change the tensor's row stride
      {"  - {name: l, op: linear, inputs: [x], attrs: {out_features: 17}}\n"
       "  - {name: a, op: sigmoid, inputs: [l]}\n",
       "[a]"},
      // not an activation or add
      {"  - {name: l, op: linear, inputs: [x], attrs: {out_features: 16}}\n"
       "  - {name: y, op: mul, inputs: [l, r]}\n",
       "[y]"},
  };
  for (const auto& [nodes, outputs] : cases) {
    SCOPED_TRACE(nodes);
    Graph g = parse(graph(nodes, outputs));
    const std::vector<std::string> before = names(g);
    EXPECT_EQ(epilogue_pass().apply(g, registry()), 0);
    EXPECT_EQ(names(g), before);
  }
}

}  // namespace
}  // namespace teeny
