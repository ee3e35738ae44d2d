// `teeny profile BUNDLE ...`: per-launch GPU times (CUPTI), statistics, GB/s and GFLOP/s, as a
// table, JSON or CSV, with an optional Chrome trace; --sweep profiles several bindings.
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/chrome_trace.h"
#include "cli/commands.h"
#include "cli/profile_report.h"
#include "core/error.h"
#include "core/profiler.h"

namespace teeny::cli {
namespace {

struct ProfileFlags {
  std::string bundle;
  std::vector<std::string> binds;
  std::string sweep;
  std::string mode = "sequence";
  std::string format = "table";
  std::string trace;
  ProfileOptions options;
};

void run_profile(ProfileFlags flags) {
  ProfileOptions& options = flags.options;
  options.mode = flags.mode == "isolated" ? ProfileMode::kIsolated : ProfileMode::kSequence;
  options.keep_trace = !flags.trace.empty();

  std::vector<std::vector<std::string>> bind_sets{flags.binds};
  std::string sweep_dim;
  if (!flags.sweep.empty()) {
    const auto [dim, values] = parse_sweep(flags.sweep);
    for (const std::string& bind : flags.binds)
      if (bind.substr(0, bind.find('=')) == dim)
        throw Error(fmt::format("--sweep {} and --bind {} both set {}", flags.sweep, bind, dim));
    bind_sets.clear();
    for (int64_t value : values) {
      bind_sets.push_back(flags.binds);
      bind_sets.back().push_back(fmt::format("{}={}", dim, value));
    }
    sweep_dim = dim;
  }

  const ProfileReport report = profile_bundle(flags.bundle, bind_sets, sweep_dim, options);
  for (const std::string& note : report.notes) std::cerr << "teeny: note: " << note << "\n";
  if (!flags.trace.empty()) write_chrome_trace(report, flags.trace);
  if (flags.format == "json")
    std::cout << profile_json(report).dump(2) << "\n";
  else if (flags.format == "csv")
    std::cout << format_profile_csv(report);
  else
    std::cout << format_profile_table(report);
  if (!flags.trace.empty()) std::cerr << "teeny: trace written to " << flags.trace << "\n";

  std::vector<std::string> untrusted;
  for (const ProfileRun& run : report.runs)
    if (!run.untrusted.empty()) untrusted.push_back(bindings_text(run.bindings));
  if (!untrusted.empty())
    throw gpu_error(
        fmt::format("the kernel records of {} do not match the launches; those "
                    "numbers are not trusted (reasons above)",
                    fmt::join(untrusted, "; ")));
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto flags = std::make_shared<ProfileFlags>();
  CLI::App* cmd = app.add_subcommand(
      "profile", "Time every kernel launch of a bundle on the GPU (CUPTI), with GB/s, GFLOP/s and traces");
  cmd->add_option("BUNDLE", flags->bundle, "bundle directory (from teeny compile)")->required();
  cmd->add_option("--bind", flags->binds, "bind a dim: D=N (repeatable; default: the spec's)")->allow_extra_args(false);
  cmd->add_option("--sweep", flags->sweep, "profile each value of one dim in turn: D=a,b,c");
  cmd->add_option("--warmup", flags->options.warmup_iterations,
                  fmt::format("warm-up iterations (default {}; and at least {} s)", flags->options.warmup_iterations,
                              flags->options.warmup_min_seconds))
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--iterations", flags->options.iterations,
                  fmt::format("timed iterations, at least (default {})", flags->options.iterations))
      ->check(CLI::PositiveNumber);
  cmd->add_option(
         "--min-time", flags->options.min_seconds,
         fmt::format("keep timing until this many seconds have passed (default {})", flags->options.min_seconds))
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--mode", flags->mode,
                  "sequence (default: graph order, warm L2) or isolated (L2 flushed before each launch)")
      ->check(CLI::IsMember({"sequence", "isolated"}));
  cmd->add_flag("--cuda-graph", flags->options.cuda_graph, "profile the launches replayed as one CUDA graph");
  cmd->add_option("--weights", flags->options.weights_path,
                  "trained parameters by <node>.<slot> (.safetensors); others are random");
  cmd->add_option("--format", flags->format, "table (default), json or csv")
      ->check(CLI::IsMember({"table", "json", "csv"}));
  cmd->add_option("--trace", flags->trace, "write a Chrome/Perfetto trace (JSON) of the timed kernels");
  cmd->callback([flags] { run_profile(*flags); });
}

}  // namespace teeny::cli
