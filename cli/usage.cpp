#include "cli/usage.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace teeny::cli {

namespace {

std::vector<const CLI::App*> all_commands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

std::vector<std::string> command_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* command : all_commands(app)) names.push_back(command->get_name());
  return names;
}

// The long and short names of a command's options, with their dashes.
std::vector<std::string> option_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

bool is_option(const std::string& arg) {
  if (arg.size() < 2 || arg[0] != '-') return false;
  char* end = nullptr;
  std::strtod(arg.c_str(), &end);
  return *end != '\0';  // "-1" and "-0.5" are values
}

// The commands other than `command` that have the option `name`.
std::vector<std::string> commands_with(const CLI::App& app, const CLI::App* command, const std::string& name) {
  std::vector<std::string> owners;
  for (const CLI::App* other : all_commands(app)) {
    const std::vector<std::string> names = option_names(*other);
    if (other != command && std::find(names.begin(), names.end(), name) != names.end())
      owners.push_back(fmt::format("'teeny {}'", other->get_name()));
  }
  return owners;
}

// An unknown option of `command` (teeny itself where null), with the nearest of its own and the
// commands that have it.
Error unknown_option(const CLI::App& app, const CLI::App* command, const std::string& arg) {
  const std::string name = arg.substr(0, arg.find('='));
  const std::string where = command ? fmt::format("teeny {}", command->get_name()) : "teeny";
  // Only long names get a suggestion: a one-letter one is near every other.
  const std::string nearest =
      name.rfind("--", 0) == 0 ? did_you_mean(name, option_names(command ? *command : app)) : "";
  Error error(fmt::format("'{}' has no option '{}'{}", where, excerpt(name), nearest));
  const std::vector<std::string> owners = commands_with(app, command, name);
  if (!owners.empty()) error.note(fmt::format("{} is an option of {}", name, fmt::join(owners, " and ")));
  return error;
}

// teeny without a command, or with one it does not have.
Error command_error(const CLI::App& app, const std::vector<std::string>& extras) {
  const std::vector<std::string> names = command_names(app);
  const std::string list = fmt::format("{}", fmt::join(names, ", "));
  if (extras.empty()) return Error(fmt::format("a command is required: {}", list));
  const std::string& first = extras.front();
  Error error = is_option(first)
                    ? unknown_option(app, nullptr, first)
                    : Error(fmt::format("unknown command '{}'{}", excerpt(first), did_you_mean(first, names)));
  return error.note("teeny's commands: " + list);
}

CLI::Validator number_check(const std::string& description, bool zero_ok) {
  return CLI::Validator(
      [zero_ok](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || errno == ERANGE) return fmt::format("'{}' is not a number", excerpt(text));
        if (value < 0 || (!zero_ok && value == 0))
          return fmt::format("'{}' must be {}", excerpt(text), zero_ok ? "0 or more" : "above 0");
        return "";
      },
      description);
}

}  // namespace

Error usage_error(const CLI::App& app, const CLI::ParseError& error) {
  const std::vector<CLI::App*> parsed = app.get_subcommands();
  const CLI::App* command = parsed.empty() ? nullptr : parsed.front();
  const std::vector<std::string> extras = app.remaining(true);
  if (command == nullptr) return command_error(app, extras);
  const std::string where = fmt::format("teeny {}", command->get_name());
  const std::string help = fmt::format("'{} --help' lists its arguments", where);
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    for (const std::string& arg : extras)
      if (is_option(arg)) return unknown_option(app, command, arg).note(help);
    if (!extras.empty())
      return Error(fmt::format("'{}': unexpected argument '{}'", where, excerpt(extras.front()))).note(help);
  }
  return Error(fmt::format("'{}': {}", where, error.what())).note(help);
}

CLI::Validator positive_number() { return number_check("POSITIVE", false); }
CLI::Validator non_negative_number() { return number_check("NONNEGATIVE", true); }

}  // namespace teeny::cli
