// GPU tests of `teeny tune` (suite Gpu*: skipped with the reason when there is no CUDA driver or
// device): tuning a linear writes one record whose winner is the fastest of the candidates that
// passed their check, a second tune resumes (measures nothing again), and compile builds the
// winner where the record applies, which then runs and checks against the host reference; a
// candidate's time counts all its launches.
#include <algorithm>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/tuning.h"
#include "tests/file_test_util.h"
#include "tests/gpu_test_util.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

using testing::Command;
using testing::run_teeny;

// y = linear(x [M, 1024], 1536) in `dtype`.
std::string linear_spec(const std::string& dtype) {
  return fmt::format(
      "name: gemm\ndims:\n  M: {{min: 1, max: 4096, default: 1}}\ninputs:\n  x: {{dtype: {}, shape: [M, 1024]}}\n"
      "nodes:\n  - {{name: y, op: linear, inputs: [x], attrs: {{out_features: 1536}}}}\noutputs: [y]\n",
      dtype);
}

// `teeny tune` of linear_spec(dtype) at M = m into dir's t.json.
Command tune_linear(const testing::ScratchDir& dir, const std::string& dtype, int m) {
  testing::spit(dir.str("gemm.yaml"), linear_spec(dtype));
  return run_teeny(
      fmt::format("tune {} --bind M={} --iterations 10 -o {}", dir.str("gemm.yaml"), m, dir.str("t.json")));
}

TEST(GpuTune, RecordsTheFastestPassingVariantResumesAndCompileBuildsIt) {
  TEENY_GPU_OR_SKIP(device);
  testing::ScratchDir dir;
  const std::string tuning = dir.str("t.json");
  const Command tuned = tune_linear(dir, "bf16", 8);
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err;

  const TuningFile file = load_tuning(tuning);
  ASSERT_EQ(file.records.size(), 1u);
  const TuningRecord& record = file.records[0];
  EXPECT_EQ(record.op, "linear");
  EXPECT_EQ(dims_text(record.dims), "M=8, N=1536, K=1024");
  // 8 rows: both 16-bit small-M kernels and every tile were candidates.
  EXPECT_EQ(record.candidates.size(), 8u);
  double fastest = 1e30;
  std::string winner;
  for (const TuningCandidate& c : record.candidates) {
    EXPECT_EQ(c.rejected, "") << c.variant;
    if (c.rejected.empty() && c.median_us < fastest) {
      fastest = c.median_us;
      winner = c.variant;
    }
    if (c.rejected.empty()) {
      EXPECT_GT(c.median_us, 0.5) << c.variant;  // a launch takes microseconds
    }
  }
  EXPECT_EQ(record.variant, winner);

  const Command resumed = run_teeny("tune " + dir.str("gemm.yaml") + " --bind M=8 -o " + tuning);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("already tuned: " + winner), std::string::npos) << resumed.out;

  const std::string bundle = dir.str("gemm.teeny");
  const Command compiled = run_teeny("compile " + dir.str("gemm.yaml") + " --tuning " + tuning + " -o " + bundle);
  ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
  const Command inspected = run_teeny("inspect " + bundle + " --bind M=8 --format json");
  ASSERT_EQ(inspected.exit_code, 0) << inspected.err;
  const nlohmann::json variants = nlohmann::json::parse(inspected.out)["nodes"][0]["variants"];
  ASSERT_EQ(variants.size(), 2u) << variants.dump();
  EXPECT_EQ(variants[0]["variant"], winner);
  EXPECT_EQ(variants[0]["when"]["value"], 1);
  EXPECT_EQ(variants[1]["when"]["value"], 0);  // the heuristic elsewhere
  const Command checked = run_teeny("run " + bundle + " --bind M=8 --check --init random");
  EXPECT_EQ(checked.exit_code, 0) << checked.out << checked.err;
}

// An f32 linear lowers to two launches, the output's zeroing and the GEMM: a candidate's time is
// both. 4096 x 1536 x 1024 is 12.9 GFLOP, which no candidate computes in under 12.9 us even at
// 1000 TFLOP/s (above any tensor-core peak a GPU of today has, f32 or not); the zeroing alone
// takes a few microseconds.
TEST(GpuTune, ACandidatesTimeIsEveryLaunchOfIt) {
  TEENY_GPU_OR_SKIP(device);
  testing::ScratchDir dir;
  const Command tuned = tune_linear(dir, "f32", 4096);
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err;
  const TuningFile file = load_tuning(dir.str("t.json"));
  ASSERT_EQ(file.records.size(), 1u);
  const double floor_us = 2.0 * 4096 * 1536 * 1024 / 1e15 * 1e6;
  for (const TuningCandidate& c : file.records[0].candidates) {
    if (c.rejected.empty()) {
      EXPECT_GT(c.median_us, floor_us) << c.variant;
    }
  }
}

}  // namespace
}  // namespace teeny
