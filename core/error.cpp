#include "core/error.h"

#include <algorithm>

#include <fmt/format.h>

namespace teeny {

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
  if (location_ && location_->line > 0 && !location_->line_text.empty()) {
    out += "  " + location_->line_text + "\n";
    if (location_->column > 0) {
      // Keep tabs so the caret lines up under the same column in a terminal.
      std::string pad;
      for (int i = 0; i < location_->column - 1 && i < static_cast<int>(location_->line_text.size()); ++i)
        pad += location_->line_text[i] == '\t' ? '\t' : ' ';
      out += "  " + pad + "^\n";
    }
  }
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
    size_t distance = edit_distance(wrong, candidate);
    size_t limit = std::max<size_t>(1, std::max(wrong.size(), candidate.size()) / 3);
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
