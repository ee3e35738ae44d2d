// Attention's backward rules (split_heads, merge_heads, sdpa) and the grad.sdpa_* ops sdpa's adds
// (ops.md, "Gradients"): the exact backward nodes, the ops' host references against values worked
// out by hand, their shape errors (exact text), the rules' gradients against finite differences of
// the loss (tests/grad_check_util.h) including causal masks and grouped-query attention, and
// tiny_lm trained on a cross_entropy loss compiled with its backward nodes through NVRTC.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/autodiff.h"
#include "core/compile.h"
#include "tests/grad_check_util.h"
#include "tests/grad_graph_util.h"
#include "tests/op_test_util.h"

namespace teeny {
namespace {

using op_testing::HostIn;
using op_testing::infer_error;
using op_testing::reference;
using op_testing::registry;
using op_testing::tensor;
using testing::backward_of;
using testing::expect_gradients_match;
using testing::loss_graph;
using testing::trained;

// ---- the graphs the rules build ----------------------------------------------------------------

TEST(AttentionGradientRules, SplitAndMergeHeadsGoBackThroughEachOther) {
  const Graph graph =
      trained(loss_graph("  x: {dtype: f32, shape: [2, 3, 8]}\n"
                         "nodes:\n"
                         "  - {name: sh, op: split_heads, inputs: [x], attrs: {heads: 2}}\n"
                         "  - {name: out, op: merge_heads, inputs: [sh], attrs: {heads: 4}}\n",
                         "[1, 3, 16]", "  inputs: [x]\n"));
  const std::vector<std::string> expected{
      "bwd_out = split_heads(bwd_loss) {\"heads\":4}",
      "bwd_sh = merge_heads(bwd_out) {\"heads\":2}",
  };
  EXPECT_EQ(backward_of(graph, {"sh", "out"}), expected);
  EXPECT_EQ(graph.find_node("bwd_sh")->ctx.output.shape, (Shape{Expr(2), Expr(3), Expr(8)}));
}

TEST(AttentionGradientRules, SdpaRecomputesStatisticsAndCutsDkAndDvFromOneTensor) {
  const Graph graph =
      trained(loss_graph("  q: {dtype: f32, shape: [4, 3, 8]}\n"
                         "  k: {dtype: f32, shape: [2, 5, 8]}\n"
                         "  v: {dtype: f32, shape: [2, 5, 8]}\n"
                         "nodes:\n"
                         "  - {name: out, op: sdpa, inputs: [q, k, v], attrs: {causal: true, "
                         "kv_groups: 2}}\n",
                         "[4, 3, 8]", "  inputs: [q, k, v]\n"));
  const std::string attrs = "{\"causal\":true,\"kv_groups\":2}";
  const std::vector<std::string> expected{
      "bwd_out = grad.sdpa_stats(q, k, out, bwd_loss) " + attrs,
      "bwd_out_1 = grad.sdpa_dq(q, k, v, bwd_loss, bwd_out) " + attrs,
      "bwd_out_2 = grad.sdpa_dkv(q, k, v, bwd_loss, bwd_out) " + attrs,
      "bwd_out_3 = grad.slice(bwd_out_2) {\"axis\":2,\"index\":0,\"sizes\":[\"8\",\"8\"]}",
      "bwd_out_4 = grad.slice(bwd_out_2) {\"axis\":2,\"index\":1,\"sizes\":[\"8\",\"8\"]}",
  };
  EXPECT_EQ(backward_of(graph, {"out"}), expected);
  EXPECT_EQ(graph.gradients,
            (std::map<std::string, std::string>{{"k", "bwd_out_3"}, {"q", "bwd_out_1"}, {"v", "bwd_out_4"}}));
  const TensorType& stats = graph.find_node("bwd_out")->ctx.output;
  EXPECT_EQ(stats.dtype, DType::kF32);
  EXPECT_EQ(stats.shape, (Shape{Expr(4), Expr(3), Expr(2)}));
  EXPECT_EQ(graph.find_node("bwd_out_2")->ctx.output.shape, (Shape{Expr(2), Expr(5), Expr(16)}));
  EXPECT_EQ(graph.find_node("bwd_out_4")->ctx.output.shape, (Shape{Expr(2), Expr(5), Expr(8)}));
}

TEST(AttentionGradientRules, SdpaWithoutKvGradientsSkipsTheDkvKernel) {
  const Graph graph =
      trained(loss_graph("  q: {dtype: f32, shape: [2, 3, 8]}\n"
                         "  kv: {dtype: f32, shape: [2, 3, 8]}\n"
                         "nodes:\n"
                         "  - {name: out, op: sdpa, inputs: [q, kv, kv], attrs: {scale: 0.5}}\n",
                         "[2, 3, 8]", "  inputs: [q]\n"));
  const std::vector<std::string> expected{
      "bwd_out = grad.sdpa_stats(q, kv, out, bwd_loss) {\"causal\":false,\"kv_groups\":1,\"scale\":0.5}",
      "bwd_out_1 = grad.sdpa_dq(q, kv, kv, bwd_loss, bwd_out) {\"causal\":false,\"kv_groups\":1,\"scale\":0.5}",
  };
  EXPECT_EQ(backward_of(graph, {"out"}), expected);
}

// ---- the grad.sdpa_* ops' references -------------------------------------------------------------

// One query q = [1] against keys [1, 2] and values [10, 20] (head dim 1, scale 1): scores [1, 2],
// p = [p0, p1] = [1, e] / (1 + e), o = 10 p0 + 20 p1; with dO = [1], D = o, dP = v, and
// dS = p (v - o) = [-10 p0 p1, 10 p0 p1]. So dq = dS·k = 10 p0 p1, dk = dS q, dv = p dO.
const double kE = std::exp(1.0), kP0 = 1 / (1 + kE), kP1 = kE / (1 + kE), kO = 10 * kP0 + 20 * kP1;

std::vector<HostIn> one_query(int64_t heads, bool causal_pair = false) {
  if (causal_pair) {
    // Two queries [1, 1] over the same keys: under the causal mask query 0 sees key 0 alone.
    return {{{1, 2, 1}, {1, 1}}, {{1, 2, 1}, {1, 2}}, {{1, 2, 1}, {10, 20}}, {{1, 2, 1}, {1, 1}}};
  }
  // `heads` identical query heads sharing one k/v head.
  return {{{heads, 1, 1}, std::vector<double>(heads, 1.0)},
          {{1, 2, 1}, {1, 2}},
          {{1, 2, 1}, {10, 20}},
          {{heads, 1, 1}, std::vector<double>(heads, 1.0)}};
}

// grad.sdpa_stats then `op` over inputs q, k, v, do (o from sdpa's reference, or fused.sdpa_heads'
// where attrs name heads).
HostTensor through_stats(const std::string& op, const nlohmann::json& attrs, std::vector<HostIn> in) {
  const HostTensor o = reference(attrs.contains("heads") ? "fused.sdpa_heads" : "sdpa", attrs, {in[0], in[1], in[2]});
  const HostTensor stats = reference("grad.sdpa_stats", attrs, {in[0], in[1], {o.shape, o.data}, in[3]});
  if (op == "grad.sdpa_stats") return stats;
  in.push_back({stats.shape, stats.data});
  return reference(op, attrs, in);
}

void expect_near_all(const std::vector<double>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-12) << i;
}

TEST(AttentionGradientReference, StatsAreTheLogSumExpAndRowsumOfDoTimesO) {
  const nlohmann::json attrs = {{"causal", false}, {"scale", 1.0}};
  const HostTensor stats = through_stats("grad.sdpa_stats", attrs, one_query(1));
  EXPECT_EQ(stats.shape, (std::vector<int64_t>{1, 1, 2}));
  expect_near_all(stats.data, {std::log(kE + kE * kE), kO});
  // A scale of 2 doubles the scores: log(e^2 + e^4).
  const HostTensor scaled = through_stats("grad.sdpa_stats", {{"causal", false}, {"scale", 2.0}}, one_query(1));
  EXPECT_NEAR(scaled.data[0], std::log(std::exp(2.0) + std::exp(4.0)), 1e-12);
}

TEST(AttentionGradientReference, DqAndDkvOfOneQuery) {
  const nlohmann::json attrs = {{"causal", false}, {"scale", 1.0}};
  expect_near_all(through_stats("grad.sdpa_dq", attrs, one_query(1)).data, {10 * kP0 * kP1});
  const HostTensor dkv = through_stats("grad.sdpa_dkv", attrs, one_query(1));
  EXPECT_EQ(dkv.shape, (std::vector<int64_t>{1, 2, 2}));
  // Rows [dk_j, dv_j].
  expect_near_all(dkv.data, {-10 * kP0 * kP1, kP0, 10 * kP0 * kP1, kP1});
  // A scale of 0.5 halves the scores (so p changes) and scales dq and dk once more.
  const double e = std::exp(0.5), p0 = 1 / (1 + e), p1 = e / (1 + e);
  expect_near_all(through_stats("grad.sdpa_dq", {{"causal", false}, {"scale", 0.5}}, one_query(1)).data,
                  {0.5 * 10 * p0 * p1});
}

TEST(AttentionGradientReference, CausalMaskAndSharedKvHeads) {
  // Query 0 sees key 0 alone: p = 1, o = v0, dS = 0; it adds dO = 1 to dv0 and nothing else.
  // Query 1 is the unmasked query above.
  const nlohmann::json causal = {{"causal", true}, {"scale", 1.0}};
  expect_near_all(through_stats("grad.sdpa_dq", causal, one_query(1, true)).data, {0, 10 * kP0 * kP1});
  expect_near_all(through_stats("grad.sdpa_dkv", causal, one_query(1, true)).data,
                  {-10 * kP0 * kP1, 1 + kP0, 10 * kP0 * kP1, kP1});
  // Three identical query heads on one k/v head: dq per head as one, dk and dv three times.
  const nlohmann::json grouped = {{"causal", false}, {"scale", 1.0}, {"kv_groups", 3}};
  expect_near_all(through_stats("grad.sdpa_dq", grouped, one_query(3)).data, std::vector<double>(3, 10 * kP0 * kP1));
  expect_near_all(through_stats("grad.sdpa_dkv", grouped, one_query(3)).data,
                  {-30 * kP0 * kP1, 3 * kP0, 30 * kP0 * kP1, 3 * kP1});
}

TEST(AttentionGradientShape, ErrorsNameWhatDoesNotFit) {
  const nlohmann::json attrs = {{"causal", false}, {"kv_groups", 2}};
  auto t = [](DType dtype, std::vector<int64_t> dims) {
    std::vector<Expr> shape;
    for (int64_t d : dims) shape.push_back(Expr(d));
    return tensor(dtype, shape);
  };
  const DType f32 = DType::kF32;
  EXPECT_EQ(infer_error("grad.sdpa_stats", attrs,
                        {t(f32, {4, 3, 8}), t(f32, {4, 5, 8}), t(f32, {4, 3, 8}), t(f32, {4, 3, 8})}),
            "grad.sdpa_stats: q [N, Sq, Dh] needs k [N / kv_groups, Skv, Dh] with kv_groups = 2; got q [4, 3, 8] and "
            "k [4, 5, 8]");
  EXPECT_EQ(
      infer_error("grad.sdpa_stats", attrs, {t(f32, {4, 3, 8}), t(f32, {2, 5, 8}), t(f32, {4, 3, 8}), t(f32, {4, 8})}),
      "grad.sdpa_stats needs q, k, o, do of rank 3; do is [4, 8]");
  EXPECT_EQ(
      infer_error("grad.sdpa_dq", attrs,
                  {t(f32, {4, 3, 8}), t(f32, {2, 5, 8}), t(f32, {2, 5, 8}), t(f32, {4, 5, 8}), t(f32, {4, 3, 2})}),
      "grad.sdpa_dq: do must have q's shape [4, 3, 8]; got [4, 5, 8]");
  EXPECT_EQ(
      infer_error("grad.sdpa_dkv", attrs,
                  {t(f32, {4, 3, 8}), t(f32, {2, 5, 8}), t(f32, {2, 4, 8}), t(f32, {4, 3, 8}), t(f32, {4, 3, 2})}),
      "grad.sdpa_dkv: k and v must have the same shape; got [2, 5, 8] and [2, 4, 8]");
  EXPECT_EQ(infer_error("grad.sdpa_dkv", attrs,
                        {t(DType::kBF16, {4, 3, 8}), t(DType::kBF16, {2, 5, 8}), t(DType::kBF16, {2, 5, 8}),
                         t(DType::kBF16, {4, 3, 8}), t(DType::kBF16, {4, 3, 2})}),
            "grad.sdpa_dkv: stats must be f32 [4, 3, 2] (grad.sdpa_stats of q [4, 3, 8]); got bf16 [4, 3, 2]");
  EXPECT_EQ(infer_error("grad.sdpa_dq", {{"causal", false}},
                        {t(f32, {2, 3, 300}), t(f32, {2, 5, 300}), t(f32, {2, 5, 300}), t(f32, {2, 3, 300}),
                         t(f32, {2, 3, 2})}),
            "grad.sdpa_dq supports head dims up to 256; got 300");
  // fused.sdpa_heads' layout: heads side by side in each row.
  EXPECT_EQ(infer_error("grad.sdpa_stats", {{"heads", 3}, {"kv_groups", 2}},
                        {t(f32, {2, 3, 24}), t(f32, {2, 5, 8}), t(f32, {2, 3, 24}), t(f32, {2, 3, 24})}),
            "grad.sdpa_stats: heads = 3 must divide q's width 24 and be a multiple of kv_groups = 2");
  EXPECT_EQ(infer_error("grad.sdpa_stats", {{"heads", 4}, {"kv_groups", 2}},
                        {t(f32, {2, 3, 32}), t(f32, {2, 5, 32}), t(f32, {2, 3, 32}), t(f32, {2, 3, 32})}),
            "grad.sdpa_stats: q [B, Sq, heads*Dh] needs k [B, Skv, heads/kv_groups*Dh] with heads = 4, kv_groups = "
            "2; got q [2, 3, 32] and k [2, 5, 32]");
  EXPECT_EQ(
      infer_error("grad.sdpa_dq", {{"heads", 4}, {"kv_groups", 2}},
                  {t(f32, {2, 3, 32}), t(f32, {2, 5, 16}), t(f32, {2, 5, 16}), t(f32, {2, 3, 32}), t(f32, {2, 3, 2})}),
      "grad.sdpa_dq: stats must be f32 [8, 3, 2] (grad.sdpa_stats of q [2, 3, 32]); got f32 [2, 3, 2]");
}

// The heads-in-place layout computes what sdpa's layout does, head for head: q [1, 2, 2*3] with
// 2 heads of 3 on one k/v head [1, 4, 3] against the same heads split into q [2, 2, 3].
TEST(AttentionGradientReference, HeadsInPlaceMatchOneHeadPerRowBlock) {
  const std::vector<double> q = {0.1, -0.4, 0.7, 0.3, 0.2, -0.5, -0.6, 0.8, 0.05, 0.9, -0.2, 0.4};
  const std::vector<double> k = {0.5, -0.1, 0.2, -0.3, 0.6, 0.1, 0.9, 0.2, -0.7, 0.0, 0.4, 0.3};
  const std::vector<double> v = {1.0, 2.0, -1.0, 0.5, -0.5, 3.0, -2.0, 1.5, 0.25, 0.75, -1.25, 2.5};
  const std::vector<double> dout = {0.3, -0.2, 0.1, 0.6, 0.4, -0.1, -0.3, 0.2, 0.5, 0.1, -0.6, 0.7};
  // [1, 2, 6] (row i: head 0's 3 values, then head 1's) as [2, 2, 3] (head-major).
  auto split = [](const std::vector<double>& x) {
    std::vector<double> out(12);
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 2; ++i)
        for (int d = 0; d < 3; ++d) out[(h * 2 + i) * 3 + d] = x[i * 6 + h * 3 + d];
    return out;
  };
  const nlohmann::json in_place = {{"causal", true}, {"heads", 2}, {"kv_groups", 2}};
  const nlohmann::json per_row = {{"causal", true}, {"kv_groups", 2}};
  const std::vector<HostIn> fused = {{{1, 2, 6}, q}, {{1, 4, 3}, k}, {{1, 4, 3}, v}, {{1, 2, 6}, dout}};
  const std::vector<HostIn> heads = {{{2, 2, 3}, split(q)}, {{1, 4, 3}, k}, {{1, 4, 3}, v}, {{2, 2, 3}, split(dout)}};
  for (const char* op : {"grad.sdpa_stats", "grad.sdpa_dkv"}) {
    SCOPED_TRACE(op);
    expect_near_all(through_stats(op, in_place, fused).data, through_stats(op, per_row, heads).data);
  }
  expect_near_all(split(through_stats("grad.sdpa_dq", in_place, fused).data),
                  through_stats("grad.sdpa_dq", per_row, heads).data);
}

// ---- gradients against finite differences ------------------------------------------------------

TEST(AttentionGradientCheck, SplitThenMergeWithOtherHeads) {
  expect_gradients_match(loss_graph("  x: {dtype: f32, shape: [2, 3, 8]}\n"
                                    "nodes:\n"
                                    "  - {name: sh, op: split_heads, inputs: [x], attrs: {heads: 2}}\n"
                                    "  - {name: t, op: tanh, inputs: [sh]}\n"
                                    "  - {name: out, op: merge_heads, inputs: [t], attrs: {heads: 4}}\n",
                                    "[1, 3, 16]", "  inputs: [x]\n"),
                         registry(), {"x"});
}

TEST(AttentionGradientCheck, SdpaPlainCausalAndScaled) {
  for (const char* attrs :
       {"{causal: false}", "{causal: true}", "{causal: true, scale: -0.7}", "{causal: true, window: 2}"}) {
    SCOPED_TRACE(attrs);
    expect_gradients_match(loss_graph(fmt::format("  q: {{dtype: f32, shape: [2, 4, 3]}}\n"
                                                  "  k: {{dtype: f32, shape: [2, 4, 3]}}\n"
                                                  "  v: {{dtype: f32, shape: [2, 4, 3]}}\n"
                                                  "nodes:\n"
                                                  "  - {{name: out, op: sdpa, inputs: [q, k, v], attrs: {}}}\n",
                                                  attrs),
                                      "[2, 4, 3]", "  inputs: [q, k, v]\n"),
                           registry(), {"k", "q", "v"});
  }
}

TEST(AttentionGradientCheck, SlidingWindowPastTheKeys) {
  // 6 queries on 3 keys with a window of 2: queries 4 and 5 see no key (output and gradient 0).
  expect_gradients_match(loss_graph("  q: {dtype: f32, shape: [2, 6, 3]}\n"
                                    "  k: {dtype: f32, shape: [2, 3, 3]}\n"
                                    "  v: {dtype: f32, shape: [2, 3, 3]}\n"
                                    "nodes:\n"
                                    "  - {name: out, op: sdpa, inputs: [q, k, v], attrs: {causal: true, window: 2}}\n",
                                    "[2, 6, 3]", "  inputs: [q, k, v]\n"),
                         registry(), {"k", "q", "v"});
}

TEST(AttentionGradientCheck, GroupedQueryAttentionSumsOverTheSharingHeads) {
  // 6 query heads on 2 k/v heads, queries and keys of different lengths, causal.
  expect_gradients_match(loss_graph("  q: {dtype: f32, shape: [6, 3, 4]}\n"
                                    "  k: {dtype: f32, shape: [2, 5, 4]}\n"
                                    "  v: {dtype: f32, shape: [2, 5, 4]}\n"
                                    "nodes:\n"
                                    "  - {name: out, op: sdpa, inputs: [q, k, v], attrs: {causal: true, "
                                    "kv_groups: 3}}\n",
                                    "[6, 3, 4]", "  inputs: [q, k, v]\n"),
                         registry(), {"k", "q", "v"});
}

TEST(AttentionGradientCheck, FusedHeadsGroupedQueryInPlace) {
  // 4 query heads of 3 on 2 k/v heads side by side in each row, queries and keys of different
  // lengths, causal.
  expect_gradients_match(loss_graph("  q: {dtype: f32, shape: [2, 3, 12]}\n"
                                    "  k: {dtype: f32, shape: [2, 5, 6]}\n"
                                    "  v: {dtype: f32, shape: [2, 5, 6]}\n"
                                    "nodes:\n"
                                    "  - {name: out, op: fused.sdpa_heads, inputs: [q, k, v], attrs: {heads: 4, "
                                    "kv_groups: 2, causal: true}}\n",
                                    "[2, 3, 12]", "  inputs: [q, k, v]\n"),
                         registry(), {"k", "q", "v"});
}

// An attention block as tiny_lm's: q, k, v linears on one input, heads split, causal sdpa,
// merged, projected; every param and the input get their gradients through all of it. k has no
// bias: one would add q·b to every score of a row alike, which softmax ignores (its gradient is 0).
TEST(AttentionGradientCheck, AnAttentionBlock) {
  expect_gradients_match(loss_graph("  x: {dtype: f32, shape: [2, 3, 8]}\n"
                                    "nodes:\n"
                                    "  - {name: q, op: linear, inputs: [x], attrs: {out_features: 8}}\n"
                                    "  - {name: k, op: linear, inputs: [x], attrs: {out_features: 8, bias: false}}\n"
                                    "  - {name: v, op: linear, inputs: [x], attrs: {out_features: 8}}\n"
                                    "  - {name: qh, op: split_heads, inputs: [q], attrs: {heads: 2}}\n"
                                    "  - {name: kh, op: split_heads, inputs: [k], attrs: {heads: 2}}\n"
                                    "  - {name: vh, op: split_heads, inputs: [v], attrs: {heads: 2}}\n"
                                    "  - {name: attn, op: sdpa, inputs: [qh, kh, vh], attrs: {causal: true}}\n"
                                    "  - {name: merged, op: merge_heads, inputs: [attn], attrs: {heads: 2}}\n"
                                    "  - {name: out, op: linear, inputs: [merged], attrs: {out_features: 8}}\n",
                                    "[2, 3, 8]", "  inputs: [x]\n"),
                         registry(),
                         {"k.weight", "out.bias", "out.weight", "q.bias", "q.weight", "v.bias", "v.weight", "x"});
}

// ---- the example graphs ---------------------------------------------------------------------------

std::string read_graph(const std::string& name) {
  std::ifstream in(std::string(TEENY_SOURCE_DIR) + "/graphs/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `text` with `from` (which must occur once) replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// tiny_lm with a next-token loss: cross_entropy takes the head's logits (it applies log_softmax
// itself, so the graph's log_softmax node goes) against i32 targets.
std::string tiny_lm_training() {
  std::string spec = read_graph("tiny_lm.yaml");
  spec = replaced(spec, "  ids: {dtype: i32, shape: [B, S]}\n",
                  "  ids: {dtype: i32, shape: [B, S]}\n  targets: {dtype: i32, shape: [B, S]}\n");
  spec = replaced(spec, "  - {name: logprobs, op: log_softmax, inputs: [head], attrs: {axis: -1}}\n",
                  "  - {name: loss, op: cross_entropy, inputs: [head, targets]}\n");
  return replaced(spec, "outputs: [logprobs]\n", "outputs: [loss]\ntrain:\n  loss: loss\n");
}

TEST(AttentionGradientGraphs, TinyLmTrainsThroughItsAttentionAndCompiles) {
  const Graph graph = parse_graph(tiny_lm_training(), "tiny_lm_train.yaml", registry());
  CompileOptions options;
  options.cache_dir = testing::grad_check_detail::cache_dir();
  CompileStats stats;
  const Bundle bundle = compile_graph(graph, registry(), options, &stats);
  // Every param has a gradient: 2 blocks of 4 linears with bias, 2 more, 5 layernorms, the
  // embedding and the bias-free head.
  EXPECT_EQ(bundle.gradients.size(), 2u * (2 * 6 + 2 * 2) + 2 + 1 + 1);
  std::map<std::string, int> ops;
  for (const BundleNode& node : bundle.nodes) ++ops[fmt::format("{} {}", node_role_name(node.role), node.op)];
  // fuse_attention_heads runs before differentiation: each block's attention is one
  // fused.sdpa_heads node, whose gradient ops read and write the heads in place, so no head is
  // copied either way.
  EXPECT_EQ(ops["forward fused.sdpa_heads"], 2);
  EXPECT_EQ(ops["backward grad.sdpa_stats"], 2);
  EXPECT_EQ(ops["backward grad.sdpa_dq"], 2);
  EXPECT_EQ(ops["backward grad.sdpa_dkv"], 2);
  EXPECT_EQ(ops["backward grad.slice"], 4);
  for (const char* copy :
       {"forward split_heads", "forward merge_heads", "backward split_heads", "backward merge_heads"})
    EXPECT_EQ(ops[copy], 0) << copy;
}

TEST(AttentionGradientGraphs, TransformerBlockDifferentiatesEveryParam) {
  std::string spec = read_graph("transformer_block.yaml");
  spec = replaced(spec, "  x: {dtype: f32, shape: [B, S, 768]}\n",
                  "  x: {dtype: f32, shape: [B, S, 768]}\n  target: {dtype: f32, shape: [B, S, 768]}\n");
  spec = replaced(spec, "outputs: [out]\n",
                  "  - {name: loss, op: mse_loss, inputs: [out, target]}\n"
                  "outputs: [loss]\ntrain:\n  loss: loss\n  inputs: [x]\n");
  Graph graph = parse_graph(spec, "transformer_block_train.yaml", registry());
  add_training(graph, registry());
  // 6 linears with bias, 2 layernorms, and x.
  EXPECT_EQ(graph.gradients.size(), 6u * 2 + 2 * 2 + 1);
  EXPECT_EQ(backward_of(graph, {"qh"}), std::vector<std::string>{"bwd_qh = merge_heads(bwd_attn_1) {\"heads\":12}"});
}

// The bf16 block's training graph as compile lowers it: attention is one fused.sdpa_heads node;
// fuse_grad_linear_epilogue puts gelu's derivative into the dx GEMM of fc_proj (reading fc, the
// activation's input) and sums ln1's fan-out to q, k, v in the dx GEMMs of k and q.
TEST(AttentionGradientGraphs, TransformerBlockTrainsWithBackwardStepsInGemmEpilogues) {
  const Graph graph = prepare_graph(
      parse_graph(read_graph("transformer_block_bf16_train.yaml"), "transformer_block_bf16_train.yaml", registry()),
      registry(), CompileOptions{});
  auto described = [&](const std::string& name) {
    const Node* node = graph.find_node(name);
    if (node == nullptr) return std::string("(none)");
    return fmt::format("{} {} {} from {}", node->op->name, fmt::join(node->inputs, ", "), node->ctx.attrs.json().dump(),
                       fmt::join(node->fused_from, ", "));
  };
  EXPECT_EQ(described("bwd_act"),
            "grad.linear_dx bwd_loss, fc {\"epilogue\":\"gelu_tanh\",\"in_features\":3072} from bwd_fc_proj, bwd_act");
  EXPECT_EQ(described("grad_ln1"),
            "grad.linear_dx bwd_merged_3, bwd_v {\"epilogue\":\"add\",\"in_features\":768} from bwd_k, grad_ln1");
  EXPECT_EQ(described("grad_ln1_1"),
            "grad.linear_dx bwd_merged_1, grad_ln1 {\"epilogue\":\"add\",\"in_features\":768} from bwd_q, grad_ln1_1");
  EXPECT_EQ(described("merged"),
            "fused.sdpa_heads q, k, v {\"causal\":true,\"heads\":12,\"kv_groups\":1} from qh, kh, vh, attn, merged");
  for (const Node& node : graph.nodes) EXPECT_NE(node.op->name, "grad.activation") << node.name;
  // The residual's fan-out (x + proj into ln2 and the output) is an add of a layernorm's dx, no GEMM's.
  EXPECT_EQ(graph.find_node("grad_res1")->op->name, "add");
}

}  // namespace
}  // namespace teeny
