// Graphs of 10^5 nodes through everything that walks a graph or a bundle: parsing, cycle
// search, fusion, compile, binding, inspect and the manifest. No walk may recurse once per node
// (the stack would overflow) and every result must be right. How long they take is measured by
// scripts/bench_compile_scaling.py, never here.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/binding.h"
#include "core/bundle.h"
#include "core/compile.h"
#include "core/graph.h"
#include "core/inspect.h"
#include "tests/file_test_util.h"
#include "tests/op_test_util.h"

namespace teeny {
namespace {

using op_testing::registry;
using testing::ScratchDir;

constexpr size_t kNodes = 100000;

// x [B, 64] -> relu n0 -> relu n1 -> ... -> n<nodes-1>, the output; n0 reads `first_input`.
std::string chain_spec(size_t nodes, const std::string& first_input = "x") {
  std::string text =
      "name: chain\ndims:\n  B: {min: 1, max: 4096, default: 8}\ninputs:\n  x: {dtype: f32, shape: [B, 64]}\n"
      "nodes:\n";
  for (size_t i = 0; i < nodes; ++i) {
    const std::string input = i == 0 ? first_input : fmt::format("n{}", i - 1);
    text += fmt::format("  - {{name: n{}, op: relu, inputs: [{}]}}\n", i, input);
  }
  return text + fmt::format("outputs: [n{}]\n", nodes - 1);
}

const Graph& chain() {
  static const Graph graph = parse_graph(chain_spec(kNodes), "chain.yaml", registry());
  return graph;
}

TEST(LongChain, ChecksWithEveryShape) {
  const Graph& graph = chain();
  ASSERT_EQ(graph.nodes.size(), kNodes);
  EXPECT_EQ(graph.nodes.back().inputs, std::vector<std::string>{"n99998"});
  EXPECT_EQ(shape_str(graph.nodes.back().ctx.output.shape), "[B, 64]");
  const auto shapes = bind_shapes(graph, graph.default_bindings());
  EXPECT_EQ(shapes.size(), kNodes + 1);
  EXPECT_EQ(shapes.at("n99999"), (std::vector<int64_t>{8, 64}));
}

TEST(LongChain, ACycleThroughTheWholeChainIsShownWithItsMiddleLeftOut) {
  // n0 reads the last node, which reads back down the chain to n0.
  try {
    parse_graph(chain_spec(kNodes, "n99999"), "chain.yaml", registry());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.render(),
              "teeny: error: chain.yaml:7:35: node 'n0': cycle: n0 -> n99999 -> n99998 -> n99997 -> ... (99994 more) "
              "-> n2 -> n1 -> n0\n"
              "    - {name: n0, op: relu, inputs: [n99999]}\n"
              "                                    ^\n"
              "note: a node's inputs must be graph inputs or earlier nodes\n");
  }
}

TEST(LongChain, FusesEveryBlockInOneScan) {
  // 10^4 blocks h -> linear -> gelu -> add(·, h): each becomes one fused.linear in two rewrites.
  constexpr size_t kBlocks = 10000;
  std::string text =
      "name: blocks\ndims:\n  B: {min: 1, max: 64, default: 2}\ninputs:\n  x: {dtype: bf16, shape: [B, 16]}\n"
      "nodes:\n";
  std::string h = "x";
  for (size_t i = 0; i < kBlocks; ++i) {
    text += fmt::format("  - {{name: l{}, op: linear, inputs: [{}], attrs: {{out_features: 16}}}}\n", i, h);
    text += fmt::format("  - {{name: g{}, op: gelu, inputs: [l{}]}}\n", i, i);
    text += fmt::format("  - {{name: a{}, op: add, inputs: [g{}, {}]}}\n", i, i, h);
    h = fmt::format("a{}", i);
  }
  Graph graph = parse_graph(text + fmt::format("outputs: [{}]\n", h), "blocks.yaml", registry());
  int rewrites = 0;
  for (const GraphPass& pass : registry().passes()) rewrites += pass.apply(graph, registry());
  EXPECT_EQ(rewrites, static_cast<int>(2 * kBlocks));
  ASSERT_EQ(graph.nodes.size(), kBlocks);
  for (size_t i = 0; i < kBlocks; i += 999) {
    const Node& node = graph.nodes[i];
    EXPECT_EQ(node.name, fmt::format("a{}", i));
    EXPECT_EQ(node.op->name, "fused.linear");
    EXPECT_EQ(node.fused_from, (std::vector<std::string>{fmt::format("l{}", i), fmt::format("g{}", i), node.name}));
  }
}

TEST(LongChain, CompilesBindsInspectsAndWrites) {
  ScratchDir dir;
  CompileOptions options;
  options.cache_dir = dir.str("cache");
  CompileStats stats;
  const Bundle bundle = compile_graph(chain(), registry(), options, &stats);
  ASSERT_EQ(bundle.launches.size(), kNodes);
  EXPECT_EQ(bundle.kernels.size(), 1u);  // identical kernels are one

  // x, and two buffers of 8 x 64 floats that the chain takes in turn.
  const Bindings dims = bundle_bindings(bundle, {});
  BoundBundle bound = bind_bundle(bundle, dims, "chain");
  EXPECT_EQ(bound.plan.arena_bytes, 3 * 2048u);
  bind_launches(bound, DeviceFacts{132, 227 * 1024, 50 << 20});
  EXPECT_EQ(bound.node_launches(kNodes - 1), std::vector<size_t>{kNodes - 1});

  // Every launch moves B*512 bytes; the total gathers them into one term.
  const Inspection view = inspect_bundle(bundle, dims, InspectDevice{"flags", {{"SMS", 132}}});
  EXPECT_EQ(view.launch_count, kNodes);
  EXPECT_EQ(view.bytes.expr, "B*51200000");
  EXPECT_EQ(view.bytes.value, 8 * 51200000);
  ASSERT_EQ(view.nodes.size(), kNodes);
  EXPECT_EQ(view.nodes.back().launches.size(), 1u);

  // The manifest lists one launch a line.
  write_bundle(bundle, dir.str("chain.teeny"));
  std::ifstream manifest(dir.str("chain.teeny/manifest.json"));
  size_t launch_lines = 0;
  for (std::string line; std::getline(manifest, line);) launch_lines += line.rfind("    {\"args\":", 0) == 0;
  EXPECT_EQ(launch_lines, kNodes);
}

}  // namespace
}  // namespace teeny
