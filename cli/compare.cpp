// `teeny compare A B`: is B faster than A, or is it noise? A and B are two profiles from
// `teeny profile --format json`, or two bundles profiled here with their iterations interleaved.
#include <filesystem>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/compare_report.h"
#include "cli/profile_flags.h"
#include "cli/profile_report.h"
#include "cli/usage.h"
#include "core/error.h"
#include "core/perf_compare.h"

namespace teeny::cli {
namespace {

struct CompareFlags {
  std::string a, b;
  ProfileFlags profile;
  std::vector<CLI::Option*> profile_options;  // given only with two bundles
  std::string format = "table";
  CompareOptions compare;
  double min_effect_pct = 100 * CompareOptions{}.min_effect;
  CLI::Option* threshold_option = nullptr;
  double threshold_pct = 0;
};

bool is_bundle(const std::string& path) {
  std::error_code ignored;
  return std::filesystem::is_directory(path, ignored);
}

std::pair<ProfileReport, ProfileReport> read_profiles(const CompareFlags& flags) {
  for (const CLI::Option* option : flags.profile_options)
    if (option->count() > 0)
      throw Error(fmt::format("{} applies only when comparing two bundles, not two profiles", option->get_name()));
  return {read_profile_json(flags.a), read_profile_json(flags.b)};
}

std::pair<ProfileReport, ProfileReport> profile_interleaved(const CompareFlags& flags) {
  const BindSets binds = bind_sets(flags.profile);
  std::vector<ProfileReport> reports =
      profile_bundles({flags.a, flags.b}, binds.sets, binds.sweep_dim, profile_options(flags.profile));
  for (const ProfileReport& report : reports) {
    for (const std::string& note : report.notes) std::cerr << "teeny: note: " << note << "\n";
    throw_if_untrusted(report);
  }
  return {std::move(reports[0]), std::move(reports[1])};
}

// Noise and clock warnings of the runs compared: they qualify the verdicts.
void print_run_warnings(const ProfileReport& report, const std::string& label) {
  for (const ProfileRun& run : report.runs)
    for (const std::string& warning : run.warnings)
      std::cerr << fmt::format("teeny: warning: {} at {}: {}\n", label, bindings_text(run.bindings), warning);
}

void run_compare(const CompareFlags& flags) {
  if (is_bundle(flags.a) != is_bundle(flags.b))
    throw Error(
        fmt::format("compare two profiles (JSON from `teeny profile --format json`) or two bundles, not one "
                    "of each: '{}' is {}, '{}' is {}",
                    flags.a, is_bundle(flags.a) ? "a directory (a bundle)" : "not", flags.b,
                    is_bundle(flags.b) ? "a directory (a bundle)" : "not"));
  if (!(flags.compare.confidence > 0 && flags.compare.confidence < 1))
    throw Error(fmt::format("--confidence must be between 0 and 1, got {}", flags.compare.confidence));
  CompareOptions options = flags.compare;
  options.min_effect = flags.min_effect_pct / 100;
  const auto [a, b] = is_bundle(flags.a) ? profile_interleaved(flags) : read_profiles(flags);
  const Comparison comparison = compare_profiles(a, flags.a, b, flags.b, options);
  print_run_warnings(a, flags.a);
  print_run_warnings(b, flags.b);
  if (flags.format == "json")
    std::cout << compare_json(comparison).dump(2) << "\n";
  else
    std::cout << format_compare_table(comparison);
  if (flags.threshold_option->count() == 0) return;
  const std::vector<const RunComparison*> regressed = regressions(comparison, flags.threshold_pct);
  if (regressed.empty()) return;
  Error error(fmt::format("B regressed by more than --threshold {}%", flags.threshold_pct), ExitCode::kRegression);
  for (const RunComparison* run : regressed) error.note(end_to_end_sentence(comparison, *run));
  throw error;
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto flags = std::make_shared<CompareFlags>();
  CLI::App* cmd = app.add_subcommand("compare", "Is B faster than A, or is it noise? Two profiles or two bundles");
  cmd->add_option("A", flags->a, "the baseline: a profile (JSON from teeny profile --format json) or a bundle")
      ->required();
  cmd->add_option("B", flags->b, "the candidate: a profile or a bundle, as A")->required();
  flags->threshold_option =
      cmd->add_option("--threshold", flags->threshold_pct,
                      "exit with code 4 if B is slower than A end to end by more than PCT percent (and "
                      "significantly so)")
          ->check(non_negative_number());
  cmd->add_option("--confidence", flags->compare.confidence, "confidence of the intervals and verdicts (default 0.95)");
  cmd->add_option("--min-effect", flags->min_effect_pct,
                  fmt::format("how far from 1, in percent, the whole interval of B/A must lie to be called faster or "
                              "slower (default {:g})",
                              flags->min_effect_pct))
      ->check(non_negative_number());
  cmd->add_option("--format", flags->format, "table (default) or json")->check(CLI::IsMember({"table", "json"}));
  flags->profile_options = add_profile_options(*cmd, flags->profile);
  cmd->callback([flags] { run_compare(*flags); });
}

}  // namespace teeny::cli
