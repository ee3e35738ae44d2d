// Vision ops (conv2d, batchnorm2d, conv2d_bn_silu, pools, upsample, yolo.detect_decode) and the
// conv-bn-silu fusion pass: host references against hand-computed values, shape rules and their
// errors (exact text), init bytes, the pass's rewrites, the 16-bit dtypes (params, kernel names
// and template arguments, vector widths, costs), and NVRTC compile + verification of every kernel
// variant in every dtype through compile_graph.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/compile.h"
#include "core/graph.h"
#include "ops/ops.h"
#include "tests/op_test_util.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

using op_testing::registry;

Graph parse(const std::string& text) { return parse_graph(text, "vision_test.yaml", registry()); }

// A graph of one node `n` applying `op` to input x of `shape` (a YAML list) in `dtype`.
std::string one_op(const std::string& op, const std::string& attrs, const std::string& shape,
                   DType dtype = DType::kF32) {
  return fmt::format(R"(name: t
dims: {{B: {{min: 1, max: 64, default: 1}}}}
inputs: {{x: {{dtype: {}, shape: {}}}}}
nodes:
  - {{name: n, op: {}, inputs: [x], attrs: {}}}
outputs: [n]
)",
                     dtype_name(dtype), shape, op, attrs);
}

// The host reference of node `n` with B = 1, on `x` and params in slot order, all in `dtype`.
HostTensor run_reference(const std::string& op, const std::string& attrs, const std::string& shape,
                         std::vector<double> x, std::vector<std::vector<double>> params = {},
                         DType dtype = DType::kF32) {
  const Graph graph = parse(one_op(op, attrs, shape, dtype));
  const Node& node = graph.nodes.at(0);
  const Bindings b1 = {{"B", 1}};
  std::vector<HostTensor> host_params;
  if (node.op->params) {
    // Trained params from `params` in slot order; host-computed ones from their init bytes.
    size_t next = 0;
    for (const ParamSpec& spec : node.op->params(node.ctx)) {
      HostTensor values{spec.dtype, eval_shape(spec.shape, b1), {}};
      if (spec.init == ParamInit::kHost) {
        for (int64_t i = 0; i < values.numel(); ++i)
          values.data.push_back(read_element(spec.host_bytes.data(), spec.dtype, i));
      } else if (next < params.size()) {
        values.data = params[next++];
      }
      host_params.push_back(std::move(values));
    }
    EXPECT_EQ(next, params.size()) << "trained params given vs used";
  }
  const HostTensor input{dtype, eval_shape(node.ctx.inputs[0].shape, b1), std::move(x)};
  EXPECT_EQ(input.numel(), static_cast<int64_t>(input.data.size()));
  RefContext ref{node.ctx, {input}, host_params, eval_shape(node.ctx.output.shape, b1)};
  return node.op->reference(ref);
}

void expect_values(const HostTensor& got, const std::vector<int64_t>& shape, const std::vector<double>& want) {
  EXPECT_EQ(got.shape, shape);
  ASSERT_EQ(got.data.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got.data[i], want[i], 1e-12) << "element " << i;
}

std::vector<double> iota(int n, double start = 1.0) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

// The message of the error parsing a graph raises ("(no error)" if none).
std::string parse_error(const std::string& text) { return op_testing::graph_error(text, "vision_test.yaml"); }

// ---- references ------------------------------------------------------------------------------

TEST(VisionReference, ConvStride1) {
  // x = 1..9 as 3x3; weight [[1, 0], [0, 1]]: each output is x[i][j] + x[i+1][j+1].
  auto y = run_reference("conv2d", "{out_channels: 1, kernel_size: 2, bias: false}", "[B, 1, 3, 3]", iota(9),
                         {{1, 0, 0, 1}});
  expect_values(y, {1, 1, 2, 2}, {6, 8, 12, 14});
}

TEST(VisionReference, ConvStride2Padding1WithBias) {
  // All-ones 3x3 kernel, stride 2, padding 1 over 1..9: sums of the 2x2 corners, plus bias 0.5.
  auto y = run_reference("conv2d", "{out_channels: 1, kernel_size: 3, stride: 2, padding: 1}", "[B, 1, 3, 3]", iota(9),
                         {std::vector<double>(9, 1.0), {0.5}});
  expect_values(y, {1, 1, 2, 2}, {12.5, 16.5, 24.5, 28.5});
}

TEST(VisionReference, ConvDilation2) {
  // A 2x2 kernel dilated by 2 touches the four corners of the 3x3 input: 1 + 3 + 7 + 9.
  auto y = run_reference("conv2d", "{out_channels: 1, kernel_size: 2, dilation: 2, bias: false}", "[B, 1, 3, 3]",
                         iota(9), {{1, 1, 1, 1}});
  expect_values(y, {1, 1, 1, 1}, {20});
}

TEST(VisionReference, ConvRectangularKernelAndStride) {
  // kernel [1, 2], stride [1, 2] on a 2x4 input 1..8: pairs (1+2, 3+4) and (5+6, 7+8), weights (1, 10).
  auto y = run_reference("conv2d", "{out_channels: 1, kernel_size: [1, 2], stride: [1, 2], bias: false}",
                         "[B, 1, 2, 4]", iota(8), {{1, 10}});
  expect_values(y, {1, 1, 2, 2}, {21, 43, 65, 87});
}

TEST(VisionReference, ConvGroups) {
  // Two groups of 2 channels -> 1 channel each: out0 = 1*x0 + 2*x1, out1 = 3*x2 + 4*x3, plus bias.
  auto y = run_reference("conv2d", "{out_channels: 2, kernel_size: 1, groups: 2}", "[B, 4, 1, 1]", {1, 10, 100, 1000},
                         {{1, 2, 3, 4}, {0.25, -1}});
  expect_values(y, {1, 2, 1, 1}, {21.25, 4299});
}

TEST(VisionReference, ConvDepthwiseWithMultiplier) {
  // groups = C = 2, Co = 4: channels 0, 1 read x0 = 3; channels 2, 3 read x1 = 5.
  auto y = run_reference("conv2d", "{out_channels: 4, kernel_size: 1, groups: 2, bias: false}", "[B, 2, 1, 1]", {3, 5},
                         {{1, 2, 3, 4}});
  expect_values(y, {1, 4, 1, 1}, {3, 6, 15, 20});
}

TEST(VisionReference, BatchNorm) {
  // c0: (1 - 0) / sqrt(3 + 1) * 2 + 0.5 = 1.5; c1: (2 - 1) / sqrt(0 + 1) * 1 + 0 = 1.
  auto y = run_reference("batchnorm2d", "{eps: 1.0}", "[B, 2, 1, 1]", {1, 2}, {{2, 1}, {0.5, 0}, {0, 1}, {3, 0}});
  expect_values(y, {1, 2, 1, 1}, {1.5, 1.0});
}

TEST(VisionReference, ConvBnSilu) {
  // conv: 2 * 1.5 = 3; bn with var + eps = 4, weight 2, mean 1, bias -1: (3 - 1) / 2 * 2 - 1 = 1;
  // silu(1) = 1 / (1 + e^-1).
  auto y = run_reference("conv2d_bn_silu", "{out_channels: 1, kernel_size: 1, eps: 0.5}", "[B, 1, 1, 1]", {2},
                         {{1.5}, {2}, {-1}, {1}, {3.5}});
  expect_values(y, {1, 1, 1, 1}, {1.0 / (1.0 + std::exp(-1.0))});
}

TEST(VisionReference, MaxPoolDefaultStride) {
  auto y = run_reference("maxpool2d", "{kernel_size: 2}", "[B, 1, 4, 4]", iota(16));
  expect_values(y, {1, 1, 2, 2}, {6, 8, 14, 16});
}

TEST(VisionReference, MaxPoolPaddingNeverWins) {
  // All inputs negative: the implicit padding must not contribute a 0.
  auto y = run_reference("maxpool2d", "{kernel_size: 3, stride: 1, padding: 1}", "[B, 1, 2, 2]", {-4, -3, -2, -1});
  expect_values(y, {1, 1, 2, 2}, {-1, -1, -1, -1});
}

TEST(VisionReference, AvgPool) {
  auto y = run_reference("avgpool2d", "{kernel_size: 2}", "[B, 1, 4, 4]", iota(16));
  expect_values(y, {1, 1, 2, 2}, {3.5, 5.5, 11.5, 13.5});
}

TEST(VisionReference, AvgPoolCountsPadding) {
  // Every 3x3 window covers the whole 2x2 input (sum 10) and 5 padded zeros: 10 / 9.
  auto y = run_reference("avgpool2d", "{kernel_size: 3, stride: 1, padding: 1}", "[B, 1, 2, 2]", {1, 2, 3, 4});
  expect_values(y, {1, 1, 2, 2}, {10.0 / 9, 10.0 / 9, 10.0 / 9, 10.0 / 9});
}

TEST(VisionReference, GlobalAvgPool) {
  auto y = run_reference("global_avgpool", "{}", "[B, 2, 2, 3]", iota(12));
  expect_values(y, {1, 2, 1, 1}, {3.5, 9.5});
}

TEST(VisionReference, UpsampleNearest) {
  auto y = run_reference("upsample_nearest2d", "{}", "[B, 1, 2, 2]", {1, 2, 3, 4});
  expect_values(y, {1, 1, 4, 4}, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  auto y3 = run_reference("upsample_nearest2d", "{scale_factor: 3}", "[B, 1, 1, 2]", {7, 8});
  expect_values(y3, {1, 1, 3, 6}, {7, 7, 7, 8, 8, 8, 7, 7, 7, 8, 8, 8, 7, 7, 7, 8, 8, 8});
}

// ---- yolo.detect_decode: anchors and decode ----------------------------------------------------

const char* kTinyLevels = "{levels: [[2, 3, 8], [1, 1, 16]]}";  // A = 2*3 + 1*1 = 7

TEST(VisionDecode, AnchorsAreMakeAnchorsAsInitBytes) {
  const Graph graph = parse(one_op("yolo.detect_decode", kTinyLevels, "[B, 4, 7]"));
  const Node& node = graph.nodes.at(0);
  const std::vector<ParamSpec> specs = node.op->params(node.ctx);
  ASSERT_EQ(specs.size(), 3u);
  // Level 0 is 2 rows x 3 columns, y-major: (0.5, 0.5), (1.5, 0.5), (2.5, 0.5), (0.5, 1.5), ...
  const std::vector<std::vector<double>> want = {
      {0.5, 1.5, 2.5, 0.5, 1.5, 2.5, 0.5}, {0.5, 0.5, 0.5, 1.5, 1.5, 1.5, 0.5}, {8, 8, 8, 8, 8, 8, 16}};
  const char* slots[] = {"anchor_x", "anchor_y", "strides"};
  for (size_t p = 0; p < 3; ++p) {
    SCOPED_TRACE(slots[p]);
    EXPECT_EQ(specs[p].slot, slots[p]);
    EXPECT_EQ(specs[p].init, ParamInit::kHost);
    EXPECT_EQ(specs[p].dtype, DType::kF32);
    EXPECT_EQ(shape_str(specs[p].shape), "[7]");
    ASSERT_EQ(specs[p].host_bytes.size(), 7u * 4u);
    for (size_t i = 0; i < 7; ++i) EXPECT_EQ(read_element(specs[p].host_bytes.data(), DType::kF32, i), want[p][i]);
  }
}

TEST(VisionDecode, DistancesToCenterSizeTimesStride) {
  // Anchor 0 = (0.5, 0.5), stride 8; l, t, r, b = 1, 2, 3, 4: x1 = -0.5, y1 = -1.5, x2 = 3.5,
  // y2 = 4.5 -> (cx, cy, w, h) = (1.5, 1.5, 4, 6) * 8. Anchor 6 = (0.5, 0.5), stride 16, all 1:
  // (0.5, 0.5, 2, 2) * 16. The others are zero distances: (ax, ay, 0, 0) * stride.
  std::vector<double> boxes(4 * 7, 0.0);
  for (int c = 0; c < 4; ++c) boxes[c * 7] = c + 1;
  for (int c = 0; c < 4; ++c) boxes[c * 7 + 6] = 1;
  auto y = run_reference("yolo.detect_decode", kTinyLevels, "[B, 4, 7]", boxes);
  const std::vector<double> want = {12, 12, 20, 4,  12, 20, 8,    // cx
                                    12, 4,  4,  12, 12, 12, 8,    // cy
                                    32, 0,  0,  0,  0,  0,  32,   // w
                                    48, 0,  0,  0,  0,  0,  32};  // h
  expect_values(y, {1, 4, 7}, want);
}

// In 16-bit the anchors are params of the boxes' dtype, as make_anchors makes them for 16-bit
// features: cell centres past 128 round in bf16 (128.5 -> 128 and 199.5 -> 200, ties to even) and
// stay exact in f16; the reference decodes with the same rounded anchors.
TEST(VisionDecode, AnchorsIn16BitAreInitBytesOfThatDtype) {
  const char* levels = "{levels: [[1, 200, 4]]}";
  for (const auto& [dtype, x127, x128, x199] :
       {std::tuple{DType::kBF16, 127.5, 128.0, 200.0}, std::tuple{DType::kF16, 127.5, 128.5, 199.5}}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Graph graph = parse(one_op("yolo.detect_decode", levels, "[B, 4, 200]", dtype));
    const Node& node = graph.nodes.at(0);
    const std::vector<ParamSpec> specs = node.op->params(node.ctx);
    ASSERT_EQ(specs.size(), 3u);
    for (const ParamSpec& spec : specs) {
      EXPECT_EQ(spec.dtype, dtype) << spec.slot;
      EXPECT_EQ(spec.host_bytes.size(), 200u * 2u) << spec.slot;
    }
    const uint8_t* anchor_x = specs[0].host_bytes.data();
    EXPECT_EQ(read_element(anchor_x, dtype, 127), x127);
    EXPECT_EQ(read_element(anchor_x, dtype, 128), x128);
    EXPECT_EQ(read_element(anchor_x, dtype, 199), x199);
    EXPECT_EQ(read_element(specs[1].host_bytes.data(), dtype, 199), 0.5);
    EXPECT_EQ(read_element(specs[2].host_bytes.data(), dtype, 199), 4.0);
    // Zero distances decode to (anchor_x, anchor_y, 0, 0) * stride 4.
    const HostTensor y =
        run_reference("yolo.detect_decode", levels, "[B, 4, 200]", std::vector<double>(800, 0.0), {}, dtype);
    EXPECT_EQ(y.data[128], 4 * x128);
    EXPECT_EQ(y.data[199], 4 * x199);
    EXPECT_EQ(y.data[200 + 199], 2.0);
    EXPECT_EQ(y.data[400 + 199], 0.0);
  }
}

// ---- shape rules -----------------------------------------------------------------------------

std::string output_shape(const std::string& op, const std::string& attrs, const std::string& shape) {
  return shape_str(parse(one_op(op, attrs, shape)).nodes.at(0).ctx.output.shape);
}

TEST(VisionShape, Rules) {
  EXPECT_EQ(output_shape("conv2d", "{out_channels: 8, kernel_size: 3, stride: 2, padding: 1}", "[B, 3, 15, 16]"),
            "[B, 8, 8, 8]");
  EXPECT_EQ(output_shape("conv2d", "{out_channels: 8, kernel_size: [3, 1], dilation: [2, 1]}", "[B, 3, 9, 9]"),
            "[B, 8, 5, 9]");
  EXPECT_EQ(output_shape("conv2d_bn_silu", "{out_channels: 4, kernel_size: 1}", "[B, 3, 7, 5]"), "[B, 4, 7, 5]");
  EXPECT_EQ(output_shape("maxpool2d", "{kernel_size: 5, stride: 1, padding: 2}", "[B, 3, 8, 8]"), "[B, 3, 8, 8]");
  EXPECT_EQ(output_shape("maxpool2d", "{kernel_size: 2}", "[B, 3, 7, 9]"), "[B, 3, 3, 4]");
  EXPECT_EQ(output_shape("avgpool2d", "{kernel_size: 3, stride: 2, padding: 1}", "[B, 3, 7, 8]"), "[B, 3, 4, 4]");
  EXPECT_EQ(output_shape("global_avgpool", "{}", "[B, 5, 7, 9]"), "[B, 5, 1, 1]");
  EXPECT_EQ(output_shape("upsample_nearest2d", "{}", "[B, 5, 7, 9]"), "[B, 5, 14, 18]");
  EXPECT_EQ(output_shape("batchnorm2d", "{}", "[B, 5, 7, 9]"), "[B, 5, 7, 9]");
  EXPECT_EQ(output_shape("yolo.detect_decode", kTinyLevels, "[B, 4, 7]"), "[B, 4, 7]");
  // Symbolic spatial dims stay symbolic: floor((H + 2 - 3) / 2) + 1.
  EXPECT_EQ(parse(R"(name: t
dims: {B: {min: 1, max: 8, default: 1}, H: {min: 4, max: 64, default: 8}}
inputs: {x: {dtype: f32, shape: [B, 3, H, H]}}
nodes:
  - {name: n, op: conv2d, inputs: [x], attrs: {out_channels: 2, kernel_size: 3, stride: 2, padding: 1}}
outputs: [n]
)")
                .nodes.at(0)
                .ctx.output.shape.at(2)
                .eval({{"H", 9}}),
            5);
}

TEST(VisionShape, ConvParams) {
  const Graph graph = parse(one_op("conv2d", "{out_channels: 6, kernel_size: [3, 5], groups: 2}", "[B, 4, 9, 9]"));
  const Node& node = graph.nodes.at(0);
  const auto params = node.op->params(node.ctx);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].slot, "weight");
  EXPECT_EQ(shape_str(params[0].shape), "[6, 2, 3, 5]");
  EXPECT_EQ(params[1].slot, "bias");
  EXPECT_EQ(shape_str(params[1].shape), "[6]");
  const Graph fused = parse(one_op("conv2d_bn_silu", "{out_channels: 6, kernel_size: 3}", "[B, 4, 9, 9]"));
  std::vector<std::string> slots;
  for (const ParamSpec& p : fused.nodes[0].op->params(fused.nodes[0].ctx)) slots.push_back(p.slot + shape_str(p.shape));
  EXPECT_EQ(slots, (std::vector<std::string>{"conv.weight[6, 4, 3, 3]", "bn.weight[6]", "bn.bias[6]",
                                             "bn.running_mean[6]", "bn.running_var[6]"}));
}

TEST(VisionShape, Errors) {
  EXPECT_EQ(parse_error(one_op("conv2d", "{out_channels: 4, kernel_size: 3, groups: 2}", "[B, 3, 8, 8]")),
            "node 'n': in_channels 3 is not divisible by groups 2");
  EXPECT_EQ(parse_error(one_op("conv2d", "{out_channels: 5, kernel_size: 3, groups: 2}", "[B, 4, 8, 8]")),
            "node 'n': out_channels 5 is not divisible by groups 2");
  EXPECT_EQ(parse_error(one_op("conv2d", "{out_channels: 4, kernel_size: 3}", "[B, 12]")),
            "node 'n': conv2d expects x [B, C, H, W] (rank 4), got [B, 12]");
  EXPECT_EQ(parse_error(one_op("conv2d", "{out_channels: 4, kernel_size: 3}", "[B, B, 8, 8]")),
            "node 'n': conv2d needs a constant channel count, got C = B");
  EXPECT_EQ(parse_error(one_op("conv2d", "{out_channels: 4, kernel_size: 3, stride: [0, 1]}", "[B, 3, 8, 8]")),
            "node 'n': attr 'stride' must be at least 1, got 0");
  EXPECT_EQ(parse_error(one_op("conv2d", "{out_channels: 4, kernel_size: 3, padding: -1}", "[B, 3, 8, 8]")),
            "node 'n': attr 'padding' must be at least 0, got -1");
  EXPECT_EQ(parse_error(one_op("conv2d", "{out_channels: 4, kernel_size: 3, dilation: 2}", "[B, 3, 4, 9]")),
            "node 'n': the dilated kernel height 5 is larger than the padded input height 4 + 2*0");
  EXPECT_EQ(parse_error(one_op("conv2d_bn_silu", "{out_channels: 4, kernel_size: [1, 7]}", "[B, 3, 8, 6]")),
            "node 'n': the kernel width 7 is larger than the padded input width 6 + 2*0");
  EXPECT_EQ(parse_error(one_op("maxpool2d", "{kernel_size: 3, padding: 2}", "[B, 3, 8, 8]")),
            "node 'n': padding [2, 2] must be at most half the kernel [3, 3]");
  EXPECT_EQ(parse_error(one_op("avgpool2d", "{kernel_size: 5}", "[B, 3, 4, 8]")),
            "node 'n': the kernel height 5 is larger than the padded input height 4 + 2*0");
  EXPECT_EQ(parse_error(one_op("global_avgpool", "{}", "[B, 3, 8]")),
            "node 'n': global_avgpool expects x [B, C, H, W] (rank 4), got [B, 3, 8]");
  EXPECT_EQ(parse_error(one_op("yolo.detect_decode", kTinyLevels, "[B, 4, 8]")),
            "node 'n': boxes have A = 8 anchors but levels give 7 (2*3 + 1*1)");
  EXPECT_EQ(parse_error(one_op("yolo.detect_decode", kTinyLevels, "[B, 5, 7]")),
            "node 'n': yolo.detect_decode expects boxes [B, 4, A], got [B, 5, 7]");
  EXPECT_EQ(parse_error(one_op("yolo.detect_decode", "{levels: [[2, 3, 8], [1, 0, 16]]}", "[B, 4, 6]")),
            "node 'n': attr 'levels' must be at least 1, got 0");
  EXPECT_EQ(parse_error(one_op("yolo.detect_decode", "{levels: [[2, 3]]}", "[B, 4, 6]")),
            "node 'n': level 0 must be [h, w, stride], got [2, 3]");
}

// ---- dtypes ------------------------------------------------------------------------------------

struct OpCase {
  const char* op;
  const char* attrs;
  const char* shape;
};
// A node of every vision op, and of each conv kernel path.
const OpCase kEveryOp[] = {
    {"conv2d", "{out_channels: 10, kernel_size: 3, stride: 2, padding: 1, groups: 2}", "[B, 6, 17, 13]"},
    {"conv2d", "{out_channels: 12, kernel_size: 3, padding: 1, groups: 6}", "[B, 6, 17, 13]"},
    {"conv2d", "{out_channels: 20, kernel_size: 1, bias: false}", "[B, 12, 17, 13]"},
    {"conv2d_bn_silu", "{out_channels: 20, kernel_size: 1}", "[B, 12, 8, 8]"},
    {"batchnorm2d", "{}", "[B, 6, 17, 13]"},
    {"maxpool2d", "{kernel_size: 3, stride: 2, padding: 1}", "[B, 6, 17, 13]"},
    {"avgpool2d", "{kernel_size: 2}", "[B, 6, 17, 13]"},
    {"global_avgpool", "{}", "[B, 6, 17, 13]"},
    {"upsample_nearest2d", "{}", "[B, 6, 17, 13]"},
    {"yolo.detect_decode", "{levels: [[2, 3, 8], [1, 1, 16]]}", "[B, 4, 7]"},
};

// Every vision op takes each float dtype: its output, params, kernel arguments and the kernel's
// storage type (the device template's first argument, and the name after the op's) follow x.
TEST(VisionDtypes, EveryOpFollowsItsInputsDtype) {
  for (const OpCase& c : kEveryOp)
    for (DType dtype : float_dtypes()) {
      SCOPED_TRACE(fmt::format("{} {} {}", c.op, c.attrs, dtype_name(dtype)));
      const Graph graph = parse(one_op(c.op, c.attrs, c.shape, dtype));
      const Node& node = graph.nodes.at(0);
      EXPECT_EQ(node.ctx.output.dtype, dtype);
      if (node.op->params) {
        for (const ParamSpec& p : node.op->params(node.ctx)) EXPECT_EQ(p.dtype, dtype) << p.slot;
      }
      const Lowering lowering = node.op->lower(node.ctx);
      ASSERT_FALSE(lowering.kernels.empty());
      for (const KernelSource& kernel : lowering.kernels) {
        EXPECT_NE(kernel.name.find(fmt::format("_{}_", dtype_name(dtype))), std::string::npos) << kernel.name;
        EXPECT_NE(kernel.function.find(fmt::format("<{}, ", dtype_c_type(dtype))), std::string::npos)
            << kernel.function;
      }
      for (const Launch& launch : lowering.launches)
        for (const KernelArg& arg : launch.args) {
          if (arg.kind == ArgKind::kInput || arg.kind == ArgKind::kParam || arg.kind == ArgKind::kOutput) {
            EXPECT_EQ(arg.dtype, dtype) << arg.name;
          }
        }
    }
}

// Every byte a vision launch moves is an element of x's dtype: 16-bit halves f32's bytes, and
// the FLOPs stay.
TEST(VisionDtypes, SixteenBitLaunchesMoveHalfTheBytes) {
  const Bindings b3 = {{"B", 3}};
  for (const OpCase& c : kEveryOp) {
    SCOPED_TRACE(fmt::format("{} {}", c.op, c.attrs));
    auto launch = [&](DType dtype) {
      const Graph graph = parse(one_op(c.op, c.attrs, c.shape, dtype));
      const Node& node = graph.nodes.at(0);
      return node.op->lower(node.ctx).launches.at(0);
    };
    const Launch f32 = launch(DType::kF32);
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      const Launch half = launch(dtype);
      EXPECT_EQ(2 * half.bytes.eval(b3), f32.bytes.eval(b3)) << dtype_name(dtype);
      EXPECT_EQ(half.flops.eval(b3), f32.flops.eval(b3)) << dtype_name(dtype);
    }
  }
}

// A 16-byte vector holds 4 f32 elements but 8 16-bit ones: batchnorm2d and global_avgpool take
// vectors only when every plane is a whole number of them.
TEST(VisionDtypes, VectorWidthsFollowTheDtype) {
  auto kernel_name = [&](const char* op, const char* shape, DType dtype) {
    const Graph graph = parse(one_op(op, "{}", shape, dtype));
    const Node& node = graph.nodes.at(0);
    return node.op->lower(node.ctx).kernels.at(0).name;
  };
  EXPECT_EQ(kernel_name("batchnorm2d", "[B, 16, 8, 8]", DType::kF32), "batchnorm2d_f32_v4");
  EXPECT_EQ(kernel_name("batchnorm2d", "[B, 16, 8, 8]", DType::kBF16), "batchnorm2d_bf16_v8");
  EXPECT_EQ(kernel_name("batchnorm2d", "[B, 5, 3, 4]", DType::kF32), "batchnorm2d_f32_v4");
  EXPECT_EQ(kernel_name("batchnorm2d", "[B, 5, 3, 4]", DType::kF16), "batchnorm2d_f16_v1");
  EXPECT_EQ(kernel_name("global_avgpool", "[B, 4, 64, 64]", DType::kF16), "global_avgpool_f16_t256_v8");
  EXPECT_EQ(kernel_name("global_avgpool", "[B, 3, 38, 54]", DType::kF32), "global_avgpool_f32_t256_v4");
  EXPECT_EQ(kernel_name("global_avgpool", "[B, 3, 38, 54]", DType::kBF16), "global_avgpool_bf16_t256_v1");
  EXPECT_EQ(kernel_name("global_avgpool", "[B, 6, 17, 13]", DType::kBF16), "global_avgpool_bf16_t32_v1");
}

TEST(VisionDtypes, NoImplicitConversion) {
  EXPECT_EQ(parse_error(R"(name: t
dims: {B: {min: 1, max: 64, default: 1}}
inputs: {x: {dtype: bf16, shape: [B, 3, 8, 8]}}
nodes:
  - {name: n, op: conv2d, inputs: [x], attrs: {out_channels: 4, kernel_size: 3}, dtype: f32}
outputs: [n]
)"),
            "node 'n': op 'conv2d' produces its inputs' dtype, bf16; it cannot produce f32 (there are no implicit "
            "conversions)");
}

// ---- fusion pass -----------------------------------------------------------------------------

const GraphPass& fusion_pass() {
  for (const GraphPass& pass : registry().passes())
    if (pass.name == "fuse_conv_epilogue") return pass;
  throw std::runtime_error("fuse_conv_epilogue is not registered");
}

// x -> c1 (conv2d, `conv_attrs`) -> bn1 -> act (silu), then `tail` nodes; outputs `outputs`.
std::string chain(const std::string& conv_attrs, const std::string& tail = "", const std::string& outputs = "[act]") {
  return fmt::format(R"(name: t
dims: {{B: {{min: 1, max: 64, default: 2}}}}
inputs: {{x: {{dtype: f32, shape: [B, 3, 16, 16]}}}}
nodes:
  - {{name: c1, op: conv2d, inputs: [x], attrs: {}}}
  - {{name: bn1, op: batchnorm2d, inputs: [c1], attrs: {{eps: 0.002}}}}
  - {{name: act, op: silu, inputs: [bn1]}}
{}outputs: {}
)",
                     conv_attrs, tail, outputs);
}

const std::map<std::string, std::string> kC1Bn1Params = {{"conv.weight", "c1.weight"},
                                                         {"bn.weight", "bn1.weight"},
                                                         {"bn.bias", "bn1.bias"},
                                                         {"bn.running_mean", "bn1.running_mean"},
                                                         {"bn.running_var", "bn1.running_var"}};

TEST(VisionFusion, RewritesConvBnSilu) {
  Graph graph = parse(chain("{out_channels: 8, kernel_size: 3, stride: 2, padding: 1, bias: false}",
                            "  - {name: pool, op: maxpool2d, inputs: [act], attrs: {kernel_size: 2}}\n", "[pool]"));
  const Shape before = graph.nodes.at(2).ctx.output.shape;
  EXPECT_EQ(fusion_pass().apply(graph, registry()), 2);  // the batch norm, then the silu
  ASSERT_EQ(graph.nodes.size(), 2u);
  const Node& fused = graph.nodes[0];
  EXPECT_EQ(fused.name, "act");
  EXPECT_EQ(fused.op->name, "fused.conv2d");
  EXPECT_EQ(fused.inputs, std::vector<std::string>{"x"});
  EXPECT_EQ(fused.ctx.output.shape, before);
  EXPECT_EQ(fused.fused_from, (std::vector<std::string>{"c1", "bn1", "act"}));
  EXPECT_EQ(fused.param_names, kC1Bn1Params);
  EXPECT_TRUE(fused.ctx.attrs.boolean("bn"));
  EXPECT_FALSE(fused.ctx.attrs.boolean("bias"));
  EXPECT_EQ(fused.ctx.attrs.text("activation"), "silu");
  EXPECT_DOUBLE_EQ(fused.ctx.attrs.real("eps"), 0.002);  // the batch norm's eps, not the fused default
  EXPECT_EQ(fused.ctx.attrs.pair("stride"), (std::pair<int64_t, int64_t>{2, 2}));
  EXPECT_EQ(graph.nodes[1].name, "pool");  // the consumer still finds its input by name
  EXPECT_EQ(graph.nodes[1].inputs, std::vector<std::string>{"act"});
}

// ResNet's basic block: conv -> bn -> relu -> conv -> bn -> add(., x) -> relu is two fused.conv2d,
// the second adding x after its batch norm; a conv with a bias takes an activation but no batch
// norm.
TEST(VisionFusion, RewritesResNetBlockAndBiasActivation) {
  Graph graph = parse(R"(name: t
dims: {B: {min: 1, max: 64, default: 2}}
inputs: {x: {dtype: f32, shape: [B, 8, 16, 16]}}
nodes:
  - {name: c1, op: conv2d, inputs: [x], attrs: {out_channels: 8, kernel_size: 3, padding: 1, bias: false}}
  - {name: bn1, op: batchnorm2d, inputs: [c1]}
  - {name: r1, op: relu, inputs: [bn1]}
  - {name: c2, op: conv2d, inputs: [r1], attrs: {out_channels: 8, kernel_size: 3, padding: 1, bias: false}}
  - {name: bn2, op: batchnorm2d, inputs: [c2]}
  - {name: sum, op: add, inputs: [bn2, x]}
  - {name: out, op: relu, inputs: [sum]}
  - {name: head, op: conv2d, inputs: [out], attrs: {out_channels: 4, kernel_size: 1}}
  - {name: bn_after_bias, op: batchnorm2d, inputs: [head]}
  - {name: y, op: tanh, inputs: [bn_after_bias]}
outputs: [y]
)");
  EXPECT_EQ(fusion_pass().apply(graph, registry()), 5);
  ASSERT_EQ(graph.nodes.size(), 5u);
  const Node& first = graph.nodes[0];
  EXPECT_EQ(first.name, "r1");
  EXPECT_EQ(first.fused_from, (std::vector<std::string>{"c1", "bn1", "r1"}));
  EXPECT_EQ(first.ctx.attrs.text("activation"), "relu");
  const Node& second = graph.nodes[1];
  EXPECT_EQ(second.name, "out");
  EXPECT_EQ(second.op->name, "fused.conv2d");
  EXPECT_EQ(second.inputs, (std::vector<std::string>{"r1", "x"}));
  EXPECT_EQ(second.ctx.inputs.size(), 2u);
  EXPECT_EQ(second.fused_from, (std::vector<std::string>{"c2", "bn2", "sum", "out"}));
  EXPECT_EQ(second.param_names.at("bn.running_var"), "bn2.running_var");
  EXPECT_EQ(second.ctx.attrs.text("activation"), "relu");
  // head has a bias: its batch norm stays, and the tanh reads the batch norm, not a conv.
  EXPECT_EQ(graph.nodes[2].name, "head");
  EXPECT_EQ(graph.nodes[2].op->name, "conv2d");
  EXPECT_EQ(graph.nodes[3].op->name, "batchnorm2d");
}

TEST(VisionFusion, FusesAnActivationAfterABias) {
  Graph graph = parse(chain("{out_channels: 8, kernel_size: 3}"));
  // c1 has a bias: bn1 stays; act reads bn1, which is no conv.
  EXPECT_EQ(fusion_pass().apply(graph, registry()), 0);
  EXPECT_EQ(graph.nodes.size(), 3u);
  Graph lenet = parse(R"(name: t
dims: {B: {min: 1, max: 64, default: 2}}
inputs: {x: {dtype: f32, shape: [B, 1, 28, 28]}}
nodes:
  - {name: c1, op: conv2d, inputs: [x], attrs: {out_channels: 6, kernel_size: 5, padding: 2}}
  - {name: r1, op: relu, inputs: [c1]}
outputs: [r1]
)");
  EXPECT_EQ(fusion_pass().apply(lenet, registry()), 1);
  ASSERT_EQ(lenet.nodes.size(), 1u);
  EXPECT_TRUE(lenet.nodes[0].ctx.attrs.boolean("bias"));
  EXPECT_EQ(lenet.nodes[0].param_names,
            (std::map<std::string, std::string>{{"conv.weight", "c1.weight"}, {"conv.bias", "c1.bias"}}));
}

TEST(VisionFusion, LeavesConvWithSecondConsumer) {
  Graph graph = parse(chain("{out_channels: 8, kernel_size: 3, bias: false}",
                            "  - {name: other, op: relu, inputs: [c1]}\n", "[act, other]"));
  EXPECT_EQ(fusion_pass().apply(graph, registry()), 0);
  EXPECT_EQ(graph.nodes.size(), 4u);
}

TEST(VisionFusion, StopsAtABatchNormThatIsAGraphOutput) {
  Graph graph = parse(chain("{out_channels: 8, kernel_size: 3, bias: false}", "", "[act, bn1]"));
  EXPECT_EQ(fusion_pass().apply(graph, registry()), 1);  // conv and batch norm: bn1 is still produced
  ASSERT_EQ(graph.nodes.size(), 2u);
  EXPECT_EQ(graph.nodes[0].name, "bn1");
  EXPECT_EQ(graph.nodes[0].param_names, kC1Bn1Params);
  EXPECT_EQ(graph.nodes[1].op->name, "silu");
}

// ---- lowering, NVRTC and verification --------------------------------------------------------

// compile_graph, with NVRTC's log in the failure message when a kernel does not compile.
Bundle compile(const Graph& graph, const CompileOptions& options, CompileStats* stats = nullptr) {
  try {
    return compile_graph(graph, registry(), options, stats);
  } catch (const Error& e) {
    ADD_FAILURE() << e.render();
    throw;
  }
}

CompileOptions test_compile_options() {
  CompileOptions options;
  options.cache_dir = (std::filesystem::temp_directory_path() / "teeny-test-vision-cache").string();
  return options;
}

// Conv variants for the lowering checks below: implicit GEMM (grouped, rectangular, thin), the
// 1x1 GEMM path with and without 4-pixel loads, depthwise (plain and fused).
const char* kZoo = R"(name: zoo
dims: {B: {min: 1, max: 64, default: 2}}
inputs:
  x: {dtype: f32, shape: [B, 8, 15, 13]}
  x2: {dtype: f32, shape: [B, 16, 8, 8]}
nodes:
  - {name: conv_grouped, op: conv2d, inputs: [x], attrs: {out_channels: 12, kernel_size: 3, stride: 2, padding: 1, groups: 2}}
  - {name: conv_wide, op: conv2d, inputs: [x], attrs: {out_channels: 72, kernel_size: [3, 5], stride: [1, 2], padding: [1, 2]}}
  - {name: conv_thin, op: conv2d, inputs: [x], attrs: {out_channels: 3, kernel_size: 3}}
  - {name: pw_odd, op: conv2d, inputs: [x], attrs: {out_channels: 24, kernel_size: 1}}
  - {name: pw_vec, op: conv2d, inputs: [x2], attrs: {out_channels: 32, kernel_size: 1, bias: false}}
  - {name: dw, op: conv2d, inputs: [x], attrs: {out_channels: 16, kernel_size: 3, stride: 2, padding: 1, groups: 8}}
  - {name: fused, op: conv2d_bn_silu, inputs: [x], attrs: {out_channels: 64, kernel_size: 3, padding: 1}}
  - {name: fused_dw, op: conv2d_bn_silu, inputs: [x], attrs: {out_channels: 8, kernel_size: 3, padding: 1, groups: 8}}
  - {name: fused_pw, op: conv2d_bn_silu, inputs: [x2], attrs: {out_channels: 16, kernel_size: 1}}
outputs: [conv_grouped, conv_wide, conv_thin, pw_odd, pw_vec, dw, fused, fused_dw, fused_pw]
)";

// The zoo with x and x2 in `dtype`.
std::string zoo(DType dtype) {
  return std::regex_replace(kZoo, std::regex("dtype: f32"), fmt::format("dtype: {}", dtype_name(dtype)));
}

// Every vision op's GPU conformance graphs (which cover each kernel variant in every dtype)
// compile for sm_90, and every launch passes compile's checks against the kernel signature, the
// PTX entry and .maxntid. A 16-bit kernel rounds its f32 results to the dtype (cvt.rn) on the way
// out, except upsampling, which copies elements.
TEST(VisionCompile, EveryConformanceKernelCompilesAndVerifies) {
  int graphs = 0;
  for (const char* name : {"conv2d", "conv2d_bn_silu", "batchnorm2d", "maxpool2d", "avgpool2d", "global_avgpool",
                           "upsample_nearest2d", "yolo.detect_decode"}) {
    const OpDef* op = registry().find(name);
    ASSERT_NE(op, nullptr) << name;
    ASSERT_TRUE(op->conformance_cases) << name;
    std::set<DType> dtypes;
    for (const ConformanceCase& c : op->conformance_cases()) {
      SCOPED_TRACE(fmt::format("{} [{}]", name, c.label));
      const Bundle bundle = compile(parse(c.graph), test_compile_options());
      for (const BundleKernel& kernel : bundle.kernels) {
        EXPECT_EQ(kernel.target, "sm_90");
        EXPECT_NE(kernel.ptx.find(".visible .entry " + kernel.entry), std::string::npos);
      }
      // The kernel writing the output (batchnorm2d's training cases have several).
      const BundleKernel* written = nullptr;
      for (const BundleLaunch& launch : bundle.launches)
        if (launch.node == bundle.outputs.at(0)) written = &bundle.kernels.at(launch.kernel);
      ASSERT_NE(written, nullptr);
      const BundleKernel& kernel = *written;
      const DType dtype = bundle.tensor(bundle.outputs.at(0)).dtype;
      dtypes.insert(dtype);
      if (dtype != DType::kF32 && std::string(name) != "upsample_nearest2d") {
        EXPECT_NE(kernel.ptx.find(fmt::format("cvt.rn.{}.f32", dtype_name(dtype))), std::string::npos);
      }
      ++graphs;
    }
    EXPECT_EQ(dtypes, (std::set<DType>{DType::kF32, DType::kBF16, DType::kF16})) << name;
  }
  EXPECT_GE(graphs, 79);
}

// A node's lowering as `teeny tune` builds its `variant` ("": the default).
Lowering lower_variant(const Node& node, const std::string& variant) {
  OpContext ctx = node.ctx;
  ctx.variant = variant;
  return node.op->lower(ctx);
}

// The CUDA-core conv kernels' tile (the template argument tn_conv_tile<block_co, block_p, block_k,
// thread_co, thread_p>) and their block are generated from one ConvTile: the block is
// (block_co / thread_co) * (block_p / thread_p) threads, and differs from the tile's size.
TEST(VisionCompile, FusedTileConstantsAndBlockAgree) {
  const Graph graph = parse(kZoo);
  for (const char* name : {"fused", "fused_pw", "conv_wide", "conv_thin"}) {
    SCOPED_TRACE(name);
    const Node& node = *graph.find_node(name);
    const Lowering lowering = lower_variant(node, "simt");
    ASSERT_EQ(lowering.kernels.size(), 1u);
    const std::string& function = lowering.kernels[0].function;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(function, m, std::regex(R"(tn_conv_tile<(\d+), (\d+), (\d+), (\d+), (\d+)>)")))
        << function;
    const int block_co = std::stoi(m[1]), block_p = std::stoi(m[2]), thread_co = std::stoi(m[4]),
              thread_p = std::stoi(m[5]);
    const int threads = block_co / thread_co * (block_p / thread_p);
    EXPECT_EQ(lowering.launches[0].block, (std::array<int, 3>{threads, 1, 1}));
    EXPECT_EQ(threads, 128);
    EXPECT_NE(block_p, threads);
    EXPECT_EQ(lowering.kernels[0].max_threads, 128);
  }
}

// The tensor-core conv's tile: the tallest whose CTAs make about a wave (132) for the shape, no
// taller than the channels need, and a block of 32 threads a warp of the tile's warp grid.
TEST(VisionCompile, MmaConvTileFollowsChannelsAndPixels) {
  struct Case {
    const char* attrs;
    const char* shape;
    const char* tile;
    int threads;
  };
  for (const Case& c : {
           // 100352 pixels: 2 x 784 CTAs of the tallest tile.
           Case{"{out_channels: 256, kernel_size: 3, padding: 1}", "[32, 64, 56, 56]", "128, 128, 4, 2", 256},
           // One 56x56 image: 128 x 128 tiles make 50 CTAs, 64 x 128 100, 64 x 64 196.
           Case{"{out_channels: 256, kernel_size: 3, padding: 1}", "[B, 64, 56, 56]", "64, 64, 2, 2", 128},
           // 24 channels need no more than 32 rows.
           Case{"{out_channels: 24, kernel_size: 1}", "[64, 64, 28, 28]", "32, 64, 2, 2", 128},
           // 6 channels take the 16-row tile (LeNet's first conv).
           Case{"{out_channels: 6, kernel_size: 5}", "[B, 1, 32, 32]", "16, 64, 1, 4", 128},
       }) {
    SCOPED_TRACE(c.shape);
    const Graph graph = parse(one_op("conv2d", c.attrs, c.shape, DType::kBF16));
    const Node& node = *graph.find_node("n");
    const Lowering lowering = lower_variant(node, "mma");
    EXPECT_NE(lowering.kernels.at(0).function.find(fmt::format("tn_conv_mma_tile<{}>", c.tile)), std::string::npos)
        << lowering.kernels.at(0).function;
    EXPECT_EQ(lowering.launches.at(0).block, (std::array<int, 3>{c.threads, 1, 1}));
    EXPECT_EQ(lowering.kernels.at(0).max_threads, c.threads);
  }
}

// With a symbolic batch, the tile for one image runs until the tallest tile alone makes a wave:
// 256 channels at 56x56 take 2 x ceil(B * 3136 / 128) CTAs of 128 x 128, at least 132 from B = 3.
TEST(VisionCompile, MmaConvTakesTheTallestTileFromAWaveOfIt) {
  const Graph graph =
      parse(one_op("conv2d", "{out_channels: 256, kernel_size: 3, padding: 1}", "[B, 64, 56, 56]", DType::kBF16));
  const Node& node = *graph.find_node("n");
  const Lowering lowering = lower_variant(node, "mma");
  ASSERT_EQ(lowering.launches.size(), 2u);
  const Launch &one = lowering.launches[0], &tall = lowering.launches[1];
  EXPECT_NE(lowering.kernels.at(one.kernel).function.find("tn_conv_mma_tile<64, 64, 2, 2>"), std::string::npos);
  EXPECT_NE(lowering.kernels.at(tall.kernel).function.find("tn_conv_mma_tile<128, 128, 4, 2>"), std::string::npos);
  EXPECT_EQ(tall.block, (std::array<int, 3>{256, 1, 1}));
  for (int64_t b : {1, 2, 3, 64}) {
    const Bindings at{{"B", b}};
    EXPECT_EQ(one.when.eval(at), b < 3 ? 1 : 0) << b;
    EXPECT_EQ(tall.when.eval(at), b < 3 ? 0 : 1) << b;
  }
  // A bound batch, a tile already the tallest, or the CUDA-core variant: one launch.
  for (const char* shape : {"[32, 64, 56, 56]", "[B, 64, 224, 224]"}) {
    const Graph bound = parse(one_op("conv2d", "{out_channels: 256, kernel_size: 3, padding: 1}", shape, DType::kBF16));
    const Node& n = *bound.find_node("n");
    EXPECT_EQ(lower_variant(n, "mma").launches.size(), 1u) << shape;
  }
  EXPECT_EQ(lower_variant(node, "simt").launches.size(), 1u);
}

// The conv ops' variants for `teeny tune`: both implicit GEMMs, none for a depthwise conv, and an
// unknown name is an error naming it.
TEST(VisionCompile, ConvVariantsForTune) {
  const Graph graph = parse(kZoo);
  for (const char* name : {"conv_grouped", "fused", "pw_vec"}) {
    const Node& node = *graph.find_node(name);
    std::vector<std::string> names;
    for (const OpVariant& v : node.op->tuning.variants(node.ctx)) names.push_back(v.name);
    EXPECT_EQ(names, (std::vector<std::string>{"mma", "simt"})) << name;
  }
  const Node& dw = *graph.find_node("dw");
  EXPECT_TRUE(dw.op->tuning.variants(dw.ctx).empty());
  try {
    lower_variant(*graph.find_node("conv_grouped"), "wgmma");
    FAIL() << "no error";
  } catch (const OpError& e) {
    EXPECT_STREQ(e.what(), "a conv has no variant 'wgmma'");
  }
  EXPECT_THROW(lower_variant(dw, "simt"), OpError);
}

// The conv paths of the zoo's nodes, in whichever dtype `graph` has.
void expect_conv_paths(const Graph& graph) {
  auto kernel_name = [&](const char* node, const std::string& variant = "") {
    return lower_variant(*graph.find_node(node), variant).kernels.at(0).name;
  };
  EXPECT_NE(kernel_name("pw_vec", "mma").find("_mma_1x1_"), std::string::npos);
  EXPECT_NE(kernel_name("conv_grouped", "mma").find("_mma_k3x3s2x2"), std::string::npos);
  EXPECT_EQ(kernel_name("conv_grouped"), kernel_name("conv_grouped", "simt"));
  EXPECT_NE(kernel_name("pw_vec", "simt").find("gemm1x1"), std::string::npos);
  EXPECT_NE(kernel_name("pw_odd", "simt").find("gemm1x1"), std::string::npos);
  EXPECT_NE(kernel_name("conv_grouped", "simt").find("igemm_k3x3s2x2"), std::string::npos);
  EXPECT_NE(kernel_name("dw").find("_dw_"), std::string::npos);
  EXPECT_NE(kernel_name("fused_dw").find("_dw_"), std::string::npos);
  // The CUDA cores' 1x1 path loads 4 pixels at once (tn_conv2d_igemm's last template argument)
  // when planes allow, in any dtype.
  auto vector_width = [&](const char* node) {
    const std::string function = lower_variant(*graph.find_node(node), "simt").kernels.at(0).function;
    std::smatch m;
    EXPECT_TRUE(std::regex_search(function, m, std::regex(R"(tn_conv_tile<[\d, ]+>, (\d+)>)"))) << function;
    return m.empty() ? 0 : std::stoi(m[1]);
  };
  EXPECT_EQ(vector_width("pw_vec"), 4);
  EXPECT_EQ(vector_width("pw_odd"), 1);
  // Grouped convs put the group on grid.z.
  const Node& grouped = *graph.find_node("conv_grouped");
  EXPECT_EQ(grouped.op->lower(grouped.ctx).launches[0].grid[2], Expr(2));
}

TEST(VisionCompile, ConvPathsFollowTheShape) {
  for (DType dtype : float_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    expect_conv_paths(parse(zoo(dtype)));
  }
}

TEST(VisionCompile, DecodeInitBytesInBundle) {
  for (DType dtype : float_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    const Graph graph =
        parse(one_op("yolo.detect_decode", "{levels: [[8, 8, 8], [4, 4, 16], [2, 2, 32]]}", "[B, 4, 84]", dtype));
    const Bundle bundle = compile(graph, test_compile_options());
    int host_params = 0;
    for (const BundleParam& p : bundle.params) {
      ++host_params;
      EXPECT_EQ(p.init, ParamInit::kHost);
      EXPECT_EQ(p.dtype, dtype);
      EXPECT_EQ(p.size, 84u * dtype_size(dtype));
      ASSERT_LE(p.offset + p.size, bundle.param_bytes.size());
      // The last anchor is level 2's cell (1, 1): x = y = 1.5, stride 32.
      const double last = read_element(bundle.param_bytes.data() + p.offset, dtype, 83);
      EXPECT_EQ(last, p.slot == "strides" ? 32.0 : 1.5) << p.slot;
    }
    EXPECT_EQ(host_params, 3);
  }
}

std::string graph_path(const char* name) { return std::string(TEENY_SOURCE_DIR) + "/graphs/" + name; }

// Every kernel of an example graph works in the graph's dtype (its name says so).
void expect_kernels_in(const Bundle& bundle, DType dtype) {
  for (const BundleKernel& k : bundle.kernels) EXPECT_NE(k.name.find(dtype_name(dtype)), std::string::npos) << k.name;
}

// yolo_head in `dtype`: the fusion pass makes the three written-out conv -> bn -> silu triples
// fused.conv2d nodes (two rewrites each) and keeps every param name.
void expect_yolo_head_fuses(const Graph& graph, DType dtype) {
  CompileStats fused_stats, unfused_stats;
  const Bundle fused = compile(graph, test_compile_options(), &fused_stats);
  CompileOptions no_fuse = test_compile_options();
  no_fuse.fuse = false;
  const Bundle unfused = compile(graph, no_fuse, &unfused_stats);
  EXPECT_EQ(fused_stats.passes_applied, 6);  // b2, b5, h4_dw: the batch norm, then the silu
  EXPECT_EQ(unfused_stats.passes_applied, 0);
  EXPECT_EQ(unfused.nodes.size(), fused.nodes.size() + 6);
  const BundleNode* b5 = fused.find_node("b5");
  ASSERT_NE(b5, nullptr);
  EXPECT_EQ(b5->op, "fused.conv2d");
  EXPECT_EQ(b5->fused_from, (std::vector<std::string>{"b5_conv", "b5_bn", "b5"}));
  std::set<std::string> names;
  for (const BundleParam& p : fused.params) names.insert(p.name);
  for (const char* name : {"b5_conv.weight", "b5_bn.running_var", "h4_dw_conv.weight", "b0.conv.weight",
                           "b0.bn.running_mean", "decode.anchor_x"})
    EXPECT_TRUE(names.count(name)) << name;
  EXPECT_FALSE(names.count("b5.conv.weight"));
  // Same params either way: fusion renames nothing the weights file sees.
  std::set<std::string> unfused_names;
  for (const BundleParam& p : unfused.params) unfused_names.insert(p.name);
  EXPECT_EQ(names, unfused_names);
  EXPECT_EQ(fused.outputs, std::vector<std::string>{"decode"});
  EXPECT_EQ(fused.tensor("decode").dtype, dtype);
  expect_kernels_in(fused, dtype);
  expect_kernels_in(unfused, dtype);
}

TEST(VisionCompile, YoloHeadFusesTheWrittenOutTriples) {
  for (const auto& [file, dtype] :
       {std::pair{"yolo_head.yaml", DType::kF32}, std::pair{"yolo_head_f16.yaml", DType::kF16}}) {
    SCOPED_TRACE(file);
    expect_yolo_head_fuses(load_graph(graph_path(file), registry()), dtype);
  }
}

TEST(VisionCompile, LeNetCompiles) {
  for (const auto& [file, dtype] :
       {std::pair{"lenet5.yaml", DType::kF32}, std::pair{"lenet5_bf16.yaml", DType::kBF16}}) {
    SCOPED_TRACE(file);
    const Graph graph = load_graph(graph_path(file), registry());
    const Bundle bundle = compile(graph, test_compile_options());
    EXPECT_EQ(shape_str(bundle.tensor("f7").shape), "[B, 10]");
    EXPECT_EQ(shape_str(bundle.tensor("s4").shape), "[B, 16, 5, 5]");
    EXPECT_EQ(bundle.tensor("f7").dtype, dtype);
    expect_kernels_in(bundle, dtype);
  }
}

// ResNet-18 at ImageNet size, f32 and bf16: torchvision's shapes stage by stage, and its
// 11,689,512 trainable params plus the running mean and variance of 4,800 batchnorm channels, under
// torchvision's module names with '.' written '_'.
TEST(VisionCompile, ResNet18HasTorchvisionsShapesAndParams) {
  for (const auto& [file, dtype] :
       {std::pair{"resnet18.yaml", DType::kF32}, std::pair{"resnet18_bf16.yaml", DType::kBF16}}) {
    SCOPED_TRACE(file);
    const Bundle bundle = compile(load_graph(graph_path(file), registry()), test_compile_options());
    EXPECT_EQ(shape_str(bundle.tensor("maxpool").shape), "[B, 64, 56, 56]");
    EXPECT_EQ(shape_str(bundle.tensor("layer1_1").shape), "[B, 64, 56, 56]");
    EXPECT_EQ(shape_str(bundle.tensor("layer2_1").shape), "[B, 128, 28, 28]");
    EXPECT_EQ(shape_str(bundle.tensor("layer3_1").shape), "[B, 256, 14, 14]");
    EXPECT_EQ(shape_str(bundle.tensor("layer4_1").shape), "[B, 512, 7, 7]");
    EXPECT_EQ(shape_str(bundle.tensor("fc").shape), "[B, 1000]");
    EXPECT_EQ(bundle.tensor("fc").dtype, dtype);
    // fuse_conv_epilogue: every conv with its batch norm, residual add and relu, 69 nodes to 24.
    std::map<std::string, int> ops;
    for (const BundleNode& n : bundle.nodes) ++ops[n.op];
    EXPECT_EQ(ops, (std::map<std::string, int>{
                       {"fused.conv2d", 20}, {"maxpool2d", 1}, {"global_avgpool", 1}, {"flatten", 1}, {"linear", 1}}));
    EXPECT_EQ(bundle.find_node("layer1_0")->fused_from,
              (std::vector<std::string>{"layer1_0_conv2", "layer1_0_bn2", "layer1_0_add", "layer1_0"}));
    int64_t elements = 0;
    std::set<std::string> names;
    for (const BundleParam& p : bundle.params) {
      int64_t numel = 1;
      for (const Expr& d : p.shape) numel *= d.eval({});
      elements += numel;
      names.insert(p.name);
    }
    EXPECT_EQ(elements, 11689512 + 2 * 4800);
    for (const char* name :
         {"conv1.weight", "bn1.running_var", "layer2_0_downsample_0.weight", "layer4_1_bn2.bias", "fc.weight"})
      EXPECT_EQ(names.count(name), 1u) << name;
    expect_kernels_in(bundle, dtype);
  }
}

// ---- GPU: the example graphs against the host reference (teeny run --check) --------------------
// (Every op's own cases run in tests/test_gpu_conformance.cpp, from OpDef::conformance_cases.)

// Writes the bundle of `graph` compiled with `options` to a fresh temp path.
std::string write_temp_bundle(const Graph& graph, const CompileOptions& options, const std::string& tag) {
  const std::string path = (std::filesystem::temp_directory_path() / ("teeny-gpu-vision-" + tag + ".teeny")).string();
  std::filesystem::remove_all(path);
  write_bundle(compile(graph, options), path);
  return path;
}

// The example graphs, fused and unfused, node by node against the references.
TEST(GpuVision, GraphsMatchTheirReferences) {
  for (const char* name : {"lenet5.yaml", "lenet5_bf16.yaml", "yolo_head.yaml", "yolo_head_f16.yaml", "resnet18.yaml",
                           "resnet18_bf16.yaml"}) {
    const Graph graph = load_graph(graph_path(name), registry());
    for (bool fuse : {true, false}) {
      CompileOptions options = test_compile_options();
      options.fuse = fuse;
      const std::string bundle = write_temp_bundle(graph, options, fmt::format("{}-{}", graph.name, fuse));
      for (int batch : {1, 3}) {
        const testing::Command run =
            testing::run_teeny(fmt::format("run {} --bind B={} --init random --check", bundle, batch));
        if (run.exit_code == 3) GTEST_SKIP() << "no CUDA driver/device: " << run.err;
        EXPECT_EQ(run.exit_code, 0) << name << (fuse ? " fused" : " --no-fuse") << " B=" << batch << ":\n"
                                    << run.out << run.err;
      }
    }
  }
}

}  // namespace
}  // namespace teeny
