// teeny compare: matching two profiles run by run and launch by launch, verdicts on synthetic
// samples with known shifts, the profile JSON read back, thresholds and exit codes.
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cli/compare_report.h"
#include "cli/profile_report.h"
#include "core/perf_compare.h"
#include "tests/error_test_util.h"
#include "tests/file_test_util.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

using testing::message;
using testing::rendered;

// `n` times around `median` with multiplicative (log-normal) noise of relative size `noise`.
std::vector<double> samples(double median, double noise, uint64_t seed, size_t n = 200) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, noise);
  std::vector<double> out;
  for (size_t i = 0; i < n; ++i) out.push_back(median * std::exp(normal(rng)));
  return out;
}

LaunchStats launch(const std::string& node, const std::string& kernel, std::vector<double> times) {
  LaunchStats l;
  l.facts.node = node;
  l.facts.kernel = kernel;
  l.duration_us = summarize(times);
  l.samples_us = std::move(times);
  return l;
}

// A run of graph "mlp" (fc1 10 us, act 5 us, 16 us end to end) with every time scaled by `scale`.
ProfileRun mlp_run(Bindings bindings, double scale, uint64_t seed, const std::string& fc1_kernel = "linear_f32") {
  ProfileRun run;
  run.bindings = std::move(bindings);
  run.launches.push_back(launch("fc1", fc1_kernel, samples(10 * scale, 0.01, seed)));
  run.launches.push_back(launch("act", "relu_f32", samples(5 * scale, 0.01, seed + 1)));
  run.gpu_time_samples_us = samples(16 * scale, 0.01, seed + 2);
  run.gpu_time_us = summarize(run.gpu_time_samples_us);
  return run;
}

ProfileReport mlp_profile(std::vector<ProfileRun> runs, const std::string& gpu = "NVIDIA H200") {
  ProfileReport report;
  report.bundle_path = "mlp.teeny";
  report.graph_name = "mlp";
  report.environment.gpu_name = gpu;
  report.environment.timing_method = "CUPTI activity records";
  report.environment.mode = "sequence";
  report.runs = std::move(runs);
  return report;
}

// The cases, 100 samples a side: a 5% shift with 1% noise is always found; a 1% shift
// with 10% noise is not claimed, but for the rare draw (about 1 in 200) whose interval lands wholly
// above 1.02, as it must now and then for any interval at 95%.
Verdict verdict_at(double shift, double noise, uint64_t seed) {
  const RatioEstimate e = compare_samples(samples(10, noise, seed, 100), samples(10 * shift, noise, seed + 1000, 100));
  return verdict_with_min_effect(e, CompareOptions{}.min_effect);
}

TEST(PerfCompare, VerdictsOnKnownShifts) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    EXPECT_EQ(verdict_at(1.05, 0.01, seed), Verdict::kSlower) << seed;
    EXPECT_EQ(verdict_at(0.95, 0.01, seed), Verdict::kFaster) << seed;
    EXPECT_EQ(verdict_at(1.00, 0.01, seed), Verdict::kSame) << seed;
  }
  int claimed = 0;
  for (uint64_t seed = 1; seed <= 500; ++seed) claimed += verdict_at(1.01, 0.10, seed) != Verdict::kSame;
  EXPECT_LE(claimed, 10);  // 2%
}

TEST(PerfCompare, SameDistributionIsNoDifference) {
  const Comparison c = compare_profiles(mlp_profile({mlp_run({{"B", 64}}, 1, 1)}), "a.json",
                                        mlp_profile({mlp_run({{"B", 64}}, 1, 100)}), "b.json");
  ASSERT_EQ(c.runs.size(), 1u);
  EXPECT_EQ(c.runs[0].verdict, Verdict::kSame);
  ASSERT_EQ(c.runs[0].launches.size(), 2u);
  for (const LaunchComparison& l : c.runs[0].launches) EXPECT_EQ(l.verdict, Verdict::kSame) << l.node;
  EXPECT_EQ(cli::overall_verdict(c), "no difference");
  EXPECT_TRUE(c.warnings.empty());
}

TEST(PerfCompare, FifteenPercentFasterBIsFasterEverywhere) {
  const Comparison c = compare_profiles(mlp_profile({mlp_run({{"B", 64}}, 1, 1)}), "a.json",
                                        mlp_profile({mlp_run({{"B", 64}}, 0.85, 100, "linear_f32_v2")}), "b.json");
  const RunComparison& run = c.runs[0];
  EXPECT_EQ(run.verdict, Verdict::kFaster);
  EXPECT_NEAR(run.end_to_end.ratio, 0.85, 0.01);
  EXPECT_LT(run.end_to_end.ratio_low, 0.85);
  EXPECT_GT(run.end_to_end.ratio_high, 0.85);
  // Launches match by node although the kernels differ.
  EXPECT_EQ(run.launches[0].node, "fc1");
  EXPECT_EQ(run.launches[0].kernel_a, "linear_f32");
  EXPECT_EQ(run.launches[0].kernel_b, "linear_f32_v2");
  EXPECT_EQ(run.launches[0].verdict, Verdict::kFaster);
  EXPECT_EQ(cli::overall_verdict(c), "faster");
  const std::string table = cli::format_compare_table(c);
  EXPECT_NE(table.find("\nsummary: B is faster than A end to end\n"), std::string::npos) << table;
  // "B is 14.9% faster than A (B/A 0.851, 95% CI 0.849-0.853)": time saved, against A's.
  const std::string sentence = cli::end_to_end_sentence(c, run);
  EXPECT_EQ(sentence, fmt::format("end to end at B=64: B is {:.1f}% faster than A (B/A {:.3f}, 95% CI {:.3f}-{:.3f})",
                                  100 * (1 - run.end_to_end.ratio), run.end_to_end.ratio, run.end_to_end.ratio_low,
                                  run.end_to_end.ratio_high));
  EXPECT_NE(table.find(sentence + "\n"), std::string::npos) << table;
  EXPECT_NE(table.find("\nverdict: faster or slower when the whole 95% CI of B/A lies more than 2% from 1\n"),
            std::string::npos)
      << table;
}

TEST(PerfCompare, ASignificantButSmallDifferenceIsNoDifference) {
  // 1% slower with 0.1% noise: certain, but below the 2% minimum effect.
  ProfileRun a = mlp_run({}, 1, 1), b = mlp_run({}, 1, 2);
  a.gpu_time_samples_us = samples(16, 0.001, 3);
  b.gpu_time_samples_us = samples(16.16, 0.001, 4);
  const Comparison c = compare_profiles(mlp_profile({a}), "a.json", mlp_profile({b}), "b.json");
  EXPECT_EQ(verdict_of(c.runs[0].end_to_end), Verdict::kSlower);
  EXPECT_EQ(c.runs[0].verdict, Verdict::kSame);
  EXPECT_EQ(cli::end_to_end_sentence(c, c.runs[0]).substr(0, 40), "end to end at no dims: no difference (B/");
  const Comparison strict =
      compare_profiles(mlp_profile({a}), "a.json", mlp_profile({b}), "b.json", CompareOptions{0.95, 0});
  EXPECT_EQ(strict.runs[0].verdict, Verdict::kSlower);
}

TEST(PerfCompare, SamePtxDifferencesAreCalledPlacement) {
  ProfileRun a = mlp_run({}, 1, 1), b = mlp_run({}, 1, 2);
  b.launches[1].samples_us = samples(4, 0.01, 5);  // act: 20% faster with the same PTX
  a.launches[1].facts.ptx_sha256 = b.launches[1].facts.ptx_sha256 = "ab12";
  const Comparison c = compare_profiles(mlp_profile({a}), "a.json", mlp_profile({b}), "b.json");
  EXPECT_TRUE(c.runs[0].launches[1].same_ptx);
  EXPECT_EQ(c.runs[0].launches[1].verdict, Verdict::kFaster);
  EXPECT_EQ(c.runs[0].notes, std::vector<std::string>{"act ran the same PTX in A and B: that difference comes from "
                                                      "where things are (buffers, code, neighbouring launches), not "
                                                      "from the kernel"});
}

TEST(PerfCompare, RunsMatchByBindingsInAnyOrder) {
  const Comparison c =
      compare_profiles(mlp_profile({mlp_run({{"B", 1}}, 1, 1), mlp_run({{"B", 8}}, 1, 2)}), "a.json",
                       mlp_profile({mlp_run({{"B", 8}}, 1.2, 3), mlp_run({{"B", 1}}, 1, 4)}), "b.json");
  ASSERT_EQ(c.runs.size(), 2u);
  EXPECT_EQ(c.runs[0].bindings, (Bindings{{"B", 1}}));
  EXPECT_EQ(c.runs[0].verdict, Verdict::kSame);
  EXPECT_EQ(c.runs[1].verdict, Verdict::kSlower);
  EXPECT_EQ(cli::overall_verdict(c), "mixed");
}

TEST(PerfCompare, LaunchesOnlyOneSideHasAreListed) {
  ProfileRun fused = mlp_run({}, 1, 5);
  fused.launches.erase(fused.launches.begin() + 1);
  fused.launches[0].facts.node = "fc1_act";
  const Comparison c = compare_profiles(mlp_profile({mlp_run({}, 1, 1)}), "a.json", mlp_profile({fused}), "b.json");
  const RunComparison& run = c.runs[0];
  EXPECT_TRUE(run.launches.empty());
  ASSERT_EQ(run.only_in_a.size(), 2u);
  EXPECT_EQ(run.only_in_a[0].node, "fc1");
  EXPECT_EQ(run.only_in_a[1].node, "act");
  ASSERT_EQ(run.only_in_b.size(), 1u);
  EXPECT_EQ(run.only_in_b[0].node, "fc1_act");
  EXPECT_NE(cli::format_compare_table(c).find("only in B: fc1_act (linear_f32, median "), std::string::npos);
}

TEST(PerfCompare, SetupDifferencesAreWarnings) {
  ProfileReport b = mlp_profile({mlp_run({}, 1, 2)}, "NVIDIA H100");
  b.environment.mode = "isolated";
  const Comparison c = compare_profiles(mlp_profile({mlp_run({}, 1, 1)}), "a.json", b, "b.json");
  EXPECT_EQ(c.warnings,
            (std::vector<std::string>{"different GPUs: a.json has NVIDIA H200, b.json has NVIDIA H100",
                                      "different profile modes: a.json has sequence, b.json has isolated"}));
}

TEST(PerfCompare, DifferentClocksAreNoted) {
  ProfileRun slow = mlp_run({}, 1, 2);
  slow.sm_clock_before_mhz = slow.sm_clock_after_mhz = 1500;
  ProfileRun fast = mlp_run({}, 1, 1);
  fast.sm_clock_before_mhz = fast.sm_clock_after_mhz = 1980;
  const Comparison c = compare_profiles(mlp_profile({fast}), "a.json", mlp_profile({slow}), "b.json");
  EXPECT_EQ(c.runs[0].notes,
            (std::vector<std::string>{"the SM clock differed: 1980 MHz in a.json, 1500 MHz in b.json"}));
}

TEST(PerfCompare, MismatchesAreErrors) {
  ProfileReport other = mlp_profile({mlp_run({}, 1, 1)});
  other.graph_name = "resnet";
  EXPECT_EQ(message([&] { compare_profiles(mlp_profile({mlp_run({}, 1, 1)}), "a.json", other, "b.json"); }),
            "a.json profiles graph 'mlp' but b.json profiles graph 'resnet': compare profiles of one graph");

  EXPECT_EQ(rendered([&] {
              compare_profiles(mlp_profile({mlp_run({{"B", 1}}, 1, 1), mlp_run({{"B", 8}}, 1, 2)}), "a.json",
                               mlp_profile({mlp_run({{"B", 8}}, 1, 3), mlp_run({{"B", 64}}, 1, 4)}), "b.json");
            }),
            "teeny: error: the bindings of a.json and b.json do not match run for run\n"
            "note: only a.json has B=1\n"
            "note: only b.json has B=64\n");

  ProfileRun untrusted = mlp_run({{"B", 8}}, 1, 2);
  untrusted.untrusted.push_back("CUPTI dropped 3 activity records");
  EXPECT_EQ(message([&] {
              compare_profiles(mlp_profile({mlp_run({{"B", 8}}, 1, 1)}), "a.json", mlp_profile({untrusted}), "b.json");
            }),
            "b.json: the run at B=8 is not trusted (CUPTI dropped 3 activity records); profile it again");

  ProfileRun no_samples = mlp_run({}, 1, 2);
  no_samples.gpu_time_samples_us.clear();
  EXPECT_EQ(message([&] {
              compare_profiles(mlp_profile({no_samples}), "a.json", mlp_profile({mlp_run({}, 1, 1)}), "b.json");
            }),
            "a.json: the run at no dims has no per-iteration samples; profile it again with this teeny "
            "(`teeny profile --format json` keeps them)");
}

TEST(PerfCompare, ThresholdCountsOnlySignificantRegressionsAboveIt) {
  const Comparison c =
      compare_profiles(mlp_profile({mlp_run({}, 1, 1)}), "a.json", mlp_profile({mlp_run({}, 1.10, 2)}), "b.json");
  EXPECT_EQ(regressions(c, 5).size(), 1u);
  EXPECT_TRUE(regressions(c, 20).empty());
  const Comparison same =
      compare_profiles(mlp_profile({mlp_run({}, 1, 1)}), "a.json", mlp_profile({mlp_run({}, 1, 2)}), "b.json");
  EXPECT_TRUE(regressions(same, 0).empty());
}

TEST(PerfCompare, JsonNamesEveryEstimate) {
  const Comparison c = compare_profiles(mlp_profile({mlp_run({{"B", 64}}, 1, 1)}), "a.json",
                                        mlp_profile({mlp_run({{"B", 64}}, 1.1, 2)}), "b.json");
  const nlohmann::json j = cli::compare_json(c);
  EXPECT_EQ(j["verdict"], "slower");
  EXPECT_EQ(j["runs"][0]["bindings"]["B"], 64);
  EXPECT_EQ(j["runs"][0]["end_to_end"]["verdict"], "slower");
  EXPECT_NEAR(j["runs"][0]["end_to_end"]["ratio"].get<double>(), 1.1, 0.01);
  EXPECT_EQ(j["runs"][0]["end_to_end"]["a_samples"], 200);
  EXPECT_EQ(j["runs"][0]["launches"][1]["node"], "act");
  EXPECT_DOUBLE_EQ(j["confidence"].get<double>(), 0.95);
}

// ---- profile JSON read back, and the command ---------------------------------------------------

std::string write_profile(const testing::ScratchDir& dir, const std::string& name, const ProfileReport& report) {
  const std::string path = dir.str(name);
  testing::spit(path, cli::profile_json(report).dump(2));
  return path;
}

TEST(PerfCompareJson, ProfileJsonReadsBackWithSamples) {
  testing::ScratchDir dir;
  ProfileReport report = mlp_profile({mlp_run({{"B", 64}}, 1, 1)});
  report.runs[0].sm_clock_before_mhz = 1980;
  report.runs[0].warnings.push_back("noisy");
  const ProfileReport back = cli::read_profile_json(write_profile(dir, "a.json", report));
  EXPECT_EQ(back.graph_name, "mlp");
  EXPECT_EQ(back.environment.gpu_name, "NVIDIA H200");
  ASSERT_EQ(back.runs.size(), 1u);
  EXPECT_EQ(back.runs[0].bindings, (Bindings{{"B", 64}}));
  EXPECT_EQ(back.runs[0].gpu_time_samples_us, report.runs[0].gpu_time_samples_us);
  EXPECT_EQ(back.runs[0].launches[1].samples_us, report.runs[0].launches[1].samples_us);
  EXPECT_DOUBLE_EQ(back.runs[0].launches[1].duration_us.median, report.runs[0].launches[1].duration_us.median);
  EXPECT_DOUBLE_EQ(back.runs[0].sm_clock_before_mhz, 1980);
  EXPECT_EQ(back.runs[0].warnings, std::vector<std::string>{"noisy"});
}

TEST(PerfCompareJson, BadProfileFieldsNameTheFileAndPath) {
  testing::ScratchDir dir;
  nlohmann::json j = cli::profile_json(mlp_profile({mlp_run({}, 1, 1)}));
  j["runs"][0]["gpu_time"]["samples_us"][3] = "fast";
  const std::string path = dir.str("bad.json");
  testing::spit(path, j.dump());
  EXPECT_EQ(message([&] { cli::read_profile_json(path); }),
            path + ": runs[0].gpu_time.samples_us[3]: expected a number, found \"fast\"");
  j.erase("graph");
  testing::spit(path, j.dump());
  EXPECT_EQ(message([&] { cli::read_profile_json(path); }), path + ": top level: missing key 'graph'");
}

TEST(PerfCompareCli, ThresholdExitCodeAndMessages) {
  testing::ScratchDir dir;
  const std::string a = write_profile(dir, "a.json", mlp_profile({mlp_run({{"B", 64}}, 1, 1)}));
  const std::string b = write_profile(dir, "b.json", mlp_profile({mlp_run({{"B", 64}}, 1.10, 2)}));

  testing::Command same = testing::run_teeny("compare " + a + " " + a + " --threshold 1");
  EXPECT_EQ(same.exit_code, 0) << same.err;
  EXPECT_NE(same.out.find("summary: no difference between A and B end to end\n"), std::string::npos) << same.out;

  testing::Command slower = testing::run_teeny("compare " + a + " " + b + " --threshold 5");
  EXPECT_EQ(slower.exit_code, 4);
  EXPECT_EQ(slower.err.substr(0, slower.err.find('\n')), "teeny: error: B regressed by more than --threshold 5%");
  EXPECT_NE(slower.err.find("note: end to end at B=64: B is 1"), std::string::npos) << slower.err;
  EXPECT_EQ(testing::run_teeny("compare " + a + " " + b + " --threshold 20").exit_code, 0);
  EXPECT_EQ(testing::run_teeny("compare " + a + " " + b).exit_code, 0);  // no threshold: a report

  const testing::Command json = testing::run_teeny("compare " + a + " " + b + " --format json");
  EXPECT_EQ(nlohmann::json::parse(json.out)["verdict"], "slower");

  testing::Command bind = testing::run_teeny("compare " + a + " " + b + " --bind B=8");
  EXPECT_EQ(bind.exit_code, 1);
  EXPECT_EQ(bind.err, "teeny: error: --bind applies only when comparing two bundles, not two profiles\n");

  testing::Command mixed = testing::run_teeny("compare " + dir.str() + " " + b);
  EXPECT_EQ(mixed.exit_code, 1);
  EXPECT_EQ(mixed.err,
            "teeny: error: compare two profiles (JSON from `teeny profile --format json`) or two "
            "bundles, not one of each: '" +
                dir.str() + "' is a directory (a bundle), '" + b + "' is not\n");
}

}  // namespace
}  // namespace teeny
