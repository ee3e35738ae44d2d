// Fuzz target: the spec YAML reader's two paths against each other. Input: any text. Where the
// subset reader (load_yaml_subset) takes the text, yaml-cpp's event parser (load_yaml_cpp) must
// accept it too and read the same document, every value's kind, text, line, column and children.
// A difference, a crash, leak or sanitizer report is a finding.
//   build-clang/fuzz/fuzz_yaml -dict=fuzz/spec.dict fuzz/corpus/spec
#include <cstddef>
#include <cstdint>
#include <string>

#include <yaml-cpp/exceptions.h>

#include "core/yaml_tree.h"
#include "fuzz/fuzz_util.h"

namespace {

bool same_entry(const teeny::YamlDocument::Entry& a, const teeny::YamlDocument::Entry& b) {
  return a.kind == b.kind && a.line == b.line && a.column == b.column && a.scalar == b.scalar && a.first == b.first &&
         a.count == b.count;
}

bool same_document(const teeny::YamlDocument& a, const teeny::YamlDocument& b) {
  return a.root == b.root && a.children == b.children && a.entries.size() == b.entries.size() &&
         std::equal(a.entries.begin(), a.entries.end(), b.entries.begin(), same_entry);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace teeny;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::optional<YamlDocument> subset = load_yaml_subset(text);
  if (!subset) return 0;
  try {
    if (!same_document(*subset, load_yaml_cpp(text)))
      fuzz::property_failed("the subset reader and yaml-cpp read different documents");
  } catch (const YAML::Exception& e) {
    fuzz::property_failed("the subset reader took a text yaml-cpp refuses: " + e.msg);
  }
  return 0;
}
