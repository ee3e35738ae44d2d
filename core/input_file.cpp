#include "core/input_file.h"

#include <cerrno>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

namespace teeny {

// ---- InputFile --------------------------------------------------------------------------------

InputFile::InputFile(std::string path, std::string what) : path_(std::move(path)), what_(std::move(what)) {
  // O_NONBLOCK: opening a FIFO without a writer returns at once (and is then refused below).
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw error(std::strerror(errno));
  struct stat info {};
  const int err = ::fstat(fd_, &info) == 0 ? 0 : errno;
  if (err != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd_);
    throw error(err != 0 ? std::strerror(err) : S_ISDIR(info.st_mode) ? "is a directory" : "not a regular file");
  }
  size_ = static_cast<uint64_t>(info.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

Error InputFile::error(const std::string& reason) const {
  return Error(fmt::format("cannot read {} '{}': {}", what_, path_, reason));
}

std::string InputFile::read(uint64_t offset, uint64_t count) const {
  if (offset > size_ || count > size_ - offset) {
    throw error(fmt::format("it ends at byte {}, before the {} bytes needed at byte {}", size_, count, offset));
  }
  std::string bytes(count, '\0');
  uint64_t done = 0;
  while (done < count) {
    const ssize_t n = ::pread(fd_, bytes.data() + done, count - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw error(std::strerror(errno));
    if (n == 0) {
      throw error(
          fmt::format("it ends at byte {}, before the {} bytes needed at byte {}", offset + done, count, offset));
    }
    done += static_cast<uint64_t>(n);
  }
  return bytes;
}

std::string InputFile::read_all(uint64_t limit) const {
  if (size_ > limit) throw error(fmt::format("larger than the {} MiB limit", limit >> 20));
  return read(0, size_);
}

std::string read_input_file(const std::string& path, const std::string& what, uint64_t limit) {
  return InputFile(path, what).read_all(limit);
}

// ---- nesting ----------------------------------------------------------------------------------

namespace {

// Walks `text` keeping the line and column of the current character.
class Cursor {
 public:
  explicit Cursor(const std::string& text) : text_(text) {}
  bool done() const { return pos_ >= text_.size(); }
  char get(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  void advance() {
    if (text_[pos_++] == '\n') {
      ++line_;
      line_start_ = pos_;
    }
  }
  bool at_line_start() const { return pos_ == line_start_; }
  int column() const { return static_cast<int>(pos_ - line_start_); }  // 0-based
  TextPosition position() const { return {line_, column() + 1}; }
  char previous() const { return pos_ > line_start_ ? text_[pos_ - 1] : '\n'; }

 private:
  const std::string& text_;
  size_t pos_ = 0, line_start_ = 0;
  int line_ = 1;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

std::optional<TextPosition> json_nesting_beyond(const std::string& text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (Cursor at(text); !at.done(); at.advance()) {
    const char c = at.get();
    if (in_string) {
      if (c == '\\')
        at.advance();
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return at.position();
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

namespace {

// The YAML scan: block collections by the indentation of their lines (and "- " entries that open
// a list inside a list on one line), flow collections by their brackets; quoted scalars, comments
// and block scalars (| and >) are skipped.
class YamlNesting {
 public:
  YamlNesting(const std::string& text, int limit) : at_(text), limit_(limit) {}

  std::optional<TextPosition> scan() {
    while (!at_.done()) {
      if (at_.at_line_start() && quote_ == 0 && flow_ == 0 && !line_start()) return at_.position();
      if (!at_.done() && !character()) return at_.position();
    }
    return std::nullopt;
  }

 private:
  int depth() const { return static_cast<int>(block_.size()) + flow_; }

  // The indentation of a line opens (or closes) block collections. False when too deep.
  bool line_start() {
    while (at_.get() == ' ') at_.advance();
    const char c = at_.get();
    if (c == '\n' || c == '\r' || c == '#' || c == '\0') return true;  // blank or comment line
    const int column = at_.column();
    if (block_scalar_indent_ >= 0) {
      if (column > block_scalar_indent_) {
        while (!at_.done() && at_.get() != '\n') at_.advance();
        return true;
      }
      block_scalar_indent_ = -1;
    }
    while (!block_.empty() && block_.back() >= column) block_.pop_back();
    block_.push_back(column);
    line_indent_ = column;
    while (at_.get() == '-' && at_.get(1) == ' ') {  // "- - x": a list in a list
      at_.advance();
      while (at_.get() == ' ') at_.advance();
      block_.push_back(at_.column());
      if (depth() > limit_) return false;
    }
    return depth() <= limit_;
  }

  // One character outside the indentation. False when too deep.
  bool character() {
    const char c = at_.get();
    if (quote_ != 0) {
      if (c == '\\' && quote_ == '"') {
        at_.advance();
      } else if (c == quote_) {
        if (quote_ == '\'' && at_.get(1) == '\'')
          at_.advance();  // '' is an escaped quote
        else
          quote_ = 0;
      }
    } else if (c == '#' && is_space(at_.previous())) {
      while (!at_.done() && at_.get() != '\n') at_.advance();
      return true;
    } else if ((c == '"' || c == '\'') && starts_token()) {
      quote_ = c;
    } else if ((c == '|' || c == '>') && flow_ == 0 && starts_token() && ends_line_after_indicator()) {
      block_scalar_indent_ = line_indent_;
    } else if (c == '[' || c == '{') {
      ++flow_;
      if (depth() > limit_) return false;
    } else if ((c == ']' || c == '}') && flow_ > 0) {
      --flow_;
    }
    at_.advance();
    return true;
  }

  bool starts_token() const {
    const char p = at_.previous();
    return is_space(p) || p == '[' || p == '{' || p == ',' || p == ':' || p == '-';
  }

  // "|", "|-", ">+2" and the like, then only spaces or a comment up to the end of the line.
  bool ends_line_after_indicator() const {
    size_t i = 1;
    while (at_.get(i) == '-' || at_.get(i) == '+' || (at_.get(i) >= '0' && at_.get(i) <= '9')) ++i;
    while (at_.get(i) == ' ' || at_.get(i) == '\t') ++i;
    const char end = at_.get(i);
    return end == '\n' || end == '\r' || end == '#' || end == '\0';
  }

  Cursor at_;
  const int limit_;
  std::vector<int> block_;  // indentation columns of the open block collections
  int flow_ = 0;
  char quote_ = 0;
  int line_indent_ = 0;
  int block_scalar_indent_ = -1;  // inside a block scalar: lines indented more than this
};

}  // namespace

std::string json_error_text(const nlohmann::json::exception& e) {
  std::string text = e.what();
  if (text.rfind("[json.exception.", 0) == 0) {
    if (size_t end = text.find("] "); end != std::string::npos) text.erase(0, end + 2);
  }
  return excerpt(text, 200);
}

std::optional<TextPosition> yaml_nesting_beyond(const std::string& text, int limit) {
  return YamlNesting(text, limit).scan();
}

nlohmann::json parse_json_text(const std::string& text, const std::string& what) {
  if (auto deep = json_nesting_beyond(text)) {
    throw Error(fmt::format("{}: lists and objects nested more than {} deep, at line {}, column {}", what, kMaxNesting,
                            deep->line, deep->column));
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("{} is not valid JSON: {}", what, json_error_text(e)));
  } catch (const nlohmann::json::exception& e) {  // a number out of double's range
    throw Error(fmt::format("{}: {}", what, json_error_text(e)));
  }
}

}  // namespace teeny
