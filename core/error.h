// The one error type of teeny. Thrown anywhere in core/ops/cli, caught only in main.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace teeny {

// Exit codes documented in the README and design.md.
enum class ExitCode : int {
  kOk = 0,
  kInvalidInput = 1,   // spec, flags, bundle, data files
  kCheckMismatch = 2,  // `run --check` found a mismatch
  kGpu = 3,            // no driver/device, CUDA/NVRTC/CUPTI error, out of memory
  kRegression = 4,     // `compare --threshold`: B is slower than A by more than the threshold
};

// A 1-based position in a text file, with the line's text for the caret display.
struct SourceLocation {
  std::string file;
  int line = 0;    // 1-based; 0 = unknown
  int column = 0;  // 1-based; 0 = unknown
  std::string line_text;
};

class Error : public std::exception {
 public:
  explicit Error(std::string message, ExitCode code = ExitCode::kInvalidInput);

  // Builder-style helpers so call sites read as one expression.
  Error& at(SourceLocation location);
  Error& note(std::string text);     // appended; rendered as "note: ..." lines
  Error& context(std::string text);  // prepended to the message: "<text>: <message>"
  Error& with_code(ExitCode code);

  const std::string& message() const { return message_; }
  const std::optional<SourceLocation>& location() const { return location_; }
  const std::vector<std::string>& notes() const { return notes_; }
  ExitCode code() const { return code_; }

  // ninja-style rendering:
  //   teeny: error: file:line:col: message
  //     <source line>   (at most kShownColumns of it around the caret, "..." where cut)
  //     <caret>
  //   note: ...
  std::string render() const;
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
  std::optional<SourceLocation> location_;
  std::vector<std::string> notes_;
  ExitCode code_;
};

// How much of a source line an error shows around its caret.
inline constexpr size_t kShownColumns = 120;

// User text quoted in a message (a value, a name, an expression), cut to at most `max` bytes with
// "..." where it was cut: a 50 MB value makes a one-line error, not a 50 MB one.
std::string excerpt(std::string_view text, size_t max = 80);

// GPU-environment errors (exit code 3).
inline Error gpu_error(std::string message) { return Error(std::move(message), ExitCode::kGpu); }

// "did you mean" support: the nearest candidate by edit distance, if close enough.
std::optional<std::string> nearest_name(const std::string& wrong, const std::vector<std::string>& candidates);
// " (did you mean 'x'?)" or "" — for appending to messages.
std::string did_you_mean(const std::string& wrong, const std::vector<std::string>& candidates);

}  // namespace teeny
