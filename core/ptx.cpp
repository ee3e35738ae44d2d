#include "core/ptx.h"

#include <cctype>
#include <map>

#include <fmt/format.h>

#include "core/error.h"

namespace teeny {
namespace {

struct Token {
  std::string text;
  int line = 0;
};

// The most bytes of parameters a kernel may take (CUDA 12.1 and later, Volta and later).
constexpr int kMaxParamBytes = 32764;

bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%' || c == '.';
}

// Splits PTX into words (directives, identifiers, numbers), quoted strings and single
// punctuation characters; comments are dropped.
std::vector<Token> tokenize(const std::string& ptx) {
  std::vector<Token> tokens;
  int line = 1;
  size_t i = 0;
  const size_t n = ptx.size();
  while (i < n) {
    char c = ptx[i];
    if (c == '\n') {
      ++line;
      ++i;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == '/' && i + 1 < n && ptx[i + 1] == '/') {
      while (i < n && ptx[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < n && ptx[i + 1] == '*') {
      i += 2;
      while (i + 1 < n && !(ptx[i] == '*' && ptx[i + 1] == '/')) {
        if (ptx[i] == '\n') ++line;
        ++i;
      }
      i += 2;
    } else if (c == '"') {
      size_t start = i++;
      while (i < n && ptx[i] != '"' && ptx[i] != '\n') ++i;
      ++i;
      tokens.push_back({ptx.substr(start, i - start), line});
    } else if (is_word_char(c)) {
      size_t start = i;
      while (i < n && is_word_char(ptx[i])) ++i;
      tokens.push_back({ptx.substr(start, i - start), line});
    } else {
      tokens.push_back({std::string(1, c), line});
      ++i;
    }
  }
  return tokens;
}

bool is_integer(const std::string& text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

class EntryParser {
 public:
  EntryParser(const std::vector<Token>& tokens, const std::string& what) : tokens_(tokens), what_(what) {}

  std::vector<PtxEntry> parse() {
    std::vector<PtxEntry> entries;
    for (pos_ = 0; pos_ < tokens_.size(); ++pos_) {
      if (tokens_[pos_].text != ".entry") continue;
      PtxEntry entry;
      entry.line = tokens_[pos_].line;
      for (size_t back = pos_; back > 0; --back) {
        const std::string& prev = tokens_[back - 1].text;
        if (prev == ".visible")
          entry.visible = true;
        else if (prev != ".weak" && prev != ".extern")
          break;
      }
      ++pos_;
      entry.name = expect_word("an entry name");
      if (peek() == "(") parse_params(entry);
      parse_directives(entry);
      entries.push_back(std::move(entry));
    }
    return entries;
  }

 private:
  const std::string& peek() const {
    static const std::string end;
    return pos_ < tokens_.size() ? tokens_[pos_].text : end;
  }

  [[noreturn]] void fail(const std::string& expected) const {
    int line = pos_ < tokens_.size() ? tokens_[pos_].line : (tokens_.empty() ? 0 : tokens_.back().line);
    std::string found = pos_ < tokens_.size() ? fmt::format("'{}'", excerpt(tokens_[pos_].text)) : "end of file";
    throw Error(
        fmt::format("{}:{}: cannot read PTX entry declaration: expected {}, found {}", what_, line, expected, found));
  }

  std::string expect_word(const std::string& what) {
    if (pos_ >= tokens_.size() || !is_word_char(peek()[0])) fail(what);
    return tokens_[pos_++].text;
  }

  // A count or size in a declaration, at most `max`: PTX's own limits (1024 threads, 4 KiB to
  // 32 KiB of parameters) are far below what a hostile file may write.
  int expect_int(const std::string& what, int max) {
    if (!is_integer(peek())) fail(what);
    if (peek().size() > 9 || std::stoi(peek()) > max) fail(fmt::format("{} of at most {}", what, max));
    return std::stoi(tokens_[pos_++].text);
  }

  void expect(const std::string& text) {
    if (peek() != text) fail(fmt::format("'{}'", text));
    ++pos_;
  }

  void parse_params(PtxEntry& entry) {
    expect("(");
    if (peek() == ")") {
      ++pos_;
      return;
    }
    while (true) {
      entry.params.push_back(parse_param());
      if (peek() == ",") {
        ++pos_;
        continue;
      }
      expect(")");
      return;
    }
  }

  PtxParam parse_param() {
    expect(".param");
    PtxParam param;
    std::optional<int> explicit_align;
    while (pos_ < tokens_.size() && peek()[0] == '.') {
      std::string attr = tokens_[pos_++].text;
      if (attr == ".align") {
        int value = expect_int("an alignment", kMaxParamBytes);
        if (param.is_pointer) {
          param.pointee_align = value;
        } else {
          explicit_align = value;
        }
      } else if (attr == ".ptr") {
        param.is_pointer = true;
      } else if (ptx_type_size(attr) > 0) {
        param.type = attr;
      }
      // State spaces after .ptr (.global, .const, ...) carry no layout information.
    }
    if (param.type.empty()) fail("a parameter type");
    param.name = expect_word("a parameter name");
    int count = 1;
    if (peek() == "[") {
      ++pos_;
      count = expect_int("an array length", kMaxParamBytes);
      expect("]");
    }
    int element = ptx_type_size(param.type);
    param.size = element * count;
    param.align = explicit_align.value_or(element);
    return param;
  }

  void parse_directives(PtxEntry& entry) {
    while (pos_ < tokens_.size() && peek() != "{" && peek() != ";") {
      const std::string& directive = peek();
      if (directive == ".reqntid" || directive == ".maxntid") {
        auto& target = directive == ".reqntid" ? entry.reqntid : entry.maxntid;
        ++pos_;
        std::array<int, 3> ntid{1, 1, 1};
        for (int d = 0; d < 3; ++d) {
          ntid[d] = expect_int("a thread count", 1024);
          if (peek() != ",") break;
          ++pos_;
        }
        target = ntid;
      } else {
        ++pos_;  // other performance directives (.minnctapersm, .maxnreg, ...) and their values
      }
    }
  }

  const std::vector<Token>& tokens_;
  const std::string& what_;
  size_t pos_ = 0;
};

}  // namespace

int ptx_type_size(const std::string& type) {
  static const std::map<std::string, int> sizes = {
      {".b8", 1},   {".u8", 1},  {".s8", 1},  {".b16", 2}, {".u16", 2},   {".s16", 2},   {".f16", 2},
      {".bf16", 2}, {".b32", 4}, {".u32", 4}, {".s32", 4}, {".f32", 4},   {".f16x2", 4}, {".bf16x2", 4},
      {".b64", 8},  {".u64", 8}, {".s64", 8}, {".f64", 8}, {".b128", 16},
  };
  auto it = sizes.find(type);
  return it == sizes.end() ? 0 : it->second;
}

std::vector<PtxEntry> parse_ptx_entries(const std::string& ptx, const std::string& what) {
  std::vector<Token> tokens = tokenize(ptx);
  return EntryParser(tokens, what).parse();
}

const PtxEntry* find_visible_entry(const std::vector<PtxEntry>& entries, const std::string& name) {
  for (const PtxEntry& entry : entries) {
    if (entry.visible && entry.name == name) return &entry;
  }
  return nullptr;
}

bool ptx_uses_f16_mma(const std::string& ptx) {
  // A plain scan of the MMA opcodes: the profiler runs this over every launch's PTX.
  for (const char* mma : {"mma.sync.aligned.", "wgmma.mma_async."}) {
    for (size_t at = ptx.find(mma); at != std::string::npos; at = ptx.find(mma, at + 1)) {
      const size_t end = ptx.find_first_of(" \t", at);
      const std::string opcode = ptx.substr(at, end == std::string::npos ? std::string::npos : end - at);
      if (opcode.find(".bf16") != std::string::npos || opcode.find(".f16") != std::string::npos) return true;
    }
  }
  return false;
}

std::string ntid_str(const std::array<int, 3>& ntid) { return fmt::format("{}, {}, {}", ntid[0], ntid[1], ntid[2]); }

}  // namespace teeny
