#include "cli/table.h"

#include <algorithm>

namespace teeny::cli {
namespace {

size_t display_width(const std::string& text) {
  // Count UTF-8 lead bytes only, so "Wᵀ" is two columns wide, not four.
  return std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

}  // namespace

std::string format_table(const std::vector<Row>& rows, const std::string& indent, const std::vector<Align>& align) {
  std::vector<size_t> widths;
  for (const Row& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], display_width(row[c]));
  }
  std::string out;
  for (const Row& row : rows) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      const std::string padding(widths[c] - display_width(row[c]), ' ');
      const bool right = c < align.size() && align[c] == Align::kRight;
      line += right ? padding + row[c] : row[c] + padding;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace teeny::cli
