// rope (ops.md, "rope"): the host reference against values worked out by hand, the shape rule and
// its errors (exact text), the backward rule (rope with the inverse rotation) and its gradients
// against finite differences of the loss, compiled through NVRTC and run by the host reference
// executor.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/autodiff.h"
#include "tests/grad_check_util.h"
#include "tests/grad_graph_util.h"
#include "tests/op_test_util.h"

namespace teeny {
namespace {

using op_testing::context;
using op_testing::graph_error;
using op_testing::HostIn;
using op_testing::infer_error;
using op_testing::reference;
using op_testing::registry;
using op_testing::tensor;
using testing::backward_of;
using testing::expect_gradients_match;
using testing::loss_graph;
using testing::trained;

// cos and sin of 1 and 0.1 (tables), the angles of pairs 0 and 1 at position 1 for D = 4, theta
// = 100: theta^(-2i/D) is 1 for i = 0 and 100^(-1/2) = 0.1 for i = 1.
constexpr double kCos1 = 0.5403023058681398, kSin1 = 0.8414709848078965;
constexpr double kCos01 = 0.9950041652780258, kSin01 = 0.09983341664682815;

// The attrs as a validated node holds them (op_testing::reference fills in no defaults).
nlohmann::json attrs(double theta, int64_t offset = 0, bool inverse = false) {
  return {{"theta", theta}, {"offset", offset}, {"inverse", inverse}};
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST(RopeReference, TurnsThePairsIAndIPlusHalfByPositionTimesFrequency) {
  // x [1, 2, 4]: position 0 is left as it is; at position 1 pair (x0, x2) turns by 1 rad and
  // pair (x1, x3) by 0.1 rad, as rotate_half does: y0 = x0 c - x2 s, y2 = x2 c + x0 s.
  const HostTensor y = reference("rope", attrs(100), {{{1, 2, 4}, {5, 6, 7, 8, 1, 2, 3, 4}}});
  EXPECT_EQ(y.shape, (std::vector<int64_t>{1, 2, 4}));
  expect_near(y.data, {5, 6, 7, 8, 1 * kCos1 - 3 * kSin1, 2 * kCos01 - 4 * kSin01, 3 * kCos1 + 1 * kSin1,
                       4 * kCos01 + 2 * kSin01});
}

TEST(RopeReference, DefaultThetaIsTenThousand) {
  const Graph graph = parse_graph(
      "name: g\ninputs:\n  x: {dtype: f32, shape: [2, 3, 4]}\nnodes:\n  - {name: r, op: rope, inputs: [x]}\n"
      "outputs: [r]\n",
      "g.yaml", registry());
  EXPECT_EQ(graph.find_node("r")->ctx.attrs.json(), attrs(10000));
  // D = 4's second pair turns by 10000^(-1/2) = 0.01 rad at position 1: (0, 1) -> (-sin 0.01,
  // cos 0.01).
  const HostTensor y = reference("rope", attrs(10000), {{{1, 2, 4}, {0, 0, 0, 0, 0, 0, 0, 1}}});
  expect_near(y.data, {0, 0, 0, 0, 0, -0.009999833334166665, 0, 0.9999500004166653});
}

TEST(RopeReference, EveryRowTurnsAlikeAndOffsetShiftsThePositions) {
  // Two rows (two heads) of one position: with offset 1 that is position 1, the same angles for
  // both rows; x = e0 and x = e2 in them give pair 0's cos/sin columns.
  const HostTensor y = reference("rope", attrs(100, 1), {{{2, 1, 4}, {1, 0, 0, 0, 0, 0, 1, 0}}});
  expect_near(y.data, {kCos1, 0, kSin1, 0, -kSin1, 0, kCos1, 0});
}

TEST(RopeReference, InverseTurnsBack) {
  const std::vector<double> x = {0.5, -1, 2, 0.25, -3, 1.5, 0.75, -2, 1, 4, -0.5, 3};
  const HostTensor turned = reference("rope", attrs(10000, 5), {{{1, 3, 4}, x}});
  expect_near(reference("rope", attrs(10000, 5, true), {{{1, 3, 4}, turned.data}}).data, x);
  // The inverse at position 1 by hand: y0 = x0 c + x2 s.
  const HostTensor y = reference("rope", attrs(100, 1, true), {{{1, 1, 4}, {1, 2, 3, 4}}});
  expect_near(y.data, {1 * kCos1 + 3 * kSin1, 2 * kCos01 + 4 * kSin01, 3 * kCos1 - 1 * kSin1, 4 * kCos01 - 2 * kSin01});
}

TEST(RopeShape, KeepsTheShapeAndWritesContiguousRows) {
  const Expr n = Expr::dim("B") * Expr(16), s = Expr::dim("S");
  TensorType padded = tensor(DType::kBF16, {n, s, Expr(18)});
  padded.row_stride = Expr(24);
  const OpContext ctx = context("rope", nlohmann::json::object(), {padded});
  EXPECT_EQ(ctx.output.shape, (Shape{n, s, Expr(18)}));
  EXPECT_EQ(ctx.output.row_stride, Expr(18));
  EXPECT_EQ(ctx.output.dtype, DType::kBF16);
}

TEST(RopeShape, Errors) {
  const Expr b = Expr::dim("B"), s = Expr::dim("S");
  std::string key;
  EXPECT_EQ(infer_error("rope", nlohmann::json::object(), {tensor(DType::kF32, {b, Expr(64)})}, &key),
            "rope needs x of shape [N, S, D]; got [B, 64]");
  EXPECT_EQ(key, "inputs");
  EXPECT_EQ(infer_error("rope", nlohmann::json::object(), {tensor(DType::kF32, {b, s, Expr::dim("D")})}),
            "rope needs a constant head dim D (x's last dim); got D");
  EXPECT_EQ(infer_error("rope", nlohmann::json::object(), {tensor(DType::kF32, {b, s, Expr(63)})}),
            "rope needs an even head dim D (x's last dim), to rotate the pairs (i, i + D/2); got 63");
  const std::string spec =
      "name: g\ninputs:\n  x: {dtype: f32, shape: [2, 3, 4]}\nnodes:\n  - {name: r, op: rope, inputs: [x], attrs: "
      "{theta: 0}}\noutputs: [r]\n";
  EXPECT_EQ(graph_error(spec, "g.yaml"), "node 'r': attr 'theta' must be greater than 0, got 0");
}

// ---- backward -----------------------------------------------------------------------------------

TEST(RopeGradientRules, TheGradientIsRopeTurningBackWithTheSameAttrs) {
  const Graph graph =
      trained(loss_graph("  x: {dtype: f32, shape: [2, 3, 4]}\n"
                         "nodes:\n"
                         "  - {name: out, op: rope, inputs: [x], attrs: {theta: 100, offset: 7}}\n",
                         "[2, 3, 4]", "  inputs: [x]\n"));
  EXPECT_EQ(backward_of(graph, {"out"}),
            std::vector<std::string>{"bwd_out = rope(bwd_loss) {\"inverse\":true,\"offset\":7,\"theta\":100.0}"});
}

TEST(RopeGradientCheck, ThroughALinearWithPaddedRows) {
  // The linear's 6 outputs are rows of 8 f32 (padded to 16 bytes) that rope reads in place.
  for (const char* attrs : {"{}", "{theta: 100, offset: 3}", "{theta: 7, inverse: true}"}) {
    SCOPED_TRACE(attrs);
    expect_gradients_match(loss_graph(fmt::format("  x: {{dtype: f32, shape: [2, 3, 5]}}\n"
                                                  "nodes:\n"
                                                  "  - {{name: p, op: linear, inputs: [x], attrs: {{out_features: "
                                                  "6}}}}\n"
                                                  "  - {{name: out, op: rope, inputs: [p], attrs: {}}}\n",
                                                  attrs),
                                      "[2, 3, 6]", "  inputs: [x]\n"),
                           registry(), {"p.bias", "p.weight", "x"});
  }
}

}  // namespace
}  // namespace teeny
