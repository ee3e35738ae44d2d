// GPU tests of `teeny run` (suites Gpu*, label gpu): they skip with the reason when there is no
// CUDA driver or device. Expected values are computed here with plain loops, not with the ops'
// host references. RunCpuMnist runs the same mnist data through `--device cpu` on any machine.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/check_report.h"
#include "core/compare.h"
#include "core/compile.h"
#include "core/driver.h"
#include "core/executor.h"
#include "core/graph.h"
#include "core/npy.h"
#include "core/safetensors.h"
#include "ops/ops.h"
#include "tests/file_test_util.h"
#include "tests/gpu_test_util.h"
#include "tests/op_test_util.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

class RunDirs : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.str(name); }

  // Compiles `graph` into a bundle directory under the test's temp dir and reads it back.
  Bundle compile_to_disk(const Graph& graph, const Registry& registry, const std::string& name) {
    CompileOptions options;
    options.cache_dir = path("cache");
    write_bundle(compile_graph(graph, registry, options), path(name));
    return read_bundle(path(name));
  }
  testing::ScratchDir dir_;
};

class GpuRun : public RunDirs {};
class RunCpuMnist : public RunDirs {};

using testing::Command;
using testing::run_teeny;

// ---- mnist_mlp with known weights ----------------------------------------------------------

constexpr int64_t kBatch = 5, kIn = 784, kHidden = 256, kOut = 10;

double w1(int64_t o, int64_t k) { return 0.05 * std::sin(0.37 * o + 0.11 * k); }
double b1(int64_t o) { return 0.01 * (o % 7) - 0.03; }
double w2(int64_t o, int64_t k) { return 0.08 * std::cos(0.23 * o - 0.05 * k); }
double b2(int64_t o) { return 0.1 * o - 0.4; }
double x_value(int64_t r, int64_t k) { return std::cos(1.3 * r + 0.07 * k); }

// Values as the file stores them (f32), so the expectation sees what the GPU sees.
double f32(double v) { return static_cast<float>(v); }

std::vector<double> expected_probs() {
  std::vector<double> probs(kBatch * kOut);
  for (int64_t r = 0; r < kBatch; ++r) {
    std::vector<double> hidden(kHidden);
    for (int64_t o = 0; o < kHidden; ++o) {
      double acc = f32(b1(o));
      for (int64_t k = 0; k < kIn; ++k) acc += f32(x_value(r, k)) * f32(w1(o, k));
      hidden[o] = std::max(0.0, static_cast<double>(static_cast<float>(acc)));
    }
    std::vector<double> logits(kOut);
    double top = -INFINITY;
    for (int64_t o = 0; o < kOut; ++o) {
      double acc = f32(b2(o));
      for (int64_t k = 0; k < kHidden; ++k) acc += hidden[k] * f32(w2(o, k));
      logits[o] = static_cast<float>(acc);
      top = std::max(top, logits[o]);
    }
    double sum = 0;
    for (int64_t o = 0; o < kOut; ++o) sum += std::exp(logits[o] - top);
    for (int64_t o = 0; o < kOut; ++o) probs[r * kOut + o] = std::exp(logits[o] - top) / sum;
  }
  return probs;
}

void write_mnist_data(const std::string& weights, const std::string& input) {
  HostTensor fc1_w{DType::kF32, {kHidden, kIn}, {}}, fc1_b{DType::kF32, {kHidden}, {}};
  HostTensor fc2_w{DType::kF32, {kOut, kHidden}, {}}, fc2_b{DType::kF32, {kOut}, {}};
  for (int64_t o = 0; o < kHidden; ++o) {
    fc1_b.data.push_back(b1(o));
    for (int64_t k = 0; k < kIn; ++k) fc1_w.data.push_back(w1(o, k));
  }
  for (int64_t o = 0; o < kOut; ++o) {
    fc2_b.data.push_back(b2(o));
    for (int64_t k = 0; k < kHidden; ++k) fc2_w.data.push_back(w2(o, k));
  }
  write_safetensors(weights, {{"fc1.weight", fc1_w}, {"fc1.bias", fc1_b}, {"fc2.weight", fc2_w}, {"fc2.bias", fc2_b}});
  HostTensor x{DType::kF32, {kBatch, kIn}, {}};
  for (int64_t r = 0; r < kBatch; ++r) {
    for (int64_t k = 0; k < kIn; ++k) x.data.push_back(x_value(r, k));
  }
  write_npy(input, x);
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

TEST_F(GpuRun, MnistMlpWithKnownWeightsMatchesIndependentLoops) {
  TEENY_GPU_OR_SKIP(device);
  const Registry& registry = op_testing::registry();
  Graph graph = load_graph(std::string(TEENY_SOURCE_DIR) + "/graphs/mnist_mlp.yaml", registry);
  Bundle bundle = compile_to_disk(graph, registry, "mnist.teeny");
  write_mnist_data(path("w.safetensors"), path("x.npy"));

  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {"B=5"}), path("mnist.teeny"));
  EXPECT_GT(bound.tensor("fc2").row_stride, 10);  // linear pads rows: the strided path is used
  DataOptions options;
  options.input_files = {{"x", path("x.npy")}};
  options.weights_path = path("w.safetensors");
  RunData data = prepare_data(bound, options);
  EXPECT_TRUE(data.notes.empty());

  bind_launches(bound, device->facts());
  GpuExecutor executor(device, bound);
  executor.upload(data);
  RunTiming timing = executor.run(1, false);
  EXPECT_GT(timing.total_ms, 0.0);
  HostTensor probs = executor.read("probs");
  const std::vector<double> expected = expected_probs();
  EXPECT_LT(max_abs_diff(probs.data, expected), 1e-5);

  // CUDA-graph replay, several iterations: the same numbers up to summation order (linear's
  // split-K path accumulates with atomics, so it is not bitwise reproducible).
  RunTiming replay = executor.run(3, true);
  EXPECT_TRUE(replay.cuda_graph);
  EXPECT_LT(max_abs_diff(executor.read("probs").data, probs.data), 1e-6);

  CheckReport report = check_against_reference(executor, registry, {{"probs", probs}});
  EXPECT_TRUE(report.ok()) << cli::format_check_report(report);
  ASSERT_EQ(report.nodes.size(), 4u);
}

TEST_F(GpuRun, CliRunsMnistWithCheckAndCudaGraphAndWritesOutputs) {
  TEENY_GPU_OR_SKIP(device);
  const Registry& registry = op_testing::registry();
  compile_to_disk(load_graph(std::string(TEENY_SOURCE_DIR) + "/graphs/mnist_mlp.yaml", registry), registry,
                  "mnist.teeny");
  write_mnist_data(path("w.safetensors"), path("x.npy"));
  Command run = run_teeny("run " + path("mnist.teeny") + " --bind B=5 --input x=" + path("x.npy") + " --weights " +
                          path("w.safetensors") + " --output probs=" + path("probs.npy") + " --output-dir " +
                          path("all") + " --check --cuda-graph --iterations 2");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("check: ok: all 4 nodes match the host reference"), std::string::npos) << run.out;
  HostTensor probs = read_npy(path("probs.npy"));
  EXPECT_EQ(probs.shape, std::vector<int64_t>({kBatch, kOut}));
  EXPECT_LT(max_abs_diff(probs.data, expected_probs()), 1e-5);
  EXPECT_EQ(read_npy(path("all/probs.npy")).data, probs.data);
}

// The same data through `teeny run --device cpu` (the host reference executor): runs on any
// machine, so the CLI's file handling and the references are checked without a GPU too.
TEST_F(RunCpuMnist, DeviceCpuMatchesIndependentLoops) {
  const Registry& registry = op_testing::registry();
  compile_to_disk(load_graph(std::string(TEENY_SOURCE_DIR) + "/graphs/mnist_mlp.yaml", registry), registry,
                  "mnist.teeny");
  write_mnist_data(path("w.safetensors"), path("x.npy"));
  Command run = run_teeny("run " + path("mnist.teeny") + " --device cpu --bind B=5 --input x=" + path("x.npy") +
                          " --weights " + path("w.safetensors") + " --output-dir " + path("out"));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  HostTensor probs = read_npy(path("out/probs.npy"));
  EXPECT_EQ(probs.shape, std::vector<int64_t>({kBatch, kOut}));
  EXPECT_LT(max_abs_diff(probs.data, expected_probs()), 1e-6);
}

// ---- --check catches a wrong kernel --------------------------------------------------------

// test.sub (y = a - b) and test.sub_swapped: the same kernel with its two inputs passed in the
// wrong order. Names and types still match the kernel's signature, so it compiles; only the
// numbers are wrong, which is what --check is for.
OpDef sub_op(const std::string& name, bool swapped) {
  OpDef def;
  def.name = name;
  def.inputs = {{"a", ""}, {"b", ""}};
  def.infer = [](const OpContext& ctx) { return contiguous(DType::kF32, ctx.inputs.at(0).shape); };
  def.lower = [swapped](const OpContext& ctx) {
    const Expr n = product(ctx.output.shape);
    Launch launch;
    launch.args = {input(swapped ? 1 : 0, "a", DType::kF32), input(swapped ? 0 : 1, "b", DType::kF32),
                   output("y", DType::kF32), i32("n", n)};
    launch.block = {256, 1, 1};
    launch.grid = {ceil_div(n, Expr(256)), Expr(1), Expr(1)};
    launch.bytes = n * 12;
    launch.flops = n;
    KernelSource kernel;
    kernel.name = "test_sub";
    kernel.header = "test_sub.cuh";
    kernel.function = "test_sub";
    kernel.params = launch.args;
    kernel.file = __FILE__;
    kernel.line = __LINE__;
    return Lowering{{kernel}, {launch}};
  };
  def.reference = [](const RefContext& ref) {
    HostTensor y{DType::kF32, ref.output_shape, ref.inputs.at(0).data};
    for (size_t i = 0; i < y.data.size(); ++i) y.data[i] -= ref.inputs.at(1).data[i];
    return y;
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

TEST_F(GpuRun, CheckNamesTheNodeWithASwappedArgumentKernel) {
  TEENY_GPU_OR_SKIP(device);
  Registry registry;
  registry.add_kernel_header({"test_sub.cuh",
                              "__device__ void test_sub(const float* a, const float* b, float* y, int n) {\n"
                              "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                              "  if (i < n) y[i] = a[i] - b[i];\n"
                              "}\n"});
  registry.add(sub_op("test.sub", false));
  registry.add(sub_op("test.sub_swapped", true));
  const std::string spec =
      "name: swapped\n"
      "dims: {N: {min: 1, max: 4096, default: 300}}\n"
      "inputs: {a: {dtype: f32, shape: [N]}, b: {dtype: f32, shape: [N]}}\n"
      "nodes:\n"
      "  - {name: good, op: test.sub, inputs: [a, b]}\n"
      "  - {name: bad, op: test.sub_swapped, inputs: [good, b]}\n"
      "  - {name: after, op: test.sub, inputs: [bad, a]}\n"
      "outputs: [after]\n";
  Bundle bundle = compile_to_disk(parse_graph(spec, "swapped.yaml", registry), registry, "swapped.teeny");
  BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, {}), path("swapped.teeny"));
  RunData data = prepare_data(bound, DataOptions{});
  bind_launches(bound, device->facts());
  GpuExecutor executor(device, bound);
  executor.upload(data);
  executor.run(1, false);
  CheckReport report = check_against_reference(executor, registry, {});
  ASSERT_EQ(report.nodes.size(), 3u);
  EXPECT_FALSE(report.ok());
  EXPECT_TRUE(report.nodes[0].result.ok());
  EXPECT_FALSE(report.nodes[1].result.ok());
  EXPECT_EQ(report.first_failure, 1);
  // `after` is checked on the GPU's own (wrong) input, so the error does not spread to it.
  EXPECT_TRUE(report.nodes[2].result.ok());
  // The kernel computes b - good instead of good - b: wrong wherever good != b, i.e. nearly
  // everywhere for random inputs.
  EXPECT_GT(report.nodes[1].result.mismatches, 290);
  EXPECT_NE(cli::format_check_report(report).find("first diverging node 'bad' (test.sub_swapped)"), std::string::npos);
}

}  // namespace
}  // namespace teeny
