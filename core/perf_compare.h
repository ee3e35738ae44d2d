// `teeny compare`: is B faster than A, or is it noise? Two profiles of the same graph (from
// `teeny profile --format json`, or from one interleaved run of two bundles) matched run by run
// (by bindings) and launch by launch (by node and launch index: kernel names may differ, that
// is the point), each pair of sample sets put through core/perf_stats.h.
#pragma once

#include <string>
#include <vector>

#include "core/perf_stats.h"
#include "core/profiler.h"

namespace teeny {

struct CompareOptions {
  double confidence = 0.95;
  // A verdict of faster or slower needs the whole confidence interval of B/A this far from 1:
  // two instances of identical code (other buffers, other code addresses, another process)
  // differ by about a percent, and a tiny kernel by more, with as much confidence as one likes.
  double min_effect = 0.02;
};

// One launch present in both profiles.
struct LaunchComparison {
  std::string node;  // its label: "<node>" or "<node>#<launch index>"
  std::string kernel_a, kernel_b;
  bool same_ptx = false;  // both ran the same PTX: a difference is placement, not code
  RatioEstimate estimate;
  Verdict verdict = Verdict::kSame;
};

// A launch only one profile has (the two were compiled differently, e.g. with --no-fuse).
struct UnmatchedLaunch {
  std::string node, kernel;
  double median_us = 0;
};

struct RunComparison {
  Bindings bindings;
  RatioEstimate end_to_end;  // per-iteration GPU time, first kernel start to last kernel end
  Verdict verdict = Verdict::kSame;
  std::vector<LaunchComparison> launches;  // in B's launch order
  std::vector<UnmatchedLaunch> only_in_a, only_in_b;
  std::vector<std::string> notes;  // launches without per-launch samples, clock changes, ...
};

struct Comparison {
  std::string graph, label_a, label_b;  // labels: the file or bundle each profile came from
  CompareOptions options;
  std::vector<RunComparison> runs;    // in A's run order
  std::vector<std::string> warnings;  // different GPUs, modes or timing methods
};

// Matches and compares; `label_a` and `label_b` name the profiles in messages. Throws Error when
// the graphs differ, the bindings do not match run for run, or a run is not trusted or lacks
// end-to-end samples.
Comparison compare_profiles(const ProfileReport& a, const std::string& label_a, const ProfileReport& b,
                            const std::string& label_b, const CompareOptions& options = {});

// Slower when the whole interval lies above 1 + min_effect, faster when it lies below
// 1 - min_effect; else no difference (within the margin, or too noisy to tell).
Verdict verdict_with_min_effect(const RatioEstimate& e, double min_effect);

// With --threshold PCT: the runs whose end-to-end time B regressed by more than `threshold_pct`:
// judged slower, with the estimated ratio above 1 + PCT/100.
std::vector<const RunComparison*> regressions(const Comparison& comparison, double threshold_pct);

}  // namespace teeny
