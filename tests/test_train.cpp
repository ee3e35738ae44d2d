// `teeny train` on the host reference executor (core/trainer.h, cli/train.cpp): an SGD step
// against one worked out here, a resumed run against an uninterrupted one, the loss going down,
// the progress lines, a non-finite loss and every user-facing error (exact text). GpuTrain (label
// gpu) trains on the GPU with --check against the same run on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "core/binding.h"
#include "core/bundle.h"
#include "core/checkpoint.h"
#include "core/executor.h"
#include "core/npy.h"
#include "core/run_data.h"
#include "core/safetensors.h"
#include "core/train_data.h"
#include "tests/file_test_util.h"
#include "tests/gpu_test_util.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

using testing::Command;
using testing::run_teeny;
using testing::ScratchDir;

constexpr int kSamples = 8;

// fc: y = x W^T + b, W [2, 3], b [2], against targets with mse_loss; batches of B = 4.
std::string fit_spec(const std::string& optimizer, const std::string& extra_train = "") {
  return fmt::format(
      "name: fit\n"
      "dims:\n"
      "  B: {{min: 1, max: 64, default: 4}}\n"
      "inputs:\n"
      "  x: {{dtype: f32, shape: [B, 3]}}\n"
      "  y: {{dtype: f32, shape: [B, 2]}}\n"
      "nodes:\n"
      "  - {{name: fc, op: linear, inputs: [x], attrs: {{out_features: 2}}}}\n"
      "  - {{name: loss, op: mse_loss, inputs: [fc, y]}}\n"
      "outputs: [loss]\n"
      "train:\n"
      "  loss: loss\n"
      "{}{}",
      optimizer.empty() ? "" : "  optimizer: " + optimizer + "\n", extra_train);
}

// x: sample i is (sin i, cos 2i, i / 8); y = x A^T + c with A = [[1, -2, 0.5], [0.3, 0.7, -1]],
// c = (0.1, -0.2): a fit the linear layer can make exactly.
HostTensor samples_x(double poison = 0) {
  HostTensor x{DType::kF32, {kSamples, 3}, {}};
  for (int i = 0; i < kSamples; ++i)
    for (double v : {std::sin(i), std::cos(2.0 * i), i / 8.0})
      x.data.push_back(round_to_dtype(v + poison, DType::kF32));
  return x;
}

HostTensor targets_y(const HostTensor& x) {
  const double a[2][3] = {{1, -2, 0.5}, {0.3, 0.7, -1}}, c[2] = {0.1, -0.2};
  HostTensor y{DType::kF32, {kSamples, 2}, {}};
  for (int i = 0; i < kSamples; ++i)
    for (int o = 0; o < 2; ++o) {
      double v = c[o];
      for (int k = 0; k < 3; ++k) v += a[o][k] * x.data[i * 3 + k];
      y.data.push_back(round_to_dtype(v, DType::kF32));
    }
  return y;
}

class Train : public ::testing::Test {
 protected:
  // Writes the spec and the data, compiles the bundle fit.teeny in the scratch directory.
  void compile(const std::string& spec, double poison = 0) {
    testing::spit(dir_.path() / "fit.yaml", spec);
    const HostTensor x = samples_x(poison);
    write_npy(dir_.str("x.npy"), x);
    write_npy(dir_.str("y.npy"), targets_y(samples_x()));
    const Command compiled = teeny("compile fit.yaml -o fit.teeny");
    ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
  }
  Command teeny(const std::string& args) { return run_teeny(args, {dir_.str(), {}}); }
  Command train(const std::string& args) {
    return teeny("train fit.teeny --device cpu --data x=x.npy --data y=y.npy " + args);
  }
  std::map<std::string, HostTensor> saved(const std::string& file) {
    std::map<std::string, HostTensor> tensors;
    for (SafetensorsEntry& entry : read_safetensors(dir_.str(file))) tensors[entry.name] = std::move(entry.tensor);
    return tensors;
  }

  ScratchDir dir_;
};

// Every "step k/N  loss L  ..." line's loss.
std::vector<double> losses(const std::string& out) {
  std::vector<double> values;
  const std::regex line(R"(step \d+/\d+  loss (\S+)  [0-9.]+ ms  [0-9]+ samples/s)");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it)
    values.push_back(std::stod((*it)[1]));
  return values;
}

TEST_F(Train, OneSgdStepIsTheStepWorkedOutByHand) {
  compile(fit_spec("{type: sgd, lr: 0.1}"));
  const double w0[2][3] = {{0.2, -0.1, 0.4}, {0.05, 0.3, -0.25}}, b0[2] = {0.01, -0.02};
  HostTensor weight{DType::kF32, {2, 3}, {}}, bias{DType::kF32, {2}, {b0[0], b0[1]}};
  for (const auto& row : w0) weight.data.insert(weight.data.end(), row, row + 3);
  write_safetensors(dir_.str("w0.safetensors"), {{"fc.weight", weight}, {"fc.bias", bias}});
  const Command run = train("--steps 1 --weights w0.safetensors --save one.safetensors");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");

  // The first batch: samples order[0..3] of epoch 0 (core/train_data.h).
  const std::vector<int64_t> order = epoch_order(kSamples, 0, 0);
  const HostTensor x = samples_x(), y = targets_y(x);
  double grad_w[2][3] = {}, grad_b[2] = {};
  for (int r = 0; r < 4; ++r) {
    const int64_t s = order[r];
    for (int o = 0; o < 2; ++o) {
      double pred = b0[o];
      for (int k = 0; k < 3; ++k) pred += w0[o][k] * x.data[s * 3 + k];
      const double g = 2 * (pred - y.data[s * 2 + o]) / 8;  // d mean / d pred over 4 x 2 elements
      grad_b[o] += g;
      for (int k = 0; k < 3; ++k) grad_w[o][k] += g * x.data[s * 3 + k];
    }
  }
  const std::map<std::string, HostTensor> params = saved("one.safetensors");
  for (int o = 0; o < 2; ++o) {
    EXPECT_NEAR(params.at("fc.bias").data[o], b0[o] - 0.1 * grad_b[o], 1e-6);
    for (int k = 0; k < 3; ++k)
      EXPECT_NEAR(params.at("fc.weight").data[o * 3 + k], w0[o][k] - 0.1 * grad_w[o][k], 1e-6);
  }
  EXPECT_NE(run.out.find("saved one.safetensors (step 1)\n"), std::string::npos) << run.out;
}

TEST_F(Train, ProgressLinesAndTheLossGoingDown) {
  compile(fit_spec("{type: sgd, lr: 0.2, momentum: 0.9}"));
  const Command run = train("--steps 60 --seed 3");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out.rfind("bundle fit.teeny (graph 'fit'), B=4: steps 1 to 60 on the host reference executor\n", 0), 0u)
      << run.out;
  // fc.weight [2, 3] and fc.bias [2], their momentum buffers (f32), the i32 step counter: 68 bytes.
  EXPECT_TRUE(std::regex_search(run.out, std::regex(R"(\nmemory: activations and gradients [0-9.]+ [KM]?i?B planned )"
                                                    R"(by liveness \(naive [0-9.]+ [KM]?i?B\), parameters and )"
                                                    R"(optimizer state 68 B\n)")))
      << run.out;
  const std::vector<double> loss = losses(run.out);
  ASSERT_EQ(loss.size(), 60u) << run.out;
  EXPECT_LT(loss.back(), 0.01 * loss.front()) << run.out;  // the data is an exact linear fit
  EXPECT_TRUE(std::regex_search(run.out, std::regex(R"(trained 60 steps in [0-9.]+ s: [0-9.]+ ms per step after )"
                                                    R"(the first \([0-9]+ samples/s\); loss \S+ -> \S+\n$)")))
      << run.out;
  const Command sparse = train("--steps 5 --log-every 2");
  EXPECT_EQ(losses(sparse.out).size(), 3u) << sparse.out;  // steps 2, 4 and the last
}

TEST_F(Train, AResumedRunIsTheUninterruptedRun) {
  compile(fit_spec("{type: adamw, lr: 0.05, schedule: warmup_cosine, warmup_steps: 2, total_steps: 5}"));
  ASSERT_EQ(train("--steps 5 --save all.safetensors").exit_code, 0);
  const Command first = train("--steps 2 --save part.safetensors");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const Command rest = train("--steps 5 --resume part.safetensors --save rest.safetensors");
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_NE(rest.out.find("steps 3 to 5"), std::string::npos) << rest.out;
  EXPECT_EQ(losses(rest.out).size(), 3u);
  const auto all = saved("all.safetensors"), resumed = saved("rest.safetensors");
  ASSERT_EQ(all.size(), 6u);  // fc.weight, fc.bias and AdamW's two states of each
  for (const auto& [name, tensor] : all) EXPECT_EQ(resumed.at(name).data, tensor.data) << name;  // bitwise
  EXPECT_EQ(read_safetensors_file(dir_.str("rest.safetensors")).metadata.at("step"), "5");
}

TEST_F(Train, SaveEveryKeepsTheLastGoodStep) {
  compile(fit_spec("{type: sgd, lr: 0.1}"));
  // The second batch of epoch 0 holds NaNs: step 2 fails, after step 1's checkpoint.
  HostTensor x = samples_x();
  const std::vector<int64_t> order = epoch_order(kSamples, 0, 0);
  for (int r = 4; r < 8; ++r) x.data[order[r] * 3] = NAN;
  write_npy(dir_.str("x.npy"), x);
  const Command run = train("--steps 3 --save every.safetensors --save-every 1");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("step 2: the loss is nan"), std::string::npos) << run.err;
  EXPECT_EQ(read_safetensors_file(dir_.str("every.safetensors")).metadata.at("step"), "1");
}

TEST_F(Train, AWeightsFileHoldsEveryTrainedParam) {
  compile(fit_spec("{type: sgd, lr: 0.1}"));
  write_safetensors(dir_.str("w.safetensors"), {{"fc.weight", HostTensor{DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6}}}});
  const Command partial = train("--steps 1 --weights w.safetensors");
  EXPECT_EQ(partial.exit_code, 1);
  EXPECT_EQ(partial.err,
            "teeny: error: weights w.safetensors do not match the bundle: missing fc.bias [2] f32\n"
            "note: the bundle's trained parameters: fc.weight [2, 3] f32, fc.bias [2] f32\n");
}

TEST_F(Train, ANonFiniteLossStopsNamingTheFirstNonFiniteValue) {
  compile(fit_spec("{type: sgd, lr: 0.1}"), NAN);
  const Command bad_data = train("--steps 3 --save never.safetensors");
  EXPECT_EQ(bad_data.exit_code, 1);
  EXPECT_EQ(bad_data.err,
            "teeny: error: step 1: the loss is nan; the run stops, the step's updates skipped\n"
            "note: the batch's input 'x' holds a NaN or an infinity\n");
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "never.safetensors"));
  // Inputs near 1e30 keep fc finite in f32, but not the squares of the loss.
  compile(fit_spec("{type: sgd, lr: 0.1}"), 1e30);
  EXPECT_EQ(train("--steps 3").err,
            "teeny: error: step 1: the loss is inf; the run stops, the step's updates skipped\n"
            "note: the first non-finite value is the output of node 'loss' (mse_loss), in the forward pass\n");
}

TEST_F(Train, Errors) {
  compile(fit_spec("{type: sgd, lr: 0.1}"));
  auto error = [&](const std::string& args) {
    const Command run = teeny("train fit.teeny --device cpu " + args);
    EXPECT_EQ(run.exit_code, 1) << args;
    return run.err;
  };
  EXPECT_EQ(error("--steps 2 --data x=x.npy"),
            "teeny: error: bundle fit.teeny: no data for graph input y\n"
            "note: give each input a --data NAME=FILE.npy of samples, or --tokens INPUT,TARGET=FILE for a language "
            "model's token ids\n");
  EXPECT_EQ(error("--steps 2 --data x=x.npy --data yy=y.npy"),
            "teeny: error: --data yy=y.npy: bundle fit.teeny has no graph input 'yy' (did you mean 'y'?)\n"
            "note: its inputs: x, y\n");
  EXPECT_EQ(error("--steps 2 --data x=x.npy --data y"), "teeny: error: malformed --data 'y': expected NAME=FILE.npy\n");
  EXPECT_EQ(error("--steps 2 --data x=x.npy --tokens x,y=t.bin"),
            "teeny: error: --tokens x,y=t.bin: --tokens and --data cannot be combined: token data feeds a language "
            "model's two inputs\n");
  EXPECT_EQ(error("--steps 2 --tokens x,x=t.bin"),
            "teeny: error: --tokens x,x=t.bin: the token inputs and their targets must be two graph inputs\n");
  EXPECT_EQ(error("--steps 2 --tokens x,y=t.bin"),
            "teeny: error: --tokens x,y: graph input 'x' is f32 [4, 3]; token inputs are i32 [batch, sequence]\n");
  EXPECT_EQ(error("--steps 2 --tokens x=t.bin"),
            "teeny: error: malformed --tokens 'x=t.bin': expected INPUT,TARGET=FILE (.npy or .bin)\n");
  const std::string data = "--data x=x.npy --data y=y.npy ";
  EXPECT_EQ(error(data + "--steps 0"), "teeny: error: --steps must be at least 1, got 0\n");
  EXPECT_EQ(error(data + "--steps 2 --save-every 1"), "teeny: error: --save-every needs --save FILE.safetensors\n");
  EXPECT_EQ(error(data + "--steps 2 --check"),
            "teeny: error: --check compares the GPU with the host reference; it cannot be combined with --device "
            "cpu\n");
  EXPECT_EQ(error(data + "--steps 2 --resume a.safetensors --weights b.safetensors"),
            "teeny: error: --weights and --resume cannot be combined: the checkpoint holds the params\n");
  ASSERT_EQ(train("--steps 2 --save two.safetensors").exit_code, 0);
  EXPECT_EQ(error(data + "--steps 2 --resume two.safetensors"),
            "teeny: error: --resume two.safetensors: the checkpoint is at step 2; --steps 2 leaves nothing to train\n");
  EXPECT_EQ(error("--steps 2 --data x=x.npy --data y=x.npy"),
            "teeny: error: x.npy: the file's shape [8, 3] does not fit input 'y' [4, 2]: it must be [N, 2] for N "
            "samples\n");
}

// A bigram model on token ids 0, 1, ..., 10, 0, 1, ... (a .bin of uint16): each next token is
// the current one plus one, which an embedding and a linear head learn.
TEST_F(Train, TokenDataTrainsALanguageModel) {
  testing::spit(dir_.path() / "lm.yaml",
                "name: lm\n"
                "dims:\n"
                "  B: {min: 1, max: 8, default: 4}\n"
                "  S: {min: 1, max: 16, default: 8}\n"
                "inputs:\n"
                "  idx: {dtype: i32, shape: [B, S]}\n"
                "  tgt: {dtype: i32, shape: [B, S]}\n"
                "nodes:\n"
                "  - {name: emb, op: embedding, inputs: [idx], attrs: {num_embeddings: 11, dim: 16}}\n"
                "  - {name: head, op: linear, inputs: [emb], attrs: {out_features: 11}}\n"
                "  - {name: loss, op: cross_entropy, inputs: [head, tgt]}\n"
                "outputs: [loss]\n"
                "train:\n"
                "  loss: loss\n"
                "  optimizer: {type: adamw, lr: 0.05}\n");
  std::string tokens;
  for (int i = 0; i < 500; ++i) tokens += std::string{static_cast<char>(i % 11), '\0'};  // little-endian uint16
  testing::spit(dir_.path() / "tokens.bin", tokens);
  ASSERT_EQ(teeny("compile lm.yaml -o lm.teeny").exit_code, 0);
  const Command run = teeny("train lm.teeny --device cpu --tokens idx,tgt=tokens.bin --steps 40");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::regex line(R"(step (\d+)/40  loss (\S+)  [0-9.]+ ms  [0-9]+ tokens/s)");
  std::vector<double> loss;
  for (std::sregex_iterator it(run.out.begin(), run.out.end(), line), end; it != end; ++it)
    loss.push_back(std::stod((*it)[2]));
  ASSERT_EQ(loss.size(), 40u) << run.out;
  EXPECT_NEAR(loss.front(), std::log(11.0), 0.5);  // small random logits: about uniform
  EXPECT_LT(loss.back(), 0.25) << run.out;
  EXPECT_EQ(teeny("train lm.teeny --device cpu --tokens idx,loss=tokens.bin --steps 1").err,
            "teeny: error: --tokens idx,loss=tokens.bin: bundle lm.teeny has no graph input 'loss'\n"
            "note: its inputs: idx, tgt\n");
}

class GpuTrain : public Train {};

// The first step node by node against the host reference (every gradient and update), then the
// run's losses and final params against the host executor's: f32 all through, so they agree to
// f32 rounding, compounded over the steps.
TEST_F(GpuTrain, TrainsAsTheHostReferenceDoes) {
  TEENY_GPU_OR_SKIP(device);
  for (const char* optimizer : {"{type: sgd, lr: 0.2, momentum: 0.9}", "{type: adamw, lr: 0.05}"}) {
    SCOPED_TRACE(optimizer);
    compile(fit_spec(optimizer, "  clip_grad_norm: 1.0\n"));
    const std::string args = "train fit.teeny --data x=x.npy --data y=y.npy --steps 20 --seed 5 ";
    const Command gpu = teeny(args + "--check --save gpu.safetensors");
    ASSERT_EQ(gpu.exit_code, 0) << gpu.out << gpu.err;
    EXPECT_NE(gpu.out.find("check: ok: all "), std::string::npos) << gpu.out;
    const Command cpu = teeny(args + "--device cpu --save cpu.safetensors");
    ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
    const std::vector<double> on_gpu = losses(gpu.out), on_cpu = losses(cpu.out);
    ASSERT_EQ(on_gpu.size(), 20u) << gpu.out;
    ASSERT_EQ(on_cpu.size(), 20u) << cpu.out;
    for (size_t i = 0; i < on_gpu.size(); ++i) EXPECT_NEAR(on_gpu[i], on_cpu[i], 1e-4 * on_cpu[0]) << "step " << i + 1;
    const auto a = saved("gpu.safetensors"), b = saved("cpu.safetensors");
    for (const auto& [name, tensor] : b)
      for (size_t i = 0; i < tensor.data.size(); ++i) EXPECT_NEAR(a.at(name).data[i], tensor.data[i], 1e-4) << name;
  }
}

// On the GPU a step's updates run behind its backward pass without waiting for the host: a
// non-finite loss halts the step counter there, and the updates (and every later step's) leave
// the params as they were. Two steps replayed as CUDA graphs, the first on a batch holding a NaN.
TEST_F(GpuTrain, ANonFiniteLossLeavesTheParamsOnTheGpu) {
  TEENY_GPU_OR_SKIP(device);
  compile(fit_spec("{type: adamw, lr: 0.05}", "  clip_grad_norm: 1.0\n"), NAN);
  const Bundle bundle = read_bundle(dir_.str("fit.teeny"));
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {}), "fit.teeny");
  DataOptions options;
  options.fill = ParamFill::kRandom;
  RunData data = prepare_data(bound, options);
  data.inputs["x"] = samples_x(NAN);
  data.inputs["x"].shape[0] = 4;
  data.inputs["x"].data.resize(12);
  data.inputs["y"] = targets_y(samples_x());
  data.inputs["y"].shape[0] = 4;
  data.inputs["y"].data.resize(8);
  bind_launches(bound, device->facts());
  GpuExecutor executor(device, bound);
  executor.upload(data);
  executor.run(2, true);
  EXPECT_TRUE(std::isnan(executor.read(bundle.loss).data.at(0)));
  EXPECT_EQ(executor.read_param("optim_step.count").data, std::vector<double>{-1});
  for (const char* name : {"fc.weight", "fc.bias"})
    EXPECT_EQ(executor.read_param(name).data, data.params.at(name).data) << name;
  for (const char* name : {"adamw_fc_weight.exp_avg", "adamw_fc_weight.exp_avg_sq"})
    for (double v : executor.read_param(name).data) EXPECT_EQ(v, 0.0) << name;
}

TEST_F(Train, BundlesThatDoNotTrain) {
  compile(fit_spec(""));
  EXPECT_EQ(train("--steps 1").err,
            "teeny: error: bundle fit.teeny computes gradients only: its train: section has no optimizer\n"
            "note: docs/training.md describes training bundles and teeny train\n");
  testing::spit(dir_.path() / "fit.yaml", fit_spec("").substr(0, fit_spec("").find("train:")));
  ASSERT_EQ(teeny("compile fit.yaml -o fit.teeny").exit_code, 0);
  EXPECT_EQ(train("--steps 1").err,
            "teeny: error: bundle fit.teeny does not train: its spec has no train: section\n"
            "note: docs/training.md describes training bundles and teeny train\n");
}

}  // namespace
}  // namespace teeny
