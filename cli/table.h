// Plain-text tables for the CLI: left-aligned columns separated by two spaces, no trailing
// blanks. Cells may hold UTF-8 (widths count code points).
#pragma once

#include <string>
#include <vector>

namespace teeny::cli {

using Row = std::vector<std::string>;

// Renders rows (the first may be a header) with every line prefixed by `indent`.
std::string format_table(const std::vector<Row>& rows, const std::string& indent = "");

}  // namespace teeny::cli
