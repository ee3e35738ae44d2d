// Runs commands for tests of the command line: the built teeny binary (TEENY_BINARY) or any
// other tool, with stdout and stderr captured apart, since teeny keeps results on stdout and
// notes and errors on stderr.
#pragma once

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace teeny::testing {

struct Command {
  int exit_code = -1;  // -1: it could not be run
  std::string out;     // stdout
  std::string err;     // stderr
};

// Where teeny runs: the working directory (empty: the test's own) and extra environment
// variables (e.g. TEENY_CACHE_DIR).
struct CommandContext {
  std::string dir;
  std::map<std::string, std::string> env;
};

namespace command_detail {

// A new empty file in the temporary directory, unique to this process and call.
inline std::string capture_file() {
  std::string name = (std::filesystem::temp_directory_path() / "teeny-test-capture-XXXXXX").string();
  const int fd = ::mkstemp(name.data());
  if (fd >= 0) ::close(fd);
  return name;
}

inline std::string take_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(path);
  return text.str();
}

inline std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace command_detail

// Runs a shell command line.
inline Command run_command(const std::string& command_line) {
  using namespace command_detail;
  const std::string out = capture_file(), err = capture_file();
  const int status = std::system(("(" + command_line + ") >" + quoted(out) + " 2>" + quoted(err)).c_str());
  Command result;
  result.exit_code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = take_file(out);
  result.err = take_file(err);
  return result;
}

// Runs teeny with `args` (shell syntax: quote paths that need it).
inline Command run_teeny(const std::string& args, const CommandContext& context = {}) {
  using command_detail::quoted;
  std::string line;
  if (!context.dir.empty()) line += "cd " + quoted(context.dir) + " && ";
  for (const auto& [name, value] : context.env) line += name + "=" + quoted(value) + " ";
  return run_command(line + quoted(TEENY_BINARY) + " " + args);
}

}  // namespace teeny::testing
