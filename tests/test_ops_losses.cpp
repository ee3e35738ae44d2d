// The losses (cross_entropy, mse_loss): host references against hand-computed values, shape
// rules and their errors (exact text), lowerings (row plans, the scratch buffer of partials, the
// second launch), and a compiled graph: its buffers, its targets' id bound, its host run.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "core/binding.h"
#include "core/compile.h"
#include "core/host_executor.h"
#include "core/run_data.h"
#include "tests/file_test_util.h"
#include "tests/op_test_util.h"

namespace teeny {
namespace {

using namespace op_testing;

const Expr B = Expr::dim("B");

// ---- references ----------------------------------------------------------------------------

// logits [[1, 2, 3], [1, 1, 1]]: row 0's loss at target 2 is log(e + e^2 + e^3) - 3, row 1's at
// any target log 3.
const nlohmann::json kDefaults = {{"ignore_index", -100}};

HostTensor two_rows(const std::vector<double>& targets, nlohmann::json attrs = kDefaults) {
  return reference("cross_entropy", std::move(attrs), {{{2, 3}, {1, 2, 3, 1, 1, 1}}, {{2}, targets, DType::kI32}});
}

TEST(LossReference, CrossEntropyIsTheMeanOverRows) {
  const HostTensor loss = two_rows({2, 0});
  EXPECT_EQ(loss.dtype, DType::kF32);
  EXPECT_TRUE(loss.shape.empty());
  ASSERT_EQ(loss.data.size(), 1u);
  EXPECT_NEAR(loss.data[0], (0.40760596444438013 + 1.0986122886681098) / 2, 1e-12);
}

TEST(LossReference, CrossEntropyLeavesIgnoredTargetsOutOfTheMean) {
  EXPECT_NEAR(two_rows({2, -100}).data[0], 0.40760596444438013, 1e-12);
  EXPECT_NEAR(two_rows({0, 2}, {{"ignore_index", 0}}).data[0], 1.0986122886681098, 1e-12);
  EXPECT_TRUE(std::isnan(two_rows({-100, -100}).data[0]));  // 0 / 0, as PyTorch
}

TEST(LossReference, CrossEntropyTargetOutOfRangeIsNan) {
  EXPECT_TRUE(std::isnan(two_rows({3, 0}).data[0]));
  EXPECT_TRUE(std::isnan(two_rows({0, -1}).data[0]));
  EXPECT_NEAR(two_rows({3, 0}, {{"ignore_index", 3}}).data[0], 1.0986122886681098, 1e-12);
}

TEST(LossReference, CrossEntropyIsStableForLargeLogitsAndTakesAnyLeadingShape) {
  EXPECT_NEAR(reference("cross_entropy", kDefaults, {{{1, 2}, {1000, 1000}}, {{1}, {0}, DType::kI32}}).data[0],
              0.6931471805599453, 1e-12);
  // [1, 2, 2] logits [[0, 1], [2, 0]], targets [[1, 0]]: (log(1 + e) - 1 + log(e^2 + 1) - 2) / 2.
  EXPECT_NEAR(reference("cross_entropy", kDefaults, {{{1, 2, 2}, {0, 1, 2, 0}}, {{1, 2}, {1, 0}, DType::kI32}}).data[0],
              0.22009484928059753, 1e-12);
}

TEST(LossReference, MseLossIsTheMeanSquareOfTheDifference) {
  const HostTensor loss = reference("mse_loss", {}, {{{3}, {1, 2, 3}}, {{3}, {1, 0, 0}}});
  EXPECT_TRUE(loss.shape.empty());
  EXPECT_NEAR(loss.data[0], 13.0 / 3, 1e-12);
  EXPECT_NEAR(reference("mse_loss", {}, {{{2, 2}, {0.5, 0, 0, 0}}, {{2, 2}, {0, 0, 0, -0.5}}}).data[0], 0.125, 1e-12);
}

// ---- shape rules ---------------------------------------------------------------------------

TEST(LossShape, BothAreLossesWithAnF32ScalarOutput) {
  EXPECT_TRUE(op("cross_entropy").loss);
  EXPECT_TRUE(op("mse_loss").loss);
  const OpContext ce =
      context("cross_entropy", {{"ignore_index", -100}},
              {tensor(DType::kBF16, {B, Expr::dim("S"), 50257}), tensor(DType::kI32, {B, Expr::dim("S")})});
  EXPECT_EQ(ce.output.dtype, DType::kF32);
  EXPECT_TRUE(ce.output.shape.empty());
  EXPECT_EQ(ce.output.row_stride, Expr(1));
  const OpContext mse = context("mse_loss", {}, {tensor(DType::kF16, {B, 3}), tensor(DType::kF16, {B, 3})});
  EXPECT_EQ(mse.output.dtype, DType::kF32);
  EXPECT_TRUE(mse.output.shape.empty());
}

TEST(LossShape, CrossEntropyErrors) {
  std::string key;
  EXPECT_EQ(infer_error("cross_entropy", {{"ignore_index", -100}},
                        {tensor(DType::kI32, {B, 10}), tensor(DType::kI32, {B})}, &key),
            "cross_entropy needs f32, bf16 or f16 logits, got i32");
  EXPECT_EQ(key, "inputs");
  EXPECT_EQ(infer_error("cross_entropy", {{"ignore_index", -100}}, {tensor(DType::kF32, {}), tensor(DType::kI32, {})}),
            "cross_entropy needs logits of rank >= 1 ([..., classes])");
  EXPECT_EQ(
      infer_error("cross_entropy", {{"ignore_index", -100}}, {tensor(DType::kF32, {B, 10}), tensor(DType::kF32, {B})}),
      "cross_entropy targets must be i32 class indices, got f32");
  EXPECT_EQ(infer_error("cross_entropy", {{"ignore_index", -100}},
                        {tensor(DType::kF32, {B, Expr::dim("S"), 10}), tensor(DType::kI32, {B, 10})}),
            "targets have shape [B, 10] but logits [B, S, 10] need [B, S] (the logits' shape without the class dim)");
}

TEST(LossShape, MseLossErrors) {
  EXPECT_EQ(infer_error("mse_loss", {}, {tensor(DType::kF32, {B, 3}), tensor(DType::kF32, {B, 4})}),
            "prediction has shape [B, 3] but target has [B, 4]; mse_loss needs one shape");
  EXPECT_EQ(infer_error("mse_loss", {}, {tensor(DType::kF32, {B, 3}), tensor(DType::kBF16, {B, 3})}),
            "input 1 is bf16 but input 0 is f32; mse_loss needs one dtype");
  EXPECT_EQ(infer_error("mse_loss", {}, {tensor(DType::kI32, {B}), tensor(DType::kI32, {B})}),
            "mse_loss does not support i32 inputs (supported: f32, bf16, f16)");
}

TEST(LossShape, TheNodesDtypeMayOnlySayF32) {
  OpContext ctx;
  ctx.node = "n";
  ctx.inputs = {tensor(DType::kBF16, {B, 3}), tensor(DType::kBF16, {B, 3})};
  ctx.requested_dtype = DType::kF32;
  EXPECT_EQ(op("mse_loss").infer(ctx).dtype, DType::kF32);
  ctx.requested_dtype = DType::kBF16;
  try {
    op("mse_loss").infer(ctx);
    FAIL() << "no error";
  } catch (const OpError& e) {
    EXPECT_EQ(e.key, "dtype");
    EXPECT_EQ(e.message(), "op 'mse_loss' produces an f32 loss whatever its inputs' dtype; it cannot produce bf16");
  }
}

TEST(LossShape, IgnoreIndexMustFitAKernelsInt) {
  const std::string spec =
      "name: g\n"
      "inputs:\n"
      "  logits: {dtype: f32, shape: [4, 10]}\n"
      "  targets: {dtype: i32, shape: [4]}\n"
      "nodes:\n"
      "  - {name: loss, op: cross_entropy, inputs: [logits, targets], attrs: {ignore_index: 4294967296}}\n"
      "outputs: [loss]\n";
  EXPECT_EQ(graph_error(spec, "g.yaml"), "node 'loss': attr 'ignore_index' must be at most 2147483647, got 4294967296");
}

// ---- lowerings -----------------------------------------------------------------------------

struct Plan {
  std::string kernel;
  std::array<int, 3> block;
  std::string grid;
};

Plan first_launch(const Lowering& lowering) {
  const Launch& l = lowering.launches.at(0);
  return {lowering.kernels.at(l.kernel).name, l.block, l.grid[0].str()};
}

Lowering lower_cross_entropy(DType dtype, Expr classes) {
  return op("cross_entropy")
      .lower(
          context("cross_entropy", {{"ignore_index", -100}}, {tensor(dtype, {B, classes}), tensor(DType::kI32, {B})}));
}

TEST(LossLowering, CrossEntropyRowPlans) {
  // Up to 1024 classes: a warp a row, 4 rows a block; 2^18 threads at most, 2048 blocks.
  Plan p = first_launch(lower_cross_entropy(DType::kF32, Expr(1000)));
  EXPECT_EQ(p.kernel, "cross_entropy_f32_t32_i4");
  EXPECT_EQ(p.block, (std::array<int, 3>{128, 1, 1}));
  EXPECT_EQ(p.grid, "min(ceil_div(B, 4), 2048)");
  EXPECT_EQ(first_launch(lower_cross_entropy(DType::kF32, Expr(7))).kernel, "cross_entropy_f32_t32_i1");
  // A vocabulary: a block of 512 a row, 4 packs in flight a thread; 512 blocks at most.
  p = first_launch(lower_cross_entropy(DType::kBF16, Expr(32000)));
  EXPECT_EQ(p.kernel, "cross_entropy_bf16_t512_i4");
  EXPECT_EQ(p.block, (std::array<int, 3>{512, 1, 1}));
  EXPECT_EQ(p.grid, "min(B, 512)");
  EXPECT_EQ(first_launch(lower_cross_entropy(DType::kBF16, Expr(128000))).kernel, "cross_entropy_bf16_t512_i4");
  EXPECT_EQ(first_launch(lower_cross_entropy(DType::kF32, Expr(32000))).kernel, "cross_entropy_f32_t512_i4");
  EXPECT_EQ(first_launch(lower_cross_entropy(DType::kF16, Expr::dim("C"))).kernel, "cross_entropy_f16_t256_i4");
}

TEST(LossLowering, PartialsGoThroughAScratchBufferToOneAveragingBlock) {
  const Lowering lowering = lower_cross_entropy(DType::kBF16, Expr(32000));
  ASSERT_EQ(lowering.scratch.size(), 1u);
  EXPECT_EQ(lowering.scratch[0].name, "partials");
  EXPECT_EQ(lowering.scratch[0].dtype, DType::kF32);
  EXPECT_EQ(lowering.scratch[0].elements.str(), "min(B, 512)*2");  // (sum, count) a block
  ASSERT_EQ(lowering.launches.size(), 2u);
  const Launch& first = lowering.launches[0];
  EXPECT_EQ(first.args.at(2).kind, ArgKind::kScratch);
  EXPECT_EQ(first.args.at(2).slot, "partials");
  EXPECT_EQ(first.args.back().name, "ignore_index");
  EXPECT_EQ(first.args.back().value, Expr(-100));
  const Launch& mean = lowering.launches[1];
  EXPECT_EQ(lowering.kernels.at(mean.kernel).name, "cross_entropy_mean");
  EXPECT_EQ(lowering.kernels.at(mean.kernel).function, "tn_loss_mean<256, true>");
  EXPECT_EQ(mean.block, (std::array<int, 3>{256, 1, 1}));
  EXPECT_EQ(mean.grid[0], Expr(1));
  EXPECT_EQ(mean.args.at(0).kind, ArgKind::kScratch);
  EXPECT_EQ(mean.args.at(1).kind, ArgKind::kOutput);
  EXPECT_EQ(mean.args.at(2).value.str(), "min(B, 512)");
  // Cost: B rows of 32000 bf16 logits and an i32 target, the partials written and read back.
  EXPECT_EQ(first.bytes.eval({{"B", 10}}), 10 * 32000 * 2 + 10 * 4 + 10 * 8);
  EXPECT_EQ(mean.bytes.eval({{"B", 10}}), 10 * 8 + 4);
}

TEST(LossLowering, MseLossSumsAGridOfAtMost1024Blocks) {
  const Lowering lowering =
      op("mse_loss").lower(context("mse_loss", {}, {tensor(DType::kBF16, {B, 4096}), tensor(DType::kBF16, {B, 4096})}));
  ASSERT_EQ(lowering.launches.size(), 2u);
  const Launch& first = lowering.launches[0];
  EXPECT_EQ(lowering.kernels.at(first.kernel).function, "tn_mse_partials<__nv_bfloat16, 256, 4>");
  // 256 threads x 4 packs x 8 bf16 = 8192 elements a block and iteration.
  EXPECT_EQ(first.grid[0].eval({{"B", 2}}), 1);
  EXPECT_EQ(first.grid[0].eval({{"B", 3}}), 2);
  EXPECT_EQ(first.grid[0].eval({{"B", 100000}}), 1024);
  EXPECT_EQ(lowering.scratch.at(0).elements.eval({{"B", 100000}}), 1024);  // one sum a block
  EXPECT_EQ(lowering.kernels.at(lowering.launches[1].kernel).function, "tn_loss_mean<256, false>");
  EXPECT_EQ(lowering.launches[1].args.at(3).value.eval({{"B", 3}}), 3 * 4096);  // the mean is over every element
}

// ---- a compiled graph ------------------------------------------------------------------------

const std::string kLossGraph =
    "name: losses\n"
    "dims:\n"
    "  B: {min: 1, max: 4096, default: 3}\n"
    "  C: {min: 1, max: 100, default: 5}\n"
    "inputs:\n"
    "  logits: {dtype: bf16, shape: [B, 1000]}\n"
    "  targets: {dtype: i32, shape: [B]}\n"
    "  wide: {dtype: f32, shape: [B, C]}\n"
    "  labels: {dtype: i32, shape: [B]}\n"
    "  prediction: {dtype: f32, shape: [B, 7]}\n"
    "  target: {dtype: f32, shape: [B, 7]}\n"
    "nodes:\n"
    "  - {name: ce, op: cross_entropy, inputs: [logits, targets]}\n"
    "  - {name: ce_wide, op: cross_entropy, inputs: [wide, labels], attrs: {ignore_index: 0}}\n"
    "  - {name: mse, op: mse_loss, inputs: [prediction, target]}\n"
    "outputs: [ce, ce_wide, mse]\n";

const Bundle& loss_bundle() {
  static const Bundle bundle = [] {
    static testing::ScratchDir cache;
    CompileOptions options;
    options.cache_dir = cache.str();
    return compile_graph(parse_graph(kLossGraph, "losses.yaml", registry()), registry(), options);
  }();
  return bundle;
}

TEST(LossGraph, TargetsOfAConstantClassCountStayBelowIt) {
  const Bundle& b = loss_bundle();
  EXPECT_EQ(b.tensor("targets").id_bound, 1000);
  EXPECT_EQ(b.tensor("labels").id_bound, 0);  // C is symbolic: the default bound, 8
}

TEST(LossGraph, EachNodeHasItsBufferOfPartialsForItsStepOnly) {
  const Bundle& b = loss_bundle();
  const BoundBundle bound = bind_bundle(b, bundle_bindings(b, {"B=4000"}), "losses.teeny");
  EXPECT_TRUE(b.tensor("ce#partials").scratch);
  EXPECT_EQ(bound.tensor("ce#partials").shape, (std::vector<int64_t>{2 * 1000}));  // 1000 blocks of 4 rows
  EXPECT_EQ(bound.tensor("mse#partials").shape, (std::vector<int64_t>{7}));        // 28000 f32 / (256 x 4 x 4)
  EXPECT_TRUE(bound.tensor("ce").shape.empty());
  EXPECT_EQ(bound.tensor("ce").bytes, 4u);
  // The three buffers are live at different steps: ce's and mse's lie over ce_wide's, the largest
  // (1024 blocks of 256 threads for its symbolic rows).
  EXPECT_EQ(bound.plan.offsets.at("ce#partials"), bound.plan.offsets.at("mse#partials"));
}

TEST(LossGraph, TheHostRunGivesEachLoss) {
  const Bundle& b = loss_bundle();
  const BoundBundle bound = bind_bundle(b, bundle_bindings(b, {"B=5", "C=3"}), "losses.teeny");
  const RunData data = prepare_data(bound, DataOptions{});
  const std::map<std::string, HostTensor> values = run_host(bound, registry(), data);
  for (const char* name : {"ce", "ce_wide", "mse"}) EXPECT_TRUE(values.at(name).shape.empty()) << name;
  double squares = 0;
  const std::vector<double>& p = data.inputs.at("prediction").data;
  const std::vector<double>& t = data.inputs.at("target").data;
  for (size_t i = 0; i < p.size(); ++i) squares += (p[i] - t[i]) * (p[i] - t[i]);
  EXPECT_FLOAT_EQ(values.at("mse").data[0], squares / 35);
  // Targets in [0, 1000): every row counts.
  const std::vector<double>& logits = data.inputs.at("logits").data;
  const std::vector<double>& targets = data.inputs.at("targets").data;
  double losses = 0;
  for (size_t r = 0; r < targets.size(); ++r) {
    ASSERT_GE(targets[r], 0);
    ASSERT_LT(targets[r], 1000);
    double sum_exp = 0;
    for (size_t c = 0; c < 1000; ++c) sum_exp += std::exp(logits[r * 1000 + c]);
    losses += std::log(sum_exp) - logits[r * 1000 + static_cast<size_t>(targets[r])];
  }
  EXPECT_NEAR(values.at("ce").data[0], losses / 5, 1e-6);
}

}  // namespace
}  // namespace teeny
