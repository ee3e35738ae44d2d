// Training checkpoints: the file's layout (names, metadata), bit-exact round trips, atomic saves,
// and every refusal with its exact message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/checkpoint.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "tests/error_test_util.h"
#include "tests/file_test_util.h"

namespace teeny {
namespace {

namespace fs = std::filesystem;
using testing::slurp;

uint32_t f32_bits(double value) {
  const auto f = static_cast<float>(value);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

double f32_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

class CheckpointTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name = "ckpt.safetensors") const { return dir_.str(name); }

  // A two-layer graph trained with AdamW: bf16 params with f32 master weights.
  static Checkpoint sample() {
    Checkpoint c;
    c.step = 1234;
    c.graph = "mlp";
    c.optimizer = "adamw";
    c.params["fc1.weight"] = HostTensor{DType::kBF16, {2, 2}, {0.5, -1.5, 2, 0.25}};
    c.params["fc1.bias"] = HostTensor{DType::kF32, {2}, {0.1f, -0.0}};
    for (const char* param : {"fc1.weight", "fc1.bias"}) {
      const std::vector<int64_t> shape = c.params[param].shape;
      const size_t n = c.params[param].data.size();
      c.state[checkpoint_state_name(param, "exp_avg")] = HostTensor{DType::kF32, shape, std::vector<double>(n, 0.5)};
      c.state[checkpoint_state_name(param, "exp_avg_sq")] =
          HostTensor{DType::kF32, shape, std::vector<double>(n, 0.25)};
    }
    c.state["optimizer.fc1.weight.master"] = HostTensor{DType::kF32, {2, 2}, {0.5f, -1.5f, 2.0001f, 0.25f}};
    return c;
  }

  static CheckpointExpectation expectation_of(const Checkpoint& c) {
    CheckpointExpectation expect{c.graph, c.optimizer, {}, {}};
    for (const auto& [name, tensor] : c.params) expect.params[name] = {tensor.dtype, tensor.shape};
    for (const auto& [name, tensor] : c.state) expect.state[name] = {tensor.dtype, tensor.shape};
    return expect;
  }

  // The message of loading `file` into sample()'s graph.
  std::string load_error(const std::string& file) const {
    return testing::message([&] { load_checkpoint(file, expectation_of(sample())); });
  }

  // A file with sample()'s tensors and `metadata`.
  std::string with_metadata(const std::map<std::string, std::string>& metadata) const {
    std::map<std::string, HostTensor> tensors = sample().params;
    for (const auto& [name, tensor] : sample().state) tensors[name] = tensor;
    write_safetensors(path("meta.safetensors"), tensors, metadata);
    return path("meta.safetensors");
  }

  static std::map<std::string, std::string> good_metadata() {
    return {
        {"format", "teeny-checkpoint"}, {"version", "1"}, {"step", "1234"}, {"graph", "mlp"}, {"optimizer", "adamw"}};
  }

  testing::ScratchDir dir_;
};

TEST_F(CheckpointTest, ParamsKeepTheirGraphNamesAndStateIsUnderOptimizer) {
  save_checkpoint(path(), sample());
  const SafetensorsFile file = read_safetensors_file(path());
  std::vector<std::string> names;
  for (const SafetensorsEntry& entry : file.entries) names.push_back(entry.name);
  EXPECT_EQ(names, (std::vector<std::string>{"fc1.bias", "fc1.weight", "optimizer.fc1.bias.exp_avg",
                                             "optimizer.fc1.bias.exp_avg_sq", "optimizer.fc1.weight.exp_avg",
                                             "optimizer.fc1.weight.exp_avg_sq", "optimizer.fc1.weight.master"}));
  EXPECT_EQ(file.entries[1].dtype, "BF16");
  EXPECT_EQ(file.metadata, good_metadata());
  EXPECT_EQ(checkpoint_state_name("fc1.weight", "momentum_buffer"), "optimizer.fc1.weight.momentum_buffer");
}

TEST_F(CheckpointTest, RoundTripIsBitExact) {
  Checkpoint c = sample();
  // f32: the smallest subnormal, -0, the largest finite, infinity, a NaN with a payload.
  const std::vector<uint32_t> f32{0x3dcccccd, 0x00000001, 0x80000000, 0x7f7fffff, 0xff800000, 0x7fc00001};
  // bf16: 1.0078125, the smallest subnormal, -inf, a NaN with a payload, -0.
  const std::vector<uint16_t> bf16{0x3f81, 0x0001, 0xff80, 0x7fc1, 0x8000, 0x4049};
  c.state["optimizer.fc1.weight.master"] = HostTensor{DType::kF32, {2, 3}, {}};
  for (uint32_t bits : f32) c.state["optimizer.fc1.weight.master"].data.push_back(f32_from_bits(bits));
  c.params["fc1.weight"] = HostTensor{DType::kBF16, {2, 3}, {}};
  for (uint16_t bits : bf16) c.params["fc1.weight"].data.push_back(bf16_bits_to_float(bits));
  for (const char* state : {"exp_avg", "exp_avg_sq"}) {
    c.state[checkpoint_state_name("fc1.weight", state)] = HostTensor{DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6}};
  }
  save_checkpoint(path(), c);

  const Checkpoint loaded = load_checkpoint(path(), expectation_of(c));
  EXPECT_EQ(loaded.step, 1234);
  EXPECT_EQ(loaded.graph, "mlp");
  EXPECT_EQ(loaded.optimizer, "adamw");
  ASSERT_EQ(loaded.params.size(), 2u);
  ASSERT_EQ(loaded.state.size(), 5u);
  const HostTensor& master = loaded.state.at("optimizer.fc1.weight.master");
  const HostTensor& weight = loaded.params.at("fc1.weight");
  EXPECT_EQ(master.dtype, DType::kF32);
  EXPECT_EQ(weight.dtype, DType::kBF16);
  EXPECT_EQ(weight.shape, (std::vector<int64_t>{2, 3}));
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(f32_bits(master.data[i]), f32[i]) << i;
  for (size_t i = 0; i < bf16.size(); ++i) {
    EXPECT_EQ(float_to_bf16_bits(static_cast<float>(weight.data[i])), bf16[i]) << i;
  }
  EXPECT_EQ(loaded.params.at("fc1.bias").data, c.params.at("fc1.bias").data);
  EXPECT_TRUE(std::signbit(loaded.params.at("fc1.bias").data[1]));
}

// A save that fails part-way (the file size limit, as a full disk would) leaves the previous
// checkpoint as it was and no temporary file. Runs in a child so that the limit stays there.
TEST_F(CheckpointTest, AFailedSaveLeavesThePreviousFile) {
  save_checkpoint(path(), sample());
  const std::string before = slurp(path());

  Checkpoint big = sample();
  big.step = 1235;
  big.state["optimizer.fc1.weight.master"] = HostTensor{DType::kF32, {1 << 18}, std::vector<double>(1 << 18, 1.0)};
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG instead of killing
    rlimit limit{64 * 1024, 64 * 1024};
    setrlimit(RLIMIT_FSIZE, &limit);
    try {
      save_checkpoint(path(), big);
      _exit(10);
    } catch (const Error& e) {
      _exit(e.message() == "cannot write " + path() + ": File too large" ? 0 : 11);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: the save succeeded; 11: another error";

  EXPECT_EQ(slurp(path()), before);
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir_.path())) files.push_back(entry.path().filename().string());
  EXPECT_EQ(files, std::vector<std::string>{"ckpt.safetensors"});
  EXPECT_EQ(load_checkpoint(path(), expectation_of(sample())).step, 1234);
}

TEST_F(CheckpointTest, SaveRefusesWhatItCouldNotLoadBack) {
  save_checkpoint(path(), sample());
  const std::string before = slurp(path());
  Checkpoint c = sample();
  c.step = -1;
  EXPECT_EQ(testing::message([&] { save_checkpoint(path(), c); }), "writing " + path() + ": step -1 is negative");
  c = sample();
  c.state["fc1.weight.exp_avg"] = c.state.at("optimizer.fc1.weight.exp_avg");
  EXPECT_EQ(testing::message([&] { save_checkpoint(path(), c); }),
            "writing " + path() + ": optimizer state 'fc1.weight.exp_avg' is not named optimizer.<param>.<state>");
  c = sample();
  c.params["optimizer.fc1.weight.master"] = c.state.at("optimizer.fc1.weight.master");
  EXPECT_EQ(testing::message([&] { save_checkpoint(path(), c); }),
            "writing " + path() + ": 'optimizer.fc1.weight.master' is both a param and optimizer state");
  EXPECT_EQ(slurp(path()), before);
}

TEST_F(CheckpointTest, AWeightsFileIsNotACheckpoint) {
  const std::string weights = path("weights.safetensors");
  write_safetensors(weights, sample().params);
  const std::optional<Error> error = testing::thrown([&] { load_checkpoint(weights, expectation_of(sample())); });
  ASSERT_TRUE(error);
  EXPECT_EQ(error->message(),
            weights + ": not a teeny checkpoint: its metadata has no \"format\": \"teeny-checkpoint\"");
  EXPECT_EQ(error->notes(),
            std::vector<std::string>{"to start training from the weights in it, use --weights " + weights});

  // PyTorch's safetensors.torch.save_file writes {"format": "pt"}.
  write_safetensors(weights, sample().params, {{"format", "pt"}});
  EXPECT_EQ(load_error(weights), weights + ": not a teeny checkpoint: its metadata says format 'pt'");
}

TEST_F(CheckpointTest, MetadataErrorsHaveExactMessages) {
  auto metadata = good_metadata();
  metadata["version"] = "2";
  std::string f = with_metadata(metadata);
  EXPECT_EQ(load_error(f), f + ": teeny checkpoint version '2' is not supported (this teeny reads version 1)");

  for (const char* step : {"-3", "12x", "", "99999999999999999999"}) {
    metadata = good_metadata();
    metadata["step"] = step;
    f = with_metadata(metadata);
    EXPECT_EQ(load_error(f),
              f + ": bad step '" + step + "' in the checkpoint's metadata (expected a count of steps, 0 or more)");
  }
  for (const char* key : {"version", "step", "graph", "optimizer"}) {
    metadata = good_metadata();
    metadata.erase(key);
    f = with_metadata(metadata);
    EXPECT_EQ(load_error(f), f + ": the checkpoint's metadata has no \"" + key + "\"");
  }
  metadata = good_metadata();
  metadata["step"] = "0";
  EXPECT_EQ(load_checkpoint(with_metadata(metadata), expectation_of(sample())).step, 0);
}

TEST_F(CheckpointTest, AnotherGraphOrOptimizerIsRefused) {
  save_checkpoint(path(), sample());
  CheckpointExpectation expect = expectation_of(sample());
  expect.graph = "mlp2";
  EXPECT_EQ(testing::message([&] { load_checkpoint(path(), expect); }),
            path() + ": the checkpoint is of graph 'mlp', not 'mlp2'");
  expect = expectation_of(sample());
  expect.optimizer = "sgd";
  EXPECT_EQ(testing::message([&] { load_checkpoint(path(), expect); }),
            path() + ": the checkpoint's optimizer is 'adamw', but graph 'mlp' trains with 'sgd'");
}

TEST_F(CheckpointTest, EveryMissingMismatchedAndExtraTensorIsListed) {
  save_checkpoint(path(), sample());
  CheckpointExpectation expect = expectation_of(sample());
  expect.params["fc2.weight"] = {DType::kF32, {3, 2}};
  expect.state["optimizer.fc2.weight.exp_avg"] = {DType::kF32, {3, 2}};
  expect.params["fc1.weight"] = {DType::kBF16, {2, 3}};
  expect.state["optimizer.fc1.weight.master"] = {DType::kBF16, {2, 2}};
  expect.params.erase("fc1.bias");
  expect.state.erase("optimizer.fc1.bias.exp_avg_sq");
  EXPECT_EQ(testing::message([&] { load_checkpoint(path(), expect); }),
            path() +
                ": the checkpoint does not match graph 'mlp': missing fc2.weight f32 [3, 2], "
                "optimizer.fc2.weight.exp_avg f32 [3, 2]; mismatched 'fc1.weight' is bf16 [2, 2], expected bf16 [2, "
                "3], 'optimizer.fc1.weight.master' is f32 [2, 2], expected bf16 [2, 2]; not trained by the graph "
                "'fc1.bias', 'optimizer.fc1.bias.exp_avg_sq'");
}

// A graph swapped for a much larger one still makes a short message.
TEST_F(CheckpointTest, LongListsAreCut) {
  save_checkpoint(path(), sample());
  CheckpointExpectation expect = expectation_of(sample());
  for (int i = 0; i < 12; ++i) expect.params[fmt::format("layer{:02}.weight", i)] = {DType::kF32, {1}};
  EXPECT_EQ(testing::message([&] { load_checkpoint(path(), expect); }),
            path() +
                ": the checkpoint does not match graph 'mlp': missing layer00.weight f32 [1], layer01.weight f32 "
                "[1], layer02.weight f32 [1], layer03.weight f32 [1], layer04.weight f32 [1], layer05.weight f32 "
                "[1], layer06.weight f32 [1], layer07.weight f32 [1], layer08.weight f32 [1], layer09.weight f32 "
                "[1], and 2 more");
}

}  // namespace
}  // namespace teeny
