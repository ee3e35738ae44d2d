#include "cli/compare_report.h"

#include <cmath>
#include <set>

#include <fmt/format.h>

#include "cli/table.h"

namespace teeny::cli {
namespace {

constexpr const char* kMethod =
    "Mann-Whitney U test on log times; B/A is the Hodges-Lehmann estimate of the ratio of B's time to A's, "
    "with its confidence interval";

std::string pct(double fraction) { return fmt::format("{:g}%", 100 * fraction); }

std::string verdict_rule(const Comparison& c) {
  return fmt::format("faster or slower when the whole {} CI of B/A lies more than {} from 1", pct(c.options.confidence),
                     pct(c.options.min_effect));
}

std::string interval(const RatioEstimate& e) {
  if (!std::isfinite(e.ratio_high)) return "unbounded (too few samples)";
  return fmt::format("{:.3f}-{:.3f}", e.ratio_low, e.ratio_high);
}

std::string run_table(const Comparison& c, const RunComparison& run) {
  std::string out = fmt::format("\n== {} ({}) ==\n", c.graph, bindings_text(run.bindings));
  std::vector<Row> rows{{"node", "kernel A", "kernel B", "A_median_us", "B_median_us", "B/A",
                         fmt::format("{} CI", pct(c.options.confidence)), "verdict"}};
  const auto row = [&](const std::string& node, const std::string& ka, const std::string& kb, const RatioEstimate& e,
                       Verdict v) {
    rows.push_back({node, ka, kb, fmt::format("{:.2f}", e.median_a), fmt::format("{:.2f}", e.median_b),
                    fmt::format("{:.3f}", e.ratio), interval(e), verdict_name(v)});
  };
  for (const LaunchComparison& l : run.launches) row(l.node, l.kernel_a, l.kernel_b, l.estimate, l.verdict);
  row("end to end", "", "", run.end_to_end, run.verdict);
  constexpr Align L = Align::kLeft, R = Align::kRight;
  out += format_table(rows, "", {L, L, L, R, R, R, R, L});
  for (const UnmatchedLaunch& l : run.only_in_a)
    out += fmt::format("only in A: {} ({}, median {:.2f} us)\n", l.node, l.kernel, l.median_us);
  for (const UnmatchedLaunch& l : run.only_in_b)
    out += fmt::format("only in B: {} ({}, median {:.2f} us)\n", l.node, l.kernel, l.median_us);
  for (const std::string& note : run.notes) out += "note: " + note + "\n";
  out += end_to_end_sentence(c, run) + "\n";
  return out;
}

nlohmann::json estimate_json(const RatioEstimate& e, Verdict v) {
  return {{"a_median_us", e.median_a},
          {"b_median_us", e.median_b},
          {"a_samples", e.n_a},
          {"b_samples", e.n_b},
          {"ratio", e.ratio},
          {"ratio_low", e.ratio_low},
          {"ratio_high", std::isfinite(e.ratio_high) ? nlohmann::json(e.ratio_high) : nlohmann::json()},
          {"p_value", e.p_value},
          {"verdict", verdict_name(v)}};
}

nlohmann::json unmatched_json(const std::vector<UnmatchedLaunch>& launches) {
  nlohmann::json out = nlohmann::json::array();
  for (const UnmatchedLaunch& l : launches)
    out.push_back({{"node", l.node}, {"kernel", l.kernel}, {"median_us", l.median_us}});
  return out;
}

}  // namespace

std::string end_to_end_sentence(const Comparison& c, const RunComparison& run) {
  const RatioEstimate& e = run.end_to_end;
  const std::string detail = fmt::format("(B/A {:.3f}, {} CI {})", e.ratio, pct(c.options.confidence), interval(e));
  const std::string where = bindings_text(run.bindings);
  switch (run.verdict) {
    case Verdict::kFaster:
      return fmt::format("end to end at {}: B is {:.1f}% faster than A {}", where, 100 * (1 - e.ratio), detail);
    case Verdict::kSlower:
      return fmt::format("end to end at {}: B is {:.1f}% slower than A {}", where, 100 * (e.ratio - 1), detail);
    case Verdict::kSame:
      break;
  }
  return fmt::format("end to end at {}: no difference {}", where, detail);
}

std::string overall_verdict(const Comparison& c) {
  std::set<Verdict> verdicts;
  for (const RunComparison& run : c.runs) verdicts.insert(run.verdict);
  return verdicts.size() == 1 ? verdict_name(*verdicts.begin()) : "mixed";
}

std::string format_compare_table(const Comparison& c) {
  std::string out = fmt::format("teeny compare: {}\nA: {}\nB: {}\nstatistics: {}\nverdict: {}\n", c.graph, c.label_a,
                                c.label_b, kMethod, verdict_rule(c));
  for (const std::string& w : c.warnings) out += "warning: " + w + "\n";
  for (const RunComparison& run : c.runs) out += run_table(c, run);
  const std::string verdict = overall_verdict(c);
  if (verdict == "mixed")
    out += "\nsummary: mixed: B is faster than A at some bindings and not at others\n";
  else if (verdict == "no difference")
    out += "\nsummary: no difference between A and B end to end\n";
  else
    out += fmt::format("\nsummary: B is {} than A end to end\n", verdict);
  return out;
}

nlohmann::json compare_json(const Comparison& c) {
  nlohmann::json runs = nlohmann::json::array();
  for (const RunComparison& run : c.runs) {
    nlohmann::json launches = nlohmann::json::array();
    for (const LaunchComparison& l : run.launches) {
      nlohmann::json j = estimate_json(l.estimate, l.verdict);
      j["node"] = l.node;
      j["kernel_a"] = l.kernel_a;
      j["kernel_b"] = l.kernel_b;
      j["same_ptx"] = l.same_ptx;
      launches.push_back(j);
    }
    runs.push_back({{"bindings", run.bindings},
                    {"end_to_end", estimate_json(run.end_to_end, run.verdict)},
                    {"launches", launches},
                    {"only_in_a", unmatched_json(run.only_in_a)},
                    {"only_in_b", unmatched_json(run.only_in_b)},
                    {"notes", run.notes}});
  }
  return {{"graph", c.graph},
          {"a", c.label_a},
          {"b", c.label_b},
          {"method", kMethod},
          {"confidence", c.options.confidence},
          {"min_effect_pct", 100 * c.options.min_effect},
          {"warnings", c.warnings},
          {"runs", runs},
          {"verdict", overall_verdict(c)}};
}

}  // namespace teeny::cli
