// C identifiers: what dims, nodes, tensors and kernels are named with, so that every name can
// appear in generated CUDA and in expressions as it is.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>

namespace teeny {

// [A-Za-z0-9_]
inline bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// [A-Za-z_][A-Za-z0-9_]*
inline bool is_identifier(const std::string& text) {
  return !text.empty() && !std::isdigit(static_cast<unsigned char>(text[0])) &&
         std::all_of(text.begin(), text.end(), is_identifier_char);
}

}  // namespace teeny
