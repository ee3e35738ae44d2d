// The update ops of a training graph (ops/optim_sgd.cpp, ops/optim_adamw.cpp, ops/train_step.cpp,
// ops/train_clip_grad_norm.cpp): a small linear + mse_loss graph with a `train:` section,
// compiled through NVRTC, has update nodes without output tensors whose launches write the param
// and the optimizer state in place; the host reference executor's steps match SGD and AdamW
// computed by hand (gradients included, for SGD) over two steps, 16-bit params train on their f32
// master weights; and bad hyper-parameters are errors at the `optimizer:` key, exact text.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "core/autodiff.h"
#include "core/binding.h"
#include "core/compile.h"
#include "core/host_executor.h"
#include "core/optim.h"
#include "core/run_data.h"
#include "tests/error_test_util.h"
#include "tests/file_test_util.h"
#include "tests/op_test_util.h"

namespace teeny {
namespace {

using op_testing::registry;
using testing::rendered;

// fc = linear(x) with weight [2, 3] and bias [2]; loss = mean((fc - target)^2).
std::string net(const std::string& train, const char* dtype = "f32") {
  return fmt::format(
      "name: fit\n"
      "inputs:\n"
      "  x: {{dtype: {0}, shape: [2, 3]}}\n"
      "  target: {{dtype: {0}, shape: [2, 2]}}\n"
      "nodes:\n"
      "  - {{name: fc, op: linear, inputs: [x], attrs: {{out_features: 2}}}}\n"
      "  - {{name: loss, op: mse_loss, inputs: [fc, target]}}\n"
      "outputs: [loss]\n"
      "train:\n"
      "  loss: loss\n"
      "{1}",
      dtype, train);
}

const std::string& cache_dir() {
  static const testing::ScratchDir dir;
  static const std::string path = dir.str();
  return path;
}

Bundle compile(const std::string& spec) {
  CompileOptions options;
  options.cache_dir = cache_dir();
  return compile_graph(parse_graph(spec, "fit.yaml", registry()), registry(), options);
}

const std::string kSgd = "  optimizer: {type: sgd, lr: 0.1, momentum: 0.9}\n  clip_grad_norm: 1.0\n";

const Bundle& sgd_bundle() {
  static const Bundle bundle = compile(net(kSgd));
  return bundle;
}

// "kind c_type name = bound-to" per argument.
std::vector<std::string> describe_args(const BundleLaunch& launch) {
  std::vector<std::string> lines;
  for (const BundleArg& arg : launch.args) {
    std::string value = arg.tensor;
    if (arg.kind == ArgKind::kI32 || arg.kind == ArgKind::kI64) value = arg.value.str();
    if (arg.kind == ArgKind::kF32) value = fmt::format("{}", arg.fvalue);
    lines.push_back(fmt::format("{} {} {} = {}", arg_kind_name(arg.kind), arg.c_type, arg.name, value));
  }
  return lines;
}

std::vector<const BundleLaunch*> launches_of(const Bundle& bundle, const std::string& node) {
  std::vector<const BundleLaunch*> found;
  for (const BundleLaunch& launch : bundle.launches)
    if (launch.node == node) found.push_back(&launch);
  return found;
}

const BundleParam* find_param(const Bundle& bundle, const std::string& name) {
  for (const BundleParam& param : bundle.params)
    if (param.name == name) return &param;
  return nullptr;
}

bool has_tensor(const Bundle& bundle, const std::string& name) {
  for (const BundleTensor& tensor : bundle.tensors)
    if (tensor.name == name) return true;
  return false;
}

TEST(OptimOps, UpdateNodesWriteParamsInPlaceAndHaveNoOutputTensor) {
  const Bundle& b = sgd_bundle();
  std::vector<std::string> updates;
  for (const BundleNode& node : b.nodes)
    if (node.role == NodeRole::kUpdate) updates.push_back(fmt::format("{} ({})", node.name, node.op));
  EXPECT_EQ(updates, (std::vector<std::string>{"optim_step (train.step)", "clip_grad_norm (train.clip_grad_norm)",
                                               "sgd_fc_weight (optim.sgd)", "sgd_fc_bias (optim.sgd)"}));
  for (const char* update : {"optim_step", "sgd_fc_weight", "sgd_fc_bias"}) EXPECT_FALSE(has_tensor(b, update));
  EXPECT_EQ(b.tensor("clip_grad_norm").dtype, DType::kF32);
  EXPECT_EQ(shape_str(b.tensor("clip_grad_norm").shape), "[2]");

  // The state is the update node's own, zero; the param and the counter are param refs.
  for (const auto& [name, shape] :
       {std::pair{"sgd_fc_weight.momentum_buffer", "[2, 3]"}, std::pair{"sgd_fc_bias.momentum_buffer", "[2]"}}) {
    const BundleParam* param = find_param(b, name);
    ASSERT_NE(param, nullptr) << name;
    EXPECT_EQ(param->init, ParamInit::kZero);
    EXPECT_EQ(param->dtype, DType::kF32);
    EXPECT_EQ(shape_str(param->shape), shape);
  }
  const BundleParam* count = find_param(b, "optim_step.count");
  ASSERT_NE(count, nullptr);
  EXPECT_EQ(count->init, ParamInit::kZero);
  EXPECT_EQ(count->dtype, DType::kI32);
  EXPECT_EQ(find_param(b, "sgd_fc_weight.master"), nullptr);  // f32 params have none
  const BundleNode& update = *b.find_node("sgd_fc_weight");
  EXPECT_EQ(update.param_refs,
            (std::map<std::string, std::string>{{"param", "fc.weight"}, {"step", "optim_step.count"}}));

  const std::vector<const BundleLaunch*> step = launches_of(b, "optim_step");
  ASSERT_EQ(step.size(), 1u);
  // It reads the loss: a non-finite one halts it (tests below).
  EXPECT_EQ(describe_args(*step[0]),
            (std::vector<std::string>{"param_out int* step = optim_step.count", "input const float* loss = loss"}));
  EXPECT_EQ(b.kernels.at(step[0]->kernel).name, "step_increment_f32");

  const std::vector<const BundleLaunch*> sgd = launches_of(b, "sgd_fc_weight");
  ASSERT_EQ(sgd.size(), 1u);
  const std::vector<std::string> expected{
      "param_out float* param = fc.weight",
      "input const float* grad = " + b.gradients.at("fc.weight"),
      "param_out float* momentum_buffer = sgd_fc_weight.momentum_buffer",
      "i64 long long n = 6",
      "param const int* step = optim_step.count",
      "input const float* clip = clip_grad_norm",
      "f32 float lr = 0.1",
      "i32 int warmup_steps = 0",
      "i32 int total_steps = 0",
      "f32 float min_lr_ratio = 0",
      "f32 float momentum = 0.9",
      "f32 float dampening = 0",
      "f32 float weight_decay = 0",
      "i32 int nesterov = 0",
  };
  EXPECT_EQ(describe_args(*sgd[0]), expected);
  EXPECT_EQ(b.kernels.at(sgd[0]->kernel).name, "sgd_step_f32");

  // The clip node: one sum of squares over both gradients (a block for each one's only chunk), then
  // one block.
  const std::vector<const BundleLaunch*> clip = launches_of(b, "clip_grad_norm");
  ASSERT_EQ(clip.size(), 2u);
  EXPECT_EQ(
      describe_args(*clip[0]),
      (std::vector<std::string>{"scratch float* partials = clip_grad_norm#partials",
                                "input const float* grad0 = " + b.gradients.at("fc.weight"), "i64 long long n0 = 6",
                                "input const float* grad1 = " + b.gradients.at("fc.bias"), "i64 long long n1 = 2"}));
  EXPECT_EQ(b.kernels.at(clip[0]->kernel).name, "grad_sq_sum_f32x2");
  EXPECT_EQ(describe_args(*clip[1]),
            (std::vector<std::string>{"scratch float* partials = clip_grad_norm#partials", "i32 int count = 2",
                                      "f32 float max_norm = 1", "output float* clip = clip_grad_norm"}));
  EXPECT_EQ(shape_str(b.tensor("clip_grad_norm#partials").shape), "[2]");
}

// ---- host steps ------------------------------------------------------------------------------

struct Linear {
  std::vector<double> weight;  // [2, 3]
  std::vector<double> bias;    // [2]
};

const std::vector<double> kX{1, -2, 0.5, 0, 1, 3};  // [2, 3]
const std::vector<double> kTarget{1, 2, -3, 0.5};   // [2, 2]

// d mean((x W^T + b - target)^2) / d(W, b), by hand.
Linear gradients(const Linear& p) {
  Linear g{std::vector<double>(6, 0.0), std::vector<double>(2, 0.0)};
  for (int r = 0; r < 2; ++r) {
    for (int o = 0; o < 2; ++o) {
      double y = p.bias[o];
      for (int i = 0; i < 3; ++i) y += kX[r * 3 + i] * p.weight[o * 3 + i];
      const double dy = 2 * (y - kTarget[r * 2 + o]) / 4;
      g.bias[o] += dy;
      for (int i = 0; i < 3; ++i) g.weight[o * 3 + i] += dy * kX[r * 3 + i];
    }
  }
  return g;
}

double norm_of(const Linear& g) {
  double sum = 0;
  for (double v : g.weight) sum += v * v;
  for (double v : g.bias) sum += v * v;
  return std::sqrt(sum);
}

HostTensor host(DType dtype, std::vector<int64_t> shape, std::vector<double> data) {
  return {dtype, std::move(shape), std::move(data)};
}

// The data of a run with these inputs and params (the rest as prepare_data makes them: state and
// counter zero).
RunData run_data(const BoundBundle& bound, DType dtype, const Linear& p) {
  RunData data = prepare_data(bound, DataOptions{});
  data.inputs["x"] = host(dtype, {2, 3}, kX);
  data.inputs["target"] = host(dtype, {2, 2}, kTarget);
  data.params["fc.weight"] = host(dtype, {2, 3}, p.weight);
  data.params["fc.bias"] = host(dtype, {2}, p.bias);
  return data;
}

void expect_near_all(const std::vector<double>& actual, const std::vector<double>& expected, double tolerance,
                     const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], tolerance * std::max(1.0, std::abs(expected[i]))) << what << "[" << i << "]";
}

TEST(OptimOps, SgdWithMomentumAndClippingTakesTwoStepsAsComputedByHand) {
  const Bundle& b = sgd_bundle();
  const BoundBundle bound = bind_bundle(b, bundle_bindings(b, {}), "fit.teeny");
  const Linear p0{{0.5, -0.25, 1, 0, 0.75, -0.5}, {0.1, -0.2}};
  const double lr = 0.1, momentum = 0.9, max_norm = 1.0;

  // Step 1: the buffer is the clipped gradient itself; the counter becomes 1.
  RunData data = run_data(bound, DType::kF32, p0);
  HostStep step = run_host_step(bound, registry(), data);
  const Linear g1 = gradients(p0);
  const double norm1 = norm_of(g1);
  ASSERT_GT(norm1, max_norm);  // so the coefficient is below 1
  const double clip1 = max_norm / (norm1 + 1e-6);
  expect_near_all(step.tensors.at("clip_grad_norm").data, {clip1, norm1}, 1e-6, "clip_grad_norm");
  Linear buf1, p1;
  for (double g : g1.weight) buf1.weight.push_back(clip1 * g);
  for (double g : g1.bias) buf1.bias.push_back(clip1 * g);
  for (size_t i = 0; i < 6; ++i) p1.weight.push_back(p0.weight[i] - lr * buf1.weight[i]);
  for (size_t i = 0; i < 2; ++i) p1.bias.push_back(p0.bias[i] - lr * buf1.bias[i]);
  EXPECT_EQ(step.params.at("optim_step.count").data, std::vector<double>{1});
  expect_near_all(step.params.at("fc.weight").data, p1.weight, 1e-6, "fc.weight after step 1");
  expect_near_all(step.params.at("fc.bias").data, p1.bias, 1e-6, "fc.bias after step 1");
  expect_near_all(step.params.at("sgd_fc_weight.momentum_buffer").data, buf1.weight, 1e-6, "buffer after step 1");

  // Step 2 from there: buffer = momentum * buffer + clipped gradient at the new params.
  data.params = step.params;
  step = run_host_step(bound, registry(), data);
  const Linear g2 = gradients(p1);
  const double norm2 = norm_of(g2);
  const double clip2 = std::min(1.0, max_norm / (norm2 + 1e-6));
  std::vector<double> w2, b2;
  for (size_t i = 0; i < 6; ++i) w2.push_back(p1.weight[i] - lr * (momentum * buf1.weight[i] + clip2 * g2.weight[i]));
  for (size_t i = 0; i < 2; ++i) b2.push_back(p1.bias[i] - lr * (momentum * buf1.bias[i] + clip2 * g2.bias[i]));
  EXPECT_EQ(step.params.at("optim_step.count").data, std::vector<double>{2});
  expect_near_all(step.params.at("fc.weight").data, w2, 1e-5, "fc.weight after step 2");
  expect_near_all(step.params.at("fc.bias").data, b2, 1e-5, "fc.bias after step 2");
}

// A step whose loss is not finite halts the counter at -(steps taken + 1), and every update then
// leaves its param and state as they were; the counter stays halted, so a later finite step
// changes nothing either.
TEST(OptimOps, ANonFiniteLossHaltsTheCounterAndTheUpdatesChangeNothing) {
  const Bundle& b = sgd_bundle();
  const BoundBundle bound = bind_bundle(b, bundle_bindings(b, {}), "fit.teeny");
  const Linear p0{{0.5, -0.25, 1, 0, 0.75, -0.5}, {0.1, -0.2}};
  RunData data = run_data(bound, DType::kF32, p0);
  data.params = run_host_step(bound, registry(), data).params;  // one good step: count 1
  const std::map<std::string, HostTensor> before = data.params;
  ASSERT_EQ(before.at("optim_step.count").data, std::vector<double>{1});

  data.inputs["x"].data[0] = std::nan("");
  HostStep halted = run_host_step(bound, registry(), data);
  EXPECT_TRUE(std::isnan(halted.tensors.at(b.loss).data.at(0)));
  EXPECT_EQ(halted.params.at("optim_step.count").data, std::vector<double>{-2});
  for (const char* name : {"fc.weight", "fc.bias", "sgd_fc_weight.momentum_buffer", "sgd_fc_bias.momentum_buffer"})
    EXPECT_EQ(halted.params.at(name).data, before.at(name).data) << name;

  data.inputs["x"].data[0] = kX[0];
  data.params = halted.params;
  const HostStep after = run_host_step(bound, registry(), data);
  EXPECT_TRUE(std::isfinite(after.tensors.at(b.loss).data.at(0)));
  EXPECT_EQ(after.params.at("optim_step.count").data, std::vector<double>{-2});
  EXPECT_EQ(after.params.at("fc.weight").data, before.at("fc.weight").data);
}

TEST(OptimOps, SgdWithoutMomentumHasNoBufferAndFollowsTheWarmup) {
  const Bundle b =
      compile(net("  optimizer: {type: sgd, lr: 0.2, weight_decay: 0.5, schedule: warmup_cosine, warmup_steps: 4, "
                  "total_steps: 10}\n"));
  EXPECT_EQ(find_param(b, "sgd_fc_weight.momentum_buffer"), nullptr);
  const std::vector<const BundleLaunch*> sgd = launches_of(b, "sgd_fc_bias");
  ASSERT_EQ(sgd.size(), 1u);
  const std::vector<std::string> expected{
      "param_out float* param = fc.bias",
      "input const float* grad = " + b.gradients.at("fc.bias"),
      "i64 long long n = 2",
      "param const int* step = optim_step.count",
      "f32 float clip = 1",  // no clipping: the constant 1
      "f32 float lr = 0.2",
      "i32 int warmup_steps = 4",
      "i32 int total_steps = 10",
      "f32 float min_lr_ratio = 0",
      "f32 float weight_decay = 0.5",
  };
  EXPECT_EQ(describe_args(*sgd[0]), expected);
  EXPECT_EQ(b.kernels.at(sgd[0]->kernel).name, "sgd_step_no_momentum_f32_unclipped");

  // Step 1 of 4 warm-up steps: lr 0.2 / 4; weight decay adds 0.5 p to the gradient.
  const BoundBundle bound = bind_bundle(b, bundle_bindings(b, {}), "fit.teeny");
  const Linear p0{{0.5, -0.25, 1, 0, 0.75, -0.5}, {0.1, -0.2}};
  const HostStep step = run_host_step(bound, registry(), run_data(bound, DType::kF32, p0));
  const Linear g = gradients(p0);
  std::vector<double> bias;
  for (size_t i = 0; i < 2; ++i) bias.push_back(p0.bias[i] - 0.05 * (g.bias[i] + 0.5 * p0.bias[i]));
  expect_near_all(step.params.at("fc.bias").data, bias, 1e-6, "fc.bias");
}

TEST(OptimOps, AdamWOnBf16ParamsStepsTheMasterWeights) {
  const Bundle b = compile(net("  optimizer: {type: adamw, lr: 0.0004, betas: [0.8, 0.99]}\n", "bf16"));
  for (const char* slot : {"exp_avg", "exp_avg_sq", "master"}) {
    const BundleParam* param = find_param(b, fmt::format("adamw_fc_weight.{}", slot));
    ASSERT_NE(param, nullptr) << slot;
    EXPECT_EQ(param->init, ParamInit::kZero);
    EXPECT_EQ(param->dtype, DType::kF32);
    EXPECT_EQ(shape_str(param->shape), "[2, 3]");
  }
  const std::vector<const BundleLaunch*> adamw = launches_of(b, "adamw_fc_weight");
  ASSERT_EQ(adamw.size(), 1u);
  const std::vector<std::string> expected{
      "param_out __nv_bfloat16* param = fc.weight",
      "param_out float* master = adamw_fc_weight.master",
      "input const __nv_bfloat16* grad = " + b.gradients.at("fc.weight"),
      "param_out float* exp_avg = adamw_fc_weight.exp_avg",
      "param_out float* exp_avg_sq = adamw_fc_weight.exp_avg_sq",
      "i64 long long n = 6",
      "param const int* step = optim_step.count",
      "f32 float clip = 1",
      "f32 float lr = 0.0004",
      "i32 int warmup_steps = 0",
      "i32 int total_steps = 0",
      "f32 float min_lr_ratio = 0",
      "f32 float beta1 = 0.8",
      "f32 float beta2 = 0.99",
      "f32 float eps = 1e-08",
      "f32 float weight_decay = 0.01",
  };
  EXPECT_EQ(describe_args(*adamw[0]), expected);
  EXPECT_EQ(b.kernels.at(adamw[0]->kernel).name, "adamw_step_master_bf16_unclipped");

  // Step 1: the master weights start from the param; m / (1 - beta1) = g and sqrt(v / (1 -
  // beta2)) = |g|, so each weight moves by lr * g / (|g| + eps) after the decay. Two such moves
  // stay below half of bf16's spacing around 0.5 (2^-9 below it): the param rounds back to 0.5,
  // the master keeps them.
  const BoundBundle bound = bind_bundle(b, bundle_bindings(b, {}), "fit.teeny");
  const Linear p0{std::vector<double>(6, 0.5), {0.25, -0.25}};
  RunData data = run_data(bound, DType::kBF16, p0);
  HostStep step = run_host_step(bound, registry(), data);
  const std::vector<double> g1 = step.tensors.at(b.gradients.at("fc.weight")).data;
  std::vector<double> master1;
  for (size_t i = 0; i < 6; ++i)
    master1.push_back(0.5 * (1 - 0.0004 * 0.01) - 0.0004 * g1[i] / (std::abs(g1[i]) + 1e-8));
  expect_near_all(step.params.at("adamw_fc_weight.master").data, master1, 1e-7, "master after step 1");
  EXPECT_EQ(step.params.at("fc.weight").data, std::vector<double>(6, 0.5));
  std::vector<double> exp_avg1;
  for (double g : g1) exp_avg1.push_back(0.2 * g);
  expect_near_all(step.params.at("adamw_fc_weight.exp_avg").data, exp_avg1, 1e-7, "exp_avg after step 1");

  // Step 2 steps the master weights (core/optim.h's AdamW), not the rounded param; the param and
  // so the gradient are unchanged.
  data.params = step.params;
  step = run_host_step(bound, registry(), data);
  const std::vector<double> g2 = step.tensors.at(b.gradients.at("fc.weight")).data;
  EXPECT_EQ(g2, g1);
  std::vector<double> master2 = step.params.at("adamw_fc_weight.master").data;
  std::vector<double> expected2 = master1;
  std::vector<double> exp_avg = data.params.at("adamw_fc_weight.exp_avg").data;
  std::vector<double> exp_avg_sq = data.params.at("adamw_fc_weight.exp_avg_sq").data;
  AdamWConfig config;
  config.lr = 0.0004;
  config.beta1 = 0.8;
  config.beta2 = 0.99;
  adamw_step(config, 1.0, expected2, g2, exp_avg, exp_avg_sq, 2);
  expect_near_all(master2, expected2, 1e-7, "master after step 2");
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_NEAR(std::abs(master2[i] - 0.5), 0.0008, 1e-5) << i;  // two steps of about lr each
    EXPECT_EQ(step.params.at("fc.weight").data[i], 0.5) << i;
  }
}

TEST(OptimOps, ClipGradNormIsTheTotalNormOfAllGradients) {
  using op_testing::HostIn;
  // |[3, 4]| = 5 and |[12]| = 12: together sqrt(25 + 144) = 13.
  const std::vector<HostIn> grads{{{2}, {3, 4}}, {{1}, {12}, DType::kBF16}};
  const HostTensor under = op_testing::reference("train.clip_grad_norm", {{"max_norm", 1.0}}, grads);
  EXPECT_EQ(under.shape, std::vector<int64_t>{2});
  EXPECT_DOUBLE_EQ(under.data[0], 1.0 / (13 + 1e-6));
  EXPECT_DOUBLE_EQ(under.data[1], 13.0);
  // At or above the norm: 1 (the 1e-6 makes max_norm == norm clip slightly, as in PyTorch).
  EXPECT_EQ(op_testing::reference("train.clip_grad_norm", {{"max_norm", 20.0}}, grads).data[0], 1.0);
  EXPECT_LT(op_testing::reference("train.clip_grad_norm", {{"max_norm", 13.0}}, grads).data[0], 1.0);
}

TEST(OptimOps, ShapeRuleErrors) {
  using op_testing::infer_error;
  const nlohmann::json sgd{{"lr", 0.1},           {"momentum", 0.0},   {"dampening", 0.0},
                           {"weight_decay", 0.0}, {"nesterov", false}, {"schedule", "constant"},
                           {"warmup_steps", 0},   {"total_steps", 0},  {"min_lr_ratio", 0.0}};
  const TensorType padded{DType::kF32, {Expr(2), Expr(3)}, Expr(4)};
  std::string key;
  EXPECT_EQ(infer_error("optim.sgd", sgd, {padded}, &key),
            "the gradient's rows are padded (row stride 4, last dim 3); optim.sgd reads it as one contiguous array");
  EXPECT_EQ(key, "inputs");
  const TensorType grad = op_testing::tensor(DType::kF32, {Expr(2), Expr(3)});
  EXPECT_EQ(infer_error("optim.sgd", sgd, {grad, op_testing::tensor(DType::kF32, {Expr(1)})}),
            "input 1 is f32 [1]; the clip coefficient and norm are f32 [2]");
  EXPECT_EQ(infer_error("optim.sgd", sgd, {op_testing::tensor(DType::kI32, {Expr(2)})}),
            "optim.sgd does not update i32 params (supported: f32, bf16, f16)");
  EXPECT_EQ(infer_error("train.clip_grad_norm", {{"max_norm", 1.0}}, {grad, padded}),
            "input 1's rows are padded (row stride 4, last dim 3); train.clip_grad_norm reads each gradient as one "
            "contiguous array");
}

// ---- hyper-parameter errors, at the train section's `optimizer:` key ----------------------------

std::string train_error(const std::string& train) {
  return rendered([&] {
    Graph graph = parse_graph(net(train), "fit.yaml", registry());
    add_training(graph, registry());
  });
}

TEST(OptimOps, BadHyperParametersAreErrorsAtTheOptimizerKey) {
  EXPECT_EQ(train_error("  optimizer: {type: sgd, lr: 0.1, nesterov: true}\n"),
            "teeny: error: fit.yaml:11:14: train: optimizer.momentum is 0; it must be > 0 with "
            "optimizer.nesterov\n"
            "    optimizer: {type: sgd, lr: 0.1, nesterov: true}\n"
            "               ^\n");
  EXPECT_EQ(train_error("  optimizer: {type: sgd, lr: 0.1, momentum: 1}\n"),
            "teeny: error: fit.yaml:11:14: train: optimizer.momentum is 1; it must be in [0, 1)\n"
            "    optimizer: {type: sgd, lr: 0.1, momentum: 1}\n"
            "               ^\n");
  EXPECT_EQ(train_error("  optimizer: {type: adamw, lr: 0.1, betas: [0.9, 1.5]}\n"),
            "teeny: error: fit.yaml:11:14: train: optimizer.betas[1] is 1.5; it must be in [0, 1)\n"
            "    optimizer: {type: adamw, lr: 0.1, betas: [0.9, 1.5]}\n"
            "               ^\n");
  EXPECT_EQ(train_error("  optimizer: {type: adamw, lr: 0.1, betas: [0.9]}\n"),
            "teeny: error: fit.yaml:11:14: train: optimizer.betas is [0.9]; it must be [beta1, beta2]\n"
            "    optimizer: {type: adamw, lr: 0.1, betas: [0.9]}\n"
            "               ^\n");
  EXPECT_EQ(train_error("  optimizer: {type: adamw, lr: 0.1, schedule: warmup_cosine, warmup_steps: 10, "
                        "total_steps: 5}\n"),
            "teeny: error: fit.yaml:11:14: train: optimizer.warmup_steps is 10; it must be <= "
            "optimizer.total_steps (5)\n"
            "    optimizer: {type: adamw, lr: 0.1, schedule: warmup_cosine, warmup_steps: 10, total_steps: 5}\n"
            "               ^\n");
  EXPECT_EQ(train_error("  optimizer: {type: sgd, lr: 0.1, schedule: warmup_cosine}\n"),
            "teeny: error: fit.yaml:11:14: train: optimizer.total_steps is 0; it must be >= 1\n"
            "    optimizer: {type: sgd, lr: 0.1, schedule: warmup_cosine}\n"
            "               ^\n");
  // The constant schedule has no warm-up: a key it would ignore is refused.
  EXPECT_EQ(train_error("  optimizer: {type: adamw, lr: 0.1, warmup_steps: 100}\n"),
            "teeny: error: fit.yaml:11:14: train: optimizer.warmup_steps is 100, but optimizer.schedule is constant, "
            "which has no warmup_steps; use schedule: warmup_cosine\n"
            "    optimizer: {type: adamw, lr: 0.1, warmup_steps: 100}\n"
            "               ^\n");
  EXPECT_EQ(train_error("  optimizer: {type: sgd, lr: 0.1, schedule: constant, min_lr_ratio: 0.1}\n"),
            "teeny: error: fit.yaml:11:14: train: optimizer.min_lr_ratio is 0.1, but optimizer.schedule is constant, "
            "which has no min_lr_ratio; use schedule: warmup_cosine\n"
            "    optimizer: {type: sgd, lr: 0.1, schedule: constant, min_lr_ratio: 0.1}\n"
            "               ^\n");
  // What the attrs' types and domains say, the spec parser says at the value.
  EXPECT_EQ(train_error("  optimizer: {type: adamw, lr: -1}\n"),
            "teeny: error: fit.yaml:11:32: train: optimizer: 'lr' must be greater than 0, got -1\n"
            "    optimizer: {type: adamw, lr: -1}\n"
            "                                 ^\n");
  EXPECT_EQ(train_error("  optimizer: {type: adamw, lr: 0.1, betas: 0.9}\n"),
            "teeny: error: fit.yaml:11:44: train: optimizer: attr 'betas' must be a list of numbers, got '0.9'\n"
            "    optimizer: {type: adamw, lr: 0.1, betas: 0.9}\n"
            "                                             ^\n");
  EXPECT_EQ(train_error("  optimizer: {type: adamw, lr: 0.1, betas: [0.9, -0.5]}\n"),
            "teeny: error: fit.yaml:11:44: train: optimizer: 'betas' must be at least 0, got -0.5\n"
            "    optimizer: {type: adamw, lr: 0.1, betas: [0.9, -0.5]}\n"
            "                                             ^\n");
}

TEST(OptimOps, FloatListAttrsTakeIntegersAsNumbers) {
  Graph graph = parse_graph(net("  optimizer: {type: adamw, lr: 1, betas: [0, 0.5]}\n"), "fit.yaml", registry());
  add_training(graph, registry());
  EXPECT_EQ(graph.find_node("adamw_fc_weight")->ctx.attrs.reals("betas"), (std::vector<double>{0, 0.5}));
  EXPECT_EQ(graph.find_node("adamw_fc_weight")->ctx.attrs.json().at("betas").dump(), "[0.0,0.5]");
}

}  // namespace
}  // namespace teeny
