// The pools', upsample_nearest2d's and batchnorm2d's backward rules and the grad.* ops they add
// (ops.md, "Gradients"), and batchnorm2d's training mode (docs/training.md, "Training mode"): the
// exact backward and update nodes, the ops' host references against hand-computed values, their
// errors (exact text), and the gradients against finite differences of the loss
// (tests/grad_check_util.h), compiled through NVRTC and run by the host reference executor.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/autodiff.h"
#include "core/compile.h"
#include "tests/grad_check_util.h"
#include "tests/grad_graph_util.h"
#include "tests/op_test_util.h"

namespace teeny {
namespace {

using op_testing::infer_error;
using op_testing::reference;
using op_testing::registry;
using op_testing::tensor;
using testing::backward_of;
using testing::expect_gradients_match;
using testing::loss_graph;
using testing::trained;

TensorType nchw(int64_t b, int64_t c, int64_t h, int64_t w) {
  return tensor(DType::kF32, {Expr(b), Expr(c), Expr(h), Expr(w)});
}

// ---- the graphs the rules build ----------------------------------------------------------------

TEST(PoolGradientRules, MaxReadsXTheOthersDyAlone) {
  const Graph graph =
      trained(loss_graph("  x: {dtype: f32, shape: [B, 3, 7, 7]}\n"
                         "nodes:\n"
                         "  - {name: mp, op: maxpool2d, inputs: [x], attrs: {kernel_size: 3, stride: 2, padding: 1}}\n"
                         "  - {name: ap, op: avgpool2d, inputs: [mp], attrs: {kernel_size: 2}}\n"
                         "  - {name: up, op: upsample_nearest2d, inputs: [ap], attrs: {scale_factor: 3}}\n"
                         "  - {name: out, op: global_avgpool, inputs: [up]}\n",
                         "[B, 3, 1, 1]", "  inputs: [x]\n", "dims:\n  B: {min: 1, max: 8, default: 2}\n"));
  const std::vector<std::string> expected{
      "bwd_out = grad.broadcast(" + graph.find_node("bwd_out")->inputs.at(0) +
          ") {\"mean\":true,\"shape\":[\"B\",\"3\",\"6\",\"6\"]}",
      "bwd_up = grad.upsample_nearest2d(bwd_out) {\"scale_factor\":3,\"shape\":[\"B\",\"3\",\"2\",\"2\"]}",
      "bwd_ap = grad.avgpool2d(bwd_up) {\"kernel_size\":[2,2],\"padding\":[0,0],\"shape\":[\"B\",\"3\",\"4\",\"4\"]}",
      "bwd_mp = grad.maxpool2d(bwd_ap, x) {\"kernel_size\":[3,3],\"padding\":[1,1],\"stride\":[2,2]}",
  };
  EXPECT_EQ(backward_of(graph, {"out", "up", "ap", "mp"}), expected);
  EXPECT_EQ(graph.gradients.at("x"), "bwd_mp");
  EXPECT_EQ(graph.find_node("bwd_mp")->ctx.output.shape, (Shape{Expr::dim("B"), Expr(3), Expr(7), Expr(7)}));
}

// ---- the grad.* ops' references ------------------------------------------------------------

TEST(PoolGradientReference, MaxGoesToTheFirstMaxOfEachWindowAndAddsUp) {
  // x [[1, 5, 5], [2, 0, 3]], windows 2x2 at columns 0 and 1: both pick the 5 at (0, 1), the first
  // of the tie in the second window, so it gets 1 + 10.
  const HostTensor dx = reference("grad.maxpool2d", {{"kernel_size", 2}, {"stride", 1}, {"padding", 0}},
                                  {{{1, 1, 1, 2}, {1, 10}}, {{1, 1, 2, 3}, {1, 5, 5, 2, 0, 3}}});
  EXPECT_EQ(dx.shape, (std::vector<int64_t>{1, 1, 2, 3}));
  EXPECT_EQ(dx.data, (std::vector<double>{0, 11, 0, 0, 0, 0}));
}

TEST(PoolGradientReference, MaxGivesTheLastNaNOfAWindow) {
  // PyTorch's CUDA maxpool replaces its pick by every NaN it meets: the last one wins.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const HostTensor dx = reference("grad.maxpool2d", {{"kernel_size", {1, 3}}, {"padding", 0}},
                                  {{{1, 1, 1, 1}, {7}}, {{1, 1, 1, 3}, {nan, 1, nan}}});
  EXPECT_EQ(dx.data, (std::vector<double>{0, 0, 7}));
  // A padded window whose only in-bounds values are -inf picks its first in-bounds element.
  const double inf = std::numeric_limits<double>::infinity();
  const HostTensor all_inf = reference("grad.maxpool2d", {{"kernel_size", 2}, {"stride", 1}, {"padding", 1}},
                                       {{{1, 1, 2, 2}, {1, 2, 3, 4}}, {{1, 1, 1, 1}, {-inf}}});
  EXPECT_EQ(all_inf.data, (std::vector<double>{10}));
}

TEST(PoolGradientReference, AverageDividesEveryWindowByItsFullSize) {
  // x 3x3, k3 s2 p1: four overlapping windows, each clipped to a 2x2 corner of x but divided by 9
  // (padding counts); dy [1, 2, 3, 4]. The centre is in all four windows.
  const HostTensor dx =
      reference("grad.avgpool2d", {{"kernel_size", 3}, {"stride", 2}, {"padding", 1}, {"shape", {1, 1, 3, 3}}},
                {{{1, 1, 2, 2}, {1, 2, 3, 4}}});
  const std::vector<double> expected{1, 3, 2, 4, 10, 6, 3, 7, 4};
  ASSERT_EQ(dx.data.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(dx.data[i], expected[i] / 9, 1e-15) << i;
}

TEST(PoolGradientReference, UpsampleSumsEachBlock) {
  // dy [[1, 2, 3, 4], [5, 6, 7, 8]] from x 1x2 by 2: blocks {1, 2, 5, 6} and {3, 4, 7, 8}.
  const HostTensor dx = reference("grad.upsample_nearest2d", {{"scale_factor", 2}, {"shape", {1, 1, 1, 2}}},
                                  {{{1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}}});
  EXPECT_EQ(dx.data, (std::vector<double>{14, 22}));
}

TEST(PoolGradientShape, ErrorsNameWhatDoesNotFit) {
  EXPECT_EQ(infer_error("grad.maxpool2d", {{"kernel_size", 2}, {"padding", 0}}, {nchw(1, 1, 3, 3), nchw(1, 1, 4, 4)}),
            "grad.maxpool2d: dy has shape [1, 1, 3, 3]; x [1, 1, 4, 4] pooled is [1, 1, 2, 2]");
  EXPECT_EQ(infer_error("grad.maxpool2d", {{"kernel_size", 2}, {"padding", 0}},
                        {nchw(1, 1, 2, 2), tensor(DType::kF32, {Expr(4), Expr(4)})}),
            "grad.maxpool2d expects x [B, C, H, W] (rank 4), got [4, 4]");
  EXPECT_EQ(
      infer_error("grad.avgpool2d", {{"kernel_size", 3}, {"padding", 2}, {"shape", {1, 1, 5, 5}}}, {nchw(1, 1, 3, 3)}),
      "padding [2, 2] must be at most half the kernel [3, 3]");
  EXPECT_EQ(
      infer_error("grad.avgpool2d", {{"kernel_size", 2}, {"padding", 0}, {"shape", {1, 4, 4}}}, {nchw(1, 1, 2, 2)}),
      "grad.avgpool2d: shape [1, 4, 4] is not x's [B, C, H, W]");
  EXPECT_EQ(
      infer_error("grad.avgpool2d", {{"kernel_size", 2}, {"padding", 0}, {"shape", {1, 2, 4, 4}}}, {nchw(1, 1, 2, 2)}),
      "grad.avgpool2d: dy has shape [1, 1, 2, 2]; x [1, 2, 4, 4] pooled is [1, 2, 2, 2]");
  EXPECT_EQ(infer_error("grad.upsample_nearest2d", {{"scale_factor", 2}, {"shape", {1, 1, 2, 2}}}, {nchw(1, 1, 4, 5)}),
            "grad.upsample_nearest2d: dy has shape [1, 1, 4, 5]; x [1, 1, 2, 2] upsampled by 2 is [1, 1, 4, 4]");
}

// ---- gradients against finite differences ----------------------------------------------------

// x scaled by 10 first: the seeded values then lie far apart against the finite difference's step,
// so no window holds a near tie (where a max's derivative is undefined).
std::string pooled_graph(const std::string& x_shape, const std::string& pool, const std::string& target) {
  return loss_graph(fmt::format("  x: {{dtype: f32, shape: {}}}\n"
                                "nodes:\n"
                                "  - {{name: s, op: scale, inputs: [x], attrs: {{value: 10}}}}\n"
                                "  - {{name: out, {}}}\n",
                                x_shape, pool),
                    target, "  inputs: [x]\n");
}

TEST(PoolGradientCheck, MaxpoolOverlappingPaddedAndFloored) {
  expect_gradients_match(
      pooled_graph("[2, 3, 7, 7]", "op: maxpool2d, inputs: [s], attrs: {kernel_size: 3, stride: 2, padding: 1}",
                   "[2, 3, 4, 4]"),
      registry(), {"x"});
  expect_gradients_match(
      pooled_graph("[1, 5, 5, 5]", "op: maxpool2d, inputs: [s], attrs: {kernel_size: 2}", "[1, 5, 2, 2]"), registry(),
      {"x"});
  expect_gradients_match(
      pooled_graph("[1, 2, 7, 7]",
                   "op: maxpool2d, inputs: [s], attrs: {kernel_size: [2, 3], stride: [1, 2], padding: [1, 1]}",
                   "[1, 2, 8, 4]"),
      registry(), {"x"});
}

TEST(PoolGradientCheck, AvgpoolOverlappingPaddedAndFloored) {
  expect_gradients_match(
      pooled_graph("[2, 3, 7, 7]", "op: avgpool2d, inputs: [s], attrs: {kernel_size: 3, stride: 2, padding: 1}",
                   "[2, 3, 4, 4]"),
      registry(), {"x"});
  expect_gradients_match(
      pooled_graph("[1, 2, 7, 7]",
                   "op: avgpool2d, inputs: [s], attrs: {kernel_size: [2, 3], stride: [1, 2], padding: [1, 1]}",
                   "[1, 2, 8, 4]"),
      registry(), {"x"});
}

TEST(PoolGradientCheck, GlobalAvgpoolAndUpsample) {
  expect_gradients_match(pooled_graph("[2, 3, 5, 4]", "op: global_avgpool, inputs: [s]", "[2, 3, 1, 1]"), registry(),
                         {"x"});
  expect_gradients_match(
      pooled_graph("[1, 2, 3, 2]", "op: upsample_nearest2d, inputs: [s], attrs: {scale_factor: 3}", "[1, 2, 9, 6]"),
      registry(), {"x"});
}

// ---- batchnorm2d in training mode -------------------------------------------------------------

const char* kBatchNormBody =
    "  x: {dtype: f32, shape: [B, 3, 2, 2]}\n"
    "nodes:\n"
    "  - {name: bn, op: batchnorm2d, inputs: [x], attrs: {momentum: 0.25}}\n"
    "  - {name: out, op: scale, inputs: [bn], attrs: {value: 2}}\n";
const char* kBatchNormDims = "dims:\n  B: {min: 1, max: 8, default: 2}\n";

TEST(BatchNormTraining, BatchStatisticsGradientsAndARunningStatisticsUpdate) {
  const Graph graph = trained(loss_graph(kBatchNormBody, "[B, 3, 2, 2]",
                                         "  inputs: [x]\n  optimizer: {type: adamw, lr: 0.01}\n", kBatchNormDims));
  EXPECT_TRUE(graph.find_node("bn")->ctx.attrs.boolean("training"));
  const std::vector<std::string> expected{
      "bwd_bn = grad.batchnorm2d_dx(bwd_out, x) {\"eps\":1e-05} {weight->bn.weight}",
      "bwd_bn_1 = grad.batchnorm2d_dweight(bwd_out, x) {\"eps\":1e-05}",
      "bwd_bn_2 = grad.sum_to(bwd_out) {\"shape\":[\"1\",\"3\",\"1\",\"1\"]}",
      "bwd_bn_3 = reshape(bwd_bn_2) {\"shape\":[\"3\"]}",
  };
  EXPECT_EQ(backward_of(graph, {"bn"}), expected);
  // The running statistics are buffers: no gradient, no optimizer; one update after the
  // optimizer's writes them from x.
  EXPECT_EQ(trained_params(graph), (std::vector<std::string>{"bn.weight", "bn.bias"}));
  std::vector<std::string> updates;
  for (const Node& node : graph.nodes)
    if (node.role == NodeRole::kUpdate) updates.push_back(node.name + " " + node.op->name);
  EXPECT_EQ(updates,
            (std::vector<std::string>{"optim_step train.step", "adamw_bn_weight optim.adamw",
                                      "adamw_bn_bias optim.adamw", "batchnorm_stats_bn train.batchnorm_stats"}));
  const Node& stats = *graph.find_node("batchnorm_stats_bn");
  EXPECT_EQ(stats.inputs, std::vector<std::string>{"x"});
  EXPECT_EQ(stats.ctx.attrs.real("momentum"), 0.25);
  // It reads the step counter too: a halted step (a non-finite loss) changes nothing.
  EXPECT_EQ(stats.param_refs,
            (std::map<std::string, std::string>{
                {"running_mean", "bn.running_mean"}, {"running_var", "bn.running_var"}, {"step", "optim_step.count"}}));
}

TEST(BatchNormTraining, ABatchNormOffTheGradientsPathTrainsItsStatisticsToo) {
  // model.train() switches every module: bn's params are not trained here, its statistics are.
  const Graph graph =
      trained(loss_graph("  x: {dtype: f32, shape: [2, 3, 2, 2]}\n"
                         "nodes:\n"
                         "  - {name: bn, op: batchnorm2d, inputs: [x]}\n"
                         "  - {name: out, op: linear, inputs: [bn], attrs: {out_features: 2}}\n",
                         "[2, 3, 2, 2]", "  params: [out]\n  optimizer: {type: sgd, lr: 0.1}\n"));
  EXPECT_TRUE(graph.find_node("bn")->ctx.attrs.boolean("training"));
  EXPECT_TRUE(backward_of(graph, {"bn"}).empty());
  EXPECT_NE(graph.find_node("batchnorm_stats_bn"), nullptr);
}

TEST(BatchNormTraining, TheFusionPassLeavesATrainingBatchNormAlone) {
  // Off the gradient's path each intermediate has one reader: only the batch norm's training mode
  // keeps the pass from fusing.
  const std::string body =
      "  x: {dtype: f32, shape: [2, 3, 6, 6]}\n"
      "nodes:\n"
      "  - {name: c, op: conv2d, inputs: [x], attrs: {out_channels: 4, kernel_size: 3, bias: false}}\n"
      "  - {name: bn, op: batchnorm2d, inputs: [c]}\n"
      "  - {name: act, op: silu, inputs: [bn]}\n"
      "  - {name: out, op: linear, inputs: [act], attrs: {out_features: 2}}\n";
  const Graph graph = parse_graph(loss_graph(body, "[2, 4, 4, 2]", "  params: [out]\n"), "grads.yaml", registry());
  const Graph prepared = prepare_graph(graph, registry(), CompileOptions{});
  std::vector<std::string> forward;
  for (const Node& node : prepared.nodes)
    if (node.role == NodeRole::kForward) forward.push_back(node.op->name);
  EXPECT_EQ(forward, (std::vector<std::string>{"conv2d", "batchnorm2d", "silu", "linear", "mse_loss"}));
}

std::string train_error(const std::string& spec) {
  try {
    trained(spec);
  } catch (const Error& e) {
    return e.message();
  }
  return "(no error)";
}

TEST(BatchNormTraining, Errors) {
  EXPECT_EQ(train_error(
                loss_graph(kBatchNormBody, "[B, 3, 2, 2]", "  params: [bn.weight, bn.running_mean]\n", kBatchNormDims)),
            "train: params: 'bn.running_mean' is a buffer (running statistics), which no optimizer trains; its node's "
            "training mode updates it");
  EXPECT_EQ(train_error(loss_graph("  x: {dtype: f32, shape: [2, 3, 6, 6]}\n"
                                   "nodes:\n"
                                   "  - {name: out, op: conv2d_bn_silu, inputs: [x], attrs: {out_channels: 4, "
                                   "kernel_size: 3}}\n",
                                   "[2, 4, 4, 4]", "")),
            "node 'out': conv2d_bn_silu cannot train: its batch norm uses running statistics, and a training graph's "
            "batch norm uses the batch's (PyTorch's model.train()); write conv2d (bias: false), batchnorm2d and "
            "silu as three nodes");
  EXPECT_EQ(infer_error("batchnorm2d", {{"eps", 1e-5}, {"momentum", 0.1}, {"training", true}}, {nchw(1, 3, 1, 1)}),
            "batchnorm2d in training mode needs more than one value per channel (B * H * W), got x [1, 3, 1, 1]");
  EXPECT_EQ(infer_error("grad.batchnorm2d_dx", {{"eps", 1e-5}}, {nchw(2, 3, 2, 2), nchw(2, 3, 2, 1)}),
            "grad.batchnorm2d_dx needs dy and x of one shape [B, C, H, W], both contiguous; got [2, 3, 2, 2] and "
            "[2, 3, 2, 1]");
}

TEST(BatchNormTraining, ReferencesOnOneChannel) {
  // x = [1, 3, 5, 7] over B = 2 images of 1x2: mean 4, biased var 5, unbiased 20/3.
  const double eps = 1e-12;
  const HostTensor y = reference("batchnorm2d", {{"eps", eps}, {"momentum", 0.1}, {"training", true}},
                                 {{{2, 1, 1, 2}, {1, 3, 5, 7}}}, {{2}, {1}, {100}, {100}});
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y.data[i], (2 * i - 3) / std::sqrt(5.0) * 2 + 1, 1e-9) << i;
  // dy = [1, 0, 0, 0], weight 2: x̂ = [-3, -1, 1, 3] / sqrt(5), Σdy = 1, Σ dy x̂ = -3 / sqrt(5);
  // dx = 2 / sqrt(5) (dy - 1/4 - x̂ (-3 / sqrt(5)) / 4).
  const std::vector<op_testing::HostIn> inputs = {{{2, 1, 1, 2}, {1, 0, 0, 0}}, {{2, 1, 1, 2}, {1, 3, 5, 7}}};
  const HostTensor dx = reference("grad.batchnorm2d_dx", {{"eps", eps}}, inputs, {{2}});
  const double xhat[4] = {-3 / std::sqrt(5.0), -1 / std::sqrt(5.0), 1 / std::sqrt(5.0), 3 / std::sqrt(5.0)};
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(dx.data[i], 2 / std::sqrt(5.0) * ((i == 0) - 0.25 + xhat[i] * 3 / std::sqrt(5.0) / 4), 1e-9) << i;
  const HostTensor dw = reference("grad.batchnorm2d_dweight", {{"eps", eps}}, inputs);
  EXPECT_NEAR(dw.data.at(0), -3 / std::sqrt(5.0), 1e-9);

  // The running statistics with momentum 0.25 from [1, 2]: mean 0.75 + 1, var 1.5 + 0.25 * 20/3.
  const OpDef& stats = op_testing::op("train.batchnorm_stats");
  const OpContext ctx = op_testing::context("train.batchnorm_stats", {{"momentum", 0.25}}, {nchw(2, 1, 1, 2)});
  const HostTensor x{DType::kF32, {2, 1, 1, 2}, {1, 3, 5, 7}};
  const HostTensor mean{DType::kF32, {1}, {1}}, var{DType::kF32, {1}, {2}};
  const RefContext ref{ctx, {x}, {mean, var, HostTensor{DType::kI32, {1}, {1}}}, {1}};
  const std::map<std::string, HostTensor> updated = stats.update_reference(ref);
  EXPECT_NEAR(updated.at("running_mean").data.at(0), 1.75, 1e-12);
  EXPECT_NEAR(updated.at("running_var").data.at(0), 1.5 + 5.0 / 3, 1e-12);
  // A halted step counter (the step's loss was not finite): nothing changes.
  const RefContext halted{ctx, {x}, {mean, var, HostTensor{DType::kI32, {1}, {-3}}}, {1}};
  const std::map<std::string, HostTensor> kept = stats.update_reference(halted);
  EXPECT_EQ(kept.at("running_mean").data, mean.data);
  EXPECT_EQ(kept.at("running_var").data, var.data);
}

TEST(BatchNormGradientCheck, TrainingModeAloneAndBeforeAPool) {
  expect_gradients_match(loss_graph("  x: {dtype: f32, shape: [3, 2, 2, 3]}\n"
                                    "nodes:\n"
                                    "  - {name: s, op: scale, inputs: [x], attrs: {value: 3}}\n"
                                    "  - {name: out, op: batchnorm2d, inputs: [s], attrs: {eps: 0.1}}\n",
                                    "[3, 2, 2, 3]", "  inputs: [x]\n"),
                         registry(), {"out.bias", "out.weight", "x"});
  expect_gradients_match(loss_graph("  x: {dtype: f32, shape: [2, 3, 5, 5]}\n"
                                    "nodes:\n"
                                    "  - {name: bn, op: batchnorm2d, inputs: [x], attrs: {eps: 0.01}}\n"
                                    "  - {name: act, op: silu, inputs: [bn]}\n"
                                    "  - {name: out, op: avgpool2d, inputs: [act], attrs: {kernel_size: 3, stride: 2, "
                                    "padding: 1}}\n",
                                    "[2, 3, 3, 3]", "  inputs: [x]\n"),
                         registry(), {"bn.bias", "bn.weight", "x"});
}

}  // namespace
}  // namespace teeny
