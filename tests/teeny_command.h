// Runs the built teeny binary (TEENY_BINARY) with arguments, for tests of the command line.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace teeny::testing {

struct Command {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline Command run_teeny(const std::string& args) {
  Command result;
  FILE* pipe = popen((std::string(TEENY_BINARY) + " " + args + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace teeny::testing
