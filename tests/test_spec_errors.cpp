// Exact text of every user-facing spec error: file:line:col, node and key, the source line
// with a caret, notes and "did you mean" suggestions.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>

#include "core/graph.h"
#include "ops/ops.h"
#include "tests/error_test_util.h"
#include "tests/op_test_util.h"
#include "tests/spec_test_ops.h"

namespace teeny {
namespace {

using testing::rendered;

const char* kBase = R"(name: net
dims:
  B: {min: 1, max: 64, default: 8}
inputs:
  x: {dtype: f32, shape: [B, 16]}
nodes:
  - {name: fc1, op: dense, inputs: [x], attrs: {out_features: 32}}
  - {name: act, op: relu, inputs: [fc1]}
  - {name: probs, op: softmax, inputs: [act]}
outputs: [probs]
)";

// The base spec with 1-based line `line` replaced by `text` (several lines allowed).
std::string with_line(int line, const std::string& text) {
  std::istringstream in(kBase);
  std::string out, current;
  for (int n = 1; std::getline(in, current); ++n) out += (n == line ? text : current) + "\n";
  return out;
}

class SpecError : public ::testing::Test {
 protected:
  Registry registry = testing::spec_test_registry();
  std::string error_of(const std::string& spec) {
    return rendered([&] { parse_graph(spec, "g.yaml", registry); });
  }
  std::string error_at_line(int line, const std::string& text) { return error_of(with_line(line, text)); }
  std::string bind_error(const std::vector<std::string>& binds) {
    Graph graph = parse_graph(kBase, "g.yaml", registry);
    return rendered([&] { bind_dims(graph.dims, binds); });
  }
};

TEST_F(SpecError, BaseSpecIsValid) { EXPECT_EQ(error_of(kBase), "no error"); }

TEST_F(SpecError, YamlSyntax) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: relu, inputs: [fc1]"),
            "teeny: error: g.yaml:9:3: YAML syntax error: illegal block entry\n"
            "    - {name: probs, op: softmax, inputs: [act]}\n"
            "    ^\n");
}

TEST_F(SpecError, YamlSyntaxBadIndent) {
  EXPECT_EQ(error_at_line(5, "  x: {dtype: f32, shape: [B, 16]}\n   bad: ["),
            "teeny: error: g.yaml:6:4: YAML syntax error: end of map not found\n"
            "     bad: [\n"
            "     ^\n");
}

TEST_F(SpecError, NotAMap) {
  EXPECT_EQ(error_of("- just\n- a list\n"),
            "teeny: error: g.yaml:1:1: a graph spec must be a map with keys name, dims, inputs, nodes, outputs, train, "
            "got a list\n"
            "  - just\n"
            "  ^\n");
}

TEST_F(SpecError, EmptyFile) {
  EXPECT_EQ(
      error_of(""),
      "teeny: error: g.yaml:1:1: a graph spec must be a map with keys name, dims, inputs, nodes, outputs, train, got "
      "nothing\n");
}

TEST_F(SpecError, UnknownTopLevelKey) {
  EXPECT_EQ(error_at_line(6, "node:"),
            "teeny: error: g.yaml:6:1: unknown top-level key 'node' (did you mean 'nodes'?)\n"
            "  node:\n"
            "  ^\n"
            "note: valid keys: name, dims, inputs, nodes, outputs, train\n");
}

TEST_F(SpecError, MissingTopLevelKey) {
  EXPECT_EQ(error_at_line(10, ""),
            "teeny: error: g.yaml:1:1: missing top-level key 'outputs'\n"
            "  name: net\n"
            "  ^\n");
}

TEST_F(SpecError, UnknownNodeKey) {
  EXPECT_EQ(error_at_line(7, "  - {name: fc1, op: dense, inputs: [x], atrs: {out_features: 32}}"),
            "teeny: error: g.yaml:7:41: node 'fc1': unknown key 'atrs' (did you mean 'attrs'?)\n"
            "    - {name: fc1, op: dense, inputs: [x], atrs: {out_features: 32}}\n"
            "                                          ^\n"
            "note: valid keys: name, op, inputs, attrs, dtype\n");
}

TEST_F(SpecError, UnknownDimKey) {
  EXPECT_EQ(error_at_line(3, "  B: {min: 1, maxx: 64, default: 8}"),
            "teeny: error: g.yaml:3:15: dim 'B': unknown key 'maxx' (did you mean 'max'?)\n"
            "    B: {min: 1, maxx: 64, default: 8}\n"
            "                ^\n"
            "note: valid keys: min, max, default\n");
}

TEST_F(SpecError, UnknownInputKey) {
  EXPECT_EQ(error_at_line(5, "  x: {dtype: f32, shap: [B, 16]}"),
            "teeny: error: g.yaml:5:19: input 'x': unknown key 'shap' (did you mean 'shape'?)\n"
            "    x: {dtype: f32, shap: [B, 16]}\n"
            "                    ^\n"
            "note: valid keys: dtype, shape\n");
}

TEST_F(SpecError, DuplicateKey) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: relu, op: relu, inputs: [fc1]}"),
            "teeny: error: g.yaml:8:27: node 'act': duplicate key 'op' (first at line 8, column 17)\n"
            "    - {name: act, op: relu, op: relu, inputs: [fc1]}\n"
            "                            ^\n");
}

TEST_F(SpecError, MissingNodeKey) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, inputs: [fc1]}"),
            "teeny: error: g.yaml:8:5: node 'act': missing key 'op'\n"
            "    - {name: act, inputs: [fc1]}\n"
            "      ^\n");
}

TEST_F(SpecError, MissingNodeName) {
  EXPECT_EQ(error_at_line(8, "  - {op: relu, inputs: [fc1]}"),
            "teeny: error: g.yaml:8:5: node #2: missing key 'name'\n"
            "    - {op: relu, inputs: [fc1]}\n"
            "      ^\n");
}

TEST_F(SpecError, KeyWithoutValue) {
  EXPECT_EQ(error_at_line(8, "  - name: act\n    op:\n    inputs: [fc1]"),
            "teeny: error: g.yaml:9:5: node 'act': key 'op' has no value\n"
            "      op:\n"
            "      ^\n");
}

TEST_F(SpecError, NodeNameNotIdentifier) {
  EXPECT_EQ(error_at_line(8, "  - {name: act-1, op: relu, inputs: [fc1]}"),
            "teeny: error: g.yaml:8:12: node name 'act-1' is not an identifier (letters, digits and '_', not starting "
            "with a digit)\n"
            "    - {name: act-1, op: relu, inputs: [fc1]}\n"
            "             ^\n");
}

TEST_F(SpecError, UnknownOpSuggestsNearest) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: rellu, inputs: [fc1]}"),
            "teeny: error: g.yaml:8:21: node 'act': unknown op 'rellu' (did you mean 'relu'?)\n"
            "    - {name: act, op: rellu, inputs: [fc1]}\n"
            "                      ^\n"
            "note: `teeny ops` lists the registered ops\n");
}

TEST_F(SpecError, UnknownOpWithoutSuggestion) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: convolution, inputs: [fc1]}"),
            "teeny: error: g.yaml:8:21: node 'act': unknown op 'convolution'\n"
            "    - {name: act, op: convolution, inputs: [fc1]}\n"
            "                      ^\n"
            "note: `teeny ops` lists the registered ops\n");
}

TEST_F(SpecError, BadAttrType) {
  EXPECT_EQ(error_at_line(7, "  - {name: fc1, op: dense, inputs: [x], attrs: {out_features: many}}"),
            "teeny: error: g.yaml:7:63: node 'fc1': attr 'out_features' must be an integer, got 'many'\n"
            "    - {name: fc1, op: dense, inputs: [x], attrs: {out_features: many}}\n"
            "                                                                ^\n");
}

TEST_F(SpecError, BadAttrTypeList) {
  EXPECT_EQ(error_at_line(7, "  - {name: fc1, op: dense, inputs: [x], attrs: {out_features: [32]}}"),
            "teeny: error: g.yaml:7:63: node 'fc1': attr 'out_features' must be an integer, got a list\n"
            "    - {name: fc1, op: dense, inputs: [x], attrs: {out_features: [32]}}\n"
            "                                                                ^\n");
}

TEST_F(SpecError, BadBoolAttr) {
  EXPECT_EQ(error_at_line(7, "  - {name: fc1, op: dense, inputs: [x], attrs: {out_features: 32, bias: maybe}}"),
            "teeny: error: g.yaml:7:73: node 'fc1': attr 'bias' must be true or false, got 'maybe'\n"
            "    - {name: fc1, op: dense, inputs: [x], attrs: {out_features: 32, bias: maybe}}\n"
            "                                                                          ^\n");
}

TEST_F(SpecError, BadEnumValue) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: gelu, inputs: [fc1], attrs: {approximate: tanhh}}"),
            "teeny: error: g.yaml:8:63: node 'act': attr 'approximate' must be one of none, tanh; got 'tanhh' (did you "
            "mean 'tanh'?)\n"
            "    - {name: act, op: gelu, inputs: [fc1], attrs: {approximate: tanhh}}\n"
            "                                                                ^\n");
}

TEST_F(SpecError, BadIntPair) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: pool, inputs: [fc1], attrs: {kernel_size: [1, 2, 3]}}"),
            "teeny: error: g.yaml:8:63: node 'act': attr 'kernel_size' must be an integer or a list [h, w] of two "
            "integers, got a list\n"
            "    - {name: act, op: pool, inputs: [fc1], attrs: {kernel_size: [1, 2, 3]}}\n"
            "                                                                ^\n");
}

TEST_F(SpecError, BadFloatAttr) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: scale, inputs: [fc1], attrs: {value: half}}"),
            "teeny: error: g.yaml:8:58: node 'act': attr 'value' must be a number, got 'half'\n"
            "    - {name: act, op: scale, inputs: [fc1], attrs: {value: half}}\n"
            "                                                           ^\n");
}

TEST_F(SpecError, AttrBelowMinimum) {
  EXPECT_EQ(error_at_line(7, "  - {name: fc1, op: dense, inputs: [x], attrs: {out_features: 0}}"),
            "teeny: error: g.yaml:7:63: node 'fc1': attr 'out_features' must be at least 1, got 0\n"
            "    - {name: fc1, op: dense, inputs: [x], attrs: {out_features: 0}}\n"
            "                                                                ^\n");
}

TEST_F(SpecError, MissingRequiredAttr) {
  EXPECT_EQ(error_at_line(7, "  - {name: fc1, op: dense, inputs: [x]}"),
            "teeny: error: g.yaml:7:5: node 'fc1': missing required attr 'out_features' for op 'dense'\n"
            "    - {name: fc1, op: dense, inputs: [x]}\n"
            "      ^\n");
}

TEST_F(SpecError, MissingRequiredAttrWithAttrsMap) {
  EXPECT_EQ(error_at_line(7, "  - {name: fc1, op: dense, inputs: [x], attrs: {bias: false}}"),
            "teeny: error: g.yaml:7:48: node 'fc1': missing required attr 'out_features' for op 'dense'\n"
            "    - {name: fc1, op: dense, inputs: [x], attrs: {bias: false}}\n"
            "                                                 ^\n");
}

TEST_F(SpecError, UnknownAttr) {
  EXPECT_EQ(error_at_line(7, "  - {name: fc1, op: dense, inputs: [x], attrs: {out_feature: 32}}"),
            "teeny: error: g.yaml:7:49: node 'fc1': unknown attr 'out_feature' for op 'dense' (did you mean "
            "'out_features'?)\n"
            "    - {name: fc1, op: dense, inputs: [x], attrs: {out_feature: 32}}\n"
            "                                                  ^\n"
            "note: op 'dense' attrs: out_features, in_features, bias\n");
}

TEST_F(SpecError, AttrsOnOpWithoutAttrs) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: relu, inputs: [fc1], attrs: {axis: 1}}"),
            "teeny: error: g.yaml:8:50: node 'act': unknown attr 'axis' for op 'relu'\n"
            "    - {name: act, op: relu, inputs: [fc1], attrs: {axis: 1}}\n"
            "                                                   ^\n"
            "note: op 'relu' takes no attrs\n");
}

TEST_F(SpecError, DuplicateNodeName) {
  EXPECT_EQ(error_at_line(8, "  - {name: fc1, op: relu, inputs: [fc1]}"),
            "teeny: error: g.yaml:8:12: duplicate name 'fc1' (first defined on line 7)\n"
            "    - {name: fc1, op: relu, inputs: [fc1]}\n"
            "             ^\n"
            "note: graph input and node names must be unique\n");
}

TEST_F(SpecError, NodeNamedLikeInput) {
  EXPECT_EQ(error_at_line(8, "  - {name: x, op: relu, inputs: [fc1]}"),
            "teeny: error: g.yaml:8:12: duplicate name 'x' (first defined on line 5)\n"
            "    - {name: x, op: relu, inputs: [fc1]}\n"
            "             ^\n"
            "note: graph input and node names must be unique\n");
}

TEST_F(SpecError, UndefinedInputSuggestsNearest) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: relu, inputs: [fc]}"),
            "teeny: error: g.yaml:8:36: node 'act': undefined input 'fc' (did you mean 'fc1'?)\n"
            "    - {name: act, op: relu, inputs: [fc]}\n"
            "                                     ^\n");
}

TEST_F(SpecError, ForwardReference) {
  EXPECT_EQ(
      error_at_line(8, "  - {name: act, op: relu, inputs: [probs]}\n  - {name: probs, op: softmax, inputs: [fc1]}"),
      "teeny: error: g.yaml:8:36: node 'act': input 'probs' is defined later, on line 9\n"
      "    - {name: act, op: relu, inputs: [probs]}\n"
      "                                     ^\n"
      "note: a node's inputs must be graph inputs or earlier nodes; move it up\n");
}

TEST_F(SpecError, Cycle) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: relu, inputs: [probs]}"),
            "teeny: error: g.yaml:8:36: node 'act': cycle: act -> probs -> act\n"
            "    - {name: act, op: relu, inputs: [probs]}\n"
            "                                     ^\n"
            "note: a node's inputs must be graph inputs or earlier nodes\n");
}

TEST_F(SpecError, SelfCycle) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: relu, inputs: [act]}"),
            "teeny: error: g.yaml:8:36: node 'act': cycle: act -> act\n"
            "    - {name: act, op: relu, inputs: [act]}\n"
            "                                     ^\n");
}

TEST_F(SpecError, InputsNotAList) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: relu, inputs: fc1}"),
            "teeny: error: g.yaml:8:35: node 'act': 'inputs' must be a list of names, got 'fc1'\n"
            "    - {name: act, op: relu, inputs: fc1}\n"
            "                                    ^\n");
}

TEST_F(SpecError, TooManyInputs) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: relu, inputs: [fc1, x]}"),
            "teeny: error: g.yaml:8:35: node 'act': op 'relu' takes 1 input (x), got 2\n"
            "    - {name: act, op: relu, inputs: [fc1, x]}\n"
            "                                    ^\n");
}

TEST_F(SpecError, TooFewVariadicInputs) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: concat, inputs: [fc1]}"),
            "teeny: error: g.yaml:8:37: node 'act': op 'concat' takes at least 2 inputs (x...), got 1\n"
            "    - {name: act, op: concat, inputs: [fc1]}\n"
            "                                      ^\n");
}

TEST_F(SpecError, InFeaturesMismatch) {
  EXPECT_EQ(error_at_line(7, "  - {name: fc1, op: dense, inputs: [x], attrs: {out_features: 32, in_features: 8}}"),
            "teeny: error: g.yaml:7:36: node 'fc1': in_features is 8 but the input has 16 features\n"
            "    - {name: fc1, op: dense, inputs: [x], attrs: {out_features: 32, in_features: 8}}\n"
            "                                     ^\n");
}

TEST_F(SpecError, AxisOutOfRange) {
  EXPECT_EQ(error_at_line(9, "  - {name: probs, op: softmax, inputs: [act], attrs: {axis: 2}}"),
            "teeny: error: g.yaml:9:61: node 'probs': axis 2 is out of range for a rank-2 input (valid: -2..1)\n"
            "    - {name: probs, op: softmax, inputs: [act], attrs: {axis: 2}}\n"
            "                                                              ^\n");
}

TEST_F(SpecError, ShapesDoNotBroadcast) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: add, inputs: [fc1, x]}"),
            "teeny: error: g.yaml:8:34: node 'act': shapes [B, 32] and [B, 16] do not broadcast: dim 1 is 32 vs 16\n"
            "    - {name: act, op: add, inputs: [fc1, x]}\n"
            "                                   ^\n");
}

TEST_F(SpecError, DimDefaultOutOfRange) {
  EXPECT_EQ(error_at_line(3, "  B: {min: 1, max: 64, default: 100}"),
            "teeny: error: g.yaml:3:33: dim 'B': default 100 is outside [1, 64]\n"
            "    B: {min: 1, max: 64, default: 100}\n"
            "                                  ^\n");
}

TEST_F(SpecError, DimMinGreaterThanMax) {
  EXPECT_EQ(error_at_line(3, "  B: {min: 80, max: 64, default: 70}"),
            "teeny: error: g.yaml:3:12: dim 'B': min 80 is greater than max 64\n"
            "    B: {min: 80, max: 64, default: 70}\n"
            "             ^\n");
}

TEST_F(SpecError, DimMinBelowOne) {
  EXPECT_EQ(error_at_line(3, "  B: {min: 0, max: 64, default: 8}"),
            "teeny: error: g.yaml:3:12: dim 'B': min must be at least 1, got 0\n"
            "    B: {min: 0, max: 64, default: 8}\n"
            "             ^\n");
}

TEST_F(SpecError, DimMissingMax) {
  EXPECT_EQ(error_at_line(3, "  B: {min: 1, default: 8}"),
            "teeny: error: g.yaml:3:6: dim 'B': missing key 'max'\n"
            "    B: {min: 1, default: 8}\n"
            "       ^\n");
}

TEST_F(SpecError, DimNotAnInteger) {
  EXPECT_EQ(error_at_line(3, "  B: {min: 1, max: lots, default: 8}"),
            "teeny: error: g.yaml:3:20: dim 'B': 'max' must be an integer, got 'lots'\n"
            "    B: {min: 1, max: lots, default: 8}\n"
            "                     ^\n");
}

TEST_F(SpecError, DimNamedLikeFunction) {
  EXPECT_EQ(error_at_line(3, "  max: {min: 1, max: 64, default: 8}"),
            "teeny: error: g.yaml:3:3: dim name 'max' is an expression function (ceil_div, min, max, round_up, le)\n"
            "    max: {min: 1, max: 64, default: 8}\n"
            "    ^\n");
}

TEST_F(SpecError, BadShapeExpression) {
  EXPECT_EQ(error_at_line(5, "  x: {dtype: f32, shape: [B, \"16*\"]}"),
            "teeny: error: g.yaml:5:30: input 'x': bad expression '16*': expected a number, name or '(' at the end at "
            "column 4\n"
            "    x: {dtype: f32, shape: [B, \"16*\"]}\n"
            "                               ^\n");
}

TEST_F(SpecError, UnknownDimInShape) {
  EXPECT_EQ(error_at_line(5, "  x: {dtype: f32, shape: [b, 16]}"),
            "teeny: error: g.yaml:5:27: input 'x': unknown dim 'b' (did you mean 'B'?)\n"
            "    x: {dtype: f32, shape: [b, 16]}\n"
            "                            ^\n"
            "note: declared dims: B\n");
}

TEST_F(SpecError, UnknownDimInExpression) {
  EXPECT_EQ(error_at_line(5, "  x: {dtype: f32, shape: [B, \"Bx*2\"]}"),
            "teeny: error: g.yaml:5:30: input 'x': unknown dim 'Bx' in 'Bx*2' (did you mean 'B'?)\n"
            "    x: {dtype: f32, shape: [B, \"Bx*2\"]}\n"
            "                               ^\n"
            "note: declared dims: B\n");
}

TEST_F(SpecError, NonPositiveShapeEntry) {
  EXPECT_EQ(error_at_line(5, "  x: {dtype: f32, shape: [B, 0]}"),
            "teeny: error: g.yaml:5:30: input 'x': shape entry '0' must be positive\n"
            "    x: {dtype: f32, shape: [B, 0]}\n"
            "                               ^\n");
}

TEST_F(SpecError, ShapeNotAList) {
  EXPECT_EQ(error_at_line(5, "  x: {dtype: f32, shape: B}"),
            "teeny: error: g.yaml:5:26: input 'x': 'shape' must be a list like [B, 784], got 'B'\n"
            "    x: {dtype: f32, shape: B}\n"
            "                           ^\n");
}

TEST_F(SpecError, UnknownDtypeSuggestsNearest) {
  EXPECT_EQ(error_at_line(5, "  x: {dtype: fp32, shape: [B, 16]}"),
            "teeny: error: g.yaml:5:14: input 'x': unknown dtype 'fp32' (did you mean 'f32'?)\n"
            "    x: {dtype: fp32, shape: [B, 16]}\n"
            "               ^\n"
            "note: dtypes: f32, f16, bf16, i32\n");
}

TEST_F(SpecError, UnsupportedNodeDtype) {
  EXPECT_EQ(error_at_line(8, "  - {name: act, op: relu, inputs: [fc1], dtype: i32}"),
            "teeny: error: g.yaml:8:49: node 'act': op 'relu' does not support dtype i32; it supports f32, bf16\n"
            "    - {name: act, op: relu, inputs: [fc1], dtype: i32}\n"
            "                                                  ^\n");
}

TEST_F(SpecError, UnsupportedInputDtype) {
  EXPECT_EQ(error_at_line(5, "  x: {dtype: f16, shape: [B, 16]}"),
            "teeny: error: g.yaml:7:37: node 'fc1': op 'dense' does not support dtype f16 (input 'x'); it supports "
            "f32, bf16\n"
            "    - {name: fc1, op: dense, inputs: [x], attrs: {out_features: 32}}\n"
            "                                      ^\n");
}

TEST_F(SpecError, RequestedDtypeNotProduced) {
  EXPECT_EQ(error_at_line(7, "  - {name: fc1, op: dense, inputs: [x], attrs: {out_features: 32}, dtype: bf16}"),
            "teeny: error: g.yaml:7:75: node 'fc1': op 'dense' produces f32 here, not the requested bf16\n"
            "    - {name: fc1, op: dense, inputs: [x], attrs: {out_features: 32}, dtype: bf16}\n"
            "                                                                            ^\n");
}

TEST_F(SpecError, UndefinedOutput) {
  EXPECT_EQ(error_at_line(10, "outputs: [prob]"),
            "teeny: error: g.yaml:10:11: undefined output 'prob' (did you mean 'probs'?)\n"
            "  outputs: [prob]\n"
            "            ^\n");
}

TEST_F(SpecError, DuplicateOutput) {
  EXPECT_EQ(error_at_line(10, "outputs: [probs, probs]"),
            "teeny: error: g.yaml:10:18: output 'probs' is listed twice\n"
            "  outputs: [probs, probs]\n"
            "                   ^\n");
}

TEST_F(SpecError, EmptyNodes) {
  EXPECT_EQ(error_of("name: net\ninputs:\n  x: {shape: [4]}\nnodes: []\noutputs: [x]\n"),
            "teeny: error: g.yaml:4:8: 'nodes' must be a non-empty list of nodes, got an empty list\n"
            "  nodes: []\n"
            "         ^\n");
}

TEST_F(SpecError, SizeNotPositiveAtBinding) {
  EXPECT_EQ(rendered([&] {
              Graph g = parse_graph(with_line(5, "  x: {dtype: f32, shape: [B, \"B - 4\"]}"), "g.yaml", registry);
              bind_shapes(g, bind_dims(g.dims, {"B=4"}));
            }),
            "teeny: error: g.yaml:5:3: input 'x': shape [B, B - 4] is [4, 0] with B=4; sizes must be positive\n"
            "    x: {dtype: f32, shape: [B, \"B - 4\"]}\n"
            "    ^\n");
}

TEST_F(SpecError, BindUnknownDim) {
  EXPECT_EQ(bind_error({"b=4"}),
            "teeny: error: --bind b=4: unknown dim 'b' (did you mean 'B'?)\n"
            "note: declared dims: B\n");
}

TEST_F(SpecError, BindOutOfRange) {
  EXPECT_EQ(bind_error({"B=65"}), "teeny: error: --bind B=65: B must be in [1, 64]\n");
}

TEST_F(SpecError, BindMalformed) {
  EXPECT_EQ(bind_error({"B"}), "teeny: error: malformed --bind 'B': expected DIM=N, e.g. --bind B=64\n");
}

TEST_F(SpecError, BindNotAnInteger) {
  EXPECT_EQ(bind_error({"B=four"}), "teeny: error: malformed --bind 'B=four': expected DIM=N, e.g. --bind B=64\n");
}

TEST_F(SpecError, BindTwice) {
  EXPECT_EQ(bind_error({"B=2", "B=3"}), "teeny: error: --bind B=3: dim 'B' is bound more than once\n");
}

TEST_F(SpecError, MissingFile) {
  EXPECT_EQ(rendered([&] { load_graph("/nonexistent/g.yaml", registry); }),
            "teeny: error: cannot read graph spec '/nonexistent/g.yaml': No such file or directory\n");
}

// ---- with the real ops (ops/ops.inc) on graphs/mnist_mlp.yaml --------------------------------
std::string mnist_error(int line, const std::string& text) {
  std::ifstream file(TEENY_SOURCE_DIR "/graphs/mnist_mlp.yaml");
  std::string spec, current;
  for (int n = 1; std::getline(file, current); ++n) spec += (n == line ? text : current) + "\n";
  return rendered([&] { parse_graph(spec, "mnist_mlp.yaml", op_testing::registry()); });
}

TEST(SpecErrorRealOps, UnknownOpSuggestsLinear) {
  EXPECT_EQ(mnist_error(7, "  - {name: fc1, op: liner, inputs: [x], attrs: {out_features: 256}}"),
            "teeny: error: mnist_mlp.yaml:7:21: node 'fc1': unknown op 'liner' (did you mean 'linear'?)\n"
            "    - {name: fc1, op: liner, inputs: [x], attrs: {out_features: 256}}\n"
            "                      ^\n"
            "note: `teeny ops` lists the registered ops\n");
}

TEST(SpecErrorRealOps, LinearInFeaturesMismatch) {
  EXPECT_EQ(mnist_error(7, "  - {name: fc1, op: linear, inputs: [x], attrs: {out_features: 256, in_features: 512}}"),
            "teeny: error: mnist_mlp.yaml:7:37: node 'fc1': in_features is 512 but the input has 784 "
            "features (shape [B, 784])\n"
            "    - {name: fc1, op: linear, inputs: [x], attrs: {out_features: 256, in_features: 512}}\n"
            "                                      ^\n");
}

TEST(SpecErrorRealOps, LinearMissingOutFeatures) {
  EXPECT_EQ(mnist_error(9, "  - {name: fc2, op: linear, inputs: [act1]}"),
            "teeny: error: mnist_mlp.yaml:9:5: node 'fc2': missing required attr 'out_features' for op 'linear'\n"
            "    - {name: fc2, op: linear, inputs: [act1]}\n"
            "      ^\n");
}

// A node's `dtype:` that differs from its inputs' would need a conversion no kernel does.
TEST(SpecErrorRealOps, ReluCannotConvertDtype) {
  EXPECT_EQ(mnist_error(8, "  - {name: act1, op: relu, inputs: [fc1], dtype: bf16}"),
            "teeny: error: mnist_mlp.yaml:8:50: node 'act1': op 'relu' produces its inputs' dtype, f32; it cannot "
            "produce bf16 (there are no implicit conversions)\n"
            "    - {name: act1, op: relu, inputs: [fc1], dtype: bf16}\n"
            "                                                   ^\n");
}

}  // namespace
}  // namespace teeny
