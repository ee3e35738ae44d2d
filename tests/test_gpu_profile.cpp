// GPU tests of `teeny profile` (suite Gpu*: skipped with the reason when there is no CUDA
// driver or device). They compile graphs/mnist_mlp.yaml, profile it in-process and through
// the CLI, and check record counts, durations and that the JSON and trace outputs parse.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/bundle.h"
#include "core/driver.h"
#include "core/error.h"
#include "core/profiler.h"
#include "tests/gpu_test_util.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

using testing::Command;
using testing::run_teeny;

// Compiles graphs/mnist_mlp.yaml once per test into a scratch directory.
class GpuProfile : public ::testing::Test {
 protected:
  void SetUp() override {
    TEENY_GPU_OR_SKIP(device);
    dir_ = std::filesystem::temp_directory_path() / ("teeny-gpu-profile-" + std::to_string(::getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    bundle_ = (dir_ / "mlp.teeny").string();
    const Command compiled =
        run_teeny(std::string("compile ") + TEENY_SOURCE_DIR + "/graphs/mnist_mlp.yaml -o " + bundle_);
    ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
    // The launches that run at the tests' batches (the default B=64, and 256): a launch's `when`
    // leaves out each linear's small-M variant there.
    for (const BundleLaunch& launch : read_bundle(bundle_).launches) launches_ += launch.when.eval({{"B", 64}}) != 0;
    ASSERT_GT(launches_, 0u);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  ProfileOptions quick(int iterations) const {
    ProfileOptions options;
    options.warmup_iterations = 3;
    options.warmup_min_seconds = 0;
    options.iterations = iterations;
    options.min_seconds = 0;  // exactly `iterations` timed iterations
    options.keep_trace = true;
    return options;
  }

  // Record count = launch count x iterations, every duration positive, end to end no
  // shorter than the kernels it contains.
  void expect_sound(const ProfileReport& report, int iterations) const {
    ASSERT_EQ(report.runs.size(), 1u);
    const ProfileRun& run = report.runs[0];
    EXPECT_TRUE(run.untrusted.empty()) << run.untrusted.front();
    EXPECT_EQ(run.iterations, iterations);
    ASSERT_EQ(run.launches.size(), launches_);
    EXPECT_EQ(run.trace.size(), launches_ * static_cast<size_t>(iterations));
    double min_sum = 0;
    for (const LaunchStats& l : run.launches) {
      EXPECT_EQ(l.duration_us.count, static_cast<size_t>(iterations)) << l.facts.node;
      EXPECT_GT(l.duration_us.min, 0) << l.facts.node;
      EXPECT_LT(l.duration_us.max, 1e5) << l.facts.node;  // an MLP kernel under 100 ms
      EXPECT_GT(l.facts.registers, 0) << l.facts.node;
      EXPECT_GT(l.facts.occupancy, 0) << l.facts.node;
      EXPECT_LE(l.facts.occupancy, 1) << l.facts.node;
      min_sum += l.duration_us.min;
    }
    EXPECT_GE(run.gpu_time_us.min, min_sum);
    EXPECT_GT(report.environment.peaks.bandwidth_gbps, 0);
    EXPECT_GT(report.environment.peaks.fp32_gflops, 0);
  }

  std::filesystem::path dir_;
  std::string bundle_;
  size_t launches_ = 0;
};

TEST_F(GpuProfile, SequenceModeOneRecordPerLaunchPerIteration) {
  const ProfileReport report = profile_bundle(bundle_, {{}}, "", quick(25));
  if (!report.environment.cupti)
    std::cerr << "note: profiled with the fallback: " << report.environment.timing_method << "\n";
  expect_sound(report, 25);
}

TEST_F(GpuProfile, IsolatedModeExcludesTheFlush) {
  ProfileOptions options = quick(10);
  options.mode = ProfileMode::kIsolated;
  const ProfileReport report = profile_bundle(bundle_, {{"B=256"}}, "", options);
  expect_sound(report, 10);
  EXPECT_EQ(report.environment.mode, "isolated");
}

TEST_F(GpuProfile, CudaGraphReplayMapsEveryKernel) {
  ProfileOptions options = quick(15);
  options.cuda_graph = true;
  const ProfileReport report = profile_bundle(bundle_, {{}}, "", options);
  if (!report.environment.cupti)
    GTEST_SKIP() << "per-launch graph timing needs CUPTI: " << report.environment.timing_method;
  expect_sound(report, 15);
}

TEST_F(GpuProfile, CliJsonAndTraceParse) {
  const std::string trace = (dir_ / "trace.json").string();
  const Command r =
      run_teeny("profile " + bundle_ + " --iterations 12 --min-time 0 --warmup 2 --format json --trace " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["runs"].size(), 1u);
  EXPECT_EQ(j["runs"][0]["trusted"], true);
  EXPECT_EQ(j["runs"][0]["iterations"], 12);
  EXPECT_EQ(j["runs"][0]["launches"].size(), launches_);
  EXPECT_GT(j["runs"][0]["launches"][0]["duration"]["median_us"].get<double>(), 0);
  EXPECT_FALSE(j["environment"]["gpu_name"].get<std::string>().empty());
  std::ifstream in(trace);
  const nlohmann::json t = nlohmann::json::parse(in);
  size_t slices = 0;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X") {
      ++slices;
      EXPECT_GT(e["dur"].get<double>(), 0);
      EXPECT_TRUE(e["args"].contains("node"));
    }
  EXPECT_EQ(slices, launches_ * 12);
}

TEST_F(GpuProfile, CliSweepGivesOneRunPerValueAndScaling) {
  const Command r =
      run_teeny("profile " + bundle_ + " --sweep B=1,64 --iterations 5 --min-time 0 --warmup 1 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["bindings"]["B"], 1);
  EXPECT_EQ(j["runs"][1]["bindings"]["B"], 64);
  ASSERT_EQ(j["scaling"].size(), 2u);
  // The same graph with 64x the rows moves more bytes (its launches differ: B=1 takes the
  // small-M linears).
  const auto run_bytes = [&](int run) {
    int64_t bytes = 0;
    for (const auto& launch : j["runs"][run]["launches"]) bytes += launch["bytes"].get<int64_t>();
    return bytes;
  };
  EXPECT_GT(run_bytes(1), run_bytes(0));
}

}  // namespace
}  // namespace teeny
