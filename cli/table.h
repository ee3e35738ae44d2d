// Plain-text tables for the CLI: columns separated by two spaces, no trailing blanks. Cells may
// hold UTF-8 (widths count code points).
#pragma once

#include <string>
#include <vector>

namespace teeny::cli {

using Row = std::vector<std::string>;

enum class Align { kLeft, kRight };

// Renders rows (the first may be a header) with every line prefixed by `indent`. Columns are
// left-aligned unless `align` says otherwise (numbers read best right-aligned).
std::string format_table(const std::vector<Row>& rows, const std::string& indent = "",
                         const std::vector<Align>& align = {});

}  // namespace teeny::cli
