// The spec parser on valid specs: the IR it builds (dims, inputs, nodes, attrs with defaults,
// inferred types, source positions), bindings, and the bundled graphs with the real ops.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/graph.h"
#include "ops/ops.h"
#include "tests/op_test_util.h"
#include "tests/spec_test_ops.h"

namespace teeny {
namespace {

const char* kNet = R"(name: net
dims:
  B: {min: 1, max: 512, default: 8}
  S: {max: 128, default: 16}
inputs:
  x: {dtype: f32, shape: [B, S, 32]}
  y: {shape: [B, "S*2", 32]}
nodes:
  - {name: h, op: dense, inputs: [x], attrs: {out_features: 64}}
  - {name: a, op: relu, inputs: [h]}
  - name: p
    op: softmax
    inputs: [a]
  - {name: c, op: concat, inputs: [x, y]}
  - {name: g, op: gelu, inputs: [c], attrs: {approximate: tanh}}
  - {name: po, op: pool, inputs: [g], attrs: {kernel_size: 3, stride: [2, 1], levels: [[1, 2, 3]], perm: [0, 2, 1]}}
  - {name: r, op: reshape, inputs: [p], attrs: {shape: [B, "S * 64", 1]}}
  - {name: s, op: scale, inputs: [a], attrs: {value: 0.5}, dtype: f32}
outputs: [p, g, s]
)";

class Spec : public ::testing::Test {
 protected:
  Registry registry = testing::spec_test_registry();
  Graph graph = parse_graph(kNet, "net.yaml", registry);
  const Node& node(const std::string& name) {
    const Node* found = graph.find_node(name);
    EXPECT_NE(found, nullptr) << name;
    return *found;
  }
};

TEST_F(Spec, ReadsNameDimsAndInputs) {
  EXPECT_EQ(graph.name, "net");
  ASSERT_EQ(graph.dims.size(), 2u);
  EXPECT_EQ(graph.dims[0].name, "B");
  EXPECT_EQ(graph.dims[0].min, 1);
  EXPECT_EQ(graph.dims[0].max, 512);
  EXPECT_EQ(graph.dims[0].default_value, 8);
  EXPECT_EQ(graph.dims[1].name, "S");
  EXPECT_EQ(graph.dims[1].min, 1);  // min defaults to 1
  EXPECT_EQ(graph.dims[1].max, 128);
  EXPECT_EQ(graph.default_bindings(), (Bindings{{"B", 8}, {"S", 16}}));

  ASSERT_EQ(graph.inputs.size(), 2u);
  EXPECT_EQ(graph.inputs[0].name, "x");
  EXPECT_EQ(graph.inputs[0].type.dtype, DType::kF32);
  EXPECT_EQ(shape_str(graph.inputs[0].type.shape), "[B, S, 32]");
  EXPECT_EQ(graph.inputs[1].type.dtype, DType::kF32);  // dtype defaults to f32
  EXPECT_EQ(shape_str(graph.inputs[1].type.shape), "[B, S*2, 32]");
  EXPECT_EQ(graph.inputs[1].type.row_stride, Expr(32));
  EXPECT_EQ(graph.inputs[0].pos.line, 6);
  EXPECT_EQ(graph.inputs[0].pos.column, 3);
  EXPECT_EQ(graph.outputs, (std::vector<std::string>{"p", "g", "s"}));
}

// Dims and inputs keep their own declarations when their names are not in alphabetical order
// (the parser once sorted them into spec order by assigning YAML nodes, which made both the same).
TEST(SpecOrder, DimsAndInputsOutOfAlphabeticalOrderKeepTheirOwnDeclarations) {
  const Graph g = parse_graph(R"(name: t
dims:
  S: {max: 128, default: 16}
  B: {max: 512, default: 8}
inputs:
  x: {dtype: f32, shape: [B, 8]}
  r: {dtype: bf16, shape: [S, 4, 3]}
nodes:
  - {name: y, op: relu, inputs: [x]}
outputs: [y]
)",
                              "t.yaml", testing::spec_test_registry());
  EXPECT_EQ(g.default_bindings(), (Bindings{{"B", 8}, {"S", 16}}));
  ASSERT_EQ(g.dims.size(), 2u);
  EXPECT_EQ(g.dims[0].name, "S");
  EXPECT_EQ(g.dims[0].max, 128);
  EXPECT_EQ(g.dims[1].max, 512);
  ASSERT_EQ(g.inputs.size(), 2u);
  EXPECT_EQ(g.inputs[0].name, "x");
  EXPECT_EQ(g.inputs[0].type.dtype, DType::kF32);
  EXPECT_EQ(shape_str(g.inputs[0].type.shape), "[B, 8]");
  EXPECT_EQ(g.inputs[1].type.dtype, DType::kBF16);
  EXPECT_EQ(shape_str(g.inputs[1].type.shape), "[S, 4, 3]");
}

TEST_F(Spec, InfersNodeTypesInSpecOrder) {
  std::vector<std::string> order;
  for (const Node& n : graph.nodes) order.push_back(n.name);
  EXPECT_EQ(order, (std::vector<std::string>{"h", "a", "p", "c", "g", "po", "r", "s"}));
  EXPECT_EQ(node("h").op->name, "dense");
  EXPECT_EQ(node("h").inputs, (std::vector<std::string>{"x"}));
  EXPECT_EQ(shape_str(node("h").ctx.output.shape), "[B, S, 64]");
  EXPECT_EQ(shape_str(node("p").ctx.output.shape), "[B, S, 64]");
  EXPECT_EQ(shape_str(node("c").ctx.output.shape), "[B, S*3, 32]");
  EXPECT_EQ(node("c").ctx.inputs.size(), 2u);
  EXPECT_EQ(shape_str(node("r").ctx.output.shape), "[B, S*64, 1]");
  EXPECT_EQ(node("s").ctx.output.dtype, DType::kF32);
  EXPECT_EQ(node("s").ctx.requested_dtype, DType::kF32);
  EXPECT_FALSE(node("a").ctx.requested_dtype.has_value());
  EXPECT_EQ(graph.find_tensor("y"), &graph.inputs[1].type);
  EXPECT_EQ(graph.find_tensor("g"), &node("g").ctx.output);
  EXPECT_EQ(graph.find_tensor("nope"), nullptr);
}

TEST_F(Spec, ValidatesAttrsAndFillsDefaults) {
  EXPECT_EQ(node("h").ctx.attrs.json(), (nlohmann::json{{"out_features", 64}, {"bias", true}}));
  EXPECT_EQ(node("p").ctx.attrs.json(), (nlohmann::json{{"axis", -1}}));
  EXPECT_EQ(node("g").ctx.attrs.text("approximate"), "tanh");
  EXPECT_EQ(node("po").ctx.attrs.json(), nlohmann::json::parse(R"({"kernel_size": [3, 3], "stride": [2, 1],
                                      "levels": [[1, 2, 3]], "perm": [0, 2, 1]})"));
  EXPECT_EQ(node("r").ctx.attrs.json(), nlohmann::json::parse(R"({"shape": ["B", "S*64", "1"]})"));
  EXPECT_DOUBLE_EQ(node("s").ctx.attrs.real("value"), 0.5);
  EXPECT_EQ(node("c").ctx.attrs.integer("axis"), 1);
}

TEST_F(Spec, KeepsOneBasedSourcePositions) {
  // Line 9: `  - {name: h, op: dense, inputs: [x], attrs: {out_features: 64}}`
  const Node& h = node("h");
  EXPECT_EQ(h.pos.line, 9);
  EXPECT_EQ(h.pos.column, 5);
  EXPECT_EQ(h.key_pos.at("op").line, 9);
  EXPECT_EQ(h.key_pos.at("op").column, 19);
  EXPECT_EQ(h.key_pos.at("inputs.0").column, 35);
  EXPECT_EQ(h.key_pos.at("attrs.out_features").column, 61);
  // Block style (lines 11-13).
  const Node& p = node("p");
  EXPECT_EQ(p.pos.line, 11);
  EXPECT_EQ(p.pos.column, 5);
  EXPECT_EQ(p.key_pos.at("op").line, 12);
  EXPECT_EQ(p.key_pos.at("op").column, 9);

  Error e = graph.error_at(h, "attrs.bias", "example");  // not written: falls back to attrs
  EXPECT_EQ(e.render(),
            "teeny: error: net.yaml:9:46: node 'h': example\n"
            "    - {name: h, op: dense, inputs: [x], attrs: {out_features: 64}}\n"
            "  " +
                std::string(45, ' ') + "^\n");
  EXPECT_EQ(graph.error_at(p, "attrs.axis", "example").location()->column, 5);
}

TEST_F(Spec, BindsDimsWithDefaults) {
  EXPECT_EQ(bind_dims(graph.dims, {}), (Bindings{{"B", 8}, {"S", 16}}));
  EXPECT_EQ(bind_dims(graph.dims, {"S=128"}), (Bindings{{"B", 8}, {"S", 128}}));
  EXPECT_EQ(bind_dims(graph.dims, {"B=1", "S=3"}), (Bindings{{"B", 1}, {"S", 3}}));

  auto shapes = bind_shapes(graph, bind_dims(graph.dims, {"B=2", "S=5"}));
  EXPECT_EQ(shapes.at("x"), (std::vector<int64_t>{2, 5, 32}));
  EXPECT_EQ(shapes.at("y"), (std::vector<int64_t>{2, 10, 32}));
  EXPECT_EQ(shapes.at("c"), (std::vector<int64_t>{2, 15, 32}));
  EXPECT_EQ(shapes.at("r"), (std::vector<int64_t>{2, 320, 1}));
  EXPECT_EQ(shapes.size(), graph.inputs.size() + graph.nodes.size());
}

TEST_F(Spec, LoadsFromAFile) {
  std::string path = ::testing::TempDir() + "/teeny_spec_load_" + std::to_string(getpid()) + ".yaml";
  { std::ofstream(path) << kNet; }
  Graph loaded = load_graph(path, registry);
  EXPECT_EQ(loaded.nodes.size(), 8u);
  EXPECT_EQ(loaded.source->path, path);
  EXPECT_EQ(loaded.source->lines.at(8), "  - {name: h, op: dense, inputs: [x], attrs: {out_features: 64}}");
  std::filesystem::remove(path);
}

// ---- the bundled graphs with the real ops -----------------------------------------------------

TEST(SpecGraphs, MnistMlpShapes) {
  const Registry& registry = op_testing::registry();
  Graph graph = load_graph(TEENY_SOURCE_DIR "/graphs/mnist_mlp.yaml", registry);
  ASSERT_EQ(graph.nodes.size(), 4u);
  EXPECT_EQ(shape_str(graph.find_node("fc1")->ctx.output.shape), "[B, 256]");
  EXPECT_EQ(shape_str(graph.find_node("act1")->ctx.output.shape), "[B, 256]");
  EXPECT_EQ(shape_str(graph.find_node("fc2")->ctx.output.shape), "[B, 10]");
  EXPECT_EQ(shape_str(graph.find_node("probs")->ctx.output.shape), "[B, 10]");
  EXPECT_EQ(graph.find_node("probs")->ctx.output.dtype, DType::kF32);
  const Node& fc1 = *graph.find_node("fc1");
  std::vector<ParamSpec> params = fc1.op->params(fc1.ctx);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].slot, "weight");
  EXPECT_EQ(shape_str(params[0].shape), "[256, 784]");
  EXPECT_EQ(shape_str(params[1].shape), "[256]");
  auto shapes = bind_shapes(graph, bind_dims(graph.dims, {"B=3"}));
  EXPECT_EQ(shapes.at("probs"), (std::vector<int64_t>{3, 10}));
}

// Every graph in graphs/ validates, and every node's params match its op's documented
// param_slots (what `teeny ops` lists).
TEST(SpecGraphs, EveryBundledGraphValidatesAndDocumentsItsParams) {
  const Registry& registry = op_testing::registry();
  int graphs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(TEENY_SOURCE_DIR "/graphs")) {
    if (entry.path().extension() != ".yaml") continue;
    ++graphs;
    SCOPED_TRACE(entry.path().string());
    Graph graph = load_graph(entry.path().string(), registry);
    EXPECT_FALSE(graph.nodes.empty());
    bind_shapes(graph, graph.default_bindings());
    for (const Node& node : graph.nodes) {
      if (!node.op->params) continue;
      for (const ParamSpec& param : node.op->params(node.ctx)) {
        const auto& slots = node.op->param_slots;
        EXPECT_NE(std::find(slots.begin(), slots.end(), param.slot), slots.end())
            << "op '" << node.op->name << "' makes param '" << param.slot << "' but its param_slots do not list it";
      }
    }
  }
  EXPECT_GE(graphs, 1);
}

}  // namespace
}  // namespace teeny
