// `teeny profile BUNDLE ...`: per-launch GPU times (CUPTI), statistics, GB/s and GFLOP/s, as a
// table, JSON or CSV, with an optional Chrome trace; --sweep profiles several bindings.
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/chrome_trace.h"
#include "cli/commands.h"
#include "cli/profile_flags.h"
#include "cli/profile_report.h"
#include "core/error.h"
#include "core/profiler.h"

namespace teeny::cli {
namespace {

struct ProfileCommandFlags {
  std::string bundle;
  ProfileFlags profile;
  std::string format = "table";
  std::string trace;
};

void run_profile(const ProfileCommandFlags& flags) {
  ProfileOptions options = profile_options(flags.profile);
  options.keep_trace = !flags.trace.empty();
  const BindSets binds = bind_sets(flags.profile);
  const ProfileReport report = profile_bundle(flags.bundle, binds.sets, binds.sweep_dim, options);
  for (const std::string& note : report.notes) std::cerr << "teeny: note: " << note << "\n";
  if (!flags.trace.empty()) write_chrome_trace(report, flags.trace);
  if (flags.format == "json")
    std::cout << profile_json(report).dump(2) << "\n";
  else if (flags.format == "csv")
    std::cout << format_profile_csv(report);
  else
    std::cout << format_profile_table(report);
  if (!flags.trace.empty()) std::cerr << "teeny: trace written to " << flags.trace << "\n";
  throw_if_untrusted(report);
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto flags = std::make_shared<ProfileCommandFlags>();
  CLI::App* cmd = app.add_subcommand(
      "profile", "Time every kernel launch of a bundle on the GPU (CUPTI), with GB/s, GFLOP/s and traces");
  cmd->add_option("BUNDLE", flags->bundle, "bundle directory (from teeny compile)")->required();
  add_profile_options(*cmd, flags->profile);
  cmd->add_option("--format", flags->format, "table (default), json or csv")
      ->check(CLI::IsMember({"table", "json", "csv"}));
  cmd->add_option("--trace", flags->trace, "write a Chrome/Perfetto trace (JSON) of the timed kernels");
  cmd->callback([flags] { run_profile(*flags); });
}

}  // namespace teeny::cli
