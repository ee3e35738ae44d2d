#include "cli/profile_flags.h"

#include "cli/usage.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace teeny::cli {

std::vector<CLI::Option*> add_profile_options(CLI::App& cmd, ProfileFlags& flags) {
  return {
      cmd.add_option("--bind", flags.binds, "bind a dim: D=N (repeatable; default: the spec's)")
          ->allow_extra_args(false),
      cmd.add_option("--sweep", flags.sweep, "profile each value of one dim in turn: D=a,b,c"),
      cmd.add_option("--warmup", flags.options.warmup_iterations,
                     fmt::format("warm-up iterations (default {}; and at least {} s)", flags.options.warmup_iterations,
                                 flags.options.warmup_min_seconds))
          ->check(non_negative_number()),
      cmd.add_option("--iterations", flags.options.iterations,
                     fmt::format("timed iterations, at least (default {})", flags.options.iterations))
          ->check(positive_number()),
      cmd.add_option(
             "--min-time", flags.options.min_seconds,
             fmt::format("keep timing until this many seconds have passed (default {})", flags.options.min_seconds))
          ->check(non_negative_number()),
      cmd.add_option("--mode", flags.mode,
                     "sequence (default: graph order, warm L2) or isolated (L2 flushed before each launch)")
          ->check(CLI::IsMember({"sequence", "isolated"})),
      cmd.add_flag("--cuda-graph", flags.options.cuda_graph, "profile the launches replayed as one CUDA graph"),
      cmd.add_option("--weights", flags.options.weights_path,
                     "trained parameters by <node>.<slot> (.safetensors); others are random"),
  };
}

BindSets bind_sets(const ProfileFlags& flags) {
  if (flags.sweep.empty()) return {{flags.binds}, ""};
  const auto [dim, values] = parse_sweep(flags.sweep);
  for (const std::string& bind : flags.binds)
    if (bind.substr(0, bind.find('=')) == dim)
      throw Error(fmt::format("--sweep {} and --bind {} both set {}", flags.sweep, bind, dim));
  BindSets out;
  out.sweep_dim = dim;
  for (int64_t value : values) {
    out.sets.push_back(flags.binds);
    out.sets.back().push_back(fmt::format("{}={}", dim, value));
  }
  return out;
}

ProfileOptions profile_options(const ProfileFlags& flags) {
  ProfileOptions options = flags.options;
  options.mode = flags.mode == "isolated" ? ProfileMode::kIsolated : ProfileMode::kSequence;
  return options;
}

void throw_if_untrusted(const ProfileReport& report) {
  std::vector<std::string> untrusted, reasons;
  for (const ProfileRun& run : report.runs) {
    if (run.untrusted.empty()) continue;
    untrusted.push_back(bindings_text(run.bindings));
    for (const std::string& reason : run.untrusted) reasons.push_back(fmt::format("{}: {}", untrusted.back(), reason));
  }
  if (untrusted.empty()) return;
  Error error(fmt::format("{}: the kernel records of {} do not match the launches; those numbers are not trusted",
                          report.bundle_path, fmt::join(untrusted, "; ")),
              ExitCode::kGpu);
  for (const std::string& reason : reasons) error.note(reason);
  throw error;
}

}  // namespace teeny::cli
