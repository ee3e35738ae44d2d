#include "core/yaml_tree.h"

#include <algorithm>
#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/parser.h>

namespace teeny {
namespace {

using Kind = YamlDocument::Kind;

// Appends values to a document in the order a depth-first walk meets them. A list or map's
// children are collected on one stack of pending indices while it is open and moved to
// `children` when it closes, so each one's children are contiguous.
class DocumentBuilder {
 public:
  explicit DocumentBuilder(YamlDocument& document) : document_(document) {}

  // A value at a 1-based line and column (0: unknown), not yet in any list or map.
  uint32_t add(Kind kind, int line, int column) {
    YamlDocument::Entry entry;
    entry.kind = kind;
    entry.line = line;
    entry.column = column;
    const auto index = static_cast<uint32_t>(document_.entries.size());
    document_.entries.push_back(std::move(entry));
    return index;
  }
  void set_scalar(uint32_t index, std::string text) { document_.entries[index].scalar = std::move(text); }

  // Into the innermost open list or map, or as the root.
  void attach(uint32_t index) {
    if (open_.empty())
      document_.root = index;
    else
      pending_.push_back(index);
  }

  void open(uint32_t index) {
    attach(index);
    open_.push_back({index, pending_.size()});
  }

  void close() {
    const Open open = open_.back();
    open_.pop_back();
    YamlDocument::Entry& entry = document_.entries[open.index];
    entry.first = static_cast<uint32_t>(document_.children.size());
    entry.count = static_cast<uint32_t>(pending_.size() - open.first_pending);
    document_.children.insert(document_.children.end(), pending_.begin() + open.first_pending, pending_.end());
    pending_.resize(open.first_pending);
  }

  bool is_open(uint32_t index) const {
    return std::any_of(open_.begin(), open_.end(), [&](const Open& open) { return open.index == index; });
  }
  size_t depth() const { return open_.size(); }

 private:
  struct Open {
    uint32_t index;
    size_t first_pending;
  };

  YamlDocument& document_;
  std::vector<Open> open_;
  std::vector<uint32_t> pending_;
};

// yaml-cpp's events into a document.
class TreeBuilder : public YAML::EventHandler {
 public:
  explicit TreeBuilder(YamlDocument& document) : builder_(document) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    builder_.attach(add(Kind::kNull, mark, anchor));
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    // yaml-cpp's parser has already refused an alias to an undefined anchor.
    const uint32_t target = anchors_.at(anchor);
    if (builder_.is_open(target)) throw YAML::ParserException(mark, "alias to a list or map from inside it");
    builder_.attach(target);
  }

  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string& text) override {
    const uint32_t index = add(Kind::kScalar, mark, anchor);
    builder_.set_scalar(index, text);
    builder_.attach(index);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    builder_.open(add(Kind::kSequence, mark, anchor));
  }
  void OnSequenceEnd() override { builder_.close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    builder_.open(add(Kind::kMap, mark, anchor));
  }
  void OnMapEnd() override { builder_.close(); }

 private:
  uint32_t add(Kind kind, const YAML::Mark& mark, YAML::anchor_t anchor) {
    const uint32_t index =
        mark.is_null() ? builder_.add(kind, 0, 0) : builder_.add(kind, mark.line + 1, mark.column + 1);
    if (anchor != YAML::NullAnchor) {  // anchors are numbered from 1 in the order they appear
      if (anchors_.size() <= anchor) anchors_.resize(anchor + 1);
      anchors_[anchor] = index;
    }
    return index;
  }

  DocumentBuilder builder_;
  std::vector<uint32_t> anchors_;
};

// The YAML that specs are written in, read without yaml-cpp, whose scanner matches every
// character against a tree of regular expressions: three quarters of `teeny check` of a large
// spec went there. The subset: block maps and lists (a map may start on a list entry's line),
// flow maps and lists within one line, plain scalars of letters, digits and _ . - + * / ( ) %
// (with single spaces or runs of them inside), comments. Anything else is left to yaml-cpp,
// by read() returning false: quotes, anchors, aliases, tags, block scalars, `?` keys, empty
// values, null words, a scalar or flow that goes on to the next line, a value on the line
// below its key unless it is a list or map, tabs, carriage returns, bytes beyond ASCII,
// document markers and directives. Within the subset, yaml-cpp gives the same values and
// positions (tests/test_yaml_tree.cpp compares the two), so errors found later are the same.
class SubsetReader {
 public:
  SubsetReader(const std::string& text, YamlDocument& document) : text_(text), builder_(document) {}

  // False where the text is outside the subset; the document is then incomplete.
  bool read() {
    if (!printable_ascii()) return false;
    content_line_from(0);
    if (at_end_ || indent() != 0 || !block_node()) return false;
    return at_end_ && !declined_;
  }

 private:
  // Levels of lists and maps; yaml-cpp's own limit is 500 and the spec parser's 64 (kMaxNesting).
  static constexpr size_t kMaxDepth = 100;
  // yaml-cpp takes a simple key only where its ':' is within 1024 characters of its start.
  static constexpr size_t kMaxKeyLength = 1000;

  bool printable_ascii() const {
    return std::all_of(text_.begin(), text_.end(), [](char c) { return (c >= ' ' && c <= '~') || c == '\n'; });
  }

  // The character at p, with the end of the text read as a line break.
  char at(size_t p) const { return p < text_.size() ? text_[p] : '\n'; }
  size_t skip_spaces(size_t p) const {
    while (at(p) == ' ') ++p;
    return p;
  }
  int column(size_t p) const { return static_cast<int>(p - line_start_); }
  // pos_'s column: on a content line's first character, its indentation.
  int indent() const { return column(pos_); }

  // Moves to the first character of the first line from `begin` that holds more than spaces and
  // a comment; past the last line, at_end_.
  void content_line_from(size_t begin) {
    while (begin < text_.size()) {
      const size_t first = skip_spaces(begin);
      if (at(first) != '\n' && at(first) != '#') {
        line_start_ = begin;
        pos_ = first;
        // yaml-cpp's document markers, at the start of a line
        if (first == begin && (text_.compare(first, 3, "---") == 0 || text_.compare(first, 3, "...") == 0))
          declined_ = true;
        return;
      }
      const size_t end = text_.find('\n', first);
      if (end == std::string::npos) break;
      begin = end + 1;
      ++line_;
    }
    at_end_ = true;
  }
  void next_content_line() {
    const size_t end = text_.find('\n', pos_);
    if (end == std::string::npos) {
      at_end_ = true;
      return;
    }
    ++line_;
    content_line_from(end + 1);
  }

  // yaml-cpp goes on with a plain scalar that ends its line on the next line that is not blank
  // (a comment line too) where that is indented beyond `top`, the column of the list or map the
  // scalar is in.
  bool scalar_ends_with_line(int top) const {
    size_t end = text_.find('\n', pos_);
    while (end != std::string::npos) {
      const size_t begin = end + 1;
      const size_t first = skip_spaces(begin);
      if (at(first) != '\n') return static_cast<int>(first - begin) <= top;
      end = text_.find('\n', first);
    }
    return true;
  }

  // ASCII letters and digits, as the C locale's isalnum, without a call per character.
  static bool alnum(char c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'); }
  static bool plain_char(char c) {
    return alnum(c) || c == '_' || c == '.' || c == '-' || c == '+' || c == '*' || c == '/' || c == '(' || c == ')' ||
           c == '%';
  }
  // Where the plain scalar starting at p ends, spaces after it left out; p where none starts.
  // '*' and '%' cannot start one (an alias, a directive), nor can '-' or '+' alone.
  size_t plain_end(size_t p) const {
    const char c = at(p);
    const bool starts = alnum(c) || c == '_' || c == '.' || c == '/' || c == '(' || c == ')' ||
                        ((c == '-' || c == '+') && plain_char(at(p + 1)));
    if (!starts) return p;
    size_t end = p + 1;
    while (true) {
      const size_t next = skip_spaces(end);
      if (!plain_char(at(next))) return end;
      end = next + 1;
    }
  }
  // A key's text ends at spaces and ':' followed by a space or the line's end; npos otherwise.
  size_t key_colon(size_t key, size_t end) const {
    const size_t colon = skip_spaces(end);
    const bool value_indicator = at(colon) == ':' && (at(colon + 1) == ' ' || at(colon + 1) == '\n');
    return end != key && value_indicator && colon - key <= kMaxKeyLength ? colon : std::string::npos;
  }
  bool is_entry(size_t p) const { return at(p) == '-' && (at(p + 1) == ' ' || at(p + 1) == '\n'); }
  // Spaces to the end of the line, or to a comment after at least one of them.
  bool rest_is_blank(size_t p) {
    pos_ = skip_spaces(p);
    return at(pos_) == '\n' || (at(pos_) == '#' && pos_ > p);
  }

  // The scalar text_[p, end); false for the words yaml-cpp reads as null.
  bool add_scalar(size_t p, size_t end) {
    if (end - p == 4 && (!text_.compare(p, 4, "null") || !text_.compare(p, 4, "Null") || !text_.compare(p, 4, "NULL")))
      return false;
    const uint32_t index = builder_.add(Kind::kScalar, line_ + 1, column(p) + 1);
    builder_.set_scalar(index, text_.substr(p, end - p));
    builder_.attach(index);
    return true;
  }
  void open(Kind kind) { builder_.open(builder_.add(kind, line_ + 1, indent() + 1)); }

  // The block list or map at pos_; returns on the next content line indented less than it.
  bool block_node() {
    if (builder_.depth() >= kMaxDepth) return false;
    if (is_entry(pos_)) return block_list();
    return key_colon(pos_, plain_end(pos_)) != std::string::npos && block_map();
  }

  bool block_map() {
    const int map_column = indent();
    open(Kind::kMap);
    while (true) {
      const size_t key_end = plain_end(pos_);
      const size_t colon = key_colon(pos_, key_end);
      if (colon == std::string::npos || !add_scalar(pos_, key_end)) return false;
      pos_ = skip_spaces(colon + 1);
      if (!block_value(map_column)) return false;
      if (at_end_ || indent() < map_column) break;
      if (indent() > map_column || is_entry(pos_)) return false;
    }
    builder_.close();
    return true;
  }

  bool block_list() {
    const int list_column = indent();
    open(Kind::kSequence);
    while (true) {
      pos_ = skip_spaces(pos_ + 1);  // past the '-'
      if (is_entry(pos_)) return false;
      const bool map_here = key_colon(pos_, plain_end(pos_)) != std::string::npos;
      if (!(map_here ? block_map() : block_value(list_column))) return false;
      if (at_end_ || indent() < list_column) break;
      if (indent() > list_column || !is_entry(pos_)) return false;
    }
    builder_.close();
    return true;
  }

  // The value at pos_, after a key's ':' or a list's '-'; `top` is the column of that list or
  // map. Returns on the next content line.
  bool block_value(int top) {
    const char c = at(pos_);
    if (c == '\n' || c == '#') {  // on the lines below: a list or map indented beyond `top`
      next_content_line();
      return !at_end_ && indent() > top && block_node();
    }
    if (c == '[' || c == '{') {
      if (!flow_node() || !rest_is_blank(pos_)) return false;
      next_content_line();
      return true;
    }
    const size_t end = plain_end(pos_);
    if (end == pos_ || !add_scalar(pos_, end) || !rest_is_blank(end)) return false;
    if (at(pos_) == '\n' && !scalar_ends_with_line(top)) return false;
    next_content_line();
    return true;
  }

  // A flow list, flow map or plain scalar at pos_, all on this line; moves past it.
  bool flow_node() {
    if (builder_.depth() >= kMaxDepth) return false;
    const char c = at(pos_);
    if (c != '[' && c != '{') {
      const size_t end = plain_end(pos_);
      if (end == pos_ || !add_scalar(pos_, end)) return false;
      pos_ = end;
      return true;
    }
    const bool map = c == '{';
    const char close = map ? '}' : ']';
    open(map ? Kind::kMap : Kind::kSequence);
    pos_ = skip_spaces(pos_ + 1);
    if (at(pos_) != close) {
      while (true) {
        if (map) {
          const size_t key_end = plain_end(pos_);
          const size_t colon = key_colon(pos_, key_end);
          if (colon == std::string::npos || at(colon + 1) != ' ' || !add_scalar(pos_, key_end)) return false;
          pos_ = skip_spaces(colon + 1);
        }
        if (!flow_node()) return false;
        pos_ = skip_spaces(pos_);
        if (at(pos_) == close) break;
        if (at(pos_) != ',') return false;
        pos_ = skip_spaces(pos_ + 1);
        if (at(pos_) == close) return false;  // a trailing comma
      }
    }
    ++pos_;
    builder_.close();
    return true;
  }

  const std::string& text_;
  DocumentBuilder builder_;
  size_t pos_ = 0;
  size_t line_start_ = 0;
  int line_ = 0;  // 0-based, of pos_
  bool at_end_ = false;
  bool declined_ = false;
};

}  // namespace

std::vector<YamlValue> YamlValue::items() const {
  std::vector<YamlValue> out;
  if (!is_sequence()) return out;
  out.reserve(size());
  for (size_t i = 0; i < size(); ++i) out.push_back(item(i));
  return out;
}

std::vector<YamlEntry> YamlValue::entries() const {
  std::vector<YamlEntry> out;
  if (!is_map()) return out;
  out.reserve(size());
  for (size_t i = 0; i < size(); ++i) out.push_back({key(i), value(i)});
  return out;
}

std::optional<YamlDocument> load_yaml_subset(const std::string& text) {
  YamlDocument document;
  // A spec has a value every five or so characters: room for them without growing the lists by
  // copying (a value takes at least two: a character and a separator).
  document.entries.reserve(text.size() / 4 + 1);
  document.children.reserve(text.size() / 4 + 1);
  document.entries.emplace_back();  // as load_yaml_cpp's
  if (!SubsetReader(text, document).read()) return std::nullopt;
  return document;
}

YamlDocument load_yaml_cpp(const std::string& text) {
  YamlDocument document;
  document.entries.emplace_back();  // the root of a text with no document: null
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  TreeBuilder builder(document);
  parser.HandleNextDocument(builder);
  return document;
}

YamlDocument load_yaml(const std::string& text) {
  if (std::optional<YamlDocument> document = load_yaml_subset(text)) return std::move(*document);
  return load_yaml_cpp(text);
}

}  // namespace teeny
