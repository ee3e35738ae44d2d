// Usage errors: CLI11's parse errors as teeny errors that name the command, the unknown option
// or command with the nearest known one (and the command that has an option this one lacks),
// and checks on flag values whose messages quote the value.
#pragma once

#include <CLI/CLI.hpp>

#include "core/error.h"

namespace teeny::cli {

// The teeny error for a failed parse of `app` (not --help or --version, which exit 0).
Error usage_error(const CLI::App& app, const CLI::ParseError& error);

// Flag-value checks: a number above 0, or at least 0 ("POSITIVE" and "NONNEGATIVE" in --help).
CLI::Validator positive_number();
CLI::Validator non_negative_number();

}  // namespace teeny::cli
