// The YAML tree the spec parser reads (core/yaml_tree.h): kinds, text, positions and order as
// yaml-cpp's own YAML::Load gives them, aliases, and the errors YAML::Load would not give.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include <fmt/format.h>
#include <yaml-cpp/exceptions.h>

#include "core/graph.h"
#include "core/yaml_tree.h"
#include "tests/error_test_util.h"
#include "tests/file_test_util.h"
#include "tests/spec_test_ops.h"

namespace teeny {
namespace {

using Kind = YamlValue::Kind;

TEST(YamlTree, KindsTextAndPositionsInSourceOrder) {
  const YamlDocument doc = load_yaml("b: 1\na:\n  - x\n  - [y, {k: ~}]\nc:\n");
  const YamlValue root = YamlValue::root(doc);
  ASSERT_TRUE(root.is_map());
  ASSERT_EQ(root.size(), 3u);
  EXPECT_EQ(root.key(0).scalar(), "b");  // source order, not sorted
  EXPECT_EQ(root.value(0).scalar(), "1");
  EXPECT_EQ(root.key(1).scalar(), "a");
  EXPECT_EQ(root.key(2).scalar(), "c");
  EXPECT_TRUE(root.value(2).is_null());

  const YamlValue list = root.value(1);
  ASSERT_TRUE(list.is_sequence());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list.item(0).scalar(), "x");
  EXPECT_EQ(std::make_pair(list.item(0).line(), list.item(0).column()), std::make_pair(3, 5));
  const YamlValue inner = list.item(1);
  EXPECT_EQ(std::make_pair(inner.line(), inner.column()), std::make_pair(4, 5));
  ASSERT_EQ(inner.items().size(), 2u);
  EXPECT_EQ(inner.items()[0].scalar(), "y");
  const YamlValue flow_map = inner.item(1);
  ASSERT_TRUE(flow_map.is_map());
  ASSERT_EQ(flow_map.entries().size(), 1u);
  EXPECT_EQ(flow_map.entries()[0].key.scalar(), "k");
  EXPECT_TRUE(flow_map.entries()[0].value.is_null());
  EXPECT_EQ(std::make_pair(flow_map.key(0).line(), flow_map.key(0).column()), std::make_pair(4, 10));
}

TEST(YamlTree, ScalarsKeepTheirTextAndQuotedNullIsAScalar) {
  const YamlDocument doc = load_yaml("[ '~', \"a b\", 1e3, null, '' ]");
  const std::vector<YamlValue> items = YamlValue::root(doc).items();
  ASSERT_EQ(items.size(), 5u);
  EXPECT_EQ(items[0].kind(), Kind::kScalar);
  EXPECT_EQ(items[0].scalar(), "~");
  EXPECT_EQ(items[1].scalar(), "a b");
  EXPECT_EQ(items[2].scalar(), "1e3");
  EXPECT_EQ(items[3].kind(), Kind::kNull);
  EXPECT_EQ(items[4].kind(), Kind::kScalar);
  EXPECT_EQ(items[4].scalar(), "");
}

TEST(YamlTree, EmptyTextIsANullRootAndOnlyTheFirstDocumentIsRead) {
  EXPECT_TRUE(YamlValue::root(load_yaml("")).is_null());
  EXPECT_TRUE(YamlValue::root(load_yaml("# only a comment\n")).is_null());
  const YamlDocument doc = load_yaml("first\n---\nsecond\n");
  EXPECT_EQ(YamlValue::root(doc).scalar(), "first");
}

TEST(YamlTree, DuplicateKeysAreKeptForTheParserToReport) {
  const YamlDocument doc = load_yaml("{a: 1, a: 2}");
  const YamlValue root = YamlValue::root(doc);
  ASSERT_EQ(root.size(), 2u);
  EXPECT_EQ(root.value(0).scalar(), "1");
  EXPECT_EQ(root.value(1).scalar(), "2");
}

TEST(YamlTree, AnAliasIsItsAnchoredValue) {
  const YamlDocument doc = load_yaml("a: &s [B, 64]\nb: *s\nc: &n 3\nd: *n\n");
  const YamlValue root = YamlValue::root(doc);
  const YamlValue b = root.value(1);
  ASSERT_TRUE(b.is_sequence());
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b.item(1).scalar(), "64");
  EXPECT_EQ(b.line(), 1);  // the anchored value's own position
  EXPECT_EQ(root.value(3).scalar(), "3");
}

// What load_yaml(text) throws: "<message> at <0-based line>:<0-based column>", or "no error".
std::string yaml_error(const std::string& text) {
  try {
    load_yaml(text);
  } catch (const YAML::ParserException& e) {
    return e.msg + " at " + std::to_string(e.mark.line) + ":" + std::to_string(e.mark.column);
  }
  return "no error";
}

TEST(YamlTree, AnAliasFromInsideItsOwnListIsAnError) {
  EXPECT_EQ(yaml_error("a: &x [1, *x]\n"), "alias to a list or map from inside it at 0:10");
}

TEST(YamlTree, SyntaxErrorsAreYamlCppsOwn) {
  EXPECT_EQ(yaml_error("a: [1, 2\n").rfind("end of sequence flow not found at ", 0), 0u);
  EXPECT_THROW(load_yaml("a: *undefined\n"), YAML::ParserException);
}

TEST(YamlTree, SpecsMayShareValuesThroughAnchors) {
  const Registry registry = testing::spec_test_registry();
  const Graph graph = parse_graph(
      "name: g\ndims: {B: {min: 1, max: 8, default: 2}}\ninputs:\n  x: {dtype: f32, shape: &row [B, 16]}\n"
      "  y: {dtype: f32, shape: *row}\nnodes:\n  - {name: s, op: add, inputs: [x, y]}\noutputs: [s]\n",
      "g.yaml", registry);
  ASSERT_EQ(graph.inputs.size(), 2u);
  EXPECT_EQ(shape_str(graph.inputs[1].type.shape), "[B, 16]");
}

TEST(YamlTree, ASpecWithACyclicAliasIsAnErrorAtTheAlias) {
  const Registry registry = testing::spec_test_registry();
  EXPECT_EQ(testing::rendered([&] { parse_graph("name: &n [g, *n]\n", "g.yaml", registry); }),
            "teeny: error: g.yaml:1:14: YAML syntax error: alias to a list or map from inside it\n"
            "  name: &n [g, *n]\n"
            "               ^\n");
}

// ---- the subset read without yaml-cpp ----------------------------------------------------------

// Every field of a document, one value a line.
std::string dump(const YamlDocument& doc) {
  std::string out = fmt::format("root {}\n", doc.root);
  for (const YamlDocument::Entry& e : doc.entries)
    out += fmt::format("{} {}:{} [{}] {}+{}\n", static_cast<int>(e.kind), e.line, e.column, e.scalar, e.first, e.count);
  for (uint32_t child : doc.children) out += fmt::format("{} ", child);
  return out;
}

// Whether the subset reader took `text`; where it did, yaml-cpp must read the same document.
bool read_alike(const std::string& text) {
  const std::optional<YamlDocument> subset = load_yaml_subset(text);
  if (!subset) return false;
  try {
    EXPECT_EQ(dump(*subset), dump(load_yaml_cpp(text))) << "text:\n" << text;
  } catch (const YAML::Exception& e) {
    ADD_FAILURE() << "the subset reader took a text yaml-cpp refuses (" << e.msg << "):\n" << text;
  }
  return true;
}

std::vector<std::string> spec_files() {
  std::vector<std::string> texts;
  for (const char* folder : {"/graphs", "/fuzz/corpus/spec"})
    for (const auto& file : std::filesystem::directory_iterator(std::string(TEENY_SOURCE_DIR) + folder))
      texts.push_back(testing::slurp(file.path()));
  return texts;
}

const char* const kSubsetSpec =
    "name: g  # a comment\n"
    "dims:\n"
    "  B: {min: 1, max: 8, default: 2}\n"
    "\n"
    "inputs:\n"
    "  x: {dtype: f32, shape: [B, 16]}\n"
    "  y:\n"
    "    dtype: f32\n"
    "    shape:\n"
    "    - B*2\n"  // not in the subset: a list at its key's column
    "nodes:\n"
    "  - {name: a, op: relu, inputs: [x]}\n"
    "  -   name: b\n"
    "      op: scale\n"
    "      inputs: [ a ]\n"
    "      attrs: {value: -1.5e-3}\n"
    "# between\n"
    "  - {name: c, op: add, inputs: [a, b], attrs: {}}\n"
    "outputs: [c]\n";

TEST(YamlSubset, SpecsAreReadAsYamlCppReadsThem) {
  for (const std::string& text : spec_files()) EXPECT_TRUE(read_alike(text)) << text;
  std::string chain = "name: chain\ninputs:\n  x: {dtype: f32, shape: [B, 64]}\nnodes:\n";
  for (int i = 0; i < 100; ++i)
    chain += fmt::format("  - {{name: n{}, op: relu, inputs: [{}]}}\n", i, i ? "n" + std::to_string(i - 1) : "x");
  EXPECT_TRUE(read_alike(chain + "outputs: [n99]"));
  std::string spec = kSubsetSpec;
  EXPECT_FALSE(read_alike(spec));
  EXPECT_TRUE(read_alike(spec.replace(spec.find("    - B*2"), 4, "      ")));
}

TEST(YamlSubset, WhatItLeavesToYamlCpp) {
  for (const char* text : {
           "a: 'q'\n",
           "a: \"q\"\n",
           "a: &x 1\nb: *x\n",
           "a: !!str 1\n",
           "a: |\n  text\n",
           "a: >\n  text\n",
           "? a\n: 1\n",
           "a:\nb: 1\n",
           "a: null\n",
           "a: Null\n",
           "a: ~\n",
           "null: 1\n",
           "a: [null]\n",
           "a: one\n  two\n",
           "a: one\n  # folded into the scalar\n",
           "a:\n- x\n",
           "a: [1,\n  2]\n",
           "a: [1, 2,]\n",
           "a: {b}\n",
           "a: {b:1}\n",
           "a: [b: 1]\n",
           "a:\tb\n",
           "a: b\r\n",
           "a: \xc3\xa9\n",
           "--- \na: 1\n",
           "a: 1\n...\n",
           "%YAML 1.2\n---\na: 1\n",
           "- - a\n",
           "- \n- b\n",
           "a: b: c\n",
           "a: b:c\n",
           "a: b#c\n",
           "a: [b, c] d\n",
           "a: x, y\n",
           "a\n",
           "[a, b]\n",
           "  a: 1\n",
           "",
           "# only a comment\n",
           "a: 1\n  b: 2\n",
           "a:\n  b\n",
           "a: -\n",
           "a: *\n",
           "- a\n b\n",
       })
    EXPECT_FALSE(read_alike(text)) << text;
  EXPECT_FALSE(read_alike("a: " + std::string(101, '[') + std::string(101, ']') + "\n"));  // deeper than it reads
  EXPECT_FALSE(read_alike(std::string(1100, 'k') + ": 1\n"));  // longer than a simple key may be
}

TEST(YamlSubset, ScalarsPositionsAndNestingAsYamlCppReadsThem) {
  for (const char* text : {
           "a: 1\nb: x y  z   # c\nc: -1\nd: .5\ne: (B + 1)*2 % 3/4\n",
           "a:   # c\n  # c\n  b: 1\n",
           "- a\n- [b, {c: d}]\n-\n  e: f\n- g: h\n  i: [ ]\n",
           "a: {b: [c, [d, {}]], e: f}\n",
           "a:\n    - x\n    -   y: 1\n        z: 2\n    - w\nb: 1",
           "k : v\nl :   [ 1 , 2 ]\n",
           "a: b\n\n   \nc: d\n",
           "a: b\n# c\nd: e\n",
           "a:\n  - b\n  # c\n  - d\n",
       })
    EXPECT_TRUE(read_alike(text)) << text;
}

// Specs with a few characters inserted, removed or repeated: the subset reader takes some and
// must read those as yaml-cpp does, and refuse every one that yaml-cpp refuses.
TEST(YamlSubset, MutatedSpecsAreReadAsYamlCppReadsThemOrLeftToIt) {
  std::vector<std::string> seeds = spec_files();
  seeds.push_back(kSubsetSpec);
  const std::string inserted = " \n-:#[]{},.'\"&*!|>?~%\tax1";
  std::mt19937 random(22);
  auto below = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(random); };
  int taken = 0;
  const int kTexts = 3000;
  for (int i = 0; i < kTexts; ++i) {
    std::string text = seeds[below(seeds.size())];
    for (size_t edits = 1 + below(3); edits > 0 && !text.empty(); --edits) {
      const size_t at = below(text.size());
      switch (below(4)) {
        case 0:
          text.insert(at, 1, inserted[below(inserted.size())]);
          break;
        case 1:
          text.erase(at, 1 + below(3));
          break;
        case 2:
          text.insert(at, text.substr(at, below(40)));
          break;
        default:
          text.insert(at, std::string(1 + below(4), ' '));
      }
    }
    taken += read_alike(text) ? 1 : 0;
  }
  EXPECT_GT(taken, kTexts / 10);  // the comparison happened often enough to mean something
}

}  // namespace
}  // namespace teeny
