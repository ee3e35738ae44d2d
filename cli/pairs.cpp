#include "cli/pairs.h"

#include <fmt/format.h>

#include "core/error.h"

namespace teeny::cli {

std::map<std::string, std::string> parse_pairs(const std::vector<std::string>& values, const char* flag,
                                               const char* example) {
  std::map<std::string, std::string> pairs;
  for (const std::string& value : values) {
    const size_t eq = value.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == value.size()) {
      throw Error(fmt::format("malformed {} '{}': expected {}", flag, value, example));
    }
    if (!pairs.emplace(value.substr(0, eq), value.substr(eq + 1)).second) {
      throw Error(fmt::format("{} {}: '{}' is given more than once", flag, value, value.substr(0, eq)));
    }
  }
  return pairs;
}

}  // namespace teeny::cli
