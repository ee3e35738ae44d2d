// A YAML document as plain values with their positions, built from yaml-cpp's event parser.
// YAML::Load gives every value a shared_ptr, an entry in a std::set and, for maps, a list of
// pairs of such nodes: building and freeing them took twice as long as scanning the text, in a
// spec of 10^5 nodes. Here the whole document is two vectors, and a value is a handle into them.
// An alias refers to its anchored value, as in YAML::Load, but never to a list or map that
// contains it: the tree has no cycles. The common YAML of specs is read without yaml-cpp, to the
// same document (load_yaml_subset).
#ifndef TEENY_CORE_YAML_TREE_H
#define TEENY_CORE_YAML_TREE_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace teeny {

// What YamlValue's handles point into: every value, its children's indices, and the root.
struct YamlDocument {
  enum class Kind { kNull, kScalar, kSequence, kMap };
  struct Entry {
    Kind kind = Kind::kNull;
    int line = 0;  // 1-based; 0 when yaml-cpp gave no position
    int column = 0;
    std::string scalar;
    uint32_t first = 0;  // children_[first, first + count): a sequence's items, a map's keys and values
    uint32_t count = 0;
  };
  std::vector<Entry> entries;
  std::vector<uint32_t> children;
  uint32_t root = 0;
};

class YamlValue;
struct YamlEntry;

// One value of a document: null, a scalar, a sequence or a map (its keys may be any value).
// The document must outlive it.
class YamlValue {
 public:
  using Kind = YamlDocument::Kind;

  YamlValue(const YamlDocument& document, uint32_t index) : document_(&document), index_(index) {}
  static YamlValue root(const YamlDocument& document) { return {document, document.root}; }

  Kind kind() const { return entry().kind; }
  bool is_null() const { return kind() == Kind::kNull; }
  bool is_scalar() const { return kind() == Kind::kScalar; }
  bool is_sequence() const { return kind() == Kind::kSequence; }
  bool is_map() const { return kind() == Kind::kMap; }
  // A scalar's text; empty for every other kind.
  const std::string& scalar() const { return entry().scalar; }
  // 1-based; 0 when unknown.
  int line() const { return entry().line; }
  int column() const { return entry().column; }
  // Items of a sequence, entries of a map, 0 otherwise.
  size_t size() const { return is_map() ? entry().count / 2 : entry().count; }
  // Item i of a sequence; key and value of entry i of a map.
  YamlValue item(size_t i) const { return child(i); }
  YamlValue key(size_t i) const { return child(2 * i); }
  YamlValue value(size_t i) const { return child(2 * i + 1); }
  // For range loops: a sequence's items, a map's entries, in source order.
  std::vector<YamlValue> items() const;
  std::vector<YamlEntry> entries() const;

 private:
  const YamlDocument::Entry& entry() const { return document_->entries[index_]; }
  YamlValue child(size_t i) const { return {*document_, document_->children[entry().first + i]}; }

  const YamlDocument* document_;
  uint32_t index_;
};

struct YamlEntry {
  YamlValue key;
  YamlValue value;
};

// The first document of `text` (root: a null value if it has none). Throws
// YAML::ParserException, with its mark, on a syntax error (as YAML::Load does) and on an alias to
// a list or map from inside it.
YamlDocument load_yaml(const std::string& text);

// The two readers load_yaml uses, exposed for tests that compare them:
// The document of a text in the subset of YAML that specs are written in (yaml_tree.cpp,
// SubsetReader, says what it is), as yaml-cpp reads it; nothing for any other text.
std::optional<YamlDocument> load_yaml_subset(const std::string& text);
// yaml-cpp's event parser, for every text.
YamlDocument load_yaml_cpp(const std::string& text);

}  // namespace teeny

#endif  // TEENY_CORE_YAML_TREE_H
