// Subcommand registration. Each subcommand lives in its own cli/<name>.cpp and exposes one
// `void add_<name>_command(CLI::App&)`; main.cpp calls them all from one list. Subcommand
// callbacks throw teeny::Error, which only main catches. A subcommand's parsed command line is
// its `<Name>Flags` struct; the settings it hands to core/ are core's `*Options` structs.
#pragma once

#include <CLI/CLI.hpp>

#include "core/registry.h"

namespace teeny::cli {

// Every built-in op (ops/ops.inc), registered on first use.
const Registry& registry();

void add_check_command(CLI::App& app);
void add_ops_command(CLI::App& app);
void add_compile_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_profile_command(CLI::App& app);
void add_compare_command(CLI::App& app);
void add_tune_command(CLI::App& app);
void add_train_command(CLI::App& app);

}  // namespace teeny::cli
