// CPU tests of the profiler's pure parts: statistics, record matching and validation, run
// summaries and figures, report formats and the Chrome trace, all from synthetic records.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/chrome_trace.h"
#include "cli/profile_report.h"
#include "core/clock_probe.h"
#include "core/driver.h"
#include "core/error.h"
#include "core/profiler.h"
#include "core/stats.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

// ---- statistics ---------------------------------------------------------------------------

TEST(ProfileStats, SummaryMatchesHandComputedValues) {
  // Sorted: 1..10. Linear interpolation between closest ranks (rank = p/100 * (n-1)):
  // median rank 4.5 -> 5.5; p90 rank 8.1 -> 9.1; q1 rank 2.25 -> 3.25; q3 rank 6.75 -> 7.75.
  const Summary s = summarize({10, 3, 1, 7, 2, 9, 4, 8, 6, 5});
  EXPECT_EQ(s.count, 10u);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_DOUBLE_EQ(s.mean, 5.5);
  EXPECT_DOUBLE_EQ(s.median, 5.5);
  EXPECT_DOUBLE_EQ(s.p90, 9.1);
  EXPECT_DOUBLE_EQ(s.q1, 3.25);
  EXPECT_DOUBLE_EQ(s.q3, 7.75);
  EXPECT_DOUBLE_EQ(s.rel_iqr, 4.5 / 5.5);
}

TEST(ProfileStats, OddCountAndSingleSample) {
  const Summary odd = summarize({4, 1, 2});
  EXPECT_DOUBLE_EQ(odd.median, 2);
  EXPECT_DOUBLE_EQ(odd.mean, 7.0 / 3.0);
  EXPECT_DOUBLE_EQ(odd.p90, 3.6);  // rank 1.8: 2 + 0.8 * (4 - 2)
  const Summary one = summarize({3.5});
  EXPECT_DOUBLE_EQ(one.min, 3.5);
  EXPECT_DOUBLE_EQ(one.p90, 3.5);
  EXPECT_DOUBLE_EQ(one.rel_iqr, 0);
}

TEST(ProfileStats, RejectsNoSamplesAndBadPercentile) {
  try {
    summarize({});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "cannot summarise an empty set of timing samples");
  }
  try {
    percentile_sorted({1, 2}, 101);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "percentile 101 is outside [0, 100]");
  }
}

// ---- synthetic records --------------------------------------------------------------------

std::vector<LaunchFacts> two_launches() {
  LaunchFacts fc1;
  fc1.index = 0;
  fc1.node = "fc1";
  fc1.kernel = "linear_f32";
  fc1.entry = "linear_f32_entry_point";
  fc1.grid = {4, 2, 1};
  fc1.block = {256, 1, 1};
  fc1.registers = 40;
  fc1.static_smem_bytes = 8192;
  fc1.dynamic_smem_bytes = 0;
  fc1.occupancy = 0.75;
  fc1.bytes = 2000000;
  fc1.flops = 8000000;
  LaunchFacts act = fc1;
  act.index = 1;
  act.node = "act";
  act.kernel = "relu_f32";
  act.entry = "relu_f32_entry_point";
  act.grid = {64, 1, 1};
  act.registers = 16;
  act.static_smem_bytes = 0;
  act.bytes = 500000;
  act.flops = 0;
  return {fc1, act};
}

// Iteration i, launch l runs from base + i*1000 + l*100 for `dur[l]` ns, as CUPTI would
// report it with the external correlation tagging the profiler performs.
ActivityBatch sequence_batch(uint32_t iterations, std::vector<uint64_t> dur = {30, 10}) {
  ActivityBatch batch;
  const auto launches = two_launches();
  uint32_t correlation = 100;
  for (uint32_t i = 0; i < iterations; ++i) {
    for (uint32_t l = 0; l < 2; ++l) {
      KernelRecord r;
      r.correlation_id = ++correlation;
      r.start_ns = 1000000 + i * 1000 + l * 100;
      r.end_ns = r.start_ns + dur[l];
      r.stream_id = 7;
      r.name = launches[l].entry;
      batch.kernels.push_back(r);
      batch.correlations.push_back({correlation, encode_external_id(i, l)});
    }
  }
  return batch;
}

TEST(ProfileMatch, ExternalIdRoundTrip) {
  EXPECT_EQ(encode_external_id(3, 5), (uint64_t{3} << 32) | 5);
  const auto [iteration, launch] = decode_external_id(encode_external_id(70000, kWholeGraph));
  EXPECT_EQ(iteration, 70000u);
  EXPECT_EQ(launch, kWholeGraph);
}

TEST(ProfileMatch, CompleteRecordsAreTrusted) {
  const MatchedRecords m = match_records(sequence_batch(3), two_launches(), 3, false);
  EXPECT_TRUE(m.problems.empty()) << m.problems.front();
  ASSERT_EQ(m.timings.size(), 3u);
  EXPECT_EQ(m.timings[2][1].start_ns, 1000000u + 2000 + 100);
  EXPECT_EQ(m.timings[2][1].end_ns, 1000000u + 2000 + 110);
  EXPECT_EQ(m.timings[0][0].stream_id, 7u);
  EXPECT_EQ(m.excluded_records, 0u);
}

TEST(ProfileMatch, RecordsAreJoinedByCorrelationNotOrder) {
  ActivityBatch batch = sequence_batch(2);
  std::reverse(batch.kernels.begin(), batch.kernels.end());
  const MatchedRecords m = match_records(batch, two_launches(), 2, false);
  EXPECT_TRUE(m.problems.empty());
  EXPECT_EQ(m.timings[0][0].start_ns, 1000000u);
  EXPECT_EQ(m.timings[1][1].start_ns, 1001100u);
}

TEST(ProfileMatch, DroppedRecordsAreUntrusted) {
  ActivityBatch batch = sequence_batch(2);
  batch.dropped = 5;
  const MatchedRecords m = match_records(batch, two_launches(), 2, false);
  ASSERT_EQ(m.problems.size(), 2u);
  EXPECT_EQ(m.problems[0], "CUPTI dropped 5 activity records");
  EXPECT_EQ(m.problems[1], "received 4 kernel records (0 without a teeny tag) and 4 external-correlation records");
}

TEST(ProfileMatch, MissingRecordIsUntrustedWithWhere) {
  ActivityBatch batch = sequence_batch(3);
  batch.kernels.erase(batch.kernels.begin() + 3);  // iteration 1, launch 1
  batch.kernels.erase(batch.kernels.begin() + 4);  // iteration 2, launch 1 (after the shift)
  const MatchedRecords m = match_records(batch, two_launches(), 3, false);
  ASSERT_EQ(m.problems.size(), 2u);
  EXPECT_EQ(m.problems[0], "no kernel record for a launch (2x, first at iteration 1, launch 1 (act))");
  EXPECT_EQ(m.problems[1], "received 4 kernel records (0 without a teeny tag) and 6 external-correlation records");
  EXPECT_EQ(m.timings[1][1].end_ns, 0u);
}

TEST(ProfileMatch, DuplicateRecordIsUntrusted) {
  ActivityBatch batch = sequence_batch(2);
  batch.kernels.push_back(batch.kernels[2]);  // iteration 1, launch 0 twice
  const MatchedRecords m = match_records(batch, two_launches(), 2, false);
  ASSERT_EQ(m.problems.size(), 2u);
  EXPECT_EQ(m.problems[0], "more than one kernel record for a launch (1x, first at iteration 1, launch 0 (fc1))");
}

TEST(ProfileMatch, WrongKernelAndNonPositiveDurationAreUntrusted) {
  ActivityBatch batch = sequence_batch(2);
  batch.kernels[1].name = "other_entry_point";
  batch.kernels[2].end_ns = batch.kernels[2].start_ns;
  const MatchedRecords m = match_records(batch, two_launches(), 2, false);
  ASSERT_EQ(m.problems.size(), 3u);
  EXPECT_EQ(m.problems[0],
            "kernel record for a different kernel than launched (1x, first at iteration 0, launch 1 (act): "
            "expected relu_f32_entry_point, found other_entry_point)");
  EXPECT_EQ(m.problems[1], "kernel record that ends at or before its start (1x, first at iteration 1, launch 0 (fc1))");
}

TEST(ProfileMatch, UntaggedKernelsAreExcludedNotFatal) {
  ActivityBatch batch = sequence_batch(2);
  KernelRecord flush;  // e.g. an L2 flush: its launch carried no teeny external id
  flush.correlation_id = 9999;
  flush.start_ns = 5;
  flush.end_ns = 50;
  flush.name = "flush";
  batch.kernels.push_back(flush);
  const MatchedRecords m = match_records(batch, two_launches(), 2, false);
  EXPECT_TRUE(m.problems.empty());
  EXPECT_EQ(m.excluded_records, 1u);
}

TEST(ProfileMatch, TagOutsideTimedIterationsIsUntrusted) {
  ActivityBatch batch = sequence_batch(2);
  batch.correlations[0].external_id = encode_external_id(7, 0);  // a warm-up leftover
  const MatchedRecords m = match_records(batch, two_launches(), 2, false);
  ASSERT_EQ(m.problems.size(), 3u);
  EXPECT_EQ(m.problems[0], "no kernel record for a launch (1x, first at iteration 0, launch 0 (fc1))");
  EXPECT_EQ(m.problems[1],
            "kernel record tagged with a launch that was not timed (1x, first at external id 0x700000000)");
}

TEST(ProfileMatch, UntrustedResultSaysWhatArrived) {
  ActivityBatch batch = sequence_batch(2);
  batch.correlations.clear();  // kernel records without their external-correlation records
  const MatchedRecords m = match_records(batch, two_launches(), 2, false);
  ASSERT_EQ(m.problems.size(), 2u);
  EXPECT_EQ(m.problems[0], "no kernel record for a launch (4x, first at iteration 0, launch 0 (fc1))");
  EXPECT_EQ(m.problems[1], "received 4 kernel records (4 without a teeny tag) and 0 external-correlation records");
  EXPECT_EQ(m.excluded_records, 4u);
}

// A graph replay: all kernels of an iteration share the cuGraphLaunch correlation id.
ActivityBatch graph_batch(uint32_t iterations) {
  ActivityBatch batch;
  const auto launches = two_launches();
  for (uint32_t i = 0; i < iterations; ++i) {
    const uint32_t correlation = 500 + i;
    batch.correlations.push_back({correlation, encode_external_id(i, kWholeGraph)});
    for (uint32_t l = 0; l < 2; ++l) {
      KernelRecord r;
      r.correlation_id = correlation;
      r.start_ns = 2000000 + i * 1000 + l * 100;
      r.end_ns = r.start_ns + 20 + l;
      r.name = launches[l].entry;
      r.graph_node_id = 40 + l;
      batch.kernels.push_back(r);
    }
  }
  std::reverse(batch.kernels.begin(), batch.kernels.end());  // delivery order is not launch order
  return batch;
}

TEST(ProfileMatch, GraphReplayRecordsMapByStartOrder) {
  const MatchedRecords m = match_records(graph_batch(3), two_launches(), 3, true);
  EXPECT_TRUE(m.problems.empty()) << m.problems.front();
  EXPECT_EQ(m.timings[1][0].start_ns, 2001000u);
  EXPECT_EQ(m.timings[1][1].end_ns, 2001100u + 21);
  EXPECT_EQ(m.timings[2][1].graph_node_id, 41u);
}

TEST(ProfileMatch, GraphReplayWithMissingKernelOrChangedNodeIsUntrusted) {
  ActivityBatch batch = graph_batch(3);
  batch.kernels.erase(batch.kernels.begin());  // iteration 2 loses a record
  batch.kernels[2].graph_node_id = 99;         // iteration 1, launch 0 (the list is reversed)
  const MatchedRecords m = match_records(batch, two_launches(), 3, true);
  ASSERT_EQ(m.problems.size(), 3u);
  EXPECT_EQ(m.problems[0],
            "graph replay with a wrong number of kernel records (1x, first at iteration 2: 1 records for 2 launches)");
  EXPECT_EQ(m.problems[1], "graph node id differs from the first replay (1x, first at iteration 1, launch 0 (fc1))");
}

// ---- run summary and figures ---------------------------------------------------------------

TEST(ProfilePeaks, FromDeviceAttributes) {
  // H100 SXM-like: 2619 MHz x 5120-bit HBM3, 132 SMs at 1980 MHz, 128 FP32 lanes per SM.
  const DevicePeaks h100 = peaks_from_attributes(9, 0, 132, 1980000, 2619000, 5120);
  EXPECT_NEAR(h100.bandwidth_gbps, 2 * 2.619e9 * 640 / 1e9, 1e-6);    // 3352.32
  EXPECT_NEAR(h100.fp32_gflops, 132 * 128 * 2 * 1.98e9 / 1e9, 1e-6);  // 66908.16
  EXPECT_NE(h100.source.find("from device attributes"), std::string::npos);
  // A100: 64 FP32 lanes per SM.
  const DevicePeaks a100 = peaks_from_attributes(8, 0, 108, 1410000, 1215000, 5120);
  EXPECT_NEAR(a100.fp32_gflops, 108 * 64 * 2 * 1.41e9 / 1e9, 1e-6);  // 19491.84
  // Tensor-core ceilings: 4096 FLOP/clock/SM on sm_90, 2048 on sm_80 (A100: ~312 TFLOP/s).
  EXPECT_NEAR(h100.tensor16_gflops, 132 * 4096 * 1.98e9 / 1e9, 1e-6);  // 1070530.56
  EXPECT_NEAR(a100.tensor16_gflops, 108 * 2048 * 1.41e9 / 1e9, 1e-6);  // 311869.44
  EXPECT_NE(h100.source.find("f16/bf16 tensor = 132 SMs x 4096 FLOP/clock x 1980 MHz SM clock"), std::string::npos)
      << h100.source;
  // An arch whose rate teeny does not know gets no tensor-core percentage rather than a guess.
  EXPECT_EQ(peaks_from_attributes(8, 9, 142, 2520000, 2250000, 384).tensor16_gflops, 0);
}

MatchedRecords timings_from(const std::vector<std::vector<std::pair<uint64_t, uint64_t>>>& rows) {
  MatchedRecords m;
  for (const auto& row : rows) {
    std::vector<LaunchTiming> t;
    for (const auto& [start, end] : row) t.push_back({start, end, 0, 7, 0});
    m.timings.push_back(t);
  }
  return m;
}

TEST(ProfileSummary, PerLaunchStatsShareAndFigures) {
  // fc1: 10, 20, 30 us; act: 10, 10, 10 us; launches back to back with a 5 us gap.
  const MatchedRecords m = timings_from({
      {{0, 10000}, {15000, 25000}},
      {{100000, 120000}, {125000, 135000}},
      {{200000, 230000}, {235000, 245000}},
  });
  const DevicePeaks peaks{1000, 4000, 40000, "test peaks"};
  const ProfileRun run = summarize_run({{"B", 64}}, two_launches(), m, {3, 5, 4}, peaks, true);
  ASSERT_EQ(run.launches.size(), 2u);
  const LaunchStats& fc1 = run.launches[0];
  EXPECT_DOUBLE_EQ(fc1.duration_us.median, 20);
  EXPECT_DOUBLE_EQ(fc1.duration_us.mean, 20);
  EXPECT_DOUBLE_EQ(fc1.duration_us.max, 30);
  // Mean times 20 and 10: shares 2/3 and 1/3.
  EXPECT_DOUBLE_EQ(fc1.share, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(run.launches[1].share, 1.0 / 3.0);
  // 2e6 bytes in 20 us = 100 GB/s = 10% of 1000; 8e6 flops in 20 us = 400 GFLOP/s = 10% of 4000.
  EXPECT_DOUBLE_EQ(fc1.gbps, 100);
  EXPECT_DOUBLE_EQ(fc1.gflops, 400);
  EXPECT_DOUBLE_EQ(fc1.pct_peak_bandwidth, 10);
  EXPECT_DOUBLE_EQ(fc1.pct_peak_compute, 10);
  EXPECT_DOUBLE_EQ(run.launches[1].gbps, 50);  // 5e5 bytes in 10 us
  // End to end: 25, 35, 45 us.
  EXPECT_DOUBLE_EQ(run.gpu_time_us.median, 35);
  EXPECT_DOUBLE_EQ(run.gpu_time_us.min, 25);
  EXPECT_DOUBLE_EQ(run.enqueue_us.median, 4);
  EXPECT_DOUBLE_EQ(run.kernel_sum_us, 30);
  EXPECT_EQ(run.iterations, 3);
  EXPECT_EQ(run.trace.size(), 6u);
  EXPECT_TRUE(run.untrusted.empty());
  // fc1 varies 10..30 us: relative IQR (25 - 15) / 20 = 50%; end to end (40 - 30) / 35.
  ASSERT_EQ(run.warnings.size(), 2u);
  EXPECT_EQ(run.warnings[0],
            "noisy: end-to-end GPU time varies by 28.6% (relative IQR, above 5%); other GPU work or clock "
            "changes may be interfering, try a longer --min-time");
  EXPECT_EQ(run.warnings[1], "noisy launches (relative IQR above 10%): fc1 (50.0%)");
}

TEST(ProfileSummary, TensorCoreKernelsAreMeasuredAgainstTheTensorCeiling) {
  std::vector<LaunchFacts> launches = two_launches();
  launches[0].tensor_cores = true;
  const MatchedRecords m = timings_from({{{0, 20000}, {25000, 35000}}});
  // fc1: 8e6 flops in 20 us = 400 GFLOP/s = 1% of the 40000 tensor ceiling, not 10% of fp32.
  ProfileRun run = summarize_run({}, launches, m, {1}, DevicePeaks{1000, 4000, 40000, "t"}, false);
  EXPECT_DOUBLE_EQ(run.launches[0].pct_peak_compute, 1);
  // Unknown tensor ceiling: no percentage.
  run = summarize_run({}, launches, m, {1}, DevicePeaks{1000, 4000, 0, "t"}, false);
  EXPECT_DOUBLE_EQ(run.launches[0].pct_peak_compute, 0);
  // act (no tensor cores) stays on fp32: 2e6 flops in 10 us = 200 GFLOP/s = 5% of 4000.
  launches[1].flops = 2000000;
  run = summarize_run({}, launches, m, {1}, DevicePeaks{1000, 4000, 0, "t"}, false);
  EXPECT_DOUBLE_EQ(run.launches[1].pct_peak_compute, 5);
}

TEST(ProfileSummary, QuietRunHasNoWarningsAndSkipsInvalidTimings) {
  // Four identical iterations, then one whose second record is missing (left zero).
  MatchedRecords m;
  for (uint64_t base = 0; base < 500000; base += 100000)
    m.timings.push_back({{base, base + 10000, 0, 7, 0}, {base + 10000, base + 20000, 0, 7, 0}});
  m.timings[4][1] = LaunchTiming{};
  m.problems.push_back("no kernel record for a launch (1x, first at iteration 4, launch 1 (act))");
  const ProfileRun run = summarize_run({}, two_launches(), m, {1, 1, 1, 1, 1}, DevicePeaks{}, false);
  EXPECT_TRUE(run.warnings.empty()) << run.warnings.front();
  EXPECT_EQ(run.launches[1].duration_us.count, 4u);  // the missing record is not a 0 us sample
  EXPECT_DOUBLE_EQ(run.launches[1].duration_us.min, 10);
  EXPECT_EQ(run.untrusted.size(), 1u);
  EXPECT_TRUE(run.trace.empty());
  EXPECT_DOUBLE_EQ(run.launches[0].pct_peak_bandwidth, 0);  // no peaks known: no percentage
}

TEST(ProfileMatch, InterleavedSubjectsSplitOneBatch) {
  // Two subjects' iterations in one batch (as profile_bundles records them), plus an untagged
  // record (the clock probe).
  ActivityBatch batch;
  const auto launches = two_launches();
  uint32_t correlation = 0;
  for (uint32_t i = 0; i < 3; ++i)
    for (size_t s = 0; s < 2; ++s)
      for (uint32_t l = 0; l < 2; ++l) {
        KernelRecord r;
        r.correlation_id = ++correlation;
        r.start_ns = 1000 * correlation;
        r.end_ns = r.start_ns + 10 + s;  // subject 1's kernels take 1 ns longer
        r.name = launches[l].entry;
        batch.kernels.push_back(r);
        batch.correlations.push_back({correlation, encode_external_id(subject_tag(s, i), l)});
      }
  KernelRecord probe;
  probe.correlation_id = ++correlation;
  probe.name = "teeny_clock_probe";
  batch.kernels.push_back(probe);
  for (size_t s = 0; s < 2; ++s) {
    const MatchedRecords m = match_records(records_of_subject(batch, s, 2), launches, 3, false);
    EXPECT_TRUE(m.problems.empty()) << m.problems.front();
    EXPECT_EQ(m.excluded_records, s == 0 ? 1u : 0u);
    for (const auto& row : m.timings)
      for (const LaunchTiming& t : row) EXPECT_EQ(t.end_ns - t.start_ns, 10 + s);
  }
}

TEST(ProfileSummary, ClockDriftIsAWarning) {
  ProfileRun steady, drifting;
  record_clocks(steady, 1980, 1950);
  EXPECT_TRUE(steady.warnings.empty());
  EXPECT_DOUBLE_EQ(steady.sm_clock_after_mhz, 1950);
  record_clocks(drifting, 1980, 1755);
  EXPECT_EQ(drifting.warnings,
            std::vector<std::string>{"the SM clock moved from 1980 MHz to 1755 MHz during the timed iterations "
                                     "(power or thermal limit?); the times mix both clocks"});
}

TEST(ProfileClock, ProbeCompilesToPtxReadingBothClocks) {
  const std::string ptx = clock_probe_ptx(9, 0);
  EXPECT_NE(ptx.find(".entry teeny_clock_probe("), std::string::npos) << ptx;
  EXPECT_NE(ptx.find("%globaltimer"), std::string::npos);
  EXPECT_NE(ptx.find("%clock64"), std::string::npos);
}

TEST(ProfileSweep, ParsesAndRejects) {
  const auto [dim, values] = parse_sweep("B=1,8,64,512");
  EXPECT_EQ(dim, "B");
  EXPECT_EQ(values, (std::vector<int64_t>{1, 8, 64, 512}));
  const auto expect_error = [](const std::string& text, const std::string& message) {
    try {
      parse_sweep(text);
      FAIL() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.message(), message);
    }
  };
  expect_error("B", "--sweep 'B': expected DIM=a,b,c (e.g. B=1,8,64,512)");
  expect_error("=1,2", "--sweep '=1,2': expected DIM=a,b,c (e.g. B=1,8,64,512)");
  expect_error("B=", "--sweep 'B=': expected DIM=a,b,c (e.g. B=1,8,64,512)");
  expect_error("B=1,x", "--sweep 'B=1,x': 'x' is not a positive integer");
  expect_error("B=1,,2", "--sweep 'B=1,,2': '' is not a positive integer");
  expect_error("B=0", "--sweep 'B=0': '0' is not a positive integer");
  expect_error("B=4,4", "--sweep 'B=4,4': 4 is listed twice");
}

// ---- reports --------------------------------------------------------------------------------

ProfileReport synthetic_report(bool cupti, bool sweep) {
  ProfileReport report;
  report.bundle_path = "mlp.teeny";
  report.graph_name = "mnist_mlp";
  Environment& e = report.environment;
  e.gpu_name = "Test GPU";
  e.cc_major = 9;
  e.sm_count = 132;
  e.driver_version = 13000;
  e.cuda_headers_version = 12040;
  e.nvrtc_version = "13.0";
  e.cupti_version = "CUPTI API 130001";
  e.peaks = {1000, 4000, 40000, "test peaks"};
  e.cupti = cupti;
  e.timing_method =
      cupti ? "CUPTI activity records" : "CUDA events (CUPTI unavailable: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)";
  e.mode = "sequence";
  const MatchedRecords m = timings_from({{{0, 10000}, {15000, 25000}}, {{100000, 120000}, {125000, 135000}}});
  for (int64_t b : sweep ? std::vector<int64_t>{1, 8} : std::vector<int64_t>{64}) {
    ProfileRun run = summarize_run({{"B", b}}, two_launches(), m, {3, 5}, e.peaks, true);
    run.warmup_iterations = 10;
    report.runs.push_back(run);
  }
  if (sweep) {
    report.sweep_dim = "B";
    report.runs[1].untrusted.push_back("CUPTI dropped 1 activity records");
  }
  return report;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  return parts;
}

TEST(ProfileReport, JsonParsesWithUnitsAndEnvironment) {
  const std::string text = cli::profile_json(synthetic_report(true, false)).dump(2);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["environment"]["gpu_name"], "Test GPU");
  EXPECT_EQ(j["environment"]["driver_cuda_version"], "13.0");
  EXPECT_EQ(j["environment"]["cuda_headers_version"], "12.4");
  EXPECT_EQ(j["environment"]["timing_method"], "CUPTI activity records");
  EXPECT_EQ(j["environment"]["mode"], "sequence");
  EXPECT_TRUE(j["sweep_dim"].is_null());
  const auto& run = j["runs"][0];
  EXPECT_EQ(run["bindings"]["B"], 64);
  EXPECT_EQ(run["trusted"], true);
  EXPECT_DOUBLE_EQ(run["gpu_time"]["median_us"].get<double>(), 30);  // 25 and 35 us
  EXPECT_EQ(run["gpu_time"]["samples_us"], nlohmann::json({25.0, 35.0}));
  const auto& fc1 = run["launches"][0];
  EXPECT_EQ(fc1["node"], "fc1");
  EXPECT_EQ(fc1["grid"], nlohmann::json({4, 2, 1}));
  EXPECT_DOUBLE_EQ(fc1["duration"]["median_us"].get<double>(), 15);
  EXPECT_EQ(fc1["duration"]["samples_us"], nlohmann::json({10.0, 20.0}));  // iteration order
  EXPECT_DOUBLE_EQ(fc1["gbps"].get<double>(), 2e6 / 15e3);
  EXPECT_DOUBLE_EQ(fc1["share_pct"].get<double>(), 60);  // means 15 and 10
  EXPECT_EQ(fc1["registers_per_thread"], 40);
  EXPECT_DOUBLE_EQ(fc1["occupancy_pct"].get<double>(), 75);
  EXPECT_EQ(fc1["compute_unit"], "fp32");
  EXPECT_DOUBLE_EQ(j["environment"]["peak_tensor16_gflops"].get<double>(), 40000);
  EXPECT_FALSE(j.contains("scaling"));
}

TEST(ProfileReport, JsonSweepHasScalingAndUntrustedRun) {
  const nlohmann::json j = cli::profile_json(synthetic_report(true, true));
  EXPECT_EQ(j["sweep_dim"], "B");
  ASSERT_EQ(j["scaling"].size(), 2u);
  EXPECT_EQ(j["scaling"][1]["value"], 8);
  EXPECT_DOUBLE_EQ(j["scaling"][1]["us_per_unit"].get<double>(), 30.0 / 8);
  EXPECT_DOUBLE_EQ(j["scaling"][1]["time_vs_first"].get<double>(), 1);
  EXPECT_EQ(j["runs"][1]["trusted"], false);
  EXPECT_EQ(j["runs"][1]["untrusted_reasons"][0], "CUPTI dropped 1 activity records");
}

TEST(ProfileReport, CsvHasHeaderAndOneRowPerLaunch) {
  const std::string csv = cli::format_profile_csv(synthetic_report(false, true));
  const auto lines = split(csv, '\n');
  ASSERT_EQ(lines.size(), 5u);  // header + 2 runs x 2 launches
  const auto header = split(lines[0], ',');
  EXPECT_EQ(header[0], "bindings");
  EXPECT_EQ(header[16], "median_us");
  // The timing method contains no comma here, so a plain split gives the fields.
  const auto row = split(lines[4], ',');
  ASSERT_EQ(row.size(), header.size());
  EXPECT_EQ(row[0], "B=8");
  EXPECT_EQ(row[1], "false");
  EXPECT_EQ(row[2], "CUDA events (CUPTI unavailable: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)");
  EXPECT_EQ(row[6], "act");
  EXPECT_EQ(row[16], "10.0000");
}

TEST(ProfileReport, CsvQuotesFieldsWithCommas) {
  ProfileReport report = synthetic_report(true, false);
  report.runs[0].bindings = {{"B", 2}, {"S", 3}};
  const auto lines = split(cli::format_profile_csv(report), '\n');
  EXPECT_EQ(lines[1].substr(0, 12), "\"B=2, S=3\",t");
}

TEST(ProfileReport, TableShowsLaunchesTotalsAndTiming) {
  const std::string table = cli::format_profile_table(synthetic_report(false, true));
  EXPECT_NE(table.find("timing: CUDA events (CUPTI unavailable: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES); mode: sequence"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("== mnist_mlp (B=1) =="), std::string::npos);
  EXPECT_NE(table.find("median_us"), std::string::npos);
  EXPECT_NE(table.find("end-to-end GPU time per iteration (first kernel start to last kernel end): median 30.00 us"),
            std::string::npos);
  EXPECT_NE(table.find("NOT TRUSTED: the records do not match the launches:\n  - CUPTI dropped 1 activity records"),
            std::string::npos);
  EXPECT_NE(table.find("== scaling over B =="), std::string::npos);
  // The fc1 row: index, node, kernel, grid, block, median 15.00, min 10.00, p90 19.00, share 60.0.
  EXPECT_NE(table.find("\n0  fc1   linear_f32  4x2x1   256x1x1      15.00   10.00   19.00    60.0  133.3  13.3"),
            std::string::npos)
      << table;
}

TEST(ProfileReport, ATrainingStepsPassesAreTotalled) {
  ProfileReport report = synthetic_report(false, false);
  EXPECT_EQ(cli::format_profile_table(report).find("by pass"), std::string::npos);  // forward only
  report.runs[0].launches[1].facts.role = NodeRole::kBackward;
  EXPECT_NE(cli::format_profile_table(report).find(
                "by pass (kernel medians summed): forward 1 launch 15.00 us (60.0%), backward 1 launch 10.00 us "
                "(40.0%)\n"),
            std::string::npos)
      << cli::format_profile_table(report);
  const nlohmann::json j = cli::profile_json(report);
  EXPECT_EQ(j["runs"][0]["launches"][1]["pass"], "backward");
  EXPECT_EQ(j["runs"][0]["passes"]["backward"]["launches"], 1);
  EXPECT_DOUBLE_EQ(j["runs"][0]["passes"]["forward"]["kernel_sum_median_us"].get<double>(), 15);
}

// ---- trace ----------------------------------------------------------------------------------

TEST(ProfileTrace, ChromeTraceStructure) {
  ProfileReport report = synthetic_report(true, true);
  report.runs[1].trace[1].stream_id = 9;  // a second stream in the second run
  const nlohmann::json t = nlohmann::json::parse(cli::chrome_trace(report).dump());
  ASSERT_TRUE(t["traceEvents"].is_array());
  int processes = 0, threads = 0, slices = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") ++processes;
    if (e["ph"] == "M" && e["name"] == "thread_name") ++threads;
    if (e["ph"] == "X") ++slices;
  }
  EXPECT_EQ(processes, 2);
  EXPECT_EQ(threads, 3);  // stream 7 in run 0; streams 7 and 9 in run 1
  EXPECT_EQ(slices, 8);   // 2 runs x 2 iterations x 2 launches
  // The first slice of run 0: fc1 at t=0 for 10 us on stream 7.
  const auto first = std::find_if(t["traceEvents"].begin(), t["traceEvents"].end(),
                                  [](const nlohmann::json& e) { return e["ph"] == "X"; });
  EXPECT_EQ((*first)["name"], "linear_f32");
  EXPECT_EQ((*first)["pid"], 0);
  EXPECT_EQ((*first)["tid"], 7);
  EXPECT_DOUBLE_EQ((*first)["ts"].get<double>(), 0);
  EXPECT_DOUBLE_EQ((*first)["dur"].get<double>(), 10);
  EXPECT_EQ((*first)["args"]["node"], "fc1");
  EXPECT_EQ((*first)["args"]["grid"], nlohmann::json({4, 2, 1}));
  EXPECT_EQ((*first)["args"]["block"], nlohmann::json({256, 1, 1}));
  EXPECT_EQ((*first)["args"]["registers_per_thread"], 40);
  EXPECT_EQ(t["otherData"]["timing_method"], "CUPTI activity records");
}

TEST(ProfileTrace, WritesFileAndReportsUnwritablePath) {
  const std::string path = ::testing::TempDir() + "teeny_trace_test.json";
  cli::write_chrome_trace(synthetic_report(true, false), path);
  std::ifstream in(path);
  const nlohmann::json t = nlohmann::json::parse(in);
  EXPECT_EQ(t["traceEvents"].size(), 2u + 1u + 4u);  // process name + sort index, 1 thread, 4 slices
  std::remove(path.c_str());
  try {
    cli::write_chrome_trace(synthetic_report(true, false), "/nonexistent-dir/t.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "cannot write trace '/nonexistent-dir/t.json': No such file or directory");
  }
}

// ---- the command line, before any GPU work -------------------------------------------------

using testing::Command;
using testing::run_teeny;

class ProfileCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("teeny-profile-cli-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    const Command compiled =
        run_teeny(std::string("compile ") + TEENY_SOURCE_DIR + "/graphs/mnist_mlp.yaml -o " + bundle());
    ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  static std::string bundle() { return (dir_ / "mlp.teeny").string(); }
  static std::filesystem::path dir_;
};
std::filesystem::path ProfileCli::dir_;

TEST_F(ProfileCli, BadFlagsAreInputErrorsBeforeAnyGpuWork) {
  Command r = run_teeny("profile " + bundle() + " --sweep B=1,x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "teeny: error: --sweep 'B=1,x': 'x' is not a positive integer\n");
  r = run_teeny("profile " + bundle() + " --bind B=4 --sweep B=1,2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "teeny: error: --sweep B=1,2 and --bind B=4 both set B\n");
  r = run_teeny("profile " + bundle() + " --sweep B=1,70000");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "teeny: error: --bind B=70000: B must be in [1, 65536]\n");
  r = run_teeny("profile " + bundle() + " --mode cold");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--mode"), std::string::npos) << r.err;  // CLI11's wording varies by version
}

TEST_F(ProfileCli, WithoutADriverExitsThreeWithAPlainMessage) {
  try {
    cuda::Driver::get();
    GTEST_SKIP() << "a CUDA driver is present here; the GPU tests cover profile";
  } catch (const Error&) {
  }
  const Command r = run_teeny("profile " + bundle());
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("teeny: error: no CUDA driver found (libcuda.so.1)", 0), 0u) << r.err;
}

}  // namespace
}  // namespace teeny
