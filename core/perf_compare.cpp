#include "core/perf_compare.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace teeny {
namespace {

struct Labeled {
  const ProfileReport& report;
  const std::string& label;
};

void check_same_graph(const Labeled& a, const Labeled& b) {
  if (a.report.graph_name != b.report.graph_name)
    throw Error(fmt::format("{} profiles graph '{}' but {} profiles graph '{}': compare profiles of one graph", a.label,
                            a.report.graph_name, b.label, b.report.graph_name));
}

// Differences that make a comparison less clean but not meaningless.
std::vector<std::string> setup_warnings(const Labeled& a, const Labeled& b) {
  std::vector<std::string> warnings;
  const Environment& ea = a.report.environment;
  const Environment& eb = b.report.environment;
  const auto differ = [&](const char* what, const std::string& va, const std::string& vb) {
    if (va != vb) warnings.push_back(fmt::format("different {}: {} has {}, {} has {}", what, a.label, va, b.label, vb));
  };
  differ("GPUs", ea.gpu_name, eb.gpu_name);
  differ("profile modes", ea.mode + (ea.cuda_graph ? " (CUDA graph)" : ""),
         eb.mode + (eb.cuda_graph ? " (CUDA graph)" : ""));
  differ("timing methods", ea.timing_method, eb.timing_method);
  return warnings;
}

void check_trusted(const Labeled& side, const ProfileRun& run) {
  if (!run.untrusted.empty())
    throw Error(fmt::format("{}: the run at {} is not trusted ({}); profile it again", side.label,
                            bindings_text(run.bindings), fmt::join(run.untrusted, "; ")));
  if (run.gpu_time_samples_us.empty())
    throw Error(
        fmt::format("{}: the run at {} has no per-iteration samples; profile it again with this teeny "
                    "(`teeny profile --format json` keeps them)",
                    side.label, bindings_text(run.bindings)));
}

// B's run for each of A's, by bindings; the two sets must be equal.
std::vector<const ProfileRun*> match_runs(const Labeled& a, const Labeled& b) {
  std::map<Bindings, const ProfileRun*> by_bindings;
  for (const ProfileRun& run : b.report.runs) by_bindings[run.bindings] = &run;
  std::vector<const ProfileRun*> matched;
  std::vector<std::string> only_a;
  for (const ProfileRun& run : a.report.runs) {
    const auto it = by_bindings.find(run.bindings);
    if (it == by_bindings.end()) {
      only_a.push_back(bindings_text(run.bindings));
      continue;
    }
    matched.push_back(it->second);
    by_bindings.erase(it);
  }
  if (!only_a.empty() || !by_bindings.empty()) {
    std::vector<std::string> only_b;
    for (const auto& [bindings, run] : by_bindings) only_b.push_back(bindings_text(bindings));
    Error error(fmt::format("the bindings of {} and {} do not match run for run", a.label, b.label));
    if (!only_a.empty()) error.note(fmt::format("only {} has {}", a.label, fmt::join(only_a, "; ")));
    if (!only_b.empty()) error.note(fmt::format("only {} has {}", b.label, fmt::join(only_b, "; ")));
    throw error;
  }
  return matched;
}

void compare_launches(const ProfileRun& a, const ProfileRun& b, const CompareOptions& options, RunComparison& out) {
  std::map<std::string, const LaunchStats*> in_a;
  for (const LaunchStats& l : a.launches) in_a[l.facts.node] = &l;
  std::vector<std::string> no_samples, placement;
  for (const LaunchStats& lb : b.launches) {
    const auto it = in_a.find(lb.facts.node);
    if (it == in_a.end()) {
      out.only_in_b.push_back({lb.facts.node, lb.facts.kernel, lb.duration_us.median});
      continue;
    }
    const LaunchStats& la = *it->second;
    in_a.erase(it);
    if (la.samples_us.empty() || lb.samples_us.empty()) {
      no_samples.push_back(lb.facts.node);
      continue;
    }
    LaunchComparison c;
    c.node = lb.facts.node;
    c.kernel_a = la.facts.kernel;
    c.kernel_b = lb.facts.kernel;
    c.same_ptx = !la.facts.ptx_sha256.empty() && la.facts.ptx_sha256 == lb.facts.ptx_sha256;
    c.estimate = compare_samples(la.samples_us, lb.samples_us, options.confidence);
    c.verdict = verdict_with_min_effect(c.estimate, options.min_effect);
    if (c.same_ptx && c.verdict != Verdict::kSame) placement.push_back(c.node);
    out.launches.push_back(std::move(c));
  }
  for (const LaunchStats& la : a.launches)
    if (in_a.count(la.facts.node)) out.only_in_a.push_back({la.facts.node, la.facts.kernel, la.duration_us.median});
  if (!no_samples.empty())
    out.notes.push_back(
        fmt::format("no per-launch samples (a CUDA graph timed with CUDA events) for {}", fmt::join(no_samples, ", ")));
  if (!placement.empty())
    out.notes.push_back(
        fmt::format("{} ran the same PTX in A and B: that difference comes from where things "
                    "are (buffers, code, neighbouring launches), not from the kernel",
                    fmt::join(placement, ", ")));
}

// Both runs' SM clocks (measured around their timed iterations) when they differ enough to
// explain a difference on their own.
void note_clocks(const Labeled& a, const ProfileRun& ra, const Labeled& b, const ProfileRun& rb, RunComparison& out) {
  const auto mean_clock = [](const ProfileRun& r) { return (r.sm_clock_before_mhz + r.sm_clock_after_mhz) / 2; };
  const double ca = mean_clock(ra), cb = mean_clock(rb);
  if (ca > 0 && cb > 0 && std::abs(cb - ca) > kClockDrift * ca)
    out.notes.push_back(
        fmt::format("the SM clock differed: {:.0f} MHz in {}, {:.0f} MHz in {}", ca, a.label, cb, b.label));
}

}  // namespace

Comparison compare_profiles(const ProfileReport& a, const std::string& label_a, const ProfileReport& b,
                            const std::string& label_b, const CompareOptions& options) {
  const Labeled la{a, label_a}, lb{b, label_b};
  check_same_graph(la, lb);
  Comparison out;
  out.graph = a.graph_name;
  out.label_a = label_a;
  out.label_b = label_b;
  out.options = options;
  out.warnings = setup_warnings(la, lb);
  const std::vector<const ProfileRun*> matched = match_runs(la, lb);
  for (size_t r = 0; r < a.runs.size(); ++r) {
    const ProfileRun& ra = a.runs[r];
    const ProfileRun& rb = *matched[r];
    check_trusted(la, ra);
    check_trusted(lb, rb);
    RunComparison run;
    run.bindings = ra.bindings;
    run.end_to_end = compare_samples(ra.gpu_time_samples_us, rb.gpu_time_samples_us, options.confidence);
    run.verdict = verdict_with_min_effect(run.end_to_end, options.min_effect);
    compare_launches(ra, rb, options, run);
    note_clocks(la, ra, lb, rb, run);
    out.runs.push_back(std::move(run));
  }
  return out;
}

Verdict verdict_with_min_effect(const RatioEstimate& e, double min_effect) {
  if (e.ratio_low > 1 + min_effect) return Verdict::kSlower;
  if (e.ratio_high < 1 - min_effect) return Verdict::kFaster;
  return Verdict::kSame;
}

std::vector<const RunComparison*> regressions(const Comparison& comparison, double threshold_pct) {
  std::vector<const RunComparison*> out;
  for (const RunComparison& run : comparison.runs)
    if (run.verdict == Verdict::kSlower && run.end_to_end.ratio > 1 + threshold_pct / 100) out.push_back(&run);
  return out;
}

}  // namespace teeny
