// "NAME=VALUE" command-line values (`run --input x=x.npy`, `train --data x=x.npy`).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace teeny::cli {

// The values of a repeatable `flag` as a map; a malformed value (expected `example`, e.g.
// "NAME=FILE.npy") or a name given twice is an Error.
std::map<std::string, std::string> parse_pairs(const std::vector<std::string>& values, const char* flag,
                                               const char* example);

}  // namespace teeny::cli
