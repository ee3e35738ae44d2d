// GPU tests of `teeny compare BUNDLE_A BUNDLE_B` (suite Gpu*: skipped with the reason when there
// is no CUDA driver or device): a bundle against itself shows no difference, and against a
// variant that moves twice the bytes (f32 instead of bf16, same graph, nodes and bindings) the
// variant is detected as slower, end to end and per launch.
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/perf_compare.h"
#include "tests/file_test_util.h"
#include "tests/gpu_test_util.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

using testing::Command;
using testing::run_teeny;

// One bandwidth-bound node (64 Mi elements), so the f32 variant takes about twice as long.
std::string scale_spec(const std::string& dtype) {
  return "name: scale\n"
         "dims:\n  N: {min: 1, max: 268435456, default: 67108864}\n"
         "inputs:\n  x: {dtype: " +
         dtype +
         ", shape: [N]}\n"
         "nodes:\n  - {name: act, op: relu, inputs: [x]}\n"
         "outputs: [act]\n";
}

class GpuCompare : public ::testing::Test {
 protected:
  void SetUp() override {
    TEENY_GPU_OR_SKIP(device);
    fast_ = compile("bf16");
    slow_ = compile("f32");
  }

  std::string compile(const std::string& dtype) {
    testing::spit(dir_.str(dtype + ".yaml"), scale_spec(dtype));
    const std::string bundle = dir_.str(dtype + ".teeny");
    const Command compiled = run_teeny("compile " + dir_.str(dtype + ".yaml") + " -o " + bundle);
    EXPECT_EQ(compiled.exit_code, 0) << compiled.err;
    return bundle;
  }

  static ProfileOptions quick() {
    ProfileOptions options;
    options.warmup_iterations = 5;
    options.warmup_min_seconds = 0;
    options.iterations = 60;
    options.min_seconds = 0;
    return options;
  }

  testing::ScratchDir dir_;
  std::string fast_, slow_;
};

TEST_F(GpuCompare, ABundleAgainstItselfShowsNoDifference) {
  const std::vector<ProfileReport> reports = profile_bundles({fast_, fast_}, {{}}, "", quick());
  const Comparison c = compare_profiles(reports[0], "A", reports[1], "B");
  ASSERT_EQ(c.runs.size(), 1u);
  EXPECT_EQ(c.runs[0].verdict, Verdict::kSame) << c.runs[0].end_to_end.ratio << " [" << c.runs[0].end_to_end.ratio_low
                                               << ", " << c.runs[0].end_to_end.ratio_high << "]";
  // Interleaved: each saw every timed iteration, with the clock measured around them.
  EXPECT_EQ(reports[0].runs[0].iterations, 60);
  EXPECT_EQ(reports[1].runs[0].iterations, 60);
  EXPECT_GT(reports[0].runs[0].sm_clock_before_mhz, 100);
  EXPECT_GT(reports[0].runs[0].sm_clock_after_mhz, 100);
}

TEST_F(GpuCompare, TwiceTheBytesIsDetectedAsSlower) {
  const std::vector<ProfileReport> reports = profile_bundles({fast_, slow_}, {{}}, "", quick());
  const Comparison c = compare_profiles(reports[0], "bf16", reports[1], "f32");
  const RunComparison& run = c.runs[0];
  EXPECT_EQ(run.verdict, Verdict::kSlower);
  EXPECT_GT(run.end_to_end.ratio, 1.5);
  ASSERT_EQ(run.launches.size(), 1u);
  EXPECT_EQ(run.launches[0].node, "act");
  EXPECT_EQ(run.launches[0].verdict, Verdict::kSlower);
}

TEST_F(GpuCompare, CliThresholdFailsTheSlowerVariant) {
  const std::string flags = " --iterations 40 --min-time 0 --warmup 3";
  const Command regressed = run_teeny("compare " + fast_ + " " + slow_ + " --threshold 10" + flags);
  EXPECT_EQ(regressed.exit_code, 4) << regressed.err;
  EXPECT_NE(regressed.out.find("summary: B is slower than A end to end"), std::string::npos) << regressed.out;
  const Command improved = run_teeny("compare " + slow_ + " " + fast_ + " --threshold 10 --format json" + flags);
  EXPECT_EQ(improved.exit_code, 0) << improved.err;
  EXPECT_EQ(nlohmann::json::parse(improved.out)["verdict"], "faster");
}

}  // namespace
}  // namespace teeny
