#include "core/error.h"

#include <algorithm>

#include <fmt/format.h>

namespace teeny {

namespace {

bool is_utf8_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// The source line (at most kShownColumns of it, around the caret, "..." where cut) and the caret.
std::string source_excerpt(const SourceLocation& location) {
  const std::string& text = location.line_text;
  const size_t caret = location.column > 0 ? static_cast<size_t>(location.column - 1) : 0;
  size_t begin = 0, end = text.size();
  if (text.size() > kShownColumns) {
    begin = std::min(caret > kShownColumns / 2 ? caret - kShownColumns / 2 : 0, text.size() - kShownColumns);
    end = begin + kShownColumns;
    while (begin > 0 && is_utf8_continuation(text[begin])) --begin;
    while (end < text.size() && is_utf8_continuation(text[end])) ++end;
  }
  const std::string cut_before = begin > 0 ? "..." : "", cut_after = end < text.size() ? "..." : "";
  std::string out = "  " + cut_before + text.substr(begin, end - begin) + cut_after + "\n";
  if (location.column > 0) {
    // Keep tabs so the caret lines up under the same column in a terminal.
    std::string pad(cut_before.size(), ' ');
    for (size_t i = begin; i < caret && i < end; ++i) pad += text[i] == '\t' ? '\t' : ' ';
    out += "  " + pad + "^\n";
  }
  return out;
}

}  // namespace

std::string excerpt(std::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  size_t end = max > 3 ? max - 3 : 0;
  while (end > 0 && is_utf8_continuation(text[end])) --end;
  return std::string(text.substr(0, end)) + "...";
}

Error::Error(std::string message, ExitCode code) : message_(std::move(message)), code_(code) {}

Error& Error::at(SourceLocation location) {
  location_ = std::move(location);
  return *this;
}

Error& Error::note(std::string text) {
  notes_.push_back(std::move(text));
  return *this;
}

Error& Error::context(std::string text) {
  message_ = text + ": " + message_;
  return *this;
}

Error& Error::with_code(ExitCode code) {
  code_ = code;
  return *this;
}

std::string Error::render() const {
  std::string out = "teeny: error: ";
  if (location_ && !location_->file.empty()) {
    out += location_->file;
    if (location_->line > 0) {
      out += fmt::format(":{}", location_->line);
      if (location_->column > 0) out += fmt::format(":{}", location_->column);
    }
    out += ": ";
  }
  out += message_ + "\n";
  if (location_ && location_->line > 0 && !location_->line_text.empty()) out += source_excerpt(*location_);
  for (const auto& n : notes_) out += "note: " + n + "\n";
  return out;
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      size_t substitution = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitution});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::optional<std::string> nearest_name(const std::string& wrong, const std::vector<std::string>& candidates) {
  // Close enough = at most a third of the longer name differs (ninja uses a similar bound).
  std::optional<std::string> best;
  size_t best_distance = 0;
  for (const auto& candidate : candidates) {
    const size_t limit = std::max<size_t>(1, std::max(wrong.size(), candidate.size()) / 3);
    // The lengths alone rule it out; long names are no typos worth a quadratic distance.
    const bool too_long = std::max(wrong.size(), candidate.size()) > 256;
    if (too_long || std::max(wrong.size(), candidate.size()) - std::min(wrong.size(), candidate.size()) > limit)
      continue;
    size_t distance = edit_distance(wrong, candidate);
    if (distance <= limit && (!best || distance < best_distance)) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& wrong, const std::vector<std::string>& candidates) {
  auto best = nearest_name(wrong, candidates);
  return best ? fmt::format(" (did you mean '{}'?)", *best) : std::string();
}

}  // namespace teeny
