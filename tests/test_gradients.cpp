// The backward rules of the elementwise, reduction and shape ops and the grad.* ops they add
// (ops.md, "Gradients"): the exact backward nodes a few graphs get (which forward tensors the
// rules read, where broadcast gradients are summed), the grad.* ops' host references against
// hand-computed values and their shape errors (exact text), and every rule's gradients against
// finite differences of the loss (tests/grad_check_util.h), compiled through NVRTC and run by the
// host reference executor.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/autodiff.h"
#include "tests/error_test_util.h"
#include "tests/grad_check_util.h"
#include "tests/grad_graph_util.h"
#include "tests/op_test_util.h"

namespace teeny {
namespace {

using op_testing::HostIn;
using op_testing::infer_error;
using op_testing::reference;
using op_testing::registry;
using op_testing::tensor;
using testing::backward_of;
using testing::expect_gradients_match;
using testing::loss_graph;
using testing::trained;

// ---- the graphs the rules build ----------------------------------------------------------------

// Each graph ends in `scale` (whose rule is one scale node, bwd_out), so the nodes under test read
// bwd_out whatever the loss's rule adds.
TEST(GradientRules, ActivationsReadTheTensorTheirDerivativeIsWrittenIn) {
  const Graph graph =
      trained(loss_graph("  x: {dtype: f32, shape: [2, 3]}\n"
                         "nodes:\n"
                         "  - {name: si, op: silu, inputs: [x]}\n"
                         "  - {name: re, op: relu, inputs: [si]}\n"
                         "  - {name: ge, op: gelu, inputs: [re], attrs: {approximate: tanh}}\n"
                         "  - {name: out, op: scale, inputs: [ge], attrs: {value: 2}}\n",
                         "[2, 3]", "  inputs: [x]\n"));
  const std::vector<std::string> expected{
      "bwd_out = scale(" + graph.find_node("bwd_out")->inputs.at(0) + ") {\"value\":2.0}",
      // gelu's derivative needs its input; relu's and sigmoid's and tanh's, their output.
      "bwd_ge = grad.activation(bwd_out, re) {\"activation\":\"gelu_tanh\"}",
      "bwd_re = grad.activation(bwd_ge, re) {\"activation\":\"relu\"}",
      "bwd_si = grad.activation(bwd_re, x) {\"activation\":\"silu\"}",
  };
  EXPECT_EQ(backward_of(graph, {"out", "ge", "re", "si"}), expected);
  EXPECT_EQ(graph.gradients.at("x"), "bwd_si");
}

TEST(GradientRules, BroadcastOperandsHaveTheirGradientsSummedBack) {
  const Graph graph =
      trained(loss_graph("  a: {dtype: f32, shape: [3, 4]}\n"
                         "  b: {dtype: f32, shape: [4]}\n"
                         "  c: {dtype: f32, shape: [3, 1]}\n"
                         "nodes:\n"
                         "  - {name: y, op: add, inputs: [a, b]}\n"
                         "  - {name: m, op: mul, inputs: [y, c]}\n"
                         "  - {name: out, op: scale, inputs: [m], attrs: {value: 2}}\n",
                         "[3, 4]", "  inputs: [a, b, c]\n"));
  const std::vector<std::string> expected{
      // dL/dy = dy * c has y's shape: no sum; dL/dc = dy * y summed over the dim c was broadcast on.
      "bwd_m = mul(bwd_out, c)",
      "bwd_m_1 = mul(bwd_out, y)",
      "bwd_m_2 = grad.sum_to(bwd_m_1) {\"shape\":[\"3\",\"1\"]}",
      // a has the output's shape: its gradient is dL/dy itself; b's, the last dim alone, is summed
      // over the rows by the op that spreads them over the GPU.
      "bwd_y = grad.sum_rows(bwd_m)",
  };
  EXPECT_EQ(backward_of(graph, {"m", "y"}), expected);
  EXPECT_EQ(graph.gradients, (std::map<std::string, std::string>{{"a", "bwd_m"}, {"b", "bwd_y"}, {"c", "bwd_m_2"}}));
}

TEST(GradientRules, ShapeOpsAndReductionsGoBackThroughTheirInverses) {
  const Graph graph =
      trained(loss_graph("  x: {dtype: f32, shape: [2, 3, 4]}\n"
                         "  z: {dtype: f32, shape: [2, 6]}\n"
                         "nodes:\n"
                         "  - {name: t, op: transpose, inputs: [x], attrs: {perm: [2, 0, 1]}}\n"
                         "  - {name: f, op: flatten, inputs: [t], attrs: {start_dim: 1}}\n"
                         "  - {name: c, op: concat, inputs: [f, z], attrs: {axis: 0}}\n"
                         "  - {name: r, op: reduce_sum, inputs: [c], attrs: {axis: 1}}\n"
                         "  - {name: out, op: scale, inputs: [r], attrs: {value: 2}}\n",
                         "[6]", "  inputs: [x, z]\n"));
  const std::vector<std::string> expected{
      // reduce_sum without keepdim: the axis comes back, dy copied along it.
      "bwd_r = grad.broadcast(bwd_out) {\"axis\":1,\"mean\":false,\"shape\":[\"6\",\"6\"]}",
      // concat: each input's piece.
      "bwd_c = grad.slice(bwd_r) {\"axis\":0,\"index\":0,\"sizes\":[\"4\",\"2\"]}",
      "bwd_c_1 = grad.slice(bwd_r) {\"axis\":0,\"index\":1,\"sizes\":[\"4\",\"2\"]}",
      // flatten: a view back; transpose: the inverse permutation.
      "bwd_f = reshape(bwd_c) {\"shape\":[\"4\",\"2\",\"3\"]}",
      "bwd_t = transpose(bwd_f) {\"perm\":[1,2,0]}",
  };
  EXPECT_EQ(backward_of(graph, {"r", "c", "f", "t"}), expected);
}

TEST(GradientRules, SoftmaxAndMaxReadTheirOutputs) {
  const Graph graph =
      trained(loss_graph("  x: {dtype: f32, shape: [2, 5]}\n"
                         "nodes:\n"
                         "  - {name: ls, op: log_softmax, inputs: [x], attrs: {axis: 0}}\n"
                         "  - {name: mx, op: reduce_max, inputs: [ls], attrs: {axis: -1}}\n"
                         "  - {name: me, op: reduce_mean, inputs: [x], attrs: {axis: 1, keepdim: true}}\n"
                         "  - {name: sm, op: softmax, inputs: [me], attrs: {axis: 0}}\n"
                         "  - {name: both, op: mul, inputs: [mx, sm]}\n"
                         "  - {name: out, op: scale, inputs: [both], attrs: {value: 2}}\n",
                         "[2, 2]", "  inputs: [x]\n"));
  const std::vector<std::string> expected{
      // both = mx * sm broadcasts mx [2] and sm [2, 1] to [2, 2]: each gradient is summed back.
      "bwd_sm = grad.softmax(bwd_both_3, sm) {\"axis\":0,\"log\":false}",
      // keepdim: dy [2, 1] broadcasts back to [2, 5] as it is, divided by 5.
      "bwd_me = grad.broadcast(bwd_sm) {\"mean\":true,\"shape\":[\"2\",\"5\"]}",
      // The max's gradient goes where ls equals mx; log_softmax's reads its output.
      "bwd_mx = grad.reduce_max(bwd_both_1, ls, mx) {\"axis\":1}",
      "bwd_ls = grad.softmax(bwd_mx, ls) {\"axis\":0,\"log\":true}",
  };
  EXPECT_EQ(backward_of(graph, {"sm", "me", "mx", "ls"}), expected);
}

// ---- the grad.* ops' references ------------------------------------------------------------

TEST(GradientReference, ActivationDerivatives) {
  auto grad = [](const std::string& activation, double dy, double saved) {
    return reference("grad.activation", {{"activation", activation}}, {{{1}, {dy}}, {{1}, {saved}}}).data.at(0);
  };
  EXPECT_EQ(grad("relu", 3, 0.5), 3);
  EXPECT_EQ(grad("relu", 3, 0), 0);  // PyTorch: y <= 0 passes nothing
  EXPECT_NEAR(grad("sigmoid", 2, 0.25), 2 * 0.25 * 0.75, 1e-15);
  EXPECT_NEAR(grad("tanh", 2, 0.5), 2 * 0.75, 1e-15);
  // silu'(1) = s (1 + 1 - s) with s = 1 / (1 + e^-1) = 0.7310585786300049.
  EXPECT_NEAR(grad("silu", 1, 1), 0.7310585786300049 * (2 - 0.7310585786300049), 1e-15);
  // gelu'(0) = Phi(0) = 1/2 in both forms; gelu'(1) = Phi(1) + phi(1) = 0.8413447460685429 +
  // 0.24197072451914337.
  EXPECT_NEAR(grad("gelu", 1, 0), 0.5, 1e-15);
  EXPECT_NEAR(grad("gelu_tanh", 1, 0), 0.5, 1e-15);
  EXPECT_NEAR(grad("gelu", 1, 1), 0.8413447460685429 + 0.24197072451914337, 1e-15);
  // The tanh form at 1: t = tanh(sqrt(2/pi) 1.044715) = 0.6858296942, and
  // 0.5 (1 + t) + 0.5 (1 - t^2) sqrt(2/pi) (1 + 3 0.044715) = 1.0829640838.
  EXPECT_NEAR(grad("gelu_tanh", 1, 1), 1.0829640838, 1e-9);
}

TEST(GradientReference, SumToAddsOverTheBroadcastDims) {
  // [2, 3] to [3]: column sums; to [2, 1]: row sums; to []: everything.
  const HostIn dy{{2, 3}, {1, 2, 3, 10, 20, 30}};
  EXPECT_EQ(reference("grad.sum_to", {{"shape", {"3"}}}, {dy}).data, (std::vector<double>{11, 22, 33}));
  EXPECT_EQ(reference("grad.sum_to", {{"shape", {"2", "1"}}}, {dy}).data, (std::vector<double>{6, 60}));
  EXPECT_EQ(reference("grad.sum_to", {{"shape", nlohmann::json::array()}}, {dy}).data, (std::vector<double>{66}));
}

TEST(GradientReference, BroadcastCopiesAndMeanDivides) {
  const HostIn dy{{2}, {1, 2}};
  // Axis 1 put back into [2, 3]; without an axis, [2] aligns with the last dim of [3, 2].
  EXPECT_EQ(reference("grad.broadcast", {{"shape", {"2", "3"}}, {"axis", 1}, {"mean", false}}, {dy}).data,
            (std::vector<double>{1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(reference("grad.broadcast", {{"shape", {"3", "2"}}, {"mean", true}}, {dy}).data,
            (std::vector<double>{1.0 / 3, 2.0 / 3, 1.0 / 3, 2.0 / 3, 1.0 / 3, 2.0 / 3}));
}

TEST(GradientReference, SliceTakesOnePiece) {
  const HostIn dy{{2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}};
  EXPECT_EQ(reference("grad.slice", {{"axis", 1}, {"sizes", {"2", "3"}}, {"index", 1}}, {dy}).data,
            (std::vector<double>{2, 3, 4, 7, 8, 9}));
  EXPECT_EQ(reference("grad.slice", {{"axis", 0}, {"sizes", {"1", "1"}}, {"index", 0}}, {dy}).data,
            (std::vector<double>{0, 1, 2, 3, 4}));
}

TEST(GradientReference, SoftmaxBothForms) {
  // y = [0.25, 0.75], dy = [1, 3]: sum(dy y) = 2.5, dx = y (dy - 2.5) = [-0.375, 0.375].
  EXPECT_EQ(reference("grad.softmax", {{"axis", -1}, {"log", false}}, {{{1, 2}, {1, 3}}, {{1, 2}, {0.25, 0.75}}}).data,
            (std::vector<double>{-0.375, 0.375}));
  // log form, y = log [0.25, 0.75]: dx = dy - exp(y) sum(dy) = [1 - 1, 3 - 3].
  const HostTensor log_form =
      reference("grad.softmax", {{"axis", 0}, {"log", true}}, {{{2}, {1, 3}}, {{2}, {std::log(0.25), std::log(0.75)}}});
  EXPECT_NEAR(log_form.data.at(0), 0, 1e-15);
  EXPECT_NEAR(log_form.data.at(1), 0, 1e-15);
}

TEST(GradientReference, MaxGoesToTheFirstMaximum) {
  // Rows [1, 5, 5] and [2, 0, 1]: the tie in row 0 sends dy to column 1, as PyTorch's max(dim).
  const HostTensor dx =
      reference("grad.reduce_max", {{"axis", 1}}, {{{2}, {10, 20}}, {{2, 3}, {1, 5, 5, 2, 0, 1}}, {{2}, {5, 2}}});
  EXPECT_EQ(dx.data, (std::vector<double>{0, 10, 0, 20, 0, 0}));
  // keepdim along axis 0: columns of [[3, 1], [3, 4]].
  EXPECT_EQ(
      reference("grad.reduce_max", {{"axis", 0}}, {{{1, 2}, {7, 8}}, {{2, 2}, {3, 1, 3, 4}}, {{1, 2}, {3, 4}}}).data,
      (std::vector<double>{7, 0, 0, 8}));
}

// ---- shape errors (exact text) ---------------------------------------------------------------

TEST(GradientShape, ErrorsNameWhatDoesNotFit) {
  const Expr B = Expr::dim("B");
  std::string key;
  EXPECT_EQ(infer_error("grad.activation", {{"activation", "relu"}},
                        {tensor(DType::kF32, {B, 4}), tensor(DType::kF32, {B, 5})}, &key),
            "grad.activation: dy has shape [B, 4] but saved has [B, 5]; they must match");
  EXPECT_EQ(key, "inputs");
  EXPECT_EQ(infer_error("grad.sum_to", {{"shape", {"5"}}}, {tensor(DType::kF32, {B, 4})}, &key),
            "grad.sum_to: shape [5] does not broadcast to dy's shape [B, 4]");
  EXPECT_EQ(key, "attrs.shape");
  EXPECT_EQ(infer_error("grad.sum_to", {{"shape", {"B", "0"}}}, {tensor(DType::kF32, {B, 4})}),
            "grad.sum_to: shape [B, 0] has an extent below 1");
  EXPECT_EQ(infer_error("grad.broadcast", {{"shape", {"B", "4"}}, {"mean", false}}, {tensor(DType::kF32, {3})}),
            "grad.broadcast: dy's shape [3] does not broadcast to shape [B, 4]");
  EXPECT_EQ(infer_error("grad.broadcast", {{"shape", {"B", "3", "4"}}, {"axis", 1}, {"mean", false}},
                        {tensor(DType::kF32, {B, 3})}, &key),
            "grad.broadcast: dy has shape [B, 3]; shape [B, 3, 4] without axis 1 is [B, 4]");
  EXPECT_EQ(key, "inputs");
  EXPECT_EQ(infer_error("grad.slice", {{"axis", 1}, {"sizes", {"W", "8"}}, {"index", 0}}, {tensor(DType::kF32, {B, 9})},
                        &key),
            "grad.slice: sizes [W, 8] add up to W + 8, but dy's axis 1 is 9");
  EXPECT_EQ(key, "attrs.sizes");
  EXPECT_EQ(infer_error("grad.slice", {{"axis", 1}, {"sizes", {"1", "8"}}, {"index", 2}}, {tensor(DType::kF32, {B, 9})},
                        &key),
            "grad.slice: index 2 is past the 2 sizes");
  EXPECT_EQ(key, "attrs.index");
  EXPECT_EQ(infer_error("grad.softmax", {{"axis", -1}, {"log", false}},
                        {tensor(DType::kF32, {B, 4}), tensor(DType::kF32, {4})}),
            "grad.softmax: dy has shape [B, 4] but y has [4]; they must match");
  EXPECT_EQ(infer_error("grad.reduce_max", {{"axis", 1}},
                        {tensor(DType::kF32, {B}), tensor(DType::kF32, {B, 4}), tensor(DType::kF32, {4})}),
            "grad.reduce_max: y has shape [4]; x [B, 4] reduced over axis 1 is [B] or [B, 1]");
  EXPECT_EQ(infer_error("grad.reduce_max", {{"axis", 1}},
                        {tensor(DType::kF32, {B, 1}), tensor(DType::kF32, {B, 4}), tensor(DType::kF32, {B})}),
            "grad.reduce_max: dy has shape [B, 1] but y has [B]; they must match");
}

TEST(GradientShape, ASpecNamingAGradOpGetsTheErrorAtItsNode) {
  const std::string spec =
      "name: g\n"
      "inputs:\n"
      "  dy: {dtype: f32, shape: [3, 4]}\n"
      "nodes:\n"
      "  - {name: db, op: grad.sum_to, inputs: [dy], attrs: {shape: [3]}}\n"
      "outputs: [db]\n";
  EXPECT_EQ(testing::rendered([&] { parse_graph(spec, "g.yaml", registry()); }),
            "teeny: error: g.yaml:5:62: node 'db': grad.sum_to: shape [3] does not broadcast to dy's shape [3, 4]\n"
            "    - {name: db, op: grad.sum_to, inputs: [dy], attrs: {shape: [3]}}\n"
            "                                                               ^\n");
}

// The host reference sees the run's concrete shapes, not its dims: a piece's start must follow
// from dims that are whole extents of dy or of the output, or from the pieces after it.
TEST(GradientShape, SliceReferenceNeedsItsStartBound) {
  const Expr B = Expr::dim("B"), W = Expr::dim("W"), V = Expr::dim("V");
  // dy [B, W + 1 + V] bound to [2, 6], cut into [W, 1, V].
  auto piece = [&](int64_t index, std::vector<int64_t> out) {
    const nlohmann::json attrs = {{"axis", 1}, {"sizes", {"W", "1", "V"}}, {"index", index}};
    const OpContext ctx = op_testing::context("grad.slice", attrs, {tensor(DType::kF32, {B, W + Expr(1) + V})});
    std::vector<double> values(12);
    for (int i = 0; i < 12; ++i) values[i] = i;
    return op_testing::op("grad.slice").reference(RefContext{ctx, {{DType::kF32, {2, 6}, values}}, {}, out});
  };
  // Piece 2 (V = 3, the output's extent) starts at 6 - 3: the axis less the pieces from it on.
  EXPECT_EQ(piece(2, {2, 3}).data, (std::vector<double>{3, 4, 5, 9, 10, 11}));
  // Piece 1: neither W (before it) nor V (after it) is an extent of dy or of the output.
  EXPECT_EQ(testing::message([&] {
              piece(1, {2, 1});
            }),
            "grad.slice: the host reference cannot bind the sizes [W, 1, V] around piece 1 from the shapes of dy and "
            "the output");
}

// ---- gradients against finite differences ----------------------------------------------------

TEST(GradientCheck, Activations) {
  for (const char* op : {"relu", "silu", "sigmoid", "tanh"}) {
    SCOPED_TRACE(op);
    expect_gradients_match(loss_graph(fmt::format("  x: {{dtype: f32, shape: [3, 7]}}\n"
                                                  "nodes:\n"
                                                  "  - {{name: out, op: {}, inputs: [x]}}\n",
                                                  op),
                                      "[3, 7]", "  inputs: [x]\n"),
                           registry(), {"x"});
  }
  for (const char* form : {"none", "tanh"}) {
    SCOPED_TRACE(form);
    expect_gradients_match(
        loss_graph(fmt::format("  x: {{dtype: f32, shape: [3, 7]}}\n"
                               "nodes:\n"
                               "  - {{name: s, op: scale, inputs: [x], attrs: {{value: 3}}}}\n"
                               "  - {{name: out, op: gelu, inputs: [s], attrs: {{approximate: {}}}}}\n",
                               form),
                   "[3, 7]", "  inputs: [x]\n"),
        registry(), {"x"});
  }
}

TEST(GradientCheck, BroadcastingArithmetic) {
  for (const char* op : {"add", "sub", "mul"}) {
    SCOPED_TRACE(op);
    // b broadcast along the rows, c along the columns and a new leading dim.
    expect_gradients_match(loss_graph(fmt::format("  a: {{dtype: f32, shape: [3, 4]}}\n"
                                                  "  b: {{dtype: f32, shape: [4]}}\n"
                                                  "  c: {{dtype: f32, shape: [3, 1]}}\n"
                                                  "nodes:\n"
                                                  "  - {{name: ab, op: {0}, inputs: [a, b]}}\n"
                                                  "  - {{name: out, op: {0}, inputs: [c, ab]}}\n",
                                                  op),
                                      "[3, 4]", "  inputs: [a, b, c]\n"),
                           registry(), {"a", "b", "c"});
  }
  // Divisors kept in (0.27, 0.73) by a sigmoid, so that the finite differences stay smooth.
  expect_gradients_match(loss_graph("  a: {dtype: f32, shape: [2, 3, 4]}\n"
                                    "  b: {dtype: f32, shape: [3, 1]}\n"
                                    "nodes:\n"
                                    "  - {name: q, op: sigmoid, inputs: [b]}\n"
                                    "  - {name: out, op: div, inputs: [a, q]}\n",
                                    "[2, 3, 4]", "  inputs: [a, b]\n"),
                         registry(), {"a", "b"});
}

TEST(GradientCheck, SoftmaxBothFormsBothAxes) {
  for (const char* op : {"softmax", "log_softmax"})
    for (int axis : {-1, 0}) {
      SCOPED_TRACE(fmt::format("{} axis {}", op, axis));
      expect_gradients_match(loss_graph(fmt::format("  x: {{dtype: f32, shape: [3, 5]}}\n"
                                                    "nodes:\n"
                                                    "  - {{name: s, op: scale, inputs: [x], attrs: {{value: 3}}}}\n"
                                                    "  - {{name: out, op: {}, inputs: [s], attrs: {{axis: {}}}}}\n",
                                                    op, axis),
                                        "[3, 5]", "  inputs: [x]\n"),
                             registry(), {"x"});
    }
}

TEST(GradientCheck, Reductions) {
  struct Case {
    std::string op;
    int axis;
    bool keepdim;
    std::string target;
  };
  for (const Case& c : std::vector<Case>{{"reduce_sum", 1, false, "[2, 4]"},
                                         {"reduce_sum", 0, true, "[1, 3, 4]"},
                                         {"reduce_mean", -1, false, "[2, 3]"},
                                         {"reduce_mean", 1, true, "[2, 1, 4]"},
                                         {"reduce_max", 2, false, "[2, 3]"},
                                         {"reduce_max", 1, true, "[2, 1, 4]"}}) {
    SCOPED_TRACE(fmt::format("{} axis {} keepdim {}", c.op, c.axis, c.keepdim));
    expect_gradients_match(
        loss_graph(fmt::format("  x: {{dtype: f32, shape: [2, 3, 4]}}\n"
                               "nodes:\n"
                               "  - {{name: out, op: {}, inputs: [x], attrs: {{axis: {}, keepdim: {}}}}}\n",
                               c.op, c.axis, c.keepdim),
                   c.target, "  inputs: [x]\n"),
        registry(), {"x"});
  }
}

TEST(GradientCheck, ViewsTransposeAndConcat) {
  expect_gradients_match(loss_graph("  x: {dtype: f32, shape: [2, 3, 4]}\n"
                                    "  z: {dtype: f32, shape: [3, 4]}\n"
                                    "nodes:\n"
                                    "  - {name: t, op: transpose, inputs: [x], attrs: {perm: [2, 0, 1]}}\n"
                                    "  - {name: f, op: flatten, inputs: [t], attrs: {start_dim: 1}}\n"
                                    "  - {name: r, op: reshape, inputs: [z], attrs: {shape: [2, 6]}}\n"
                                    "  - {name: c, op: concat, inputs: [r, f, r], attrs: {axis: 0}}\n"
                                    "  - {name: out, op: tanh, inputs: [c]}\n",
                                    "[8, 6]", "  inputs: [x, z]\n"),
                         registry(), {"x", "z"});
}

// A batch dim bound at run time, fan-out, and the rules in one chain: the layer computes
// sum over B of softmax(relu(x + b) * w) - mean(x), with x feeding two branches.
TEST(GradientCheck, AChainOfRulesOverASymbolicBatch) {
  testing::GradCheckOptions options;
  options.binds = {"B=3"};
  expect_gradients_match(loss_graph("  x: {dtype: f32, shape: [B, 5]}\n"
                                    "  b: {dtype: f32, shape: [5]}\n"
                                    "  w: {dtype: f32, shape: [B, 1]}\n"
                                    "nodes:\n"
                                    "  - {name: h, op: add, inputs: [x, b]}\n"
                                    "  - {name: r, op: relu, inputs: [h]}\n"
                                    "  - {name: m, op: mul, inputs: [r, w]}\n"
                                    "  - {name: s, op: softmax, inputs: [m]}\n"
                                    "  - {name: mean, op: reduce_mean, inputs: [x], attrs: {axis: 1, keepdim: true}}\n"
                                    "  - {name: d, op: sub, inputs: [s, mean]}\n"
                                    "  - {name: out, op: reduce_sum, inputs: [d], attrs: {axis: 0}}\n",
                                    "[5]", "  inputs: [x, b, w]\n", "dims:\n  B: {min: 1, max: 64, default: 2}\n"),
                         registry(), {"b", "w", "x"}, options);
}

// The check itself: a sigmoid whose rule uses tanh's derivative, dy (1 - y^2) for dy y (1 - y), is
// caught at every element.
TEST(GradientCheck, CatchesAWrongRule) {
  static const Registry wrong = [] {
    Registry reg = registry();
    OpDef sigmoid = *reg.find("sigmoid");
    sigmoid.name = "test.wrong_sigmoid";
    sigmoid.backward = [](GradBuilder& g) {
      g.input_grad(0, g.add("grad.activation", {g.grad_output(), g.output()}, {{"activation", "tanh"}}));
    };
    reg.add(sigmoid);
    return reg;
  }();
  const std::vector<testing::GradCheck> checks =
      testing::check_gradients(loss_graph("  x: {dtype: f32, shape: [2, 3]}\n"
                                          "nodes:\n"
                                          "  - {name: out, op: test.wrong_sigmoid, inputs: [x]}\n",
                                          "[2, 3]", "  inputs: [x]\n"),
                               wrong);
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0].mismatches.size(), 6u);
  EXPECT_GT(checks[0].max_error, 0.5 * checks[0].max_numeric);
}

}  // namespace
}  // namespace teeny
