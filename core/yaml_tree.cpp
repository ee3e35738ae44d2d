#include "core/yaml_tree.h"

#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/parser.h>

namespace teeny {
namespace {

using Kind = YamlDocument::Kind;

// Appends each event's value to the document. A list or map's children are collected on one
// stack of pending indices while it is open and moved to `children` when it closes, so each
// one's children are contiguous.
class TreeBuilder : public YAML::EventHandler {
 public:
  explicit TreeBuilder(YamlDocument& document) : document_(document) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { attach(add(Kind::kNull, mark, anchor)); }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    // yaml-cpp's parser has already refused an alias to an undefined anchor.
    const uint32_t target = anchors_.at(anchor);
    for (const Open& open : open_)
      if (open.index == target) throw YAML::ParserException(mark, "alias to a list or map from inside it");
    attach(target);
  }

  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string& text) override {
    const uint32_t index = add(Kind::kScalar, mark, anchor);
    document_.entries[index].scalar = text;
    attach(index);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(Kind::kSequence, mark, anchor);
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(Kind::kMap, mark, anchor);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Open {
    uint32_t index;
    size_t first_pending;
  };

  uint32_t add(Kind kind, const YAML::Mark& mark, YAML::anchor_t anchor) {
    YamlDocument::Entry entry;
    entry.kind = kind;
    if (!mark.is_null()) {
      entry.line = mark.line + 1;
      entry.column = mark.column + 1;
    }
    const auto index = static_cast<uint32_t>(document_.entries.size());
    document_.entries.push_back(std::move(entry));
    if (anchor != YAML::NullAnchor) {  // anchors are numbered from 1 in the order they appear
      if (anchors_.size() <= anchor) anchors_.resize(anchor + 1);
      anchors_[anchor] = index;
    }
    return index;
  }

  void attach(uint32_t index) {
    if (open_.empty())
      document_.root = index;
    else
      pending_.push_back(index);
  }

  void open(Kind kind, const YAML::Mark& mark, YAML::anchor_t anchor) {
    const uint32_t index = add(kind, mark, anchor);
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

  YamlDocument& document_;
  std::vector<uint32_t> anchors_;
  std::vector<Open> open_;
  std::vector<uint32_t> pending_;
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

YamlDocument load_yaml(const std::string& text) {
  YamlDocument document;
  document.entries.emplace_back();  // the root of a text with no document: null
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  TreeBuilder builder(document);
  parser.HandleNextDocument(builder);
  return document;
}

}  // namespace teeny
