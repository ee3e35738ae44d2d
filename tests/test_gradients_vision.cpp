// conv2d's backward rule and the grad.* ops it adds (ops.md, "Gradients"): the exact backward
// nodes, the ops' host references against hand-computed values, their shape errors (exact text),
// and the gradients against finite differences of the loss (tests/grad_check_util.h) over
// strides, padding, dilation, groups (depthwise too) and bias, compiled through NVRTC and run by
// the host reference executor.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/autodiff.h"
#include "tests/grad_check_util.h"
#include "tests/grad_graph_util.h"
#include "tests/op_test_util.h"

namespace teeny {
namespace {

using op_testing::infer_error;
using op_testing::reference;
using op_testing::registry;
using op_testing::tensor;
using testing::backward_of;
using testing::expect_gradients_match;
using testing::loss_graph;
using testing::trained;

TensorType nchw(int64_t b, int64_t c, int64_t h, int64_t w) {
  return tensor(DType::kF32, {Expr(b), Expr(c), Expr(h), Expr(w)});
}

// Conv attrs with the defaults a graph's node would get (the op tests' contexts take attrs as
// given).
nlohmann::json conv(nlohmann::json attrs) {
  for (const auto& [name, value] :
       {std::pair<const char*, int>{"stride", 1}, {"padding", 0}, {"dilation", 1}, {"groups", 1}})
    if (!attrs.contains(name)) attrs[name] = value;
  return attrs;
}

// ---- the graphs the rule builds ----------------------------------------------------------------

TEST(VisionGradientRules, Conv2dReadsItsInputAndWeight) {
  const Graph graph = trained(
      loss_graph("  x: {dtype: f32, shape: [B, 4, 9, 8]}\n"
                 "nodes:\n"
                 "  - {name: c1, op: conv2d, inputs: [x], attrs: {out_channels: 6, kernel_size: 3, stride: 2, "
                 "padding: 1, groups: 2}}\n"
                 "  - {name: out, op: conv2d, inputs: [c1], attrs: {out_channels: 5, kernel_size: 1, bias: false}}\n",
                 "[B, 5, 5, 4]", "  inputs: [x]\n", "dims:\n  B: {min: 1, max: 8, default: 2}\n"));
  // The forward attrs but bias; grad.conv2d_dx adds x's shape.
  const std::string conv1 =
      "\"dilation\":[1,1],\"groups\":2,\"kernel_size\":[3,3],\"out_channels\":6,\"padding\":[1,1],";
  const std::string conv2 =
      "\"dilation\":[1,1],\"groups\":1,\"kernel_size\":[1,1],\"out_channels\":5,\"padding\":[0,0],";
  const std::vector<std::string> expected{
      // No bias; dx through the weight (a param ref).
      "bwd_out = grad.conv2d_dx(bwd_loss) {" + conv2 +
          "\"shape\":[\"B\",\"6\",\"5\",\"4\"],\"stride\":[1,1]} {weight->out.weight}",
      "bwd_out_1 = grad.conv2d_dweight(bwd_loss, c1) {" + conv2 + "\"stride\":[1,1]}",
      // The shape tells the 9x8 input from a 10x8 one, whose stride-2 conv has the same output.
      "bwd_c1 = grad.conv2d_dx(bwd_out) {" + conv1 +
          "\"shape\":[\"B\",\"4\",\"9\",\"8\"],\"stride\":[2,2]} {weight->c1.weight}",
      "bwd_c1_1 = grad.conv2d_dweight(bwd_out, x) {" + conv1 + "\"stride\":[2,2]}",
      "bwd_c1_2 = grad.sum_to(bwd_out) {\"shape\":[\"6\",\"1\",\"1\"]}",
      "bwd_c1_3 = reshape(bwd_c1_2) {\"shape\":[\"6\"]}",
  };
  EXPECT_EQ(backward_of(graph, {"c1", "out"}), expected);
  EXPECT_EQ(graph.gradients,
            (std::map<std::string, std::string>{
                {"c1.bias", "bwd_c1_3"}, {"c1.weight", "bwd_c1_1"}, {"out.weight", "bwd_out_1"}, {"x", "bwd_c1"}}));
  // The gradients have their params' and input's types.
  EXPECT_EQ(graph.find_node("bwd_c1")->ctx.output.shape, (Shape{Expr::dim("B"), Expr(4), Expr(9), Expr(8)}));
  EXPECT_EQ(graph.find_node("bwd_c1_1")->ctx.output.shape, (Shape{Expr(6), Expr(2), Expr(3), Expr(3)}));
  EXPECT_EQ(graph.find_node("bwd_c1_3")->ctx.output.shape, (Shape{Expr(6)}));
}

TEST(VisionGradientRules, Conv2dWithoutInputGradientSkipsDx) {
  const Graph graph =
      trained(loss_graph("  x: {dtype: f32, shape: [2, 3, 5, 5]}\n"
                         "nodes:\n"
                         "  - {name: out, op: conv2d, inputs: [x], attrs: {out_channels: 4, kernel_size: 3}}\n",
                         "[2, 4, 3, 3]", "  params: [out.weight]\n"));
  EXPECT_EQ(backward_of(graph, {"out"}),
            std::vector<std::string>{
                "bwd_out = grad.conv2d_dweight(bwd_loss, x) {\"dilation\":[1,1],\"groups\":1,\"kernel_size\":[3,3],"
                "\"out_channels\":4,\"padding\":[0,0],\"stride\":[1,1]}"});
}

// ---- the grad.* ops' references ------------------------------------------------------------

TEST(VisionGradientReference, Conv2dDxAddsEachTapAtThePixelItRead) {
  // weight [1, 1, 2, 2] = [[1, 2], [3, 4]] over x [1, 1, 3, 3]; dy [[1, 0], [0, 2]]: the weight
  // added at the top left, twice the weight one pixel down and right.
  const HostTensor dx =
      reference("grad.conv2d_dx", conv({{"out_channels", 1}, {"kernel_size", 2}, {"shape", {1, 1, 3, 3}}}),
                {{{1, 1, 2, 2}, {1, 0, 0, 2}}}, {{1, 2, 3, 4}});
  EXPECT_EQ(dx.shape, (std::vector<int64_t>{1, 1, 3, 3}));
  EXPECT_EQ(dx.data, (std::vector<double>{1, 2, 0, 3, 6, 4, 0, 6, 8}));
  // Stride 2: the one output pixel read the top-left 2x2 only; the last row and column of x got
  // no gradient.
  const HostTensor strided = reference(
      "grad.conv2d_dx", conv({{"out_channels", 1}, {"kernel_size", 2}, {"stride", 2}, {"shape", {1, 1, 3, 3}}}),
      {{{1, 1, 1, 1}, {5}}}, {{1, 2, 3, 4}});
  EXPECT_EQ(strided.data, (std::vector<double>{5, 10, 0, 15, 20, 0, 0, 0, 0}));
  // Padding 1, 1x1 image, two channels in two groups: each channel's centre tap alone.
  const HostTensor padded =
      reference("grad.conv2d_dx",
                conv({{"out_channels", 2}, {"kernel_size", 3}, {"padding", 1}, {"groups", 2}, {"shape", {1, 2, 1, 1}}}),
                {{{1, 2, 1, 1}, {1, 10}}}, {{0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0}});
  EXPECT_EQ(padded.data, (std::vector<double>{7, 30}));
}

TEST(VisionGradientReference, Conv2dDweightSumsDyTimesWhatEachTapRead) {
  // x [1, 1, 3, 3] = 1..9, dy [[1, 0], [0, 2]], 2x2 taps: dW[kh][kw] = x[kh][kw] + 2 x[kh+1][kw+1].
  const HostTensor dw = reference("grad.conv2d_dweight", conv({{"out_channels", 1}, {"kernel_size", 2}}),
                                  {{{1, 1, 2, 2}, {1, 0, 0, 2}}, {{1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}});
  EXPECT_EQ(dw.shape, (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_EQ(dw.data, (std::vector<double>{11, 14, 20, 23}));
  // Dilation 2 over two images: the one output pixel's taps read x's corners; the images add.
  const HostTensor dilated =
      reference("grad.conv2d_dweight", conv({{"out_channels", 1}, {"kernel_size", 2}, {"dilation", 2}}),
                {{{2, 1, 1, 1}, {1, -1}}, {{2, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 1, 0, 0, 0, 0, 0, 0}}});
  EXPECT_EQ(dilated.data, (std::vector<double>{1, 3 - 1, 7, 9}));
}

TEST(VisionGradientShape, ErrorsNameWhatDoesNotFit) {
  const nlohmann::json attrs = conv({{"out_channels", 4}, {"kernel_size", 3}, {"stride", 2}, {"padding", 1}});
  nlohmann::json dx = attrs;
  dx["shape"] = {2, 3, 9, 8};
  std::string key;
  EXPECT_EQ(infer_error("grad.conv2d_dx", dx, {nchw(2, 4, 5, 5)}, &key),
            "grad.conv2d_dx needs dy of the conv's output shape [2, 4, 5, 4] for x [2, 3, 9, 8], got [2, 4, 5, 5]");
  EXPECT_EQ(key, "inputs");
  dx["shape"] = {3, 9, 8};
  EXPECT_EQ(infer_error("grad.conv2d_dx", dx, {nchw(2, 4, 5, 4)}, &key),
            "grad.conv2d_dx: shape must be the forward input's [B, C, H, W], got [3, 9, 8]");
  EXPECT_EQ(key, "attrs.shape");
  dx["shape"] = {2, 0, 9, 8};
  EXPECT_EQ(infer_error("grad.conv2d_dx", dx, {nchw(2, 4, 5, 4)}, &key),
            "grad.conv2d_dx: shape [2, 0, 9, 8] has an extent below 1");
  dx["shape"] = {2, "C", 9, 8};
  EXPECT_EQ(infer_error("grad.conv2d_dx", dx, {nchw(2, 4, 5, 4)}, &key),
            "grad.conv2d_dx needs a constant channel count, got C = C");
  EXPECT_EQ(key, "attrs.shape");
  dx["shape"] = {2, 3, 9, 8};
  dx["groups"] = 2;
  EXPECT_EQ(infer_error("grad.conv2d_dx", dx, {nchw(2, 4, 5, 4)}, &key), "in_channels 3 is not divisible by groups 2");
  EXPECT_EQ(key, "attrs.groups");

  // x 10x8 has the output of 9x8: both fit dy.
  EXPECT_EQ(infer_error("grad.conv2d_dweight", attrs, {nchw(2, 4, 5, 4), nchw(2, 3, 10, 8)}), "(no error)");
  EXPECT_EQ(
      infer_error("grad.conv2d_dweight", attrs, {nchw(2, 4, 4, 4), nchw(2, 3, 9, 8)}, &key),
      "grad.conv2d_dweight needs dy of the conv's output shape [2, 4, 5, 4] for x [2, 3, 9, 8], got [2, 4, 4, 4]");
  EXPECT_EQ(key, "inputs");
  EXPECT_EQ(infer_error("grad.conv2d_dweight", attrs,
                        {nchw(2, 4, 5, 4), tensor(DType::kF32, {Expr(2), Expr(3), Expr(9)})}, &key),
            "grad.conv2d_dweight expects x [B, C, H, W] (rank 4), got [2, 3, 9]");
  EXPECT_EQ(infer_error("grad.conv2d_dweight", attrs,
                        {nchw(2, 4, 5, 4), tensor(DType::kBF16, {Expr(2), Expr(3), Expr(9), Expr(8)})}),
            "input 1 is bf16 but input 0 is f32; grad.conv2d_dweight needs one dtype");
  nlohmann::json big = attrs;
  big["kernel_size"] = 11;
  EXPECT_EQ(infer_error("grad.conv2d_dweight", big, {nchw(2, 4, 5, 4), nchw(2, 3, 9, 8)}, &key),
            "the kernel width 11 is larger than the padded input width 8 + 2*1");
  EXPECT_EQ(key, "attrs.kernel_size");
}

// ---- gradients against finite differences ----------------------------------------------------

// One conv2d on x [2, C, H, W] (the node `out`), its every gradient checked.
void expect_conv_gradients_match(const std::string& x_shape, const std::string& attrs, const std::string& y_shape,
                                 bool bias) {
  SCOPED_TRACE(fmt::format("x {} attrs {}", x_shape, attrs));
  expect_gradients_match(
      loss_graph(fmt::format("  x: {{dtype: f32, shape: {}}}\n"
                             "nodes:\n"
                             "  - {{name: out, op: conv2d, inputs: [x], attrs: {{{}, bias: {}}}}}\n",
                             x_shape, attrs, bias),
                 y_shape, "  inputs: [x]\n"),
      registry(),
      bias ? std::vector<std::string>{"out.bias", "out.weight", "x"} : std::vector<std::string>{"out.weight", "x"});
}

TEST(VisionGradientCheck, Conv2dStridePaddingAndBias) {
  // 3x3 stride 2 padding 1 over an odd 7x6 image: the last row of x feeds only the last output row.
  expect_conv_gradients_match("[2, 3, 7, 6]", "out_channels: 4, kernel_size: 3, stride: 2, padding: 1", "[2, 4, 4, 3]",
                              true);
  // Stride 2 that skips the last row and column of x entirely (their gradient is 0).
  expect_conv_gradients_match("[2, 2, 6, 5]", "out_channels: 3, kernel_size: 2, stride: 2", "[2, 3, 3, 2]", false);
  // Unequal window, stride and padding per axis.
  expect_conv_gradients_match("[1, 2, 5, 7]", "out_channels: 3, kernel_size: [3, 2], stride: [1, 2], padding: [2, 0]",
                              "[1, 3, 7, 3]", true);
}

TEST(VisionGradientCheck, Conv2dDilationAndOneByOne) {
  expect_conv_gradients_match("[2, 2, 7, 7]", "out_channels: 3, kernel_size: 3, dilation: 2, padding: 1",
                              "[2, 3, 5, 5]", true);
  expect_conv_gradients_match("[2, 3, 4, 3]", "out_channels: 5, kernel_size: 1", "[2, 5, 4, 3]", false);
  // A 1x1 image under a padded 3x3 window: the centre tap alone.
  expect_conv_gradients_match("[2, 3, 1, 1]", "out_channels: 2, kernel_size: 3, padding: 1", "[2, 2, 1, 1]", true);
}

TEST(VisionGradientCheck, Conv2dGroupsAndDepthwise) {
  expect_conv_gradients_match("[2, 4, 5, 5]", "out_channels: 6, kernel_size: 3, padding: 1, groups: 2", "[2, 6, 5, 5]",
                              true);
  // Depthwise with a multiplier of 2, strided.
  expect_conv_gradients_match("[2, 3, 6, 5]", "out_channels: 6, kernel_size: 3, stride: 2, padding: 1, groups: 3",
                              "[2, 6, 3, 3]", true);
  expect_conv_gradients_match("[1, 4, 5, 4]", "out_channels: 4, kernel_size: 3, padding: 2, dilation: 2, groups: 4",
                              "[1, 4, 5, 4]", false);
}

// Two convs around a tanh over a symbolic batch: the first conv's dx and both weights' gradients
// pass through the second conv's dx.
TEST(VisionGradientCheck, Conv2dChainOverASymbolicBatch) {
  testing::GradCheckOptions options;
  options.binds = {"B=2"};
  expect_gradients_match(
      loss_graph("  x: {dtype: f32, shape: [B, 2, 6, 6]}\n"
                 "nodes:\n"
                 "  - {name: c1, op: conv2d, inputs: [x], attrs: {out_channels: 4, kernel_size: 3, stride: 2, "
                 "padding: 1}}\n"
                 "  - {name: act, op: tanh, inputs: [c1]}\n"
                 "  - {name: out, op: conv2d, inputs: [act], attrs: {out_channels: 2, kernel_size: 3, padding: 1, "
                 "groups: 2}}\n",
                 "[B, 2, 3, 3]", "  inputs: [x]\n", "dims:\n  B: {min: 1, max: 8, default: 2}\n"),
      registry(), {"c1.bias", "c1.weight", "out.bias", "out.weight", "x"}, options);
}

}  // namespace
}  // namespace teeny
