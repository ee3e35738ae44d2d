// Sizes and domains (issue 22): checked element and byte counts, the limits on one tensor
// (2^40 bytes) and on one binding's memory (2^42 bytes), overflow in shapes reported with the
// node and the binding, and attribute domains from each op's schema. Exact error text.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>

#include "core/binding.h"
#include "core/compile.h"
#include "core/graph.h"
#include "core/memory_plan.h"
#include "tests/error_test_util.h"
#include "tests/file_test_util.h"
#include "tests/op_test_util.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

using testing::message;
using testing::rendered;

// A spec with one input `x` of `shape` and the nodes given (YAML lines under `nodes:`).
std::string spec(const std::string& shape, const std::string& nodes = "  - {name: r, op: relu, inputs: [x]}\n") {
  return "name: t\n"
         "dims:\n"
         "  B: {min: 1, max: 1048576, default: 4}\n"
         "inputs:\n"
         "  x: {dtype: f32, shape: " +
         shape + "}\n" + "nodes:\n" + nodes + "outputs: [r]\n";
}

std::string check_error(const std::string& text, const std::vector<std::string>& binds = {}) {
  return rendered([&] {
    const Graph graph = parse_graph(text, "t.yaml", op_testing::registry());
    bind_shapes(graph, bind_dims(graph.dims, binds));
  });
}

TEST(TensorBytes, RowsTimesRowStrideTimesElementSize) {
  EXPECT_EQ(tensor_bytes(DType::kF32, {3, 10}, 12), 3 * 12 * 4);
  EXPECT_EQ(tensor_bytes(DType::kBF16, {}, 1), 2);
  EXPECT_EQ(tensor_bytes(DType::kF32, {262144, 1048576}, 1048576), int64_t{1} << 40);  // exactly the limit
  EXPECT_EQ(message([] {
              tensor_bytes(DType::kF32, {262145, 1048576}, 1048576);
            }),
            "f32 [262145, 1048576] takes 1099515822080 bytes; one tensor may take at most 2^40 bytes (1 TiB)");
  // An element count that wraps to 0 in 64 bits (2^32 * 2^32) is not a small tensor.
  EXPECT_EQ(message([] {
              tensor_bytes(DType::kF32, {int64_t{1} << 32, int64_t{1} << 32}, int64_t{1} << 32);
            }),
            "f32 [4294967296, 4294967296] takes 2^63 bytes or more; one tensor may take at most 2^40 bytes (1 TiB)");
  EXPECT_EQ(message([] {
              tensor_bytes(DType::kF16, {4, 5}, INT64_MAX);
            }),
            "f16 [4, 5] with row stride 9223372036854775807 takes 2^63 bytes or more; one tensor may take at most "
            "2^40 bytes (1 TiB)");
}

TEST(TensorBytes, ASymbolicTypeIsBoundedByItsConstantExtents) {
  const Expr b = Expr::dim("B");
  EXPECT_EQ(tensor_size_problem(contiguous(DType::kF32, {b, Expr(1024), Expr(1024)})), "");
  EXPECT_EQ(tensor_size_problem(contiguous(DType::kF32, {b, Expr(1048576), Expr(1048576)})),
            "f32 [B, 1048576, 1048576] takes at least 4398046511104 bytes; one tensor may take at most 2^40 bytes "
            "(1 TiB)");
  EXPECT_EQ(tensor_size_problem({DType::kF32, {Expr(1048576), b}, Expr(1048576)}),
            "f32 [1048576, B] with row stride 1048576 takes 4398046511104 bytes; one tensor may take at most 2^40 "
            "bytes (1 TiB)");
}

TEST(SpecSizes, ATensorOverTheLimitIsAnErrorAtCheck) {
  EXPECT_EQ(check_error(spec("[4294967296, 4294967296]")),
            "teeny: error: t.yaml:5:26: input 'x': f32 [4294967296, 4294967296] takes 2^63 bytes or more; one tensor "
            "may take at most 2^40 bytes (1 TiB)\n"
            "    x: {dtype: f32, shape: [4294967296, 4294967296]}\n"
            "                           ^\n");
  EXPECT_EQ(check_error(spec("[B, 1048576, 1048576]")),
            "teeny: error: t.yaml:5:26: input 'x': f32 [B, 1048576, 1048576] takes at least 4398046511104 bytes; one "
            "tensor may take at most 2^40 bytes (1 TiB)\n"
            "    x: {dtype: f32, shape: [B, 1048576, 1048576]}\n"
            "                           ^\n");
  // Symbolic: at the binding.
  EXPECT_EQ(check_error(spec("[\"B*65536\", 1048576]")), "no error");
  EXPECT_EQ(check_error(spec("[\"B*65536\", 1048576]"), {"B=16"}),
            "teeny: error: t.yaml:5:3: input 'x': shape [B*65536, 1048576] is [1048576, 1048576] with B=16: f32 "
            "[1048576, 1048576] takes 4398046511104 bytes; one tensor may take at most 2^40 bytes (1 TiB)\n"
            "    x: {dtype: f32, shape: [\"B*65536\", 1048576]}\n"
            "    ^\n");
}

TEST(SpecSizes, OutputsAndParamsOverTheLimitNameTheNode) {
  EXPECT_EQ(
      check_error(spec("[4, 8]", "  - {name: r, op: linear, inputs: [x], attrs: {out_features: 1099511627776}}\n")),
      "teeny: error: t.yaml:7:19: node 'r': output f32 [4, 1099511627776] takes 17592186044416 bytes; one "
      "tensor may take at most 2^40 bytes (1 TiB)\n"
      "    - {name: r, op: linear, inputs: [x], attrs: {out_features: 1099511627776}}\n"
      "                    ^\n");
  // linear pads its rows: the stride of INT64_MAX features no longer wraps negative.
  EXPECT_EQ(check_error(
                spec("[4, 8]", "  - {name: r, op: linear, inputs: [x], attrs: {out_features: 9223372036854775807}}\n")),
            "teeny: error: t.yaml:7:19: node 'r': integer overflow in 'round_up(9223372036854775807, 4)'\n"
            "    - {name: r, op: linear, inputs: [x], attrs: {out_features: 9223372036854775807}}\n"
            "                    ^\n");
  const std::string embedding =
      "name: t\n"
      "inputs:\n"
      "  ids: {dtype: i32, shape: [4, 8]}\n"
      "nodes:\n"
      "  - {name: e, op: embedding, inputs: [ids], attrs: {num_embeddings: 68719476736, dim: 4096}}\n"
      "outputs: [e]\n";
  EXPECT_EQ(message([&] { parse_graph(embedding, "t.yaml", op_testing::registry()); }),
            "node 'e': parameter 'weight': f32 [68719476736, 4096] takes 1125899906842624 bytes; one tensor may take "
            "at most 2^40 bytes (1 TiB)");
}

TEST(SpecSizes, ShapeArithmeticThatOverflowsIsAnError) {
  EXPECT_EQ(check_error(spec("[\"B*922337203685477580\"]"), {"B=40"}),
            "teeny: error: t.yaml:5:3: input 'x': cannot evaluate shape [B*922337203685477580] with B=40: integer "
            "overflow evaluating 'B*922337203685477580': 40*922337203685477580 is out of the 64-bit range\n"
            "    x: {dtype: f32, shape: [\"B*922337203685477580\"]}\n"
            "    ^\n");
}

// compile --bind substitutes the dims into every shape before anything is bound.
TEST(SpecSizes, ACompileTimeBindingThatOverflowsNamesTheTensorAndTheBinding) {
  const Graph graph = parse_graph(spec("[\"B*B*1000000000\"]"), "t.yaml", op_testing::registry());
  CompileOptions options;
  options.fixed = {{"B", 1048576}};
  EXPECT_EQ(message([&] { compile_graph(graph, op_testing::registry(), options); }),
            "input 'x' [B*B*1000000000]: with --bind B=1048576: integer overflow in '1099511627776*1000000000'");
}

// An overflow in an op's lowering (a convolution's FLOPs here) is put at the node.
TEST(SpecSizes, AnOverflowWhileLoweringNamesTheNode) {
  const Graph graph = parse_graph(
      "name: c\ninputs:\n  x: {dtype: f32, shape: [1, 1073741824, 1, 1]}\nnodes:\n"
      "  - {name: c1, op: conv2d, inputs: [x], attrs: {out_channels: 1, kernel_size: 1, padding: 185000, "
      "bias: false}}\noutputs: [c1]\n",
      "c.yaml", op_testing::registry());
  EXPECT_EQ(rendered([&] { compile_graph(graph, op_testing::registry(), {}); }),
            "teeny: error: c.yaml:5:20: node 'c1': op 'conv2d', integer overflow in '2147483648*136900740001'\n"
            "    - {name: c1, op: conv2d, inputs: [x], attrs: {out_channels: 1, kernel_size: 1, padding: 185000, "
            "bias: false}}\n"
            "                     ^\n");
}

// The crashes of issue 22 through the binary: each is exit code 1 with one clean error.
TEST(SpecSizes, HostileExpressionsEndInACleanError) {
  testing::ScratchDir dir;
  testing::spit(dir.path() / "fpe.yaml", spec("[\"(-922337203685477580*10-8)/(-1)\"]"));
  const testing::Command fpe = testing::run_teeny("check " + dir.str("fpe.yaml"));
  EXPECT_EQ(fpe.exit_code, 1);
  EXPECT_EQ(fpe.err, "teeny: error: " + dir.str("fpe.yaml") +
                         ":5:27: input 'x': bad expression '(-922337203685477580*10-8)/(-1)': integer overflow in "
                         "'(-9223372036854775807 - 1)/-1' at column 27\n"
                         "    x: {dtype: f32, shape: [\"(-922337203685477580*10-8)/(-1)\"]}\n"
                         "                            ^\n");
  testing::spit(dir.path() / "deep.yaml",
                spec("[\"" + std::string(100000, '(') + "B" + std::string(100000, ')') + "\"]"));
  const testing::Command deep = testing::run_teeny("check " + dir.str("deep.yaml"));
  EXPECT_EQ(deep.exit_code, 1);
  EXPECT_NE(deep.err.find("input 'x': bad expression '" + std::string(60, '(') +
                          "...': nested deeper than 256 levels at column 257\n"),
            std::string::npos)
      << deep.err;
  EXPECT_LT(deep.err.size(), 1000u);  // the 200 kB line is not echoed
}

// A bundle of graph inputs only: no nodes, launches or kernels to bind.
Bundle inputs_bundle(const std::vector<Shape>& shapes) {
  Bundle bundle;
  bundle.dims = {{"B", 1, 1024, 4}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string name = "x" + std::to_string(i);
    bundle.inputs.push_back(name);
    bundle.outputs.push_back(name);
    bundle.tensors.push_back({name, DType::kF32, shapes[i], shapes[i].back(), "", ""});
  }
  return bundle;
}

TEST(BindSizes, SymbolicShapesAreCheckedWhereTheBundleIsBound) {
  const Expr b = Expr::dim("B");
  const Bundle big = inputs_bundle({{b * Expr(65536), Expr(1048576)}});
  EXPECT_EQ(message([&] { bind_bundle(big, {{"B", 4}}, "t.teeny"); }), "no error");  // 1 TiB
  EXPECT_EQ(message([&] {
              bind_bundle(big, {{"B", 16}}, "t.teeny");
            }),
            "bundle t.teeny: tensor 'x0' has shape [B*65536, 1048576] = [1048576, 1048576] with B=16: f32 [1048576, "
            "1048576] takes 4398046511104 bytes; one tensor may take at most 2^40 bytes (1 TiB)");
  const Bundle wraps = inputs_bundle({{b * Expr(int64_t{1} << 31), Expr(int64_t{1} << 32)}});
  EXPECT_EQ(message([&] {
              bind_bundle(wraps, {{"B", 2}}, "t.teeny");
            }),
            "bundle t.teeny: tensor 'x0' has shape [B*2147483648, 4294967296] = [4294967296, 4294967296] with B=2: "
            "f32 [4294967296, 4294967296] takes 2^63 bytes or more; one tensor may take at most 2^40 bytes (1 TiB)");
  const Bundle overflows = inputs_bundle({{b * Expr(int64_t{1} << 62)}});
  EXPECT_EQ(message([&] {
              bind_bundle(overflows, {{"B", 2}}, "t.teeny");
            }),
            "bundle t.teeny: cannot evaluate dim 0 of tensor 'x0' 'B*4611686018427387904' with B=2: integer overflow "
            "evaluating 'B*4611686018427387904': 2*4611686018427387904 is out of the 64-bit range");
}

TEST(BindSizes, ABindingsMemoryIsLimitedTo4TiB) {
  const Shape tebibyte = {Expr(262144), Expr(1048576)};  // f32: 2^40 bytes, the most one tensor may take
  EXPECT_EQ(message([&] {
              bind_bundle(inputs_bundle({tebibyte, tebibyte, tebibyte, tebibyte}), {}, "t.teeny");
            }),
            "no error");
  EXPECT_EQ(message([&] {
              bind_bundle(inputs_bundle({tebibyte, tebibyte, tebibyte, tebibyte, tebibyte}), {}, "t.teeny");
            }),
            "bundle t.teeny: with no dims the activations and parameters take 5497558138880 bytes (5497558138880 of "
            "activations, planned, and 0 of parameters); one binding may take at most 2^42 bytes (4 TiB)");
}

TEST(BindSizes, TheMemoryPlanDoesNotWrap) {
  const uint64_t huge = uint64_t{1} << 62;
  std::vector<PlanEntry> entries;
  for (int i = 0; i < 4; ++i) entries.push_back({"t" + std::to_string(i), huge, 0, 1, ""});
  EXPECT_EQ(message([&] { plan_memory(entries); }), "memory plan: the activations need 2^64 bytes or more");
}

// ---- attribute domains ----------------------------------------------------------------------

std::string attr_error(const std::string& op, const std::string& attrs, const std::string& shape = "[B, 3, 8, 8]") {
  return check_error(spec(shape, "  - {name: r, op: " + op + ", inputs: [x], attrs: " + attrs + "}\n"));
}

TEST(AttrDomains, ValuesOutsideTheSchemaAreErrorsAtTheValue) {
  EXPECT_EQ(attr_error("layernorm", "{eps: -1}", "[B, 8]"),
            "teeny: error: t.yaml:7:56: node 'r': attr 'eps' must be greater than 0, got -1\n"
            "    - {name: r, op: layernorm, inputs: [x], attrs: {eps: -1}}\n"
            "                                                         ^\n");
  EXPECT_EQ(attr_error("rmsnorm", "{eps: 0}", "[B, 8]"),
            "teeny: error: t.yaml:7:54: node 'r': attr 'eps' must be greater than 0, got 0\n"
            "    - {name: r, op: rmsnorm, inputs: [x], attrs: {eps: 0}}\n"
            "                                                       ^\n");
  EXPECT_EQ(message([] {
              parse_graph(spec("[B, 8]", "  - {name: r, op: scale, inputs: [x], attrs: {value: .nan}}\n"), "t.yaml",
                          op_testing::registry());
            }),
            "node 'r': attr 'value' must be a finite number, got nan");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{out_channels: 4, kernel_size: 0}", "attr 'kernel_size' must be at least 1, got 0"},
      {"{out_channels: 4, kernel_size: 3, dilation: [1, 0]}", "attr 'dilation' must be at least 1, got 0"},
      {"{out_channels: 4, kernel_size: 3, stride: 2097152}", "attr 'stride' must be at most 1048576, got 2097152"},
      {"{out_channels: 4, kernel_size: 3, groups: 0}", "attr 'groups' must be at least 1, got 0"},
      {"{out_channels: 4, kernel_size: 3, eps: -0.001}", "attr 'eps' must be greater than 0, got -0.001"},
  };
  for (const auto& [attrs, expected] : cases) {
    EXPECT_EQ(message([&, &attrs = attrs] {
                parse_graph(
                    spec("[B, 3, 8, 8]", "  - {name: r, op: conv2d_bn_silu, inputs: [x], attrs: " + attrs + "}\n"),
                    "t.yaml", op_testing::registry());
              }),
              "node 'r': " + expected)
        << attrs;
  }
  EXPECT_EQ(message([] {
              parse_graph(spec("[B, 3, 8, 8]",
                               "  - {name: r, op: maxpool2d, inputs: [x], attrs: {kernel_size: 2, "
                               "padding: -1}}\n"),
                          "t.yaml", op_testing::registry());
            }),
            "node 'r': attr 'padding' must be at least 0, got -1");
}

TEST(AttrDomains, TheDomainIsShownWithTheSchema) {
  AttrSpec eps{};
  eps.min_value = 0.0;
  eps.min_exclusive = true;
  EXPECT_EQ(attr_domain_text(eps), "greater than 0");
  AttrSpec window{};
  window.min_value = 1.0;
  window.max_value = 1048576.0;
  EXPECT_EQ(attr_domain_text(window), "at least 1 and at most 1048576");
  EXPECT_EQ(attr_domain_text(AttrSpec{}), "");
  EXPECT_EQ(attr_domain_problem(window, nlohmann::json::array({{3, 1}, {2, 0}})), "must be at least 1, got 0");
}

}  // namespace
}  // namespace teeny
