// The profiling flags `teeny profile` and `teeny compare BUNDLE_A BUNDLE_B` share: bindings,
// sweep, warm-up, iterations, time, mode, CUDA graph, weights.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/profiler.h"

namespace teeny::cli {

struct ProfileFlags {
  std::vector<std::string> binds;
  std::string sweep;
  std::string mode = "sequence";
  ProfileOptions options;
};

// Returns the options added, so a command can tell whether any was given.
std::vector<CLI::Option*> add_profile_options(CLI::App& cmd, ProfileFlags& flags);

// The bind sets to profile: the --bind values, once per --sweep value if there is one.
struct BindSets {
  std::vector<std::vector<std::string>> sets;
  std::string sweep_dim;  // empty without --sweep
};
BindSets bind_sets(const ProfileFlags& flags);

// flags.options with the mode applied.
ProfileOptions profile_options(const ProfileFlags& flags);

// Exit code 3, with the reasons as notes, when the kernel records of any run did not match its
// launches.
void throw_if_untrusted(const ProfileReport& report);

}  // namespace teeny::cli
