// The YAML tree the spec parser reads (core/yaml_tree.h): kinds, text, positions and order as
// yaml-cpp's own YAML::Load gives them, aliases, and the errors YAML::Load would not give.
#include <gtest/gtest.h>

#include <string>

#include <yaml-cpp/exceptions.h>

#include "core/graph.h"
#include "core/yaml_tree.h"
#include "tests/error_test_util.h"
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

}  // namespace
}  // namespace teeny
