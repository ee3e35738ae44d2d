// The pools' and upsample_nearest2d's backward rules and the grad.* ops they add (ops.md,
// "Gradients"): the exact backward nodes, the ops' host references against hand-computed values,
// their shape errors (exact text), and the gradients against finite differences of the loss
// (tests/grad_check_util.h), compiled through NVRTC and run by the host reference executor.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/autodiff.h"
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

}  // namespace
}  // namespace teeny
