// The losses' backward rules (cross_entropy, mse_loss) and the grad.* ops they add (ops.md,
// "Losses' gradients"): the ops' host references against hand-computed values, their lowerings and
// shape errors (exact text), the nodes the rules add and the errors they raise, and both rules'
// gradients against finite differences of the loss (tests/grad_check_util.h), compiled through
// NVRTC and run by the host reference executor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include <fmt/format.h>

#include "core/autodiff.h"
#include "core/binding.h"
#include "core/compile.h"
#include "core/run_data.h"
#include "tests/error_test_util.h"
#include "tests/grad_check_util.h"
#include "tests/grad_graph_util.h"
#include "tests/op_test_util.h"

namespace teeny {
namespace {

using op_testing::context;
using op_testing::infer_error;
using op_testing::op;
using op_testing::reference;
using op_testing::registry;
using op_testing::tensor;
using testing::backward_of;
using testing::expect_gradients_match;
using testing::trained;

const Expr B = Expr::dim("B");

// ---- references ----------------------------------------------------------------------------

// softmax([1, 2, 3]) = [e, e^2, e^3] / (e + e^2 + e^3).
const double kP0 = 0.09003057317038046, kP1 = 0.24472847105479764, kP2 = 0.6652409557748219;

// logits [[1, 2, 3], [0, 0, 0]] against `targets`.
HostTensor two_rows(const std::vector<double>& targets, int64_t ignore_index = -100) {
  return reference("grad.cross_entropy", {{"ignore_index", ignore_index}},
                   {{{2, 3}, {1, 2, 3, 0, 0, 0}}, {{2}, targets, DType::kI32}});
}

void expect_near_all(const std::vector<double>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-15) << i;
}

TEST(LossGradientReference, CrossEntropyIsSoftmaxLessOneHotOverTheCount) {
  // Row 1 ignored: the count is 1; row 0 is softmax less the one-hot of class 2, row 1 is 0.
  const HostTensor dx = two_rows({2, -100});
  EXPECT_EQ(dx.shape, (std::vector<int64_t>{2, 3}));
  expect_near_all(dx.data, {kP0, kP1, kP2 - 1, 0, 0, 0});
  // Both rows count: each halved; row 1's softmax is 1/3 everywhere.
  expect_near_all(two_rows({0, 1}).data, {(kP0 - 1) / 2, kP1 / 2, kP2 / 2, 1.0 / 6, -1.0 / 3, 1.0 / 6});
  // ignore_index 1 leaves row 0 (target 0) alone in the count.
  expect_near_all(two_rows({0, 1}, 1).data, {kP0 - 1, kP1, kP2, 0, 0, 0});
}

TEST(LossGradientReference, CrossEntropyTargetOutOfRangeGivesANanRow) {
  // Target 3 of 3 classes: row 0 is NaN (the loss is), and it still counts, as the loss's does.
  const HostTensor dx = two_rows({3, 1});
  for (int c = 0; c < 3; ++c) EXPECT_TRUE(std::isnan(dx.data[c])) << c;
  expect_near_all({dx.data.begin() + 3, dx.data.end()}, {1.0 / 6, -1.0 / 3, 1.0 / 6});
  // Every target ignored: the loss is NaN, the gradient 0.
  expect_near_all(two_rows({-100, -100}).data, std::vector<double>(6, 0.0));
}

TEST(LossGradientReference, CrossEntropyIsStableAndTakesAnyLeadingShape) {
  // Logits [1000, 1000]: softmax [1/2, 1/2] with no overflow.
  expect_near_all(
      reference("grad.cross_entropy", {{"ignore_index", -100}}, {{{1, 2}, {1000, 1000}}, {{1}, {1}, DType::kI32}}).data,
      {0.5, -0.5});
  // [1, 2, 2] logits [[0, 0], [0, 0]], targets [[1, 0]]: two rows of [1/2, 1/2] less a one-hot, halved.
  expect_near_all(reference("grad.cross_entropy", {{"ignore_index", -100}},
                            {{{1, 2, 2}, {0, 0, 0, 0}}, {{1, 2}, {1, 0}, DType::kI32}})
                      .data,
                  {0.25, -0.25, -0.25, 0.25});
}

TEST(LossGradientReference, MseLossIsTwiceTheDifferenceOverTheCount) {
  const HostTensor dx = reference("grad.mse_loss", {}, {{{3}, {1, 2, 3}}, {{3}, {1, 0, 0}}});
  EXPECT_EQ(dx.shape, std::vector<int64_t>{3});
  expect_near_all(dx.data, {0, 4.0 / 3, 2});
  expect_near_all(reference("grad.mse_loss", {}, {{{2, 2}, {0.5, 0, 0, 0}}, {{2, 2}, {0, 0, 0, -0.5}}}).data,
                  {0.25, 0, 0, 0.25});
}

// ---- lowerings -----------------------------------------------------------------------------

TEST(LossGradientLowering, CrossEntropyCountsInOneBlockThenWritesEachRow) {
  const Lowering lowering = op("grad.cross_entropy")
                                .lower(context("grad.cross_entropy", {{"ignore_index", 7}},
                                               {tensor(DType::kBF16, {B, 50257}), tensor(DType::kI32, {B})}));
  ASSERT_EQ(lowering.scratch.size(), 1u);
  EXPECT_EQ(lowering.scratch[0].name, "inv_count");
  EXPECT_EQ(lowering.scratch[0].dtype, DType::kF32);
  EXPECT_EQ(lowering.scratch[0].elements, Expr(1));
  ASSERT_EQ(lowering.launches.size(), 2u);
  const Launch& count = lowering.launches[0];
  EXPECT_EQ(lowering.kernels.at(count.kernel).function, "tn_cross_entropy_count<1024>");
  EXPECT_EQ(count.block, (std::array<int, 3>{1024, 1, 1}));
  EXPECT_EQ(count.grid[0], Expr(1));
  EXPECT_EQ(count.args.at(1).kind, ArgKind::kScratch);
  EXPECT_EQ(count.args.back().value, Expr(7));
  // The forward's plan for a vocabulary: a block of 512 a row.
  const Launch& rows = lowering.launches[1];
  EXPECT_EQ(lowering.kernels.at(rows.kernel).name, "grad_cross_entropy_bf16_t512_i4");
  EXPECT_EQ(rows.block, (std::array<int, 3>{512, 1, 1}));
  EXPECT_EQ(rows.grid[0].str(), "B");
  EXPECT_EQ(rows.args.at(2).slot, "inv_count");
  EXPECT_EQ(rows.args.at(3).kind, ArgKind::kOutput);
  // Up to 1024 classes: a warp a row, four rows a block.
  const Lowering small = op("grad.cross_entropy")
                             .lower(context("grad.cross_entropy", {{"ignore_index", -100}},
                                            {tensor(DType::kF32, {B, 1000}), tensor(DType::kI32, {B})}));
  EXPECT_EQ(small.kernels.at(small.launches[1].kernel).name, "grad_cross_entropy_f32_t32_i4");
  EXPECT_EQ(small.launches[1].grid[0].str(), "ceil_div(B, 4)");
}

TEST(LossGradientLowering, MseLossTakesTheElementCountAtRunTime) {
  const TensorType padded{DType::kF32, {B, Expr(17)}, Expr(20)};
  const Lowering lowering =
      op("grad.mse_loss").lower(context("grad.mse_loss", {}, {padded, tensor(DType::kF32, {B, 17})}));
  ASSERT_EQ(lowering.launches.size(), 1u);
  const Launch& launch = lowering.launches[0];
  EXPECT_EQ(lowering.kernels.at(launch.kernel).function, "tn_grad_mse<float, 256>");
  std::vector<std::string> args;
  for (const KernelArg& arg : launch.args)
    args.push_back(arg.kind == ArgKind::kI32 || arg.kind == ArgKind::kI64 ? arg.name + " = " + arg.value.str()
                                                                          : arg.name);
  EXPECT_EQ(args, (std::vector<std::string>{"p", "t", "dx", "rows = B", "cols = 17", "p_stride = 20", "t_stride = 17",
                                            "n = B*17"}));
}

// ---- shape errors (exact text) ---------------------------------------------------------------

TEST(LossGradientShape, ErrorsNameWhatDoesNotFit) {
  std::string key;
  EXPECT_EQ(infer_error("grad.mse_loss", {}, {tensor(DType::kF32, {B, 3}), tensor(DType::kF32, {B, 4})}, &key),
            "grad.mse_loss: prediction has shape [B, 3] but target has [B, 4]; they must match");
  EXPECT_EQ(key, "inputs");
  EXPECT_EQ(infer_error("grad.mse_loss", {}, {tensor(DType::kF32, {B, 3}), tensor(DType::kBF16, {B, 3})}),
            "input 1 is bf16 but input 0 is f32; grad.mse_loss needs one dtype");
  EXPECT_EQ(infer_error("grad.mse_loss", {}, {tensor(DType::kI32, {B}), tensor(DType::kI32, {B})}),
            "grad.mse_loss does not support i32 inputs (supported: f32, bf16, f16)");
  const nlohmann::json attrs = {{"ignore_index", -100}};
  EXPECT_EQ(infer_error("grad.cross_entropy", attrs, {tensor(DType::kI32, {B, 10}), tensor(DType::kI32, {B})}, &key),
            "grad.cross_entropy needs f32, bf16 or f16 logits, got i32");
  EXPECT_EQ(key, "inputs");
  EXPECT_EQ(infer_error("grad.cross_entropy", attrs, {tensor(DType::kF32, {}), tensor(DType::kI32, {})}),
            "grad.cross_entropy needs logits of rank >= 1 ([..., classes])");
  EXPECT_EQ(infer_error("grad.cross_entropy", attrs, {tensor(DType::kF32, {B, 10}), tensor(DType::kF32, {B})}),
            "grad.cross_entropy targets must be i32 class indices, got f32");
  EXPECT_EQ(infer_error("grad.cross_entropy", attrs,
                        {tensor(DType::kF32, {B, Expr::dim("S"), 10}), tensor(DType::kI32, {B, 10})}),
            "targets have shape [B, 10] but logits [B, S, 10] need [B, S] (the logits' shape without the class dim)");
}

TEST(LossGradientShape, TheOutputIsTheLogitsOrPredictionsTypeAndNoOther) {
  const OpContext ctx =
      context("grad.cross_entropy", {{"ignore_index", -100}},
              {tensor(DType::kBF16, {B, Expr::dim("S"), 50257}), tensor(DType::kI32, {B, Expr::dim("S")})});
  EXPECT_EQ(ctx.output.dtype, DType::kBF16);
  EXPECT_EQ(ctx.output.shape, (Shape{B, Expr::dim("S"), Expr(50257)}));
  OpContext f32;
  f32.node = "n";
  f32.inputs = {tensor(DType::kF16, {B, 3}), tensor(DType::kF16, {B, 3})};
  f32.requested_dtype = DType::kF32;
  try {
    op("grad.mse_loss").infer(f32);
    FAIL() << "no error";
  } catch (const OpError& e) {
    EXPECT_EQ(e.key, "dtype");
    EXPECT_EQ(e.message(),
              "op 'grad.mse_loss' produces its inputs' dtype, f16; it cannot produce f32 (there are no implicit "
              "conversions)");
  }
}

// ---- the nodes the rules add, and their errors -------------------------------------------------

// x -> fc (linear) -> logits [B, T, 5] -> cross_entropy against targets [B, T]; `train` its
// train: lines after `loss:`.
std::string cross_entropy_graph(const std::string& train, int64_t ignore_index = 0) {
  return fmt::format(
      "name: ce\n"
      "dims:\n"
      "  B: {{min: 1, max: 8, default: 2}}\n"
      "inputs:\n"
      "  x: {{dtype: f32, shape: [B, 3, 4]}}\n"
      "  targets: {{dtype: i32, shape: [B, 3]}}\n"
      "nodes:\n"
      "  - {{name: fc, op: linear, inputs: [x], attrs: {{out_features: 5}}}}\n"
      "  - {{name: loss, op: cross_entropy, inputs: [fc, targets], attrs: {{ignore_index: {}}}}}\n"
      "outputs: [loss]\n"
      "train:\n"
      "  loss: loss\n"
      "{}",
      ignore_index, train);
}

TEST(LossGradientRules, CrossEntropyGivesTheLogitsGrad) {
  const Graph graph = trained(cross_entropy_graph("  inputs: [x]\n", 3));
  EXPECT_EQ(backward_of(graph, {"loss"}),
            std::vector<std::string>{"bwd_loss = grad.cross_entropy(fc, targets) {\"ignore_index\":3}"});
  const Node& dlogits = *graph.find_node("bwd_loss");
  EXPECT_EQ(dlogits.ctx.output.shape, (Shape{B, Expr(3), Expr(5)}));
  EXPECT_EQ(graph.find_node("bwd_fc")->inputs.at(0), "bwd_loss");
}

TEST(LossGradientRules, MseLossNegatesThePredictionsGradForTheTarget) {
  const Graph graph =
      trained(testing::loss_graph("  x: {dtype: f32, shape: [B, 4]}\n"
                                  "nodes:\n"
                                  "  - {name: out, op: tanh, inputs: [x]}\n",
                                  "[B, 4]", "  inputs: [x, target]\n", "dims:\n  B: {min: 1, max: 8, default: 2}\n"));
  const std::vector<std::string> expected{
      "bwd_loss = grad.mse_loss(out, target)",
      "bwd_loss_1 = scale(bwd_loss) {\"value\":-1.0}",
  };
  EXPECT_EQ(backward_of(graph, {"loss"}), expected);
  EXPECT_EQ(graph.gradients.at("target"), "bwd_loss_1");
  // Without the target's gradient: grad.mse_loss alone.
  const Graph prediction_only =
      trained(testing::loss_graph("  x: {dtype: f32, shape: [2, 4]}\n"
                                  "nodes:\n"
                                  "  - {name: out, op: tanh, inputs: [x]}\n",
                                  "[2, 4]", "  inputs: [x]\n"));
  EXPECT_EQ(backward_of(prediction_only, {"loss"}), std::vector<std::string>{"bwd_loss = grad.mse_loss(out, target)"});
}

TEST(LossGradientRules, ALossIsDifferentiatedOnlyAsTheRoot) {
  // inner feeds the loss: its rule would need the gradient of its output.
  const std::string nested =
      "name: nested\n"
      "inputs:\n"
      "  x: {dtype: f32, shape: [2, 3]}\n"
      "  t: {dtype: f32, shape: [2, 3]}\n"
      "  zero: {dtype: f32, shape: []}\n"
      "nodes:\n"
      "  - {name: inner, op: mse_loss, inputs: [x, t]}\n"
      "  - {name: loss, op: mse_loss, inputs: [inner, zero]}\n"
      "outputs: [loss]\n"
      "train:\n"
      "  loss: loss\n"
      "  inputs: [x]\n";
  EXPECT_EQ(testing::message([&] { trained(nested); }),
            "node 'inner': mse_loss is differentiated only as the train: loss, but the loss depends on it through "
            "other nodes");
}

// ---- gradients against finite differences ----------------------------------------------------

// The random targets a grad check of `spec` draws (its seed, its bindings).
std::vector<double> drawn_targets(const std::string& spec, const testing::GradCheckOptions& options) {
  CompileOptions compile;
  compile.cache_dir = testing::grad_check_detail::cache_dir();
  const Bundle bundle = compile_graph(parse_graph(spec, "grad_check.yaml", registry()), registry(), compile);
  const BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, options.binds), "grad_check.teeny");
  DataOptions data;
  data.seed = options.seed;
  data.fill = ParamFill::kRandom;
  return prepare_data(bound, data).inputs.at("targets").data;
}

TEST(LossGradientCheck, CrossEntropyOverTokensWithIgnoredRows) {
  testing::GradCheckOptions options;
  options.binds = {"B=2"};
  // Class 0 ignored among 5: the draw must hold ignored rows and counted ones, or the check proves
  // less than it says.
  const std::string spec = cross_entropy_graph("  inputs: [x]\n");
  const std::vector<double> targets = drawn_targets(spec, options);
  const auto ignored = std::count(targets.begin(), targets.end(), 0.0);
  EXPECT_GT(ignored, 0);
  EXPECT_LT(ignored, static_cast<std::ptrdiff_t>(targets.size()));
  expect_gradients_match(spec, registry(), {"fc.bias", "fc.weight", "x"}, options);
}

TEST(LossGradientCheck, CrossEntropyOfLogitsDirectly) {
  const std::string spec =
      "name: ce\n"
      "inputs:\n"
      "  logits: {dtype: f32, shape: [2, 3, 7]}\n"
      "  targets: {dtype: i32, shape: [2, 3]}\n"
      "nodes:\n"
      "  - {name: s, op: scale, inputs: [logits], attrs: {value: 3}}\n"
      "  - {name: loss, op: cross_entropy, inputs: [s, targets]}\n"
      "outputs: [loss]\n"
      "train:\n"
      "  loss: loss\n"
      "  inputs: [logits]\n";
  expect_gradients_match(spec, registry(), {"logits"});
}

TEST(LossGradientCheck, MseLossOverASymbolicBatch) {
  testing::GradCheckOptions options;
  options.binds = {"B=3"};
  expect_gradients_match(
      testing::loss_graph("  x: {dtype: f32, shape: [B, 4]}\n"
                          "nodes:\n"
                          "  - {name: out, op: linear, inputs: [x], attrs: {out_features: 3}}\n",
                          "[B, 3]", "  inputs: [x, target]\n", "dims:\n  B: {min: 1, max: 64, default: 2}\n"),
      registry(), {"out.bias", "out.weight", "target", "x"}, options);
}

}  // namespace
}  // namespace teeny
