// The dense ops' backward rules (linear, fused.linear, matmul, layernorm, rmsnorm, embedding) and
// the grad.* ops they add (ops.md, "Gradients"): the exact backward nodes (which forward tensors
// and params they read), the ops' host references against hand-computed values, their shape
// errors (exact text), and every rule's gradients against finite differences of the loss
// (tests/grad_check_util.h), compiled through NVRTC and run by the host reference executor.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/autodiff.h"
#include "core/compile.h"
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

TEST(DenseGradientRules, LinearReadsItsInputAndWeight) {
  const Graph graph =
      trained(loss_graph("  x: {dtype: f32, shape: [B, 6]}\n"
                         "nodes:\n"
                         "  - {name: fc, op: linear, inputs: [x], attrs: {out_features: 5}}\n"
                         "  - {name: nb, op: linear, inputs: [fc], attrs: {out_features: 3, bias: false}}\n"
                         "  - {name: out, op: reduce_sum, inputs: [nb], attrs: {axis: 0}}\n",
                         "[3]", "  inputs: [x]\n", "dims:\n  B: {min: 1, max: 8, default: 2}\n"));
  const std::vector<std::string> expected{
      // No bias: dx through the weight (a param ref) and dW from the forward input.
      "bwd_nb = grad.linear_dx(bwd_out) {\"in_features\":5} {weight->nb.weight}",
      "bwd_nb_1 = grad.linear_dweight(bwd_out, fc)",
      "bwd_fc = grad.linear_dx(bwd_nb) {\"in_features\":6} {weight->fc.weight}",
      "bwd_fc_1 = grad.linear_dweight(bwd_nb, x)",
      "bwd_fc_2 = grad.sum_rows(bwd_nb)",
  };
  EXPECT_EQ(backward_of(graph, {"fc", "nb"}), expected);
  EXPECT_EQ(graph.gradients,
            (std::map<std::string, std::string>{
                {"fc.bias", "bwd_fc_2"}, {"fc.weight", "bwd_fc_1"}, {"nb.weight", "bwd_nb_1"}, {"x", "bwd_fc"}}));
  // The gradients have their params' and input's types.
  EXPECT_EQ(graph.find_node("bwd_fc")->ctx.output.shape, (Shape{Expr::dim("B"), Expr(6)}));
  EXPECT_EQ(graph.find_node("bwd_fc_1")->ctx.output.shape, (Shape{Expr(5), Expr(6)}));
  EXPECT_EQ(graph.find_node("bwd_fc_2")->ctx.output.shape, (Shape{Expr(5)}));
}

TEST(DenseGradientRules, LinearWithoutInputGradientSkipsDx) {
  const Graph graph =
      trained(loss_graph("  x: {dtype: f32, shape: [2, 6]}\n"
                         "nodes:\n"
                         "  - {name: fc, op: linear, inputs: [x], attrs: {out_features: 3}}\n"
                         "  - {name: out, op: scale, inputs: [fc], attrs: {value: 2}}\n",
                         "[2, 3]", "  params: [fc.weight]\n"));
  EXPECT_EQ(backward_of(graph, {"fc"}), std::vector<std::string>{"bwd_fc = grad.linear_dweight(bwd_out, x)"});
}

TEST(DenseGradientRules, MatmulSumsBroadcastOperandsAndTakesA2DWeightInOneGemm) {
  const Graph graph =
      trained(loss_graph("  a: {dtype: f32, shape: [2, 3, 4]}\n"
                         "  w: {dtype: f32, shape: [4, 5]}\n"
                         "  s: {dtype: f32, shape: [1, 5, 2]}\n"
                         "nodes:\n"
                         "  - {name: aw, op: matmul, inputs: [a, w]}\n"
                         "  - {name: aws, op: matmul, inputs: [aw, s]}\n"
                         "  - {name: out, op: scale, inputs: [aws], attrs: {value: 2}}\n",
                         "[2, 3, 2]", "  inputs: [a, w, s]\n"));
  const std::vector<std::string> expected{
      // s [1, 5, 2] broadcast along the batch: its gradient per batch, then summed back.
      "bwd_aws = grad.matmul_da(bwd_out, s)",
      "bwd_aws_1 = grad.matmul_db(aw, bwd_out) {\"sum_batches\":false}",
      "bwd_aws_2 = grad.sum_to(bwd_aws_1) {\"shape\":[\"1\",\"5\",\"2\"]}",
      // w is 2-D under a batched a: one GEMM over all 6 rows.
      "bwd_aw = grad.matmul_da(bwd_aws, w)",
      "bwd_aw_1 = grad.matmul_db(a, bwd_aws) {\"sum_batches\":true}",
  };
  EXPECT_EQ(backward_of(graph, {"aw", "aws"}), expected);
  EXPECT_EQ(graph.gradients.at("s"), "bwd_aws_2");
  EXPECT_EQ(graph.find_node("bwd_aw_1")->ctx.output.shape, (Shape{Expr(4), Expr(5)}));
}

TEST(DenseGradientRules, NormsRecomputeTheirStatisticsFromX) {
  const Graph graph =
      trained(loss_graph("  x: {dtype: f32, shape: [2, 6]}\n"
                         "nodes:\n"
                         "  - {name: ln, op: layernorm, inputs: [x]}\n"
                         "  - {name: rn, op: rmsnorm, inputs: [ln], attrs: {eps: 0.01}}\n"
                         "  - {name: pl, op: layernorm, inputs: [rn], attrs: {affine: false}}\n"
                         "  - {name: out, op: scale, inputs: [pl], attrs: {value: 2}}\n",
                         "[2, 6]", "  inputs: [x]\n"));
  const std::vector<std::string> expected{
      "bwd_pl = grad.layernorm_dx(bwd_out, rn) {\"affine\":false,\"eps\":1e-05}",
      "bwd_rn = grad.rmsnorm_dx(bwd_pl, ln) {\"eps\":0.01} {weight->rn.weight}",
      "bwd_rn_1 = grad.rmsnorm_dweight(bwd_pl, ln) {\"eps\":0.01}",
      "bwd_ln = grad.layernorm_dx(bwd_rn, x) {\"affine\":true,\"eps\":1e-05} {weight->ln.weight}",
      "bwd_ln_1 = grad.layernorm_dweight(bwd_rn, x) {\"eps\":1e-05}",
      "bwd_ln_2 = grad.sum_rows(bwd_rn)",
  };
  EXPECT_EQ(backward_of(graph, {"ln", "rn", "pl"}), expected);
}

TEST(DenseGradientRules, EmbeddingScattersIntoItsWeight) {
  const Graph graph =
      trained(loss_graph("  ids: {dtype: i32, shape: [2, 3]}\n"
                         "nodes:\n"
                         "  - {name: emb, op: embedding, inputs: [ids], attrs: {num_embeddings: 7, "
                         "dim: 4}}\n"
                         "  - {name: out, op: scale, inputs: [emb], attrs: {value: 2}}\n",
                         "[2, 3, 4]", ""));
  EXPECT_EQ(backward_of(graph, {"emb"}),
            std::vector<std::string>{"bwd_emb = grad.embedding_dweight(bwd_out, ids) {\"num_embeddings\":7}"});
  EXPECT_EQ(graph.find_node("bwd_emb")->ctx.output.shape, (Shape{Expr(7), Expr(4)}));
}

TEST(DenseGradientRules, FusedLinearRecomputesWhatItDidNotSave) {
  const Graph graph =
      trained(loss_graph("  x: {dtype: f32, shape: [2, 6]}\n"
                         "  r: {dtype: f32, shape: [2, 4]}\n"
                         "nodes:\n"
                         "  - {name: a, op: fused.linear, inputs: [x], attrs: {out_features: 4, activation: tanh}}\n"
                         "  - {name: b, op: fused.linear, inputs: [a, r], attrs: {out_features: 4, activation: silu, "
                         "bias: false}}\n"
                         "  - {name: out, op: scale, inputs: [b], attrs: {value: 2}}\n",
                         "[2, 4]", "  inputs: [x, r]\n"));
  const std::vector<std::string> expected{
      // silu's derivative needs x Wᵀ, which a linear on b's weight computes again; r gets dy.
      "bwd_b = linear(a) {\"bias\":false,\"out_features\":4} {weight->b.weight}",
      "bwd_b_1 = grad.activation(bwd_out, bwd_b) {\"activation\":\"silu\"}",
      "bwd_b_2 = grad.linear_dx(bwd_b_1) {\"in_features\":4} {weight->b.weight}",
      "bwd_b_3 = grad.linear_dweight(bwd_b_1, a)",
      // tanh without a residual: its derivative is written in the node's own output.
      "bwd_a = grad.activation(bwd_b_2, a) {\"activation\":\"tanh\"}",
      "bwd_a_1 = grad.linear_dx(bwd_a) {\"in_features\":6} {weight->a.weight}",
      "bwd_a_2 = grad.linear_dweight(bwd_a, x)",
      "bwd_a_3 = grad.sum_rows(bwd_a)",
  };
  EXPECT_EQ(backward_of(graph, {"a", "b"}), expected);
  EXPECT_EQ(graph.gradients.at("r"), "bwd_out");
}

// ---- the grad.* ops' references ------------------------------------------------------------

TEST(DenseGradientReference, LinearDxAndDweight) {
  // dy [2, 2] = [[1, 2], [3, 4]], W [2, 3] = [[1, 0, 2], [0, 1, -1]]: dx = dy W.
  const HostTensor dx =
      reference("grad.linear_dx", {{"in_features", 3}}, {{{2, 2}, {1, 2, 3, 4}}}, {{1, 0, 2, 0, 1, -1}});
  EXPECT_EQ(dx.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(dx.data, (std::vector<double>{1, 2, 0, 3, 4, 2}));
  // dW = dyᵀ x with x [2, 3] = [[1, 2, 3], [4, 5, 6]]: row n is sum_r dy[r][n] x[r].
  const HostTensor dw = reference("grad.linear_dweight", {}, {{{2, 2}, {1, 2, 3, 4}}, {{2, 3}, {1, 2, 3, 4, 5, 6}}});
  EXPECT_EQ(dw.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(dw.data, (std::vector<double>{13, 17, 21, 18, 24, 30}));
  const HostTensor db = reference("grad.sum_rows", {}, {{{2, 1, 2}, {1, 2, 3, 4}}});
  EXPECT_EQ(db.data, (std::vector<double>{4, 6}));
}

// grad.linear_dx's epilogues (fuse_grad_linear_epilogue): dx = dy W of LinearDxAndDweight, then
// + r, or grad.activation's dx · f'(r).
TEST(DenseGradientReference, LinearDxEpilogues) {
  const HostIn dy{{2, 2}, {1, 2, 3, 4}};
  const std::vector<double> w = {1, 0, 2, 0, 1, -1};  // dx = [[1, 2, 0], [3, 4, 2]]
  const HostIn r{{2, 3}, {1, -1, 0, 2, 0.5, -3}};
  auto dx = [&](const char* epilogue) {
    return reference("grad.linear_dx", {{"in_features", 3}, {"epilogue", epilogue}}, {dy, r}, {w}).data;
  };
  EXPECT_EQ(dx("add"), (std::vector<double>{2, 1, 0, 5, 4.5, -1}));
  EXPECT_EQ(dx("relu"), (std::vector<double>{1, 0, 0, 3, 4, 0}));  // dx where r > 0
  EXPECT_EQ(dx("tanh"), (std::vector<double>{0, 0, 0, 3 * (1 - 4), 4 * (1 - 0.25), 2 * (1 - 9)}));
  // An activation reading x: grad.activation's own reference on the plain dx.
  const HostIn plain{{2, 3}, {1, 2, 0, 3, 4, 2}};
  for (const char* act : {"gelu_tanh", "silu", "gelu", "sigmoid"}) {
    SCOPED_TRACE(act);
    EXPECT_EQ(dx(act), reference("grad.activation", {{"activation", act}}, {plain, r}).data);
  }
}

TEST(DenseGradientReference, MatmulPerBatchAndSummed) {
  // c = a b with a [2, 1, 2] = [[[1, 2]], [[3, 4]]], b [2, 1] = [[5], [6]]; dc [2, 1, 1] = [1, 2].
  // da[z] = dc[z] bᵀ: [[5, 6]], [[10, 12]].
  const HostTensor da = reference("grad.matmul_da", {}, {{{2, 1, 1}, {1, 2}}, {{2, 1}, {5, 6}}});
  EXPECT_EQ(da.shape, (std::vector<int64_t>{2, 1, 2}));
  EXPECT_EQ(da.data, (std::vector<double>{5, 6, 10, 12}));
  // db[z] = a[z]ᵀ dc[z]: [[1], [2]] and [[6], [8]]; summed: [[7], [10]].
  const HostTensor db =
      reference("grad.matmul_db", {{"sum_batches", false}}, {{{2, 1, 2}, {1, 2, 3, 4}}, {{2, 1, 1}, {1, 2}}});
  EXPECT_EQ(db.shape, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(db.data, (std::vector<double>{1, 2, 6, 8}));
  const HostTensor sum =
      reference("grad.matmul_db", {{"sum_batches", true}}, {{{2, 1, 2}, {1, 2, 3, 4}}, {{2, 1, 1}, {1, 2}}});
  EXPECT_EQ(sum.shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(sum.data, (std::vector<double>{7, 10}));
  // a broadcast ([1, 2] under dc [2, 1, 1]): each batch reads the same a.
  const HostTensor bcast =
      reference("grad.matmul_db", {{"sum_batches", false}}, {{{1, 2}, {1, 2}}, {{2, 1, 1}, {1, 2}}});
  EXPECT_EQ(bcast.data, (std::vector<double>{1, 2, 2, 4}));
}

TEST(DenseGradientReference, NormsOnOneRow) {
  // x = [1, 3]: mean 2, var 1, rstd 1 / sqrt(1 + eps) ~ 1 with eps 1e-12; x̂ = [-1, 1].
  const std::vector<HostIn> inputs = {{{1, 2}, {1, 0}}, {{1, 2}, {1, 3}}};
  const double eps = 1e-12;
  // dweight = dy x̂ = [-1, 0].
  const HostTensor dw = reference("grad.layernorm_dweight", {{"eps", eps}}, inputs);
  EXPECT_NEAR(dw.data[0], -1, 1e-9);
  EXPECT_NEAR(dw.data[1], 0, 1e-9);
  // With weight [2, 3]: g = [2, 0], mean(g) = 1, mean(g x̂) = -1, dx = g - 1 + x̂ = [0, 0]: a
  // shift of one element moves the mean with it.
  const HostTensor dx = reference("grad.layernorm_dx", {{"eps", eps}, {"affine", true}}, inputs, {{2, 3}});
  EXPECT_NEAR(dx.data[0], 0, 1e-9);
  EXPECT_NEAR(dx.data[1], 0, 1e-9);
  // dy = [1, 1] without a weight: dx = 0 (a uniform dy only shifts the mean).
  const HostTensor plain =
      reference("grad.layernorm_dx", {{"eps", eps}, {"affine", false}}, {{{1, 2}, {1, 1}}, {{1, 2}, {1, 3}}});
  EXPECT_NEAR(plain.data[0], 0, 1e-9);
  EXPECT_NEAR(plain.data[1], 0, 1e-9);
  // rmsnorm of x = [3, 4]: rms = sqrt(12.5), rstd = 1 / sqrt(12.5), x̂ = [3, 4] / sqrt(12.5).
  // dy = [1, 0], weight [1, 1]: mean(g x̂) = 3 / (2 sqrt(12.5)); dx = rstd (g - x̂ mean(g x̂)) =
  // [1 - 9/25, -12/25] / sqrt(12.5).
  const std::vector<HostIn> rms_inputs = {{{1, 2}, {1, 0}}, {{1, 2}, {3, 4}}};
  const HostTensor rdx = reference("grad.rmsnorm_dx", {{"eps", eps}}, rms_inputs, {{1, 1}});
  EXPECT_NEAR(rdx.data[0], (1 - 9.0 / 25) / std::sqrt(12.5), 1e-9);
  EXPECT_NEAR(rdx.data[1], (-12.0 / 25) / std::sqrt(12.5), 1e-9);
  const HostTensor rdw = reference("grad.rmsnorm_dweight", {{"eps", eps}}, rms_inputs);
  EXPECT_NEAR(rdw.data[0], 3 / std::sqrt(12.5), 1e-9);
  EXPECT_NEAR(rdw.data[1], 0, 1e-9);
}

TEST(DenseGradientReference, EmbeddingSumsDuplicateIdsAndSkipsOutOfRange) {
  // ids [4] = [2, 0, 2, 9] into 3 rows of dim 2: row 2 gets positions 0 and 2, row 1 nothing,
  // id 9 nothing.
  const HostTensor dw = reference("grad.embedding_dweight", {{"num_embeddings", 3}},
                                  {{{4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}}, {{4}, {2, 0, 2, 9}, DType::kI32}});
  EXPECT_EQ(dw.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(dw.data, (std::vector<double>{3, 4, 0, 0, 6, 8}));
}

TEST(DenseGradientShape, ErrorsNameWhatDoesNotFit) {
  EXPECT_EQ(infer_error("grad.linear_dweight", {},
                        {tensor(DType::kF32, {Expr(4), Expr(3)}), tensor(DType::kF32, {Expr(5), Expr(2)})}),
            "grad.linear_dweight needs dy [..., N] and x [..., K] with the same leading dims; got [4, 3] and [5, 2]");
  EXPECT_EQ(infer_error("grad.matmul_da", {},
                        {tensor(DType::kF32, {Expr(2), Expr(3), Expr(4)}), tensor(DType::kF32, {Expr(5), Expr(3)})}),
            "grad.matmul_da needs dc [..., M, N] and b [..., K, N]; got [2, 3, 4] and [5, 3]");
  EXPECT_EQ(
      infer_error("grad.matmul_db", {{"sum_batches", false}},
                  {tensor(DType::kF32, {Expr(3), Expr(2), Expr(4)}), tensor(DType::kF32, {Expr(2), Expr(2), Expr(5)})}),
      "grad.matmul_db: the operand's batch dims [3] do not broadcast to dc's [2]");
  EXPECT_EQ(infer_error("grad.matmul_db", {{"sum_batches", true}},
                        {tensor(DType::kF32, {Expr(2), Expr(4)}), tensor(DType::kF32, {Expr(3), Expr(2), Expr(5)})}),
            "grad.matmul_db with sum_batches needs a's batch dims to be dc's; got [2, 4] and [3, 2, 5]");
  EXPECT_EQ(infer_error("grad.layernorm_dx", {{"eps", 1e-5}, {"affine", true}},
                        {tensor(DType::kF32, {Expr(2), Expr(3)}), tensor(DType::kF32, {Expr(2), Expr(4)})}),
            "grad.layernorm_dx needs dy and x of one shape [..., D]; got [2, 3] and [2, 4]");
  EXPECT_EQ(infer_error("grad.embedding_dweight", {{"num_embeddings", 3}},
                        {tensor(DType::kF32, {Expr(4), Expr(2)}), tensor(DType::kF32, {Expr(4)})}),
            "grad.embedding_dweight ids must be i32, got f32");
  EXPECT_EQ(infer_error("grad.embedding_dweight", {{"num_embeddings", 3}},
                        {tensor(DType::kF32, {Expr(4), Expr(2)}), tensor(DType::kI32, {Expr(5)})}),
            "grad.embedding_dweight needs dy [..., D] over ids [...]; got [4, 2] and [5]");
  const TensorType dy = tensor(DType::kF32, {Expr(4), Expr(2)});
  EXPECT_EQ(infer_error("grad.linear_dx", {{"in_features", 3}, {"epilogue", "gelu"}}, {dy}),
            "grad.linear_dx: epilogue 'gelu' needs input r of dx's shape [4, 3]");
  EXPECT_EQ(infer_error("grad.linear_dx", {{"in_features", 3}}, {dy, tensor(DType::kF32, {Expr(4), Expr(3)})}),
            "grad.linear_dx reads input r only with an epilogue (add, or an activation's name)");
  EXPECT_EQ(infer_error("grad.linear_dx", {{"in_features", 3}, {"epilogue", "add"}},
                        {dy, tensor(DType::kF32, {Expr(4), Expr(2)})}),
            "grad.linear_dx: r must be dx's f32 [4, 3]; got f32 [4, 2]");
}

// ---- fuse_grad_linear_epilogue -------------------------------------------------------------------

// x feeds two linears (its gradient, a listed input, sums their dx), one of them through tanh (whose
// derivative reads its output t).
std::string fan_out_graph() {
  return loss_graph(
      "  x: {dtype: f32, shape: [4, 6]}\n"
      "nodes:\n"
      "  - {name: a, op: linear, inputs: [x], attrs: {out_features: 5}}\n"
      "  - {name: t, op: tanh, inputs: [a]}\n"
      "  - {name: b, op: linear, inputs: [t], attrs: {out_features: 3}}\n"
      "  - {name: c, op: linear, inputs: [x], attrs: {out_features: 3}}\n"
      "  - {name: out, op: sub, inputs: [b, c]}\n",
      "[4, 3]", "  inputs: [x]\n");
}

std::string described(const Graph& graph, const std::string& name) {
  const Node* node = graph.find_node(name);
  if (node == nullptr) return "(none)";
  return fmt::format("{}({}) {} from {}", node->op->name, fmt::join(node->inputs, ", "), node->ctx.attrs.json().dump(),
                     fmt::join(node->fused_from, ", "));
}

TEST(DenseGradientFusion, ActivationDerivativeAndFanOutSumGoIntoTheDxGemm) {
  const Graph graph = prepare_graph(parse_graph(fan_out_graph(), "grads.yaml", registry()), registry(), {});
  EXPECT_EQ(described(graph, "bwd_t"),
            "grad.linear_dx(bwd_loss, t) {\"epilogue\":\"tanh\",\"in_features\":5} from bwd_b, bwd_t");
  EXPECT_EQ(described(graph, "grad_x"),
            "grad.linear_dx(bwd_t, bwd_c) {\"epilogue\":\"add\",\"in_features\":6} from bwd_a, grad_x");
  // x's gradient is still the tensor the graph records, and the absorbed nodes are gone.
  EXPECT_EQ(graph.gradients.at("x"), "grad_x");
  EXPECT_EQ(graph.find_node("bwd_b"), nullptr);
  EXPECT_EQ(graph.find_node("bwd_a"), nullptr);
}

// The fused graph's gradients (compiled with its passes, run by the host reference executor)
// against finite differences of the loss.
TEST(DenseGradientFusion, FusedGradientsMatchFiniteDifferences) {
  expect_gradients_match(fan_out_graph(), registry(),
                         {"a.bias", "a.weight", "b.bias", "b.weight", "c.bias", "c.weight", "x"});
}

TEST(DenseGradientFusion, NoFuseKeepsTheBackwardNodes) {
  CompileOptions options;
  options.fuse = false;
  const Graph graph = prepare_graph(parse_graph(fan_out_graph(), "grads.yaml", registry()), registry(), options);
  EXPECT_EQ(described(graph, "bwd_t"), "grad.activation(bwd_b, t) {\"activation\":\"tanh\"} from ");
  EXPECT_EQ(graph.find_node("grad_x")->op->name, "add");
}

// ---- gradients against finite differences ----------------------------------------------------

TEST(DenseGradientCheck, LinearWithAndWithoutBias) {
  for (const char* bias : {"true", "false"}) {
    SCOPED_TRACE(bias);
    expect_gradients_match(
        loss_graph(fmt::format("  x: {{dtype: f32, shape: [2, 3, 5]}}\n"
                               "nodes:\n"
                               "  - {{name: out, op: linear, inputs: [x], attrs: {{out_features: 4, bias: {}}}}}\n",
                               bias),
                   "[2, 3, 4]", "  inputs: [x]\n"),
        registry(),
        std::string(bias) == "true" ? std::vector<std::string>{"out.bias", "out.weight", "x"}
                                    : std::vector<std::string>{"out.weight", "x"});
  }
}

TEST(DenseGradientCheck, MatmulBatchedAndBroadcast) {
  // a broadcast along the outer batch dim, b along the inner one and a 2-D w in one GEMM.
  expect_gradients_match(loss_graph("  a: {dtype: f32, shape: [1, 2, 3, 4]}\n"
                                    "  b: {dtype: f32, shape: [2, 1, 4, 5]}\n"
                                    "  w: {dtype: f32, shape: [5, 3]}\n"
                                    "nodes:\n"
                                    "  - {name: ab, op: matmul, inputs: [a, b]}\n"
                                    "  - {name: out, op: matmul, inputs: [ab, w]}\n",
                                    "[2, 2, 3, 3]", "  inputs: [a, b, w]\n"),
                         registry(), {"a", "b", "w"});
  // Both operands 2-D.
  expect_gradients_match(loss_graph("  a: {dtype: f32, shape: [3, 4]}\n"
                                    "  b: {dtype: f32, shape: [4, 2]}\n"
                                    "nodes:\n"
                                    "  - {name: out, op: matmul, inputs: [a, b]}\n",
                                    "[3, 2]", "  inputs: [a, b]\n"),
                         registry(), {"a", "b"});
}

TEST(DenseGradientCheck, LayernormAndRmsnorm) {
  // Rows of 7 and an eps large enough to matter; scale first so that x̂ spreads.
  expect_gradients_match(loss_graph("  x: {dtype: f32, shape: [3, 7]}\n"
                                    "nodes:\n"
                                    "  - {name: s, op: scale, inputs: [x], attrs: {value: 3}}\n"
                                    "  - {name: ln, op: layernorm, inputs: [s], attrs: {eps: 0.1}}\n"
                                    "  - {name: out, op: rmsnorm, inputs: [ln], attrs: {eps: 0.01}}\n",
                                    "[3, 7]", "  inputs: [x]\n"),
                         registry(), {"ln.bias", "ln.weight", "out.weight", "x"});
  expect_gradients_match(loss_graph("  x: {dtype: f32, shape: [2, 2, 5]}\n"
                                    "nodes:\n"
                                    "  - {name: out, op: layernorm, inputs: [x], attrs: {affine: false}}\n",
                                    "[2, 2, 5]", "  inputs: [x]\n"),
                         registry(), {"x"});
}

TEST(DenseGradientCheck, EmbeddingWithRepeatedIds) {
  // 12 ids over 5 rows: some repeat (seeded), and each repeat's gradient adds.
  expect_gradients_match(loss_graph("  ids: {dtype: i32, shape: [3, 4]}\n"
                                    "nodes:\n"
                                    "  - {name: emb, op: embedding, inputs: [ids], attrs: {num_embeddings: 5, "
                                    "dim: 3}}\n"
                                    "  - {name: out, op: tanh, inputs: [emb]}\n",
                                    "[3, 4, 3]", ""),
                         registry(), {"emb.weight"});
}

TEST(DenseGradientCheck, FusedLinearEpilogues) {
  for (const char* act : {"none", "relu", "sigmoid", "silu", "gelu_tanh"})
    for (bool residual : {false, true}) {
      SCOPED_TRACE(fmt::format("{} residual {}", act, residual));
      const std::vector<std::string> names = residual ? std::vector<std::string>{"out.bias", "out.weight", "r", "x"}
                                                      : std::vector<std::string>{"out.bias", "out.weight", "x"};
      expect_gradients_match(
          loss_graph(fmt::format("  x: {{dtype: f32, shape: [3, 5]}}\n"
                                 "  r: {{dtype: f32, shape: [3, 4]}}\n"
                                 "nodes:\n"
                                 "  - {{name: out, op: fused.linear, inputs: [x{}], attrs: {{out_features: 4, "
                                 "activation: {}}}}}\n",
                                 residual ? ", r" : "", act),
                     "[3, 4]", residual ? "  inputs: [x, r]\n" : "  inputs: [x]\n"),
          registry(), names);
    }
}

// A small transformer-style block over a batch bound at run time (summed away before the loss):
// embedding, layernorm, two linears around a gelu, a residual add and rmsnorm, with the
// embedding's output fanning out.
TEST(DenseGradientCheck, AnMlpBlockOverASymbolicBatch) {
  testing::GradCheckOptions options;
  options.binds = {"B=2"};
  expect_gradients_match(
      loss_graph("  ids: {dtype: i32, shape: [B, 3]}\n"
                 "nodes:\n"
                 "  - {name: emb, op: embedding, inputs: [ids], attrs: {num_embeddings: 6, dim: 4}}\n"
                 "  - {name: ln, op: layernorm, inputs: [emb]}\n"
                 "  - {name: fc, op: linear, inputs: [ln], attrs: {out_features: 8}}\n"
                 "  - {name: act, op: gelu, inputs: [fc]}\n"
                 "  - {name: proj, op: linear, inputs: [act], attrs: {out_features: 4}}\n"
                 "  - {name: res, op: add, inputs: [proj, emb]}\n"
                 "  - {name: rn, op: rmsnorm, inputs: [res]}\n"
                 "  - {name: out, op: reduce_sum, inputs: [rn], attrs: {axis: 0}}\n",
                 "[3, 4]", "", "dims:\n  B: {min: 1, max: 8, default: 2}\n"),
      registry(),
      {"emb.weight", "fc.bias", "fc.weight", "ln.bias", "ln.weight", "proj.bias", "proj.weight", "rn.weight"}, options);
}

}  // namespace
}  // namespace teeny
