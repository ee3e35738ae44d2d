// What batchnorm2d in training mode (ops/batchnorm2d.cpp), its gradients
// (ops/grad_batchnorm2d.cpp) and its running statistics' update (ops/train_batchnorm_stats.cpp)
// share: the per-channel batch statistics over x [B, C, H, W], on the GPU (the launch of
// ops/kernels/batchnorm_train.cuh's tn_bn_batch_stats) and on the host.
#pragma once

#include <string>
#include <vector>

#include "core/op.h"

namespace teeny::ops {

// A block per channel for the per-channel sums; one thread per element for the elementwise steps.
inline constexpr int kBatchNormThreads = 256;

// Throws OpError("inputs", ...) where every channel of x [B, C, H, W] holds one value (B, H and W
// all 1), as PyTorch refuses to train on: the batch variance would be 0 over 0.
void check_batch_statistics(const std::string& op, const TensorType& x);

// Adds to `lowering` the scratch buffer "stats" (f32 [2C]: each channel's batch mean and
// 1 / sqrt(var + eps)) and the launch computing it from input `x_input` of ctx.
void add_batch_stats(Lowering& lowering, const OpContext& ctx, int x_input, const std::string& kernel_prefix);

// The "stats" scratch arg, for the launches that read it.
KernelArg stats_arg();

// Each channel's mean and biased variance over B * H * W values, in double.
struct ChannelMoments {
  std::vector<double> mean, var;
  int64_t count = 0;  // values per channel
};
ChannelMoments channel_moments(const HostTensor& x);

}  // namespace teeny::ops
