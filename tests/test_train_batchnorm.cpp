// batchnorm2d in a training run on the host reference executor (`teeny train --device cpu`): two
// steps move the running statistics as PyTorch's training forward does, worked out here from the
// batches of "Data order", and the checkpoint holds them beside the params while the optimizer
// keeps no state for them.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "core/npy.h"
#include "core/safetensors.h"
#include "core/train_data.h"
#include "tests/file_test_util.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

using testing::Command;
using testing::run_teeny;
using testing::ScratchDir;

constexpr int kSamples = 8, kBatch = 4, kChannels = 2, kPlane = 6;  // images 2x3
constexpr double kMomentum = 0.25;

const char* kSpec =
    "name: bn\n"
    "dims:\n"
    "  B: {min: 1, max: 64, default: 4}\n"
    "inputs:\n"
    "  x: {dtype: f32, shape: [B, 2, 2, 3]}\n"
    "  y: {dtype: f32, shape: [B, 2, 2, 3]}\n"
    "nodes:\n"
    "  - {name: bn, op: batchnorm2d, inputs: [x], attrs: {momentum: 0.25}}\n"
    "  - {name: loss, op: mse_loss, inputs: [bn, y]}\n"
    "outputs: [loss]\n"
    "train:\n"
    "  loss: loss\n"
    "  optimizer: {type: adamw, lr: 0.01}\n";

// Sample s, channel c, pixel p: values whose channels differ in mean and spread.
double sample_value(int s, int c, int p) { return (c + 1) * std::sin(1.3 * s + 0.7 * p) + 2 * c - 0.5; }

TEST(TrainBatchNorm, TwoStepsMoveTheRunningStatisticsAsPyTorchDoes) {
  ScratchDir dir;
  testing::spit(dir.path() / "bn.yaml", kSpec);
  HostTensor x{DType::kF32, {kSamples, kChannels, 2, 3}, {}}, y{DType::kF32, {kSamples, kChannels, 2, 3}, {}};
  for (int s = 0; s < kSamples; ++s)
    for (int c = 0; c < kChannels; ++c)
      for (int p = 0; p < kPlane; ++p) {
        x.data.push_back(round_to_dtype(sample_value(s, c, p), DType::kF32));
        y.data.push_back(0.1 * p);
      }
  write_npy(dir.str("x.npy"), x);
  write_npy(dir.str("y.npy"), y);
  const std::vector<double> mean0 = {0.5, -1}, var0 = {2, 0.5};
  write_safetensors(dir.str("w0.safetensors"), {{"bn.weight", HostTensor{DType::kF32, {2}, {1, 1}}},
                                                {"bn.bias", HostTensor{DType::kF32, {2}, {0, 0}}},
                                                {"bn.running_mean", HostTensor{DType::kF32, {2}, mean0}},
                                                {"bn.running_var", HostTensor{DType::kF32, {2}, var0}}});
  const testing::CommandContext context{dir.str(), {}};
  const Command compiled = run_teeny("compile bn.yaml -o bn.teeny", context);
  ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
  const Command trained = run_teeny(
      "train bn.teeny --device cpu --data x=x.npy --data y=y.npy --steps 2 --weights w0.safetensors "
      "--save two.safetensors",
      context);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;

  // Steps 0 and 1 take batches 0 and 1 of epoch 0; each moves the statistics by momentum towards
  // the batch's mean and unbiased variance over B * H * W = 24 values a channel.
  const std::vector<int64_t> order = epoch_order(kSamples, 0, 0);
  std::vector<double> mean = mean0, var = var0;
  for (int step = 0; step < 2; ++step)
    for (int c = 0; c < kChannels; ++c) {
      std::vector<double> values;
      for (int r = 0; r < kBatch; ++r)
        for (int p = 0; p < kPlane; ++p)
          values.push_back(x.data[(order[step * kBatch + r] * kChannels + c) * kPlane + p]);
      double m = 0, ss = 0;
      for (double v : values) m += v / values.size();
      for (double v : values) ss += (v - m) * (v - m);
      mean[c] = (1 - kMomentum) * mean[c] + kMomentum * m;
      var[c] = (1 - kMomentum) * var[c] + kMomentum * ss / (values.size() - 1);
    }
  std::map<std::string, HostTensor> saved;
  for (SafetensorsEntry& entry : read_safetensors(dir.str("two.safetensors")))
    saved[entry.name] = std::move(entry.tensor);
  for (int c = 0; c < kChannels; ++c) {
    EXPECT_NEAR(saved.at("bn.running_mean").data[c], mean[c], 1e-6) << c;
    EXPECT_NEAR(saved.at("bn.running_var").data[c], var[c], 1e-6) << c;
  }
  // The params train and keep optimizer state; the buffers keep none.
  std::vector<std::string> names;
  for (const auto& [name, tensor] : saved) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"bn.bias", "bn.running_mean", "bn.running_var", "bn.weight",
                                             "optimizer.bn.bias.exp_avg", "optimizer.bn.bias.exp_avg_sq",
                                             "optimizer.bn.weight.exp_avg", "optimizer.bn.weight.exp_avg_sq"}));
}

}  // namespace
}  // namespace teeny
