// Optimizer semantics (core/optim.h) against values worked out by hand from PyTorch's definitions
// (torch.optim.SGD, torch.optim.AdamW, clip_grad_norm_), the schedule at its landmarks, and every
// configuration error's exact text.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/optim.h"
#include "tests/error_test_util.h"

namespace teeny {
namespace {

using testing::message;

constexpr double kTol = 1e-12;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

void expect_near(const std::vector<double>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], kTol) << "element " << i;
}

// ---- SGD -----------------------------------------------------------------------------------

// lr 0.1, momentum 0.9, weight decay 0.1, param [1, -2]; d = g + 0.1 p, buf = d on step 1 then
// 0.9 buf + d, p -= 0.1 buf.
//   step 1, g [0.5, 1]:  d [0.6, 0.8]            buf [0.6, 0.8]          p [0.94, -2.08]
//   step 2, g [0.5, 1]:  d [0.594, 0.792]        buf [1.134, 1.512]      p [0.8266, -2.2312]
//   step 3, g [-0.5, 0]: d [-0.41734, -0.22312]  buf [0.60326, 1.13768]  p [0.766274, -2.344968]
TEST(OptimSgd, MomentumAndWeightDecayOverThreeSteps) {
  const SgdConfig config{0.1, 0.9, 0, 0.1, false};
  std::vector<double> param{1, -2}, buffer{0, 0};
  sgd_step(config, 1, param, {0.5, 1}, buffer, 1);
  expect_near(buffer, {0.6, 0.8});
  expect_near(param, {0.94, -2.08});
  sgd_step(config, 1, param, {0.5, 1}, buffer, 2);
  expect_near(buffer, {1.134, 1.512});
  expect_near(param, {0.8266, -2.2312});
  sgd_step(config, 1, param, {-0.5, 0}, buffer, 3);
  expect_near(buffer, {0.60326, 1.13768});
  expect_near(param, {0.766274, -2.344968});
}

// Step 1 sets the buffer from the gradient whatever it held (PyTorch creates it then).
TEST(OptimSgd, FirstStepIgnoresTheBuffersContents) {
  const SgdConfig config{0.1, 0.9, 0, 0.1, false};
  std::vector<double> param{1, -2}, buffer{7, -7};
  sgd_step(config, 1, param, {0.5, 1}, buffer, 1);
  expect_near(buffer, {0.6, 0.8});
  expect_near(param, {0.94, -2.08});
}

// lr 0.1, momentum 0.9, Nesterov, param 1, g 1 twice:
//   step 1: buf 1, d = 1 + 0.9 * 1 = 1.9, p = 0.81;  step 2: buf 1.9, d = 1 + 0.9 * 1.9 = 2.71, p = 0.539.
TEST(OptimSgd, Nesterov) {
  const SgdConfig config{0.1, 0.9, 0, 0, true};
  std::vector<double> param{1}, buffer{0};
  sgd_step(config, 1, param, {1}, buffer, 1);
  expect_near(param, {0.81});
  sgd_step(config, 1, param, {1}, buffer, 2);
  expect_near(buffer, {1.9});
  expect_near(param, {0.539});
}

// Dampening 0.5 skips step 1: buf 1, p 0.9; then buf = 0.9 * 1 + 0.5 * 1 = 1.4, p = 0.9 - 0.14 = 0.76.
TEST(OptimSgd, DampeningFromTheSecondStep) {
  const SgdConfig config{0.1, 0.9, 0.5, 0, false};
  std::vector<double> param{1}, buffer{0};
  sgd_step(config, 1, param, {1}, buffer, 1);
  expect_near(param, {0.9});
  sgd_step(config, 1, param, {1}, buffer, 2);
  expect_near(buffer, {1.4});
  expect_near(param, {0.76});
}

// No momentum, no buffer: p = 1 - (0.2 * 0.5) * (2 + 0.5 * 1) = 0.75 with lr 0.2 at factor 0.5.
TEST(OptimSgd, PlainWithScheduledLearningRate) {
  const SgdConfig config{0.2, 0, 0, 0.5, false};
  std::vector<double> param{1}, no_buffer;
  sgd_step(config, 0.5, param, {2}, no_buffer, 1);
  expect_near(param, {0.75});
}

// Without weight decay an infinite param stays infinite (no 0 * inf term), as in PyTorch.
TEST(OptimSgd, NoWeightDecayTermWhenZero) {
  std::vector<double> param{kInf}, no_buffer;
  sgd_step(SgdConfig{0.1}, 1, param, {1}, no_buffer, 1);
  EXPECT_EQ(param[0], kInf);
}

// ---- AdamW ---------------------------------------------------------------------------------

// lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, param [1, -1]; decay factor 0.999.
// Step 1, g [0.5, -2]: bc1 = 0.1, bc2 = 0.001, so m / bc1 = g and v / bc2 = g^2:
//   m [0.05, -0.2], v [0.00025, 0.004]
//   p0 = 0.999 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.999 - 0.099999998 = 0.899000002
//   p1 = -0.999 + 0.1 * 2 / (2 + 1e-8) = -0.999 + 0.0999999995 = -0.8990000005
// Step 2, g [0.25, 1]: bc1 = 1 - 0.81 = 0.19, bc2 = 1 - 0.998001 = 0.001999
//   m0 = 0.045 + 0.025 = 0.07, v0 = 0.00024975 + 0.0000625 = 0.00031225
//   m1 = -0.18 + 0.1 = -0.08,  v1 = 0.003996 + 0.001 = 0.004996
//   sqrt(v0 / bc2) = sqrt(0.15620310155...) = 0.39522538...; sqrt(v1 / bc2) = sqrt(2.49924962...) = 1.58090152...
//   p0 = 0.899000002 * 0.999 - 0.1 * (0.07 / 0.19) / (0.39522538... + 1e-8)
//      = 0.898101001998 - 0.09321796... = 0.80488304...
//   p1 = -0.8990000005 * 0.999 - 0.1 * (-0.08 / 0.19) / (1.58090152... + 1e-8)
//      = -0.8981010004995 + 0.02663370... = -0.87146729...
TEST(OptimAdamW, TwoSteps) {
  const AdamWConfig config{0.1, 0.9, 0.999, 1e-8, 0.01};
  std::vector<double> param{1, -1}, m{0, 0}, v{0, 0};
  adamw_step(config, 1, param, {0.5, -2}, m, v, 1);
  expect_near(m, {0.05, -0.2});
  expect_near(v, {0.00025, 0.004});
  expect_near(param, {0.899000002, -0.8990000005});
  adamw_step(config, 1, param, {0.25, 1}, m, v, 2);
  expect_near(m, {0.07, -0.08});
  expect_near(v, {0.00031225, 0.004996});
  const double update0 = 0.1 * (0.07 / 0.19) / (std::sqrt(0.00031225 / 0.001999) + 1e-8);
  const double update1 = 0.1 * (-0.08 / 0.19) / (std::sqrt(0.004996 / 0.001999) + 1e-8);
  expect_near(param, {0.898101001998 - update0, -0.8981010004995 - update1});
  EXPECT_NEAR(param[0], 0.80488304, 1e-8);
  EXPECT_NEAR(param[1], -0.87146730, 1e-8);
}

// At step 1 the moments count as zeros (PyTorch's initial state) whatever the buffers held.
TEST(OptimAdamW, FirstStepIgnoresTheMomentsContents) {
  const AdamWConfig config{0.1, 0.9, 0.999, 1e-8, 0.01};
  std::vector<double> param{1, -1}, m{3, 3}, v{9, 9};
  adamw_step(config, 1, param, {0.5, -2}, m, v, 1);
  expect_near(m, {0.05, -0.2});
  expect_near(v, {0.00025, 0.004});
  expect_near(param, {0.899000002, -0.8990000005});
}

// The scheduled rate scales the decay too: lr 0.2 at factor 0.5, weight decay 0.5, g 0:
// p = 2 * (1 - 0.1 * 0.5) = 1.9, and the zero moments move nothing.
TEST(OptimAdamW, ScheduledRateScalesTheDecay) {
  const AdamWConfig config{0.2, 0.9, 0.999, 1e-8, 0.5};
  std::vector<double> param{2}, m{0}, v{0};
  adamw_step(config, 0.5, param, {0}, m, v, 1);
  expect_near(param, {1.9});
}

TEST(OptimSteps, SizeAndStepMisuse) {
  std::vector<double> param{1, 2}, one{0}, two{0, 0};
  EXPECT_EQ(message([&] { sgd_step(SgdConfig{0.1}, 1, param, one, two, 1); }),
            "optimizer step: grad has size 1; the param has size 2");
  EXPECT_EQ(message([&] {
              sgd_step(SgdConfig{0.1, 0.9}, 1, param, two, one, 1);
            }),
            "optimizer step: momentum_buffer has size 1; the param has size 2");
  EXPECT_EQ(message([&] { adamw_step(AdamWConfig{0.1}, 1, param, two, two, one, 1); }),
            "optimizer step: exp_avg_sq has size 1; the param has size 2");
  EXPECT_EQ(message([&] { adamw_step(AdamWConfig{0.1}, 1, param, two, two, two, 0); }),
            "optimizer step: step is 0; it must be >= 1");
}

// ---- schedule ------------------------------------------------------------------------------

// Warm-up 10, total 110, floor 0.1: s / 10 up to step 10, then 0.1 + 0.9 (1 + cos(pi (s - 10) / 100)) / 2.
TEST(OptimSchedule, WarmupThenCosine) {
  const Schedule schedule{Schedule::Kind::kWarmupCosine, 10, 110, 0.1};
  EXPECT_DOUBLE_EQ(schedule_factor(schedule, 1), 0.1);  // warm-up start
  EXPECT_DOUBLE_EQ(schedule_factor(schedule, 5), 0.5);  // warm-up middle
  EXPECT_DOUBLE_EQ(schedule_factor(schedule, 10), 1);   // warm-up end
  // cos(pi / 100) = 1 - 0.00049348 + 0.00000004 = 0.99950656: 0.1 + 0.45 * 1.99950656
  EXPECT_NEAR(schedule_factor(schedule, 11), 0.99977795, 1e-8);
  EXPECT_NEAR(schedule_factor(schedule, 60), (1 + 0.1) / 2, kTol);  // cosine midpoint
  EXPECT_NEAR(schedule_factor(schedule, 110), 0.1, kTol);           // the end
  EXPECT_DOUBLE_EQ(schedule_factor(schedule, 111), 0.1);            // past the end: clamped
  EXPECT_DOUBLE_EQ(schedule_factor(schedule, 100000), 0.1);
}

// No warm-up: step 1 is already a quarter of the way with total 4: (1 + cos(pi / 4)) / 2.
TEST(OptimSchedule, CosineWithoutWarmup) {
  const Schedule schedule{Schedule::Kind::kWarmupCosine, 0, 4, 0};
  EXPECT_NEAR(schedule_factor(schedule, 1), (1 + 0.70710678118654752) / 2, kTol);
  EXPECT_NEAR(schedule_factor(schedule, 2), 0.5, kTol);
  EXPECT_NEAR(schedule_factor(schedule, 4), 0, kTol);
}

// Warm-up as long as the run: the floor right after it.
TEST(OptimSchedule, WarmupFillsTheRun) {
  const Schedule schedule{Schedule::Kind::kWarmupCosine, 5, 5, 0.25};
  EXPECT_DOUBLE_EQ(schedule_factor(schedule, 5), 1);
  EXPECT_DOUBLE_EQ(schedule_factor(schedule, 6), 0.25);
}

TEST(OptimSchedule, ConstantIsOne) {
  const Schedule schedule{};
  EXPECT_EQ(schedule_factor(schedule, 1), 1);
  EXPECT_EQ(schedule_factor(schedule, 1000000), 1);
}

// ---- clipping ------------------------------------------------------------------------------

TEST(OptimClip, Coefficient) {
  EXPECT_DOUBLE_EQ(clip_coefficient(2, 1), 1 / 2.000001);  // above max: 0.49999975...
  EXPECT_DOUBLE_EQ(clip_coefficient(1, 1), 1 / 1.000001);  // at max: already below 1, as PyTorch
  EXPECT_DOUBLE_EQ(clip_coefficient(3, 0.5), 0.5 / 3.000001);
  EXPECT_EQ(clip_coefficient(0.5, 1), 1);  // below max: 1.999996 clamped
  EXPECT_EQ(clip_coefficient(0, 1), 1);
  EXPECT_EQ(clip_coefficient(kInf, 1), 0);
  EXPECT_TRUE(std::isnan(clip_coefficient(kNaN, 1)));  // torch.clamp keeps NaN
}

// ---- configuration errors ------------------------------------------------------------------

TEST(OptimConfig, ValidConfigsPass) {
  EXPECT_FALSE(config_problem(SgdConfig{0.1}));
  EXPECT_FALSE(config_problem(SgdConfig{0.1, 0.9, 0, 1e-4, true}));
  EXPECT_FALSE(config_problem(SgdConfig{0.1, 0.9, 1, 0, false}));
  EXPECT_FALSE(config_problem(AdamWConfig{1e-3}));
  EXPECT_FALSE(config_problem(AdamWConfig{1e-3, 0, 0, 1e-8, 0}));
  EXPECT_FALSE(config_problem(Schedule{}));
  EXPECT_FALSE(config_problem(Schedule{Schedule::Kind::kConstant, -5, -5, 7}));  // unused fields
  EXPECT_FALSE(config_problem(Schedule{Schedule::Kind::kWarmupCosine, 0, 1, 0}));
  EXPECT_FALSE(config_problem(Schedule{Schedule::Kind::kWarmupCosine, 10, 10, 1}));
  EXPECT_FALSE(max_norm_problem(1));
}

TEST(OptimConfig, SgdErrors) {
  auto text = [](const SgdConfig& config) { return message([&] { check_config(config); }); };
  EXPECT_EQ(text({0}), "optimizer.lr is 0; it must be > 0 and finite");
  EXPECT_EQ(text({-0.1}), "optimizer.lr is -0.1; it must be > 0 and finite");
  EXPECT_EQ(text({kInf}), "optimizer.lr is inf; it must be > 0 and finite");
  EXPECT_EQ(text({kNaN}), "optimizer.lr is nan; it must be > 0 and finite");
  EXPECT_EQ(text({0.1, 1}), "optimizer.momentum is 1; it must be in [0, 1)");
  EXPECT_EQ(text({0.1, -0.5}), "optimizer.momentum is -0.5; it must be in [0, 1)");
  EXPECT_EQ(text({0.1, 0.9, 1.5}), "optimizer.dampening is 1.5; it must be in [0, 1]");
  EXPECT_EQ(text({0.1, 0.9, 0, -0.01}), "optimizer.weight_decay is -0.01; it must be >= 0 and finite");
  EXPECT_EQ(text({0.1, 0.9, 0, kInf}), "optimizer.weight_decay is inf; it must be >= 0 and finite");
  EXPECT_EQ(text({0.1, 0, 0, 0, true}), "optimizer.momentum is 0; it must be > 0 with optimizer.nesterov");
  EXPECT_EQ(text({0.1, 0.9, 0.1, 0, true}), "optimizer.dampening is 0.1; it must be 0 with optimizer.nesterov");
}

TEST(OptimConfig, AdamWErrors) {
  auto text = [](const AdamWConfig& config) { return message([&] { check_config(config); }); };
  EXPECT_EQ(text({0}), "optimizer.lr is 0; it must be > 0 and finite");
  EXPECT_EQ(text({1e-3, -0.1}), "optimizer.betas[0] is -0.1; it must be in [0, 1)");
  EXPECT_EQ(text({1e-3, 0.9, 1.5}), "optimizer.betas[1] is 1.5; it must be in [0, 1)");
  EXPECT_EQ(text({1e-3, 0.9, 1}), "optimizer.betas[1] is 1; it must be in [0, 1)");
  EXPECT_EQ(text({1e-3, 0.9, 0.999, 0}), "optimizer.eps is 0; it must be > 0 and finite");
  EXPECT_EQ(text({1e-3, 0.9, 0.999, -1e-8}), "optimizer.eps is -1e-08; it must be > 0 and finite");
  EXPECT_EQ(text({1e-3, 0.9, 0.999, 1e-8, -1}), "optimizer.weight_decay is -1; it must be >= 0 and finite");
}

TEST(OptimConfig, ScheduleErrors) {
  auto text = [](int64_t warmup, int64_t total, double min_ratio) {
    return message([&] { check_config(Schedule{Schedule::Kind::kWarmupCosine, warmup, total, min_ratio}); });
  };
  EXPECT_EQ(text(-1, 100, 0), "optimizer.schedule.warmup_steps is -1; it must be >= 0");
  EXPECT_EQ(text(0, 0, 0), "optimizer.schedule.total_steps is 0; it must be >= 1");
  EXPECT_EQ(text(200, 100, 0),
            "optimizer.schedule.warmup_steps is 200; it must be <= optimizer.schedule.total_steps (100)");
  EXPECT_EQ(text(10, 100, 1.5), "optimizer.schedule.min_lr_ratio is 1.5; it must be in [0, 1]");
  EXPECT_EQ(text(10, 100, -0.1), "optimizer.schedule.min_lr_ratio is -0.1; it must be in [0, 1]");
}

TEST(OptimConfig, MaxNormErrors) {
  EXPECT_EQ(message([] { check_max_norm(0); }), "optimizer.max_grad_norm is 0; it must be > 0 and finite");
  EXPECT_EQ(message([] { check_max_norm(kNaN, "clip"); }), "clip is nan; it must be > 0 and finite");
}

// The key, relative to the section, is for pointing at the value in the spec.
TEST(OptimConfig, ProblemNamesTheKeyAndSection) {
  const std::optional<ConfigProblem> found = config_problem(AdamWConfig{1e-3, 0.9, 1.5}, "train.opt");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->key, "betas[1]");
  EXPECT_EQ(found->message, "train.opt.betas[1] is 1.5; it must be in [0, 1)");
  const std::optional<ConfigProblem> nesterov = config_problem(SgdConfig{0.1, 0, 0, 0, true});
  ASSERT_TRUE(nesterov);
  EXPECT_EQ(nesterov->key, "momentum");
}

}  // namespace
}  // namespace teeny
