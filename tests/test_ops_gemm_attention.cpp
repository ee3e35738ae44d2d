// GEMM and attention ops (linear, matmul, sdpa, fused.sdpa_heads, split_heads, merge_heads): host
// references against hand-computed values, shape rules and their errors (exact text), lowering
// (arguments match the generated signature; padded strides, grids and costs), NVRTC compilation
// of every kernel variant for sm_90 with the PTX entry checked against the launch's arguments,
// and the fuse_attention_heads graph pass.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/compile.h"
#include "core/graph.h"
#include "core/nvrtc.h"
#include "core/ptx.h"
#include "core/registry.h"
#include "ops/dense_gemm.h"
#include "ops/ops.h"
#include "tests/op_test_util.h"
#include "tests/teeny_command.h"

namespace teeny {
namespace {

namespace fs = std::filesystem;

using namespace op_testing;

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

const Expr B = Expr::dim("B"), S = Expr::dim("S");

// ---- references ------------------------------------------------------------------------------

TEST(GemmAttentionReference, LinearWithAndWithoutBias) {
  const HostIn x{{2, 3}, {1, 2, 3, 4, 5, 6}};
  const std::vector<double> w = {1, 0, -1, 0.5, 0.5, 0.5};
  HostTensor y = reference("linear", {{"out_features", 2}, {"bias", true}}, {x}, {w, {10, -1}});
  EXPECT_EQ(y.shape, (std::vector<int64_t>{2, 2}));
  expect_near(y.data, {8, 2, 8, 6.5});
  y = reference("linear", {{"out_features", 2}, {"bias", false}}, {x}, {w});
  expect_near(y.data, {-2, 3, -2, 7.5});
}

TEST(GemmAttentionReference, LinearOverLeadingDims) {
  // x [2, 1, 2]: each row is mapped independently.
  const HostTensor y =
      reference("linear", {{"out_features", 1}, {"bias", true}}, {{{2, 1, 2}, {1, 2, 3, 4}}}, {{2, -1}, {0.25}});
  EXPECT_EQ(y.shape, (std::vector<int64_t>{2, 1, 1}));
  expect_near(y.data, {0.25, 2.25});
}

TEST(GemmAttentionReference, MatmulBroadcastsBatches) {
  // a [2, 1, 2] @ b [2, 2]: b is shared by both batches.
  HostTensor c = reference("matmul", nlohmann::json::object(), {{{2, 1, 2}, {1, 2, 3, 4}}, {{2, 2}, {1, 0, 1, 2}}});
  EXPECT_EQ(c.shape, (std::vector<int64_t>{2, 1, 2}));
  expect_near(c.data, {3, 4, 7, 8});
  // a [1, 2, 2] @ b [2, 2, 1]: a is shared; batch z uses b[z].
  c = reference("matmul", nlohmann::json::object(), {{{1, 2, 2}, {1, 2, 3, 4}}, {{2, 2, 1}, {1, 1, 0, 2}}});
  EXPECT_EQ(c.shape, (std::vector<int64_t>{2, 2, 1}));
  expect_near(c.data, {3, 7, 4, 8});
}

TEST(GemmAttentionReference, SdpaCausalAndNot) {
  // Scores for query 1 are (0, ln 3) -> weights (1/4, 3/4) -> 0.25 * 2 + 0.75 * 6 = 5.
  const HostIn q{{1, 2, 1}, {1, 1}}, k{{1, 2, 1}, {0, std::log(3.0)}}, v{{1, 2, 1}, {2, 6}};
  expect_near(reference("sdpa", {{"causal", false}}, {q, k, v}).data, {5, 5});
  // Causal: query 0 sees only key 0.
  expect_near(reference("sdpa", {{"causal", true}}, {q, k, v}).data, {2, 5});
  // scale 0 gives uniform weights.
  expect_near(reference("sdpa", {{"causal", false}, {"scale", 0.0}}, {q, k, v}).data, {4, 4});
}

TEST(GemmAttentionReference, SdpaSlidingWindowKeepsTheLastKeys) {
  // Keys 0..3 with v = 1, 2, 4, 8 and equal scores: a window of 2 averages a query's own value and
  // the one before it; query 0 has only its own. With 2 keys for 4 queries, query 3's window (keys
  // 2 and 3) lies past the keys: its output is 0.
  const HostIn q{{1, 4, 1}, {0, 0, 0, 0}}, k{{1, 4, 1}, {0, 0, 0, 0}}, v{{1, 4, 1}, {1, 2, 4, 8}};
  expect_near(reference("sdpa", {{"causal", true}, {"window", 2}}, {q, k, v}).data, {1, 1.5, 3, 6});
  expect_near(reference("sdpa", {{"causal", true}, {"window", 1}}, {q, k, v}).data, {1, 2, 4, 8});
  const HostIn k2{{1, 2, 1}, {0, 0}}, v2{{1, 2, 1}, {1, 2}};
  expect_near(reference("sdpa", {{"causal", true}, {"window", 2}}, {q, k2, v2}).data, {1, 1.5, 2, 0});
}

TEST(GemmAttentionShape, SlidingWindowNeedsCausal) {
  const TensorType t = tensor(DType::kF32, {Expr(2), Expr(4), Expr(8)});
  std::string key;
  EXPECT_EQ(infer_error("sdpa", {{"causal", false}, {"window", 4}}, {t, t, t}, &key),
            "a sliding window needs causal: true (it keeps the last window keys up to the query)");
  EXPECT_EQ(key, "attrs.window");
  EXPECT_EQ(infer_error("grad.sdpa_stats", {{"causal", false}, {"window", 4}}, {t, t, t, t}, &key),
            "a sliding window needs causal: true (it keeps the last window keys up to the query)");
}

TEST(GemmAttentionReference, SdpaDefaultScaleIsInverseSqrtHeadDim) {
  // Dh = 4, q = k0 = (1, 1, 1, 1): q·k0 = 4, scaled by 1/2 = 2; k1 = 0 scores 0.
  const HostIn q{{1, 1, 4}, {1, 1, 1, 1}}, k{{1, 2, 4}, {1, 1, 1, 1, 0, 0, 0, 0}};
  const HostIn v{{1, 2, 4}, {1, 1, 1, 1, 0, 0, 0, 0}};
  const double w0 = std::exp(2.0) / (std::exp(2.0) + 1.0);
  expect_near(reference("sdpa", {{"causal", false}}, {q, k, v}).data, {w0, w0, w0, w0});
}

TEST(GemmAttentionReference, SplitAndMergeHeadsAreInverse) {
  const HostIn x{{1, 2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}};
  const HostTensor split = reference("split_heads", {{"heads", 2}}, {x});
  EXPECT_EQ(split.shape, (std::vector<int64_t>{2, 2, 2}));
  expect_near(split.data, {0, 1, 4, 5, 2, 3, 6, 7});
  const HostTensor merged = reference("merge_heads", {{"heads", 2}}, {{split.shape, split.data}});
  EXPECT_EQ(merged.shape, (std::vector<int64_t>{1, 2, 4}));
  expect_near(merged.data, x.data);
}

// fused.sdpa_heads on [1, 2, 2 heads of 1]: head 0 is SdpaCausalAndNot's case; head 1 has its
// keys swapped (weights 3/4, 1/4 where both are visible) and values 4, 12.
TEST(GemmAttentionReference, SdpaHeadsByHand) {
  const HostIn q{{1, 2, 2}, {1, 1, 1, 1}}, k{{1, 2, 2}, {0, std::log(3.0), std::log(3.0), 0}};
  const HostIn v{{1, 2, 2}, {2, 4, 6, 12}};
  expect_near(reference("fused.sdpa_heads", {{"heads", 2}, {"causal", false}}, {q, k, v}).data, {5, 6, 5, 6});
  expect_near(reference("fused.sdpa_heads", {{"heads", 2}, {"causal", true}}, {q, k, v}).data, {2, 4, 5, 6});
}

// The fused op equals split_heads -> sdpa -> merge_heads, each through its own reference.
TEST(GemmAttentionReference, SdpaHeadsEqualsSplitAttendMerge) {
  const int64_t batch = 2, sq = 5, skv = 7, heads = 3, width = heads * 4;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  auto random = [&](int64_t rows) {
    HostIn x{{batch, rows, width}, {}};
    for (int64_t i = 0; i < batch * rows * width; ++i) x.data.push_back(uniform(rng));
    return x;
  };
  const HostIn q = random(sq), k = random(skv), v = random(skv);
  auto split = [&](const HostIn& x) {
    const HostTensor y = reference("split_heads", {{"heads", heads}}, {x});
    return HostIn{y.shape, y.data};
  };
  for (const nlohmann::json& attrs :
       {nlohmann::json{{"causal", false}}, nlohmann::json{{"causal", true}, {"scale", 0.7}}}) {
    SCOPED_TRACE(attrs.dump());
    const HostTensor attended = reference("sdpa", attrs, {split(q), split(k), split(v)});
    const HostTensor merged = reference("merge_heads", {{"heads", heads}}, {{attended.shape, attended.data}});
    nlohmann::json fused_attrs = attrs;
    fused_attrs["heads"] = heads;
    const HostTensor fused = reference("fused.sdpa_heads", fused_attrs, {q, k, v});
    EXPECT_EQ(fused.shape, (std::vector<int64_t>{batch, sq, width}));
    EXPECT_EQ(fused.shape, merged.shape);
    expect_near(fused.data, merged.data);
  }
}

// Grouped-query attention by hand, Dh 1. k/v head 0 is SdpaCausalAndNot's (keys 0, ln 3; values
// 2, 6), head 1 has the keys swapped and values 4, 12. Query heads (1, 1) and (0, 0) alternate;
// with kv_groups 2, query heads 0 and 1 read k/v head 0, heads 2 and 3 k/v head 1 (n / 2, not
// n % 2). (0, 0) scores 0 against both keys: the mean of the values.
TEST(GemmAttentionReference, SdpaGroupedQueryByHand) {
  const HostIn q{{4, 2, 1}, {1, 1, 0, 0, 1, 1, 0, 0}};
  const HostIn k{{2, 2, 1}, {0, std::log(3.0), std::log(3.0), 0}}, v{{2, 2, 1}, {2, 6, 4, 12}};
  expect_near(reference("sdpa", {{"causal", false}, {"kv_groups", 2}}, {q, k, v}).data, {5, 5, 4, 4, 6, 6, 8, 8});
  expect_near(reference("sdpa", {{"causal", true}, {"kv_groups", 2}}, {q, k, v}).data, {2, 5, 2, 4, 4, 6, 4, 8});
  // Multi-query: all four query heads on k/v head 0.
  const HostIn k0{{1, 2, 1}, {0, std::log(3.0)}}, v0{{1, 2, 1}, {2, 6}};
  expect_near(reference("sdpa", {{"causal", false}, {"kv_groups", 4}}, {q, k0, v0}).data, {5, 5, 4, 4, 5, 5, 4, 4});
}

// The same numbers through fused.sdpa_heads: one batch of 4 query heads in a row, 2 k/v heads.
TEST(GemmAttentionReference, SdpaHeadsGroupedQueryByHand) {
  const HostIn q{{1, 2, 4}, {1, 0, 1, 0, 1, 0, 1, 0}};
  const HostIn k{{1, 2, 2}, {0, std::log(3.0), std::log(3.0), 0}}, v{{1, 2, 2}, {2, 4, 6, 12}};
  const nlohmann::json attrs = {{"heads", 4}, {"kv_groups", 2}};
  nlohmann::json causal = attrs, plain = attrs;
  causal["causal"] = true;
  plain["causal"] = false;
  expect_near(reference("fused.sdpa_heads", plain, {q, k, v}).data, {5, 4, 6, 8, 5, 4, 6, 8});
  expect_near(reference("fused.sdpa_heads", causal, {q, k, v}).data, {2, 2, 4, 4, 5, 4, 6, 8});
}

// Random data, G = 1, 2 and 6 (multi-query): fused.sdpa_heads equals split_heads (q into H heads,
// k and v into H / G) -> sdpa with kv_groups -> merge_heads, and that sdpa equals plain sdpa on
// k and v with each head repeated G times by hand (PyTorch's repeat_interleave).
TEST(GemmAttentionReference, GroupedQueryEqualsRepeatedKvHeads) {
  const int64_t batch = 2, sq = 5, skv = 7, heads = 6, dh = 3;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  auto random = [&](int64_t rows, int64_t width) {
    HostIn x{{batch, rows, width}, {}};
    for (int64_t i = 0; i < batch * rows * width; ++i) x.data.push_back(uniform(rng));
    return x;
  };
  auto split = [](const HostIn& x, int64_t h) {
    const HostTensor y = reference("split_heads", {{"heads", h}}, {x});
    return HostIn{y.shape, y.data};
  };
  // [N_kv, S, Dh] -> [N_kv * g, S, Dh], row r copied to rows r*g .. r*g + g - 1.
  auto repeat_rows = [](const HostIn& x, int64_t g) {
    const int64_t row_size = x.shape[1] * x.shape[2];
    HostIn y{{x.shape[0] * g, x.shape[1], x.shape[2]}, {}};
    for (int64_t r = 0; r < x.shape[0]; ++r)
      for (int64_t i = 0; i < g; ++i) y.data.insert(y.data.end(), &x.data[r * row_size], &x.data[(r + 1) * row_size]);
    return y;
  };
  const HostIn q = random(sq, heads * dh);
  for (int64_t groups : {1, 2, 6}) {
    SCOPED_TRACE(groups);
    const int64_t kv_heads = heads / groups;
    const HostIn k = random(skv, kv_heads * dh), v = random(skv, kv_heads * dh);
    const nlohmann::json attrs = {{"causal", true}, {"kv_groups", groups}};
    const HostTensor grouped = reference("sdpa", attrs, {split(q, heads), split(k, kv_heads), split(v, kv_heads)});
    const HostTensor repeated =
        reference("sdpa", {{"causal", true}},
                  {split(q, heads), repeat_rows(split(k, kv_heads), groups), repeat_rows(split(v, kv_heads), groups)});
    expect_near(grouped.data, repeated.data);
    const HostTensor merged = reference("merge_heads", {{"heads", heads}}, {{grouped.shape, grouped.data}});
    nlohmann::json fused_attrs = attrs;
    fused_attrs["heads"] = heads;
    const HostTensor fused = reference("fused.sdpa_heads", fused_attrs, {q, k, v});
    EXPECT_EQ(fused.shape, (std::vector<int64_t>{batch, sq, heads * dh}));
    expect_near(fused.data, merged.data);
  }
}

// ---- shape rules -----------------------------------------------------------------------------

TEST(GemmAttentionShape, LinearPadsOutputRowsTo16Bytes) {
  OpContext ctx = context("linear", {{"out_features", 10}, {"bias", true}}, {tensor(DType::kF32, {B, 784})});
  EXPECT_EQ(shape_str(ctx.output.shape), "[B, 10]");
  EXPECT_EQ(ctx.output.row_stride, Expr(12));
  ctx = context("linear", {{"out_features", 10}, {"bias", true}}, {tensor(DType::kBF16, {B, S, 784})});
  EXPECT_EQ(ctx.output.dtype, DType::kBF16);
  EXPECT_EQ(shape_str(ctx.output.shape), "[B, S, 10]");
  EXPECT_EQ(ctx.output.row_stride, Expr(16));
  ctx = context("linear", {{"out_features", 768}, {"bias", true}}, {tensor(DType::kF32, {B, S, 768})});
  EXPECT_EQ(ctx.output.row_stride, Expr(768));
}

TEST(GemmAttentionShape, LinearParams) {
  OpContext ctx = context("linear", {{"out_features", 10}, {"bias", true}}, {tensor(DType::kBF16, {B, 784})});
  std::vector<ParamSpec> params = op("linear").params(ctx);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].slot, "weight");
  EXPECT_EQ(shape_str(params[0].shape), "[10, 784]");
  EXPECT_EQ(params[0].dtype, DType::kBF16);
  EXPECT_EQ(params[0].init, ParamInit::kTrained);
  EXPECT_EQ(params[1].slot, "bias");
  EXPECT_EQ(shape_str(params[1].shape), "[10]");
  ctx = context("linear", {{"out_features", 10}, {"bias", false}}, {tensor(DType::kF32, {B, 784})});
  params = op("linear").params(ctx);
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].slot, "weight");
}

TEST(GemmAttentionShape, LinearErrors) {
  std::string key;
  EXPECT_EQ(infer_error("linear", {{"out_features", 10}, {"bias", true}, {"in_features", 784}},
                        {tensor(DType::kF32, {B, 100})}, &key),
            "in_features is 784 but the input has 100 features (shape [B, 100])");
  EXPECT_EQ(key, "inputs");
  EXPECT_EQ(infer_error("linear", {{"out_features", 10}, {"bias", true}}, {tensor(DType::kF32, {})}, &key),
            "linear needs an input with at least one dim [..., in], got a scalar");
  EXPECT_EQ(key, "inputs");
  EXPECT_EQ(infer_error("linear", {{"out_features", 10}, {"bias", true}, {"in_features", 784}},
                        {tensor(DType::kF32, {B, 784})}),
            "(no error)");
}

TEST(GemmAttentionShape, MatmulBroadcastAndErrors) {
  OpContext ctx = context("matmul", nlohmann::json::object(),
                          {tensor(DType::kF32, {B, 1, 20, 17}), tensor(DType::kF32, {3, 17, 600})});
  EXPECT_EQ(shape_str(ctx.output.shape), "[B, 3, 20, 600]");
  std::string key;
  EXPECT_EQ(infer_error("matmul", nlohmann::json::object(),
                        {tensor(DType::kF32, {B, 20, 17}), tensor(DType::kF32, {16, 600})}, &key),
            "matmul: a's last dim (17) must equal b's second-to-last dim (16); a is [B, 20, 17], b is [16, 600]");
  EXPECT_EQ(key, "inputs");
  EXPECT_EQ(infer_error("matmul", nlohmann::json::object(), {tensor(DType::kF32, {17}), tensor(DType::kF32, {17, 3})}),
            "matmul needs inputs of rank >= 2 ([..., M, K] and [..., K, N]); got [17] and [17, 3]");
}

TEST(GemmAttentionShape, SdpaShapesAndErrors) {
  const TensorType q = tensor(DType::kF32, {B * Expr(12), S, 64});
  OpContext ctx = context("sdpa", {{"causal", true}}, {q, q, q});
  EXPECT_EQ(shape_str(ctx.output.shape), "[B*12, S, 64]");
  std::string key;
  const TensorType wide = tensor(DType::kF32, {B, S, 320});
  EXPECT_EQ(infer_error("sdpa", {{"causal", false}}, {wide, wide, wide}, &key),
            "sdpa supports head dims up to 256 (multiples of 4 above 128); got 320");
  EXPECT_EQ(key, "inputs");
  const TensorType odd = tensor(DType::kF32, {B, S, 129});
  EXPECT_EQ(infer_error("sdpa", {{"causal", false}}, {odd, odd, odd}),
            "sdpa supports head dims up to 256 (multiples of 4 above 128); got 129");
  const TensorType other = tensor(DType::kF32, {B, S, 32});
  EXPECT_EQ(infer_error("sdpa", {{"causal", false}}, {q, other, other}),
            "sdpa: q, k, v must have the same first dim N; got [B*12, S, 64], [B, S, 32], [B, S, 32]");
  EXPECT_EQ(infer_error("sdpa", {{"causal", false}}, {q, q, tensor(DType::kF32, {B * Expr(12), 7, 64})}),
            "sdpa: k and v must have the same shape; got [B*12, S, 64] and [B*12, 7, 64]");
  const TensorType symbolic = tensor(DType::kF32, {B, S, S});
  EXPECT_EQ(infer_error("sdpa", {{"causal", false}}, {symbolic, symbolic, symbolic}),
            "sdpa needs a fixed head dim; q is [B, S, S]");
  EXPECT_EQ(infer_error("sdpa", {{"causal", false}}, {tensor(DType::kF32, {S, 64}), q, q}),
            "sdpa needs q, k, v of shape [N, S, Dh]; q is [S, 64]");
}

TEST(GemmAttentionShape, SdpaHeadsShapesAndErrors) {
  const Expr T = Expr::dim("T");
  TensorType q = tensor(DType::kBF16, {B, S, 768});
  q.row_stride = Expr(776);
  const TensorType kv = tensor(DType::kBF16, {B, T, 768});
  const OpContext ctx = context("fused.sdpa_heads", {{"heads", 12}, {"causal", true}}, {q, kv, kv});
  EXPECT_EQ(shape_str(ctx.output.shape), "[B, S, 768]");
  EXPECT_EQ(ctx.output.row_stride, Expr(768));  // contiguous whatever the inputs' strides
  EXPECT_EQ(ctx.output.dtype, DType::kBF16);
  const std::string op = "fused.sdpa_heads";
  const TensorType x = tensor(DType::kF32, {B, S, 768});
  std::string key;
  EXPECT_EQ(infer_error(op, {{"heads", 5}}, {x, x, x}, &key),
            "fused.sdpa_heads: the width 768 is not divisible by heads = 5");
  EXPECT_EQ(key, "attrs.heads");
  const TensorType wide = tensor(DType::kF32, {B, S, 640});
  EXPECT_EQ(infer_error(op, {{"heads", 2}}, {wide, wide, wide}, &key),
            "fused.sdpa_heads supports head dims up to 256 (multiples of 4 above 128); got 320");
  EXPECT_EQ(key, "inputs");
  const TensorType pair = tensor(DType::kF32, {Expr(2), S, 768});
  EXPECT_EQ(infer_error(op, {{"heads", 12}}, {x, pair, pair}),
            "fused.sdpa_heads: q, k, v must have the same first dim B; got [B, S, 768], [2, S, 768], [2, S, 768]");
  EXPECT_EQ(infer_error(op, {{"heads", 12}}, {x, tensor(DType::kF32, {B, T, 768}), x}),
            "fused.sdpa_heads: k and v must have the same shape; got [B, T, 768] and [B, S, 768]");
  const TensorType narrow = tensor(DType::kF32, {B, S, 384});
  EXPECT_EQ(infer_error(op, {{"heads", 12}}, {x, narrow, narrow}),
            "fused.sdpa_heads: q, k, v must have the same width H*Dh; got [B, S, 768], [B, S, 384], [B, S, 384]");
  EXPECT_EQ(infer_error(op, {{"heads", 12}}, {x, tensor(DType::kF32, {B, 768}), x}),
            "fused.sdpa_heads needs q, k, v of shape [B, S, H*Dh]; k is [B, 768]");
  const TensorType symbolic = tensor(DType::kF32, {B, S, S});
  EXPECT_EQ(infer_error(op, {{"heads", 1}}, {symbolic, symbolic, symbolic}),
            "fused.sdpa_heads needs a fixed width H*Dh; q is [B, S, S]");
  EXPECT_EQ(infer_error(op, {{"heads", 12}}, {x, tensor(DType::kBF16, {B, S, 768}), x}),
            "input 1 is bf16 but input 0 is f32; fused.sdpa_heads needs one dtype");
}

// The notes of the OpError the op's shape rule throws.
std::vector<std::string> infer_notes(const std::string& name, nlohmann::json attrs, std::vector<TensorType> inputs) {
  try {
    context(name, std::move(attrs), std::move(inputs));
  } catch (const OpError& e) {
    return e.notes();
  }
  return {};
}

// Llama-style grouped-query attention: q = split_heads(linear(x, 32*128), 32), k and v =
// split_heads(linear(x, 8*128), 8), sdpa with kv_groups 4.
TEST(GemmAttentionShape, SdpaGroupedQueryShapesAndErrors) {
  const Expr T = Expr::dim("T");
  const TensorType q = context("split_heads", {{"heads", 32}}, {tensor(DType::kBF16, {B, S, 4096})}).output;
  const TensorType kv = context("split_heads", {{"heads", 8}}, {tensor(DType::kBF16, {B, T, 1024})}).output;
  EXPECT_EQ(shape_str(q.shape), "[B*32, S, 128]");
  EXPECT_EQ(shape_str(kv.shape), "[B*8, T, 128]");
  OpContext ctx = context("sdpa", {{"causal", true}, {"kv_groups", 4}}, {q, kv, kv});
  EXPECT_EQ(shape_str(ctx.output.shape), "[B*32, S, 128]");
  EXPECT_EQ(ctx.output.dtype, DType::kBF16);
  // Constant first dims: 8 query heads on 1 k/v head.
  const TensorType one = tensor(DType::kF32, {1, T, 64});
  ctx = context("sdpa", {{"causal", false}, {"kv_groups", 8}}, {tensor(DType::kF32, {8, S, 64}), one, one});
  EXPECT_EQ(shape_str(ctx.output.shape), "[8, S, 64]");

  std::string key;
  EXPECT_EQ(infer_error("sdpa", {{"causal", true}}, {q, kv, kv}, &key),
            "sdpa: q, k, v must have the same first dim N; got [B*32, S, 128], [B*8, T, 128], [B*8, T, 128]");
  EXPECT_EQ(key, "inputs");
  EXPECT_EQ(infer_notes("sdpa", {{"causal", true}}, {q, kv, kv}),
            std::vector<std::string>{"kv_groups: 4 would match (grouped-query attention, 4 query heads per k/v head)"});
  EXPECT_EQ(infer_error("sdpa", {{"causal", true}, {"kv_groups", 2}}, {q, kv, kv}),
            "sdpa: q's first dim N must be kv_groups = 2 times k's and v's; got [B*32, S, 128], [B*8, T, 128], "
            "[B*8, T, 128]");
  // N not a multiple of N_kv: no kv_groups fits, so no note.
  const TensorType four = tensor(DType::kF32, {4, T, 64});
  EXPECT_EQ(infer_error("sdpa", {{"causal", false}, {"kv_groups", 2}}, {tensor(DType::kF32, {6, S, 64}), four, four}),
            "sdpa: q's first dim N must be kv_groups = 2 times k's and v's; got [6, S, 64], [4, T, 64], [4, T, 64]");
  EXPECT_TRUE(infer_notes("sdpa", {{"causal", false}}, {tensor(DType::kF32, {6, S, 64}), four, four}).empty());
  // A symbolic q not structurally kv_groups times k: B*H against B with H a dim.
  const TensorType by_dim = tensor(DType::kF32, {B * Expr::dim("H"), S, 64});
  const TensorType per_batch = tensor(DType::kF32, {B, T, 64});
  EXPECT_EQ(infer_error("sdpa", {{"causal", false}, {"kv_groups", 4}}, {by_dim, per_batch, per_batch}),
            "sdpa: q's first dim N must be kv_groups = 4 times k's and v's; got [B*H, S, 64], [B, T, 64], [B, T, 64]");
  const TensorType narrow = tensor(DType::kBF16, {B * Expr(8), T, 64});
  EXPECT_EQ(infer_error("sdpa", {{"causal", true}, {"kv_groups", 4}}, {q, narrow, narrow}),
            "sdpa: q, k, v must have the same head dim; got [B*32, S, 128], [B*8, T, 64], [B*8, T, 64]");
  EXPECT_EQ(
      infer_error("sdpa", {{"causal", true}, {"kv_groups", 4}}, {q, kv, tensor(DType::kBF16, {B * Expr(4), T, 128})}),
      "sdpa: k and v must have the same shape; got [B*8, T, 128] and [B*4, T, 128]");
}

TEST(GemmAttentionShape, SdpaHeadsGroupedQueryShapesAndErrors) {
  const Expr T = Expr::dim("T");
  const std::string op = "fused.sdpa_heads";
  const TensorType q = tensor(DType::kF16, {B, S, 768});
  const TensorType kv = tensor(DType::kF16, {B, T, 192});  // 3 k/v heads of 64
  const OpContext ctx = context(op, {{"heads", 12}, {"kv_groups", 4}, {"causal", true}}, {q, kv, kv});
  EXPECT_EQ(shape_str(ctx.output.shape), "[B, S, 768]");
  const TensorType mqa = tensor(DType::kF16, {B, T, 64});
  EXPECT_EQ(shape_str(context(op, {{"heads", 12}, {"kv_groups", 12}}, {q, mqa, mqa}).output.shape), "[B, S, 768]");

  std::string key;
  EXPECT_EQ(infer_error(op, {{"heads", 12}, {"kv_groups", 5}}, {q, kv, kv}, &key),
            "fused.sdpa_heads: heads = 12 is not divisible by kv_groups = 5");
  EXPECT_EQ(key, "attrs.kv_groups");
  EXPECT_EQ(infer_error(op, {{"heads", 12}}, {q, kv, kv}, &key),
            "fused.sdpa_heads: q, k, v must have the same width H*Dh; got [B, S, 768], [B, T, 192], [B, T, 192]");
  EXPECT_EQ(key, "inputs");
  EXPECT_EQ(infer_notes(op, {{"heads", 12}}, {q, kv, kv}),
            std::vector<std::string>{"kv_groups: 4 would match (grouped-query attention, 4 query heads per k/v head)"});
  EXPECT_EQ(infer_error(op, {{"heads", 12}, {"kv_groups", 6}}, {q, kv, kv}),
            "fused.sdpa_heads: q's width H*Dh must be kv_groups = 6 times k's and v's; got [B, S, 768], [B, T, 192], "
            "[B, T, 192]");
  // The batch is never grouped: k/v heads of other batches are no query head's.
  const TensorType pair = tensor(DType::kF16, {Expr(2), T, 192});
  EXPECT_EQ(infer_error(op, {{"heads", 12}, {"kv_groups", 4}}, {q, pair, pair}),
            "fused.sdpa_heads: q, k, v must have the same first dim B; got [B, S, 768], [2, T, 192], [2, T, 192]");
  EXPECT_TRUE(infer_notes(op, {{"heads", 12}, {"kv_groups", 4}}, {q, pair, pair}).empty());
}

TEST(GemmAttentionShape, SplitAndMergeHeads) {
  OpContext split = context("split_heads", {{"heads", 12}}, {tensor(DType::kBF16, {B, S, 768})});
  EXPECT_EQ(shape_str(split.output.shape), "[B*12, S, 64]");
  EXPECT_EQ(split.output.dtype, DType::kBF16);
  OpContext merge = context("merge_heads", {{"heads", 12}}, {split.output});
  EXPECT_EQ(shape_str(merge.output.shape), "[B, S, 768]");
  std::string key;
  EXPECT_EQ(infer_error("split_heads", {{"heads", 5}}, {tensor(DType::kF32, {B, S, 768})}, &key),
            "split_heads: the last dim 768 is not divisible by heads = 5");
  EXPECT_EQ(key, "attrs.heads");
  EXPECT_EQ(infer_error("merge_heads", {{"heads", 5}}, {tensor(DType::kF32, {12, S, 64})}, &key),
            "merge_heads: the first dim 12 is not divisible by heads = 5");
  EXPECT_EQ(key, "attrs.heads");
  EXPECT_EQ(infer_error("split_heads", {{"heads", 2}}, {tensor(DType::kF32, {B, 8})}),
            "split_heads needs x of shape [B, S, H*Dh]; got [B, 8]");
}

// ---- lowering ------------------------------------------------------------------------------

struct LowerCase {
  std::string op;
  nlohmann::json attrs;
  std::vector<TensorType> inputs;
};

std::vector<LowerCase> lowering_cases() {
  TensorType padded = tensor(DType::kF32, {B, S, 17});
  padded.row_stride = Expr(20);
  std::vector<LowerCase> cases;
  // Every variant for f32 and bf16; f16 differs from bf16 only in the MMA/convert type names,
  // so a GEMM and an attention kernel suffice for it.
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int out : {10, 4096})
      for (bool bias : {true, false})
        cases.push_back({"linear", {{"out_features", out}, {"bias", bias}}, {tensor(dt, {B, 784})}});
    cases.push_back({"matmul", nlohmann::json::object(), {tensor(dt, {B, 12, S, 64}), tensor(dt, {12, 64, 1000})}});
    cases.push_back({"matmul", nlohmann::json::object(), {tensor(dt, {S, 64}), tensor(dt, {64, 100})}});
    for (int dh : {64, 17, 128, 256})
      for (bool causal : {false, true}) {
        const TensorType t = tensor(dt, {B * Expr(12), S, dh});
        cases.push_back({"sdpa", {{"causal", causal}}, {t, t, t}});
      }
    for (int width : {768, 36}) {
      cases.push_back({"split_heads", {{"heads", 12}}, {tensor(dt, {B, S, width})}});
      cases.push_back({"merge_heads", {{"heads", 12}}, {tensor(dt, {B * Expr(12), S, width / 12})}});
    }
  }
  const TensorType f16 = tensor(DType::kF16, {B * Expr(12), S, 64});
  cases.push_back({"linear", {{"out_features", 4096}, {"bias", true}}, {tensor(DType::kF16, {B, 784})}});
  cases.push_back({"sdpa", {{"causal", true}}, {f16, f16, f16}});
  cases.push_back({"split_heads", {{"heads", 1}}, {padded}});
  cases.push_back({"sdpa", {{"causal", true}}, {padded, padded, padded}});
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const TensorType x = tensor(dt, {B, S, 768});
    cases.push_back({"fused.sdpa_heads", {{"heads", 12}, {"causal", true}}, {x, x, x}});
  }
  cases.push_back({"fused.sdpa_heads", {{"heads", 1}, {"causal", false}}, {padded, padded, padded}});
  // Grouped-query attention: the same kernels, k/v heads chosen by run-time arguments.
  const TensorType gq = tensor(DType::kBF16, {B * Expr(8), S, 64}), gkv = tensor(DType::kBF16, {B * Expr(2), S, 64});
  cases.push_back({"sdpa", {{"causal", true}, {"kv_groups", 4}}, {gq, gkv, gkv}});
  const TensorType hq = tensor(DType::kF32, {B, S, 12 * 17}), hkv = tensor(DType::kF32, {B, S, 3 * 17});
  cases.push_back({"fused.sdpa_heads", {{"heads", 12}, {"kv_groups", 4}, {"causal", false}}, {hq, hkv, hkv}});
  return cases;
}

TEST(GemmAttentionLowering, LaunchesPassTheirKernelsParams) {
  for (const LowerCase& c : lowering_cases()) {
    SCOPED_TRACE(c.op + " " + c.attrs.dump());
    const Lowering lowering = op(c.op).lower(context(c.op, c.attrs, c.inputs));
    ASSERT_FALSE(lowering.launches.empty());
    for (const Launch& launch : lowering.launches) {
      const KernelSource& kernel = lowering.kernels.at(launch.kernel);
      ASSERT_EQ(kernel.params.size(), launch.args.size());
      for (size_t i = 0; i < kernel.params.size(); ++i) {
        EXPECT_EQ(kernel.params[i].name, launch.args[i].name) << "argument " << i;
        EXPECT_EQ(arg_c_type(kernel.params[i]), arg_c_type(launch.args[i])) << "argument " << i;
      }
    }
  }
}

const KernelArg& arg(const Launch& launch, const std::string& name) {
  for (const KernelArg& a : launch.args)
    if (a.name == name) return a;
  throw std::runtime_error("no argument " + name);
}

TEST(GemmAttentionLowering, LinearGridStridesAndCost) {
  TensorType x = tensor(DType::kF32, {B, S, 17});
  x.row_stride = Expr(20);
  OpContext ctx = context("linear", {{"out_features", 4096}, {"bias", true}}, {x});
  ctx.target_sm = 80;  // the CUDA-core kernel (sm_90 takes 3xTF32)
  const Lowering lowering = tiled_linear(op("linear").lower(ctx));
  ASSERT_EQ(lowering.launches.size(), 2u);  // f32: zero-fill for split-K, then the GEMM
  const Launch& launch = lowering.launches[1];
  const Bindings bind = {{"B", 2}, {"S", 100}, {"SMS", 132}};
  // K = 17 is less than one split's minimum of 128: no split, one element zeroed.
  EXPECT_EQ(arg(launch, "splits").value.eval(bind), 1);
  EXPECT_EQ(arg(lowering.launches[0], "count").value.eval(bind), 1);
  EXPECT_EQ(lowering.launches[0].grid[0].eval(bind), 1);
  EXPECT_EQ(arg(launch, "M").value.eval(bind), 200);
  EXPECT_EQ(arg(launch, "K").value.eval(bind), 17);
  EXPECT_EQ(arg(launch, "ldx").value.eval(bind), 20);
  EXPECT_EQ(arg(launch, "ldy").value.eval(bind), 4096);
  // 128x128 tiles: ceil(200 / 128) * (4096 / 128).
  EXPECT_EQ(launch.grid[0].eval(bind), 2 * 32);
  EXPECT_EQ(launch.block[0], 256);
  EXPECT_EQ(launch.flops.eval(bind), 2LL * 200 * 4096 * 17 + 200 * 4096);
  EXPECT_EQ(launch.bytes.eval(bind), 4LL * (200 * 17 + 4096 * 17 + 200 * 4096 + 4096));
}

TEST(GemmAttentionLowering, LinearSplitsKWhenTilesCannotFillTheGpu) {
  // GPT-2's MLP down-projection at B=1, S=128: 6 tiles of 128x128, K = 3072 (CUDA cores).
  OpContext ctx = context("linear", {{"out_features", 768}, {"bias", true}}, {tensor(DType::kF32, {B, S, 3072})});
  ctx.target_sm = 80;
  const Lowering lowering = tiled_linear(op("linear").lower(ctx));
  ASSERT_EQ(lowering.launches.size(), 2u);
  const Bindings small = {{"B", 1}, {"S", 128}, {"SMS", 132}};
  // Two blocks an SM: 1.5 waves of 264 blocks are 396. min(ceil(396 / 6), 3072 / 128) = 24
  // splits; the whole padded output is zeroed first.
  EXPECT_EQ(arg(lowering.launches[1], "splits").value.eval(small), 24);
  EXPECT_EQ(lowering.launches[1].grid[0].eval(small), 6 * 24);
  EXPECT_EQ(arg(lowering.launches[0], "count").value.eval(small), 128 * 768);
  // B=64, S=128: 384 tiles are 1.45 waves of 264 blocks; two splits make 2.9.
  EXPECT_EQ(arg(lowering.launches[1], "splits").value.eval({{"B", 64}, {"S", 128}, {"SMS", 132}}), 2);
  // 516 tiles (B=43, S=256: 86 x 6) fill 1.95 waves: no split; nor do 1536 (B=64, S=512).
  EXPECT_EQ(arg(lowering.launches[1], "splits").value.eval({{"B", 43}, {"S", 256}, {"SMS", 132}}), 1);
  EXPECT_EQ(arg(lowering.launches[1], "splits").value.eval({{"B", 64}, {"S", 512}, {"SMS", 132}}), 1);
  // The same bundle on fewer SMs: 384 tiles are already 1.68 waves of 228 blocks (114 SMs), and
  // 2.46 of 156 (78 SMs): no split; 6 tiles still take the K limit of 24 splits (ceil(342 / 6),
  // ceil(234 / 6) > 24).
  for (const int sms : {114, 78}) {
    EXPECT_EQ(arg(lowering.launches[1], "splits").value.eval({{"B", 64}, {"S", 128}, {"SMS", sms}}), 1) << sms;
    EXPECT_EQ(arg(lowering.launches[1], "splits").value.eval({{"B", 1}, {"S", 128}, {"SMS", sms}}), 24) << sms;
  }
  // 16-bit linears run on tensor cores without split-K: one launch.
  const OpContext bf16 =
      context("linear", {{"out_features", 768}, {"bias", true}}, {tensor(DType::kBF16, {B, S, 3072})});
  EXPECT_EQ(tiled_linear(op("linear").lower(bf16)).launches.size(), 1u);
}

TEST(GemmAttentionLowering, F32InputGradientsRunOnTensorCoresWeightGradientsOnCudaCores) {
  // tiny_lm's MLP: dx = dy W reads the weight [256, 1024] as a [K, N] B (MN-major), K = 256.
  const TensorType dy = tensor(DType::kF32, {B, S, 256}), x = tensor(DType::kF32, {B, S, 256});
  OpContext ctx = context("grad.linear_dx", {{"in_features", 1024}}, {dy});
  ctx.target_sm = 90;
  Lowering lowering = op("grad.linear_dx").lower(ctx);
  // Two GEMMs by the rows: under 66 tiles of 3xTF32 (B*S <= 1024: 8 tiles a row block), the
  // narrow CUDA-core tile, split over K in parts of 64 (and summed); else 3xTF32, unsplit. 1024
  // rows are 256 narrow tiles, which split K = 256 twice.
  ASSERT_EQ(lowering.launches.size(), 3u);
  EXPECT_EQ(lowering.kernels.at(lowering.launches[0].kernel).name, "grad_linear_dx_f32_kn_64x64x16_b0");
  EXPECT_EQ(lowering.launches[0].when.str(), "le(ceil_div(B*S, 128)*8, 65)");
  EXPECT_EQ(arg(lowering.launches[0], "splits").value.eval({{"B", 16}, {"S", 64}}), 2);
  EXPECT_EQ(lowering.kernels.at(lowering.launches[1].kernel).name, "grad_gemm_sum_splits_f32");
  const Launch& gemm = lowering.launches[2];
  EXPECT_EQ(lowering.kernels.at(gemm.kernel).name, "grad_linear_dx_f32_kn_128x128x32_wgmma_pp_b0");
  EXPECT_EQ(lowering.kernels.at(gemm.kernel).function,
            "tn_grad_gemm<tn_wgmma_gemm<float, 128, 128, 32, 384, 3, true, true, false, 32, "
            "tn_gemm_epilogue<float, tn_act_none, false, false>, false, true>>");
  EXPECT_EQ(gemm.when.str(), "le(66, ceil_div(B*S, 128)*8)");
  // 128 output tiles a row block against 2 waves of 264 units: K = 256 splits in k-steps of at
  // least 512, i.e. not at all; one block an SM.
  EXPECT_EQ(arg(gemm, "splits").value.eval({{"B", 64}, {"S", 256}, {"SMS", 132}}), 1);
  EXPECT_EQ(gemm.grid[0].eval({{"B", 64}, {"S", 256}, {"SMS", 132}}), 132);
  EXPECT_EQ(gemm.block[0], 384);
  // A K of 4096 is one split over 512 rows of dy, 8 splits of 512 (16 k-steps each) where 3xTF32
  // runs (from 1024 rows), and the sum of the splits.
  ctx = context("grad.linear_dx", {{"in_features", 1024}}, {tensor(DType::kF32, {B, 4096})});
  ctx.target_sm = 90;
  lowering = op("grad.linear_dx").lower(ctx);
  ASSERT_EQ(lowering.launches.size(), 4u);
  EXPECT_EQ(arg(lowering.launches[2], "splits").value.eval({{"B", 1024}, {"SMS", 132}}), 8);
  // A constant row count decides at compile time.
  ctx = context("grad.linear_dx", {{"in_features", 1024}}, {tensor(DType::kF32, {16384, 256})});
  ctx.target_sm = 90;
  EXPECT_EQ(op("grad.linear_dx").lower(ctx).kernels.at(0).name, "grad_linear_dx_f32_kn_128x128x32_wgmma_pp_b0");
  // Over 4096: CUDA cores, as are outputs under one tile wide, other arches and weight gradients,
  // whose sum over the rows has no bound.
  ctx = context("grad.linear_dx", {{"in_features", 1024}}, {tensor(DType::kF32, {B, 4097})});
  ctx.target_sm = 90;
  EXPECT_EQ(op("grad.linear_dx").lower(ctx).kernels.at(0).name, "grad_linear_dx_f32_kn_128x128x8_b0");
  ctx = context("grad.linear_dx", {{"in_features", 64}}, {dy});
  ctx.target_sm = 90;
  EXPECT_EQ(op("grad.linear_dx").lower(ctx).kernels.at(0).name, "grad_linear_dx_f32_kn_64x64x16_b0");
  ctx = context("grad.linear_dx", {{"in_features", 1024}}, {dy});
  ctx.target_sm = 80;
  EXPECT_EQ(op("grad.linear_dx").lower(ctx).kernels.at(0).name, "grad_linear_dx_f32_kn_128x128x8_b0");
  // A weight gradient's output is [256, 256]: the wide CUDA-core tile, its sum split to fill the
  // GPU. Its 4 tiles aim at 132 splits (2 waves of 264 units), each at least 256 long, or down to
  // 64 while the units fill at most one wave: 16384 rows split 64 ways (66 wanted: 32 k-steps of
  // 8 each), and 1024 rows 16 ways; one narrower than a tile keeps the narrow one.
  ctx = context("grad.linear_dweight", nlohmann::json::object(), {dy, x});
  ctx.target_sm = 90;
  lowering = op("grad.linear_dweight").lower(ctx);
  EXPECT_EQ(lowering.kernels.at(0).name, "grad_linear_dweight_f32_kn_128x128x8_at_b0");
  EXPECT_EQ(arg(lowering.launches[0], "splits").value.eval({{"B", 64}, {"S", 256}, {"SMS", 132}}), 64);
  EXPECT_EQ(arg(lowering.launches[0], "splits").value.eval({{"B", 16}, {"S", 64}, {"SMS", 132}}), 16);
  ctx = context("grad.linear_dweight", nlohmann::json::object(), {tensor(DType::kF32, {B, S, 64}), x});
  ctx.target_sm = 90;
  EXPECT_EQ(op("grad.linear_dweight").lower(ctx).kernels.at(0).name, "grad_linear_dweight_f32_kn_64x64x16_at_b0");
  // Constant rows (compile --bind) are no bound on a sum over them either: 256 output tiles over
  // 4096 rows stay on CUDA cores.
  const TensorType wide = tensor(DType::kF32, {4096, 2048});
  ctx = context("grad.linear_dweight", nlohmann::json::object(), {wide, wide});
  ctx.target_sm = 90;
  EXPECT_EQ(op("grad.linear_dweight").lower(ctx).kernels.at(0).name, "grad_linear_dweight_f32_kn_128x128x8_at_b0");
}

// Few rows of x (decode) stream the weight through a small-M kernel sized for M; more take the
// tiled GEMM. Which runs is decided by the bound M, through each launch's `when`.
TEST(GemmAttentionLowering, FewRowsStreamTheWeight) {
  const OpContext bf16 =
      context("linear", {{"out_features", 4100}, {"bias", true}}, {tensor(DType::kBF16, {B, S, 4096})});
  const Lowering lowering = op("linear").lower(bf16);
  ASSERT_EQ(lowering.launches.size(), 3u);
  const Launch& gemv8 = lowering.launches[0];
  const Launch& gemv16 = lowering.launches[1];
  EXPECT_EQ(lowering.kernels.at(gemv8.kernel).name, "linear_bf16_gemv_m8_bias");
  EXPECT_EQ(
      lowering.kernels.at(gemv8.kernel).function,
      "tn_linear<tn_gemv_mma<__nv_bfloat16, 16, 1, 2, tn_gemm_epilogue<__nv_bfloat16, tn_act_none, true, false>>>");
  EXPECT_EQ(
      lowering.kernels.at(gemv16.kernel).function,
      "tn_linear<tn_gemv_mma<__nv_bfloat16, 16, 2, 2, tn_gemm_epilogue<__nv_bfloat16, tn_act_none, true, false>>>");
  EXPECT_EQ(gemv8.when.str(), "le(B*S, 8)");
  EXPECT_EQ(gemv16.when.str(), "le(9, B*S)*le(B*S, 16)");
  EXPECT_EQ(lowering.launches[2].when.str(), "le(17, B*S)");
  EXPECT_EQ(gemv16.grid[0].eval({}), 257);  // 16 weight rows a block
  EXPECT_EQ(gemv16.block[0], 512);          // 16 warps split K
  EXPECT_EQ(gemv16.bytes.eval({{"B", 1}, {"S", 1}}), 2LL * (4096 + 4100 * 4096 + 4100 + 4100));
  // f32 streams up to 16 rows, 4 weight rows a block, in variants for 1, 4, 8 and 16 rows.
  const OpContext f32 = context("linear", {{"out_features", 1000}, {"bias", false}}, {tensor(DType::kF32, {B, 4096})});
  const Lowering f32_lowering = op("linear").lower(f32);
  // 4 variants, then the zeroing and the tiled GEMM on CUDA cores (a small batch), and on 3xTF32.
  ASSERT_EQ(f32_lowering.launches.size(), 8u);
  EXPECT_EQ(f32_lowering.launches[5].when.str(), "le(17, B)*le(ceil_div(B, 128)*8, 32)");
  EXPECT_EQ(f32_lowering.launches[7].when.str(), "le(17, B)*le(33, ceil_div(B, 128)*8)");
  EXPECT_EQ(f32_lowering.kernels.at(f32_lowering.launches[0].kernel).name, "linear_f32_gemv_m1");
  EXPECT_EQ(f32_lowering.kernels.at(f32_lowering.launches[0].kernel).function,
            "tn_linear<tn_gemv_simt<256, 4, 1, tn_gemm_epilogue<float, tn_act_none, false, false>>>");
  EXPECT_EQ(f32_lowering.launches[0].when.str(), "le(B, 1)");
  EXPECT_EQ(f32_lowering.launches[2].when.str(), "le(5, B)*le(B, 8)");
  EXPECT_EQ(f32_lowering.launches[3].when.str(), "le(9, B)*le(B, 16)");
  EXPECT_EQ(f32_lowering.launches[0].grid[0].eval({}), 250);
  EXPECT_EQ(f32_lowering.launches[0].block[0], 256);
  EXPECT_EQ(f32_lowering.launches[3].block[0], 128);
  // A constant M decides at compile time: one variant, no condition.
  const OpContext fixed = context("linear", {{"out_features", 64}, {"bias", true}}, {tensor(DType::kF16, {4, 256})});
  const Lowering fixed_lowering = op("linear").lower(fixed);
  ASSERT_EQ(fixed_lowering.launches.size(), 1u);
  EXPECT_EQ(fixed_lowering.launches[0].when, Expr(1));
  EXPECT_EQ(fixed_lowering.kernels.at(0).name, "linear_f16_gemv_m8_bias");
  const OpContext many = context("linear", {{"out_features", 64}, {"bias", true}}, {tensor(DType::kF16, {17, 256})});
  EXPECT_EQ(op("linear").lower(many).launches.size(), 1u);
  EXPECT_EQ(op("linear").lower(many).kernels.at(0).name.find("_gemv"), std::string::npos);
}

// sm_90 f32: the persistent 3xTF32 wgmma kernel, whose blocks walk (tile, K split) units; the
// splits fill 1.5 waves of one unit per SM.
TEST(GemmAttentionLowering, LinearF32OnSm90IsPersistent3xTf32) {
  const OpContext ctx = context("linear", {{"out_features", 768}, {"bias", true}}, {tensor(DType::kF32, {B, S, 3072})});
  const Lowering lowering = tiled_linear(op("linear").lower(ctx));
  // The CUDA-core GEMM under 33 tiles (a small batch), each GEMM after its zeroing.
  ASSERT_EQ(lowering.launches.size(), 4u);
  EXPECT_EQ(lowering.kernels.at(lowering.launches[1].kernel).name, "linear_f32_nk_bias_64x64x16");
  EXPECT_EQ(lowering.launches[1].when.str(), "le(17, B*S)*le(ceil_div(B*S, 128)*6, 32)");
  const Launch& gemm = lowering.launches[3];
  EXPECT_EQ(lowering.kernels.at(gemm.kernel).name, "linear_f32_nk_bias_128x128x32_wgmma_pp");
  EXPECT_EQ(gemm.when.str(), "le(17, B*S)*le(33, ceil_div(B*S, 128)*6)");
  EXPECT_TRUE(lowering.kernels.at(gemm.kernel).arch_specific);
  EXPECT_EQ(gemm.block[0], 384);
  // Three stages of f32 A and B tiles, each twice (TF32 high and low parts), + mbarriers.
  EXPECT_EQ(gemm.dynamic_smem.eval({}), 3 * ((128 + 128) * 128 * 2 + 16) + 16 + 1024);
  const Bindings small = {{"B", 1}, {"S", 128}, {"SMS", 132}}, large = {{"B", 64}, {"S", 128}, {"SMS", 132}};
  // 6 tiles: min(ceil(198 / 6), 3072 / 128) = 24 splits, 144 units on 132 blocks.
  EXPECT_EQ(arg(gemm, "splits").value.eval(small), 24);
  EXPECT_EQ(gemm.grid[0].eval(small), 132);
  // 78 SMs: min(ceil(117 / 6), 24) = 20 splits, 120 units on 78 blocks.
  const Bindings small78 = {{"B", 1}, {"S", 128}, {"SMS", 78}};
  EXPECT_EQ(arg(gemm, "splits").value.eval(small78), 20);
  EXPECT_EQ(gemm.grid[0].eval(small78), 78);
  EXPECT_EQ(arg(lowering.launches[2], "count").value.eval(small), 128 * 768);
  // 384 tiles fill the SMs: no split, one element zeroed.
  EXPECT_EQ(arg(gemm, "splits").value.eval(large), 1);
  EXPECT_EQ(arg(lowering.launches[2], "count").value.eval(large), 1);
}

// On sm_90 wide 16-bit linears take the wgmma kernel (arch-specific, dynamic shared memory):
// loading by TMA where the rows of x and W are 16-byte multiples (pingpong), else by cp.async
// (pingpong for K <= 1024, else cooperative); other targets, narrow outputs and matmul's [K, N]
// operand keep the mma.sync kernel.
TEST(GemmAttentionLowering, LinearUsesWgmmaOnlyWhereItApplies) {
  OpContext ctx = context("linear", {{"out_features", 768}, {"bias", true}}, {tensor(DType::kBF16, {B, S, 3072})});
  Lowering lowering = tiled_linear(op("linear").lower(ctx));
  EXPECT_EQ(lowering.kernels.at(0).name, "linear_bf16_nk_bias_128x128x64_wgmma_pp_tma");
  EXPECT_TRUE(lowering.kernels.at(0).arch_specific);
  // One loader thread and two MMA warpgroups; six 32 KiB stages with two 8-byte mbarriers each,
  // two turn mbarriers and two 8 KiB store buffers per MMA warpgroup; persistent: at most one
  // block per SM.
  EXPECT_EQ(lowering.launches.at(0).block[0], 384);
  EXPECT_EQ(lowering.launches.at(0).dynamic_smem.eval({}), 6 * (32768 + 16) + 16 + 4 * 8192 + 1024);
  EXPECT_EQ(lowering.launches.at(0).grid[0].eval({{"B", 1}, {"S", 128}, {"SMS", 132}}), 6);
  for (const int sms : {132, 114, 78}) {  // 384 tiles: one block on every SM
    EXPECT_EQ(lowering.launches.at(0).grid[0].eval({{"B", 64}, {"S", 128}, {"SMS", sms}}), sms);
  }
  // The tensor maps view x as [M, K] and W as [N, K] in boxes of one 128-byte K row by a tile,
  // and y as [M, N] in boxes of 32 columns (64 bytes) by the tile's 128 rows.
  const Bindings b = {{"B", 2}, {"S", 5}};
  ASSERT_EQ(lowering.launches.at(0).args.size(), 12u);
  const KernelArg& a_map = lowering.launches.at(0).args.at(9);
  const KernelArg& b_map = lowering.launches.at(0).args.at(10);
  const KernelArg& c_map = lowering.launches.at(0).args.at(11);
  EXPECT_EQ(a_map.kind, ArgKind::kTensorMap);
  EXPECT_EQ(a_map.name, "a_map");
  EXPECT_EQ(a_map.map.of, "x");
  EXPECT_EQ(a_map.map.cols.eval(b), 3072);
  EXPECT_EQ(a_map.map.rows.eval(b), 10);
  EXPECT_EQ(a_map.map.row_stride.eval(b), 3072);
  EXPECT_EQ(a_map.map.box_cols, 64);
  EXPECT_EQ(a_map.map.box_rows, 128);
  EXPECT_EQ(a_map.map.swizzle, 128);
  EXPECT_EQ(b_map.map.of, "weight");
  EXPECT_EQ(b_map.map.rows.eval(b), 768);
  EXPECT_EQ(b_map.map.row_stride.eval(b), 3072);
  EXPECT_EQ(b_map.map.box_rows, 128);
  EXPECT_EQ(c_map.kind, ArgKind::kTensorMap);
  EXPECT_EQ(c_map.name, "c_map");
  EXPECT_EQ(c_map.map.of, "y");
  EXPECT_EQ(c_map.map.cols.eval(b), 768);
  EXPECT_EQ(c_map.map.rows.eval(b), 10);
  EXPECT_EQ(c_map.map.row_stride.eval(b), 768);
  EXPECT_EQ(c_map.map.box_cols, 32);
  EXPECT_EQ(c_map.map.box_rows, 128);
  EXPECT_EQ(c_map.map.swizzle, 64);

  // K = 3076 (6152-byte rows): cp.async, cooperative 128x192; five 40 KiB stages.
  const OpContext unaligned =
      context("linear", {{"out_features", 768}, {"bias", true}}, {tensor(DType::kBF16, {B, S, 3076})});
  lowering = tiled_linear(op("linear").lower(unaligned));
  EXPECT_EQ(lowering.kernels.at(0).name, "linear_bf16_nk_bias_128x192x64_wgmma");
  EXPECT_EQ(lowering.launches.at(0).dynamic_smem.eval({}), 5 * ((128 + 192) * 64 * 2 + 16) + 1024);
  EXPECT_EQ(lowering.launches.at(0).grid[0].eval({{"B", 1}, {"S", 128}, {"SMS", 132}}), 4);
  for (const KernelArg& arg : lowering.launches.at(0).args) EXPECT_NE(arg.kind, ArgKind::kTensorMap) << arg.name;
  const OpContext wide = context("linear", {{"out_features", 2048}, {"bias", true}}, {tensor(DType::kF16, {B, 4100})});
  lowering = tiled_linear(op("linear").lower(wide));
  EXPECT_EQ(lowering.kernels.at(0).name, "linear_f16_nk_bias_128x256x64_wgmma");
  EXPECT_EQ(lowering.launches.at(0).dynamic_smem.eval({}), 4 * ((128 + 256) * 64 * 2 + 16) + 1024);
  // K = 770: the cp.async pingpong kernel.
  const OpContext short_k =
      context("linear", {{"out_features", 3072}, {"bias", true}}, {tensor(DType::kBF16, {B, 770})});
  lowering = tiled_linear(op("linear").lower(short_k));
  EXPECT_EQ(lowering.kernels.at(0).name, "linear_bf16_nk_bias_128x128x64_wgmma_pp");
  EXPECT_EQ(lowering.launches.at(0).block[0], 384);
  EXPECT_EQ(lowering.launches.at(0).dynamic_smem.eval({}), 6 * (32768 + 16) + 16 + 1024);
  EXPECT_EQ(lowering.launches.at(0).grid[0].eval({{"B", 8192}, {"SMS", 132}}), 132);

  ctx.target_sm = 80;
  lowering = tiled_linear(op("linear").lower(ctx));
  EXPECT_EQ(lowering.kernels.at(0).name, "linear_bf16_nk_bias_128x128x32");
  EXPECT_FALSE(lowering.kernels.at(0).arch_specific);
  EXPECT_EQ(lowering.launches.at(0).dynamic_smem.eval({}), 0);

  const OpContext narrow = context("linear", {{"out_features", 10}, {"bias", true}}, {tensor(DType::kBF16, {B, 784})});
  EXPECT_FALSE(tiled_linear(op("linear").lower(narrow)).kernels.at(0).arch_specific);
  const OpContext mm = context("matmul", nlohmann::json::object(),
                               {tensor(DType::kBF16, {B, 512, 64}), tensor(DType::kBF16, {64, 1024})});
  EXPECT_FALSE(op("matmul").lower(mm).kernels.at(0).arch_specific);
}

// NVRTC passes inline PTX through unchecked; ptxas validates the wgmma and TMA instructions,
// their operand counts and descriptors' types, and says when it would serialise the MMA
// pipeline. Loading by TMA (16-byte rows: K = 768, 3072, 4096) and by cp.async (K = 770 on
// the pingpong schedule, 3076 and 4100 on the cooperative 128x192 and 128x256 tiles).
TEST(GemmAttentionLowering, WgmmaKernelsAssembleForSm90aWithoutSerialisation) {
  if (!fs::exists(TEENY_PTXAS)) GTEST_SKIP() << "no ptxas at " << TEENY_PTXAS;
  for (auto [dtype, in, out] : std::vector<std::tuple<DType, int, int>>{{DType::kBF16, 768, 768},
                                                                        {DType::kBF16, 3072, 768},
                                                                        {DType::kF16, 4096, 4096},
                                                                        {DType::kBF16, 770, 768},
                                                                        {DType::kBF16, 3076, 768},
                                                                        {DType::kF16, 4100, 4096}}) {
    const OpContext ctx = context("linear", {{"out_features", out}, {"bias", false}}, {tensor(dtype, {B, in})});
    KernelSource kernel = tiled_linear(op("linear").lower(ctx)).kernels.at(0);
    SCOPED_TRACE(kernel.name);
    ASSERT_TRUE(kernel.arch_specific);
    const bool tma = in % 8 == 0;
    EXPECT_EQ(kernel.name.find("_tma") != std::string::npos, tma);
    NvrtcConfig config;
    config.use_cache = false;
    const std::vector<CompiledKernel> compiled = op_testing::nvrtc_compile({kernel}, config);
    const std::string& text = compiled.at(0).ptx;
    EXPECT_NE(text.find(".target sm_90a"), std::string::npos);
    // TMA loads complete on the stage barrier, and TMA kernels store whole tiles by TMA from
    // shared memory; cp.async kernels store 16 bytes a lane (after the quad transpose). Both
    // fence: cp.async kernels before each stage's MMAs, TMA kernels before each TMA store.
    EXPECT_EQ(text.find("cp.async.bulk.tensor.2d.shared::cluster.global") != std::string::npos, tma);
    EXPECT_EQ(text.find("cp.async.bulk.tensor.2d.global.shared::cta") != std::string::npos, tma);
    EXPECT_EQ(text.find("st.global.v4.u32") != std::string::npos, !tma);
    EXPECT_NE(text.find("fence.proxy.async"), std::string::npos);

    const fs::path dir = fs::temp_directory_path() / fmt::format("teeny-ptxas-{}", getpid());
    fs::create_directories(dir);
    const fs::path ptx = dir / (kernel.name + ".ptx");
    std::ofstream(ptx) << compiled.at(0).ptx;
    const testing::Command ptxas = testing::run_command(
        fmt::format("'{}' -arch=sm_90a -v '{}' -o '{}'", TEENY_PTXAS, ptx.string(), (dir / "k.cubin").string()));
    fs::remove_all(dir);
    const std::string output = ptxas.out + ptxas.err;
    EXPECT_EQ(ptxas.exit_code, 0) << output;
    EXPECT_EQ(output.find("warning"), std::string::npos) << output;
    EXPECT_NE(output.find("0 bytes spill stores"), std::string::npos) << output;
  }
}

// On sm_90 the 16-bit cp.async pingpong GEMM prefetches a tile's residual rows into L2 near the
// end of a short mainloop (a run-time test of K); 3xTF32 has no registers for it, and a linear
// with no residual has none to fetch. TMA kernels store their tiles by TMA through shared
// memory (c_map: two 8 KiB buffers a consumer), and with a residual load it there by TMA
// (r_map: a whole tile's buffers, so five stages fit instead of six).
TEST(GemmAttentionLowering, ResidualPrefetchAndTmaEpilogues) {
  NvrtcConfig config;
  config.arch = "sm_90";
  config.use_cache = false;
  const Expr rows = Expr::dim("B");
  auto lower = [&](DType dtype, int64_t in, bool residual) {
    std::vector<TensorType> inputs = {tensor(dtype, {rows, Expr(in)})};
    if (residual) inputs.push_back(tensor(dtype, {rows, Expr(768)}));
    return tiled_linear(
        op("fused.linear")
            .lower(context("fused.linear", {{"out_features", 768}, {"bias", true}, {"activation", "none"}}, inputs)));
  };
  const std::vector<Lowering> lowerings = {lower(DType::kBF16, 770, true), lower(DType::kBF16, 768, true),
                                           lower(DType::kBF16, 768, false), lower(DType::kF32, 768, true)};
  std::vector<KernelSource> kernels;
  for (const Lowering& l : lowerings) {
    kernels.push_back(l.kernels.at(0));
  }
  EXPECT_EQ(kernels[0].name, "linear_bf16_nk_bias_128x128x64_wgmma_pp_res");
  EXPECT_EQ(kernels[1].name, "linear_bf16_nk_bias_128x128x64_wgmma_pp_tma_res");
  EXPECT_EQ(kernels[2].name, "linear_bf16_nk_bias_128x128x64_wgmma_pp_tma");
  const std::vector<CompiledKernel> compiled = op_testing::nvrtc_compile(kernels, config);
  ASSERT_EQ(compiled.size(), 4u);
  const std::string prefetch = "prefetch.global.L2", tma_store = "cp.async.bulk.tensor.2d.global.shared::cta";
  const std::vector<bool> prefetches = {true, false, false, false}, tma = {false, true, true, false};
  for (size_t i = 0; i < kernels.size(); ++i) {
    SCOPED_TRACE(kernels[i].name);
    EXPECT_EQ(compiled[i].ptx.find(prefetch) != std::string::npos, prefetches[i]);
    EXPECT_EQ(compiled[i].ptx.find(tma_store) != std::string::npos, tma[i]);
  }

  auto map_names = [](const Launch& l) {
    std::vector<std::string> names;
    for (const KernelArg& a : l.args)
      if (a.kind == ArgKind::kTensorMap) names.push_back(a.name);
    return names;
  };
  const Launch& with_residual = lowerings[1].launches.at(0);
  const Launch& without = lowerings[2].launches.at(0);
  EXPECT_EQ(map_names(with_residual), (std::vector<std::string>{"a_map", "b_map", "c_map", "r_map"}));
  EXPECT_EQ(map_names(without), (std::vector<std::string>{"a_map", "b_map", "c_map"}));
  const KernelArg& r_map = with_residual.args.back();
  EXPECT_EQ(r_map.map.of, "residual");
  EXPECT_EQ(r_map.map.box_cols, 32);
  EXPECT_EQ(r_map.map.box_rows, 128);
  EXPECT_EQ(r_map.map.swizzle, 64);
  // Stages of 32 KiB + 16 bytes of mbarriers, two turn mbarriers, the store buffers (and the
  // residual mbarriers), 1 KiB of alignment slack.
  EXPECT_EQ(without.dynamic_smem.eval({}), 6 * (32768 + 16) + 16 + 2 * 2 * 8192 + 1024);
  EXPECT_EQ(with_residual.dynamic_smem.eval({}), 5 * (32768 + 16) + 16 + 2 * (4 * 8192 + 8) + 1024);
}

TEST(GemmAttentionLowering, MatmulBatchStridesBroadcast) {
  const OpContext ctx = context("matmul", nlohmann::json::object(),
                                {tensor(DType::kF32, {B, 1, 20, 17}), tensor(DType::kF32, {3, 17, 600})});
  const Launch launch = op("matmul").lower(ctx).launches.at(0);
  const Bindings bind = {{"B", 5}};
  EXPECT_EQ(arg(launch, "batch0").value.eval(bind), 5);
  EXPECT_EQ(arg(launch, "batch1").value.eval(bind), 3);
  EXPECT_EQ(arg(launch, "a_stride0").value.eval(bind), 20 * 17);
  EXPECT_EQ(arg(launch, "a_stride1").value.eval(bind), 0);  // a's dim 1 broadcasts
  EXPECT_EQ(arg(launch, "b_stride0").value.eval(bind), 0);  // b has no batch dim 0
  EXPECT_EQ(arg(launch, "b_stride1").value.eval(bind), 17 * 600);
  // 128x128 tiles: 1 * 5 per matrix, 15 matrices.
  EXPECT_EQ(launch.grid[0].eval(bind), 5 * 15);
}

TEST(GemmAttentionLowering, SdpaGridScaleAndStrides) {
  TensorType q = tensor(DType::kBF16, {B * Expr(12), S, 64});
  q.row_stride = Expr(72);
  OpContext ctx = context("sdpa", {{"causal", true}}, {q, q, q});
  ctx.target_sm = 80;  // the mma.sync kernel (sm_90 takes wgmma: SdpaWgmmaOnHopper)
  const Launch launch = op("sdpa").lower(ctx).launches.at(0);
  const Bindings bind = {{"B", 2}, {"S", 130}};
  EXPECT_EQ(launch.grid[0].eval(bind), 24 * 3);  // 64 queries per block
  EXPECT_EQ(launch.block[0], 128);               // tensor cores: 4 warps x 16 queries
  EXPECT_EQ(op("sdpa").lower(ctx).kernels.at(0).name, "sdpa_bf16_d64_causal_mma");
  EXPECT_EQ(arg(launch, "ldq").value.eval(bind), 72);
  EXPECT_DOUBLE_EQ(arg(launch, "scale").fvalue, 0.125);
  const OpContext scaled = context("sdpa", {{"causal", false}, {"scale", 0.3}}, {q, q, q});
  EXPECT_DOUBLE_EQ(arg(op("sdpa").lower(scaled).launches.at(0), "scale").fvalue, 0.3);
  // f32 at head dim 64: the register-tiled CUDA-core kernel, 16 x 16 threads a 64-query tile;
  // other f32 head dims: one thread per query row.
  const TensorType f32 = tensor(DType::kF32, {B * Expr(12), S, 64});
  const Lowering tiled = op("sdpa").lower(context("sdpa", {{"causal", true}}, {f32, f32, f32}));
  EXPECT_EQ(tiled.launches.at(0).block[0], 256);
  EXPECT_EQ(tiled.launches.at(0).grid[0].eval(bind), 24 * 3);
  EXPECT_EQ(tiled.launches.at(0).dynamic_smem.eval(bind), 6 * 64 * 68 * 4);
  EXPECT_EQ(tiled.kernels.at(0).name, "sdpa_f32_d64_causal_tiled");
  const TensorType f32_d32 = tensor(DType::kF32, {B * Expr(12), S, 32});
  const Lowering simt = op("sdpa").lower(context("sdpa", {{"causal", true}}, {f32_d32, f32_d32, f32_d32}));
  EXPECT_EQ(simt.launches.at(0).block[0], 64);
  EXPECT_EQ(simt.kernels.at(0).name, "sdpa_f32_d32_causal");
}

// A decode step (Sq <= 16, 16-bit, head dim 128, 4 query heads a k/v head) runs the tensor-core
// decode kernel: a block per (chunk of 16 packed query rows, k/v head, split). Its splits are sized
// in SMs: down to 128 keys up to one wave of 2 blocks an SM, past that splits of 512 keys or more
// up to 8 blocks an SM, never above the shapes' cap of 2048 blocks that sizes the partials.
TEST(GemmAttentionLowering, SdpaDecodeSplitsAreSizedInSms) {
  const Expr N = Expr::dim("N"), Q = Expr::dim("Q"), T = Expr::dim("T");
  const TensorType q = tensor(DType::kBF16, {N * Expr(4), Q, 128});
  const TensorType kv = tensor(DType::kBF16, {N, T, 128});
  const Lowering lowering = op("sdpa").lower(context("sdpa", {{"causal", false}, {"kv_groups", 4}}, {q, kv, kv}));
  ASSERT_EQ(lowering.launches.size(), 4u);  // the wgmma kernel's two key tiles, decode, combine
  const Launch& decode = lowering.launches.at(2);
  const Launch& combine = lowering.launches.at(3);
  EXPECT_EQ(lowering.kernels.at(decode.kernel).function, "tn_sdpa_decode_mma<__nv_bfloat16, 128, 4, 3, false>");
  // Q (16 rows of 128 + 8 padding) and 4 warps' rings of 3 stages of 16-key K and V tiles, bf16.
  EXPECT_EQ(decode.dynamic_smem.eval({}), 16 * 136 * 2 + 4 * 3 * 2 * 16 * 136 * 2);
  const auto at = [](int64_t n, int64_t rows, int64_t keys) {
    return Bindings{{"N", n}, {"Q", rows}, {"T", keys}, {"SMS", 132}};
  };
  const auto blocks = [&](int64_t n, int64_t rows, int64_t keys) { return decode.grid[0].eval(at(n, rows, keys)); };
  EXPECT_EQ(blocks(2, 1, 1024), 2 * 8);        // every 128-key split: under a wave
  EXPECT_EQ(blocks(8, 1, 16384), 8 * 33);      // one wave (264 / 8 k/v heads)
  EXPECT_EQ(blocks(64, 1, 1024), 64 * 4);      // one wave of 256-key splits, not two of 128
  EXPECT_EQ(blocks(64, 1, 32768), 64 * 16);    // 8 an SM of 512 keys or more
  EXPECT_EQ(blocks(8, 8, 65536), 2 * 8 * 66);  // 4 x 8 rows a k/v head: two chunks
  EXPECT_EQ(blocks(8, 1, 1), 8);
  EXPECT_EQ(decode.when.eval(at(8, 16, 100)), 1);
  EXPECT_EQ(decode.when.eval(at(8, 17, 100)), 0);
  EXPECT_EQ(lowering.launches.at(0).when.eval(at(8, 17, 100)), 1);
  EXPECT_EQ(combine.grid[0].eval(at(8, 1, 16384)), 32);  // a block a query row
  EXPECT_EQ(combine.when.eval(at(8, 1, 16384)), 1);
  EXPECT_EQ(combine.when.eval(at(8, 1, 100)), 0);  // one split: the decode kernel writes the output
  EXPECT_EQ(combine.dynamic_smem.eval(at(8, 1, 16384)), 4 * 33);
  // Partials for the shapes' most splits (128 at 16384 keys), whatever the GPU: 32 rows of 130.
  EXPECT_EQ(lowering.scratch.at(0).elements.eval(at(8, 1, 16384)), 128 * 32 * 130);
}

// On sm_90, 16-bit attention at head dims 64, 128 and 256 runs the wgmma kernel: persistent blocks
// (at most one an SM) of 384 threads (a producer and two consumer warpgroups) taking 128 queries
// at a time, TMA maps of q, k and v over all
// their rows with 64-column boxes, key tiles of 128 (64 at head dim 256) and the ring's stages
// in shared memory; the decode path's launch keeps the plain arguments. A window, rows TMA cannot
// stride (not 16-byte multiples), other head dims and f32 stay on the other kernels.
TEST(GemmAttentionLowering, SdpaWgmmaOnHopper) {
  const Bindings bind = {{"B", 2}, {"S", 130}, {"SMS", 132}};
  TensorType q = tensor(DType::kBF16, {B * Expr(12), S, 128});
  q.row_stride = Expr(136);
  const Lowering lowering = op("sdpa").lower(context("sdpa", {{"causal", true}}, {q, q, q}));
  EXPECT_EQ(lowering.kernels.at(0).name, "sdpa_bf16_d128_causal_wgmma");
  EXPECT_TRUE(lowering.kernels.at(0).arch_specific);
  EXPECT_EQ(lowering.kernels.at(0).function, "tn_sdpa_wgmma<__nv_bfloat16, 128, 128, 3, true>");
  const Launch& launch = lowering.launches.at(0);
  EXPECT_EQ(launch.block[0], 384);
  EXPECT_EQ(launch.grid[0].eval(bind), 24 * 2);  // 128 queries an item, fewer items than SMs
  EXPECT_EQ(launch.grid[0].eval({{"B", 20}, {"S", 130}, {"SMS", 132}}), 132);
  // Q (128 x 128), three stages of K and V tiles (128 x 128 each: as many as fit in sm_90's
  // 227 KiB), alignment slack, 14 mbarriers (Q's full and empty, a full and an empty one for each
  // stage's K and V).
  EXPECT_EQ(launch.dynamic_smem.eval(bind), 128 * 128 * 2 + 3 * 2 * 128 * 128 * 2 + 1024 + 14 * 8);
  const KernelArg& k_map = arg(launch, "k_map");
  EXPECT_EQ(k_map.map.of, "k");
  EXPECT_EQ(k_map.map.rows.eval(bind), 24 * 130);
  EXPECT_EQ(k_map.map.cols.eval(bind), 128);
  EXPECT_EQ(k_map.map.row_stride.eval(bind), 136);
  EXPECT_EQ(k_map.map.box_cols, 64);
  EXPECT_EQ(k_map.map.box_rows, 128);
  EXPECT_EQ(arg(launch, "q_map").map.box_rows, 128);
  EXPECT_EQ(lowering.launches.at(1).args.size(), launch.args.size() - 3 + 2);  // decode: partials, splits

  const TensorType wide = tensor(DType::kF16, {B, S, 256});
  const Lowering d256 = op("sdpa").lower(context("sdpa", {{"causal", false}}, {wide, wide, wide}));
  EXPECT_EQ(d256.kernels.at(0).function, "tn_sdpa_wgmma<__half, 256, 64, 2, false>");
  EXPECT_EQ(arg(d256.launches.at(0), "v_map").map.box_rows, 64);
  // Without a mask, head dim 128 takes 176-key tiles (FlashAttention-3's) from 4096 keys on, 128
  // below; two stages of 176 keys fit beside Q, three do not.
  const Lowering plain = op("sdpa").lower(context("sdpa", {{"causal", false}}, {q, q, q}));
  ASSERT_EQ(plain.kernels.size(), 4u);  // two key tiles, then the decode path's kernel and combine
  EXPECT_EQ(plain.kernels.at(0).name, "sdpa_bf16_d128_wgmma");
  EXPECT_EQ(plain.kernels.at(1).name, "sdpa_bf16_d128_wgmma_k176");
  EXPECT_EQ(plain.kernels.at(1).function, "tn_sdpa_wgmma<__nv_bfloat16, 128, 176, 2, false>");
  const Launch& short_keys = plain.launches.at(0);
  const Launch& long_keys = plain.launches.at(1);
  EXPECT_EQ(long_keys.kernel, 1);
  EXPECT_EQ(arg(long_keys, "k_map").map.box_rows, 176);
  EXPECT_EQ(long_keys.dynamic_smem.eval(bind), 128 * 128 * 2 + 2 * 2 * 176 * 128 * 2 + 1024 + 10 * 8);
  for (int64_t s : {17, 4095, 4096, 16384}) {
    const Bindings at_s = {{"B", 1}, {"S", s}, {"SMS", 132}};
    EXPECT_EQ(short_keys.when.eval(at_s), s < 4096) << s;
    EXPECT_EQ(long_keys.when.eval(at_s), s >= 4096) << s;
  }
  EXPECT_EQ(short_keys.when.eval({{"B", 1}, {"S", 16}, {"SMS", 132}}), 0);  // the decode path's

  const auto kernel = [](const TensorType& x, const nlohmann::json& attrs) {
    return op("sdpa").lower(context("sdpa", attrs, {x, x, x})).kernels.at(0).name;
  };
  EXPECT_EQ(kernel(q, {{"causal", true}, {"window", 100}}), "sdpa_bf16_d128_causal_w100_mma");
  TensorType odd = q;
  odd.row_stride = Expr(132);  // 264 bytes
  EXPECT_EQ(kernel(odd, {{"causal", true}}), "sdpa_bf16_d128_causal_mma");
  EXPECT_EQ(kernel(tensor(DType::kBF16, {B, S, 96}), {{"causal", false}}), "sdpa_bf16_d96_mma");
  EXPECT_EQ(kernel(tensor(DType::kF32, {B, S, 128}), {{"causal", false}}), "sdpa_f32_d128");
}

// fused.sdpa_heads runs sdpa's kernel (the same source, so compile shares one PTX) on heads read
// in place: only `heads` and the strides differ, and grid, shared memory and cost equal sdpa's
// on the split tensors.
TEST(GemmAttentionLowering, SdpaHeadsSharesSdpasKernel) {
  TensorType x = tensor(DType::kBF16, {B, S, 768});
  x.row_stride = Expr(776);
  const Lowering fused =
      op("fused.sdpa_heads").lower(context("fused.sdpa_heads", {{"heads", 12}, {"causal", true}}, {x, x, x}));
  const TensorType split = tensor(DType::kBF16, {B * Expr(12), S, 64});
  const Lowering plain = op("sdpa").lower(context("sdpa", {{"causal", true}}, {split, split, split}));
  EXPECT_EQ(fused.kernels.at(0).name, "sdpa_bf16_d64_causal_wgmma");
  EXPECT_EQ(kernel_translation_unit(fused.kernels.at(0), "e"), kernel_translation_unit(plain.kernels.at(0), "e"));
  const Launch& f = fused.launches.at(0);
  const Launch& p = plain.launches.at(0);
  const Bindings bind = {{"B", 2}, {"S", 130}, {"SMS", 132}};
  for (const char* name : {"N", "Sq", "Skv"})
    EXPECT_EQ(arg(f, name).value.eval(bind), arg(p, name).value.eval(bind)) << name;
  EXPECT_EQ(arg(f, "heads").value.eval(bind), 12);
  EXPECT_EQ(arg(p, "heads").value.eval(bind), 1);
  EXPECT_EQ(arg(f, "ldq").value.eval(bind), 776);
  EXPECT_EQ(arg(f, "ldo").value.eval(bind), 768);
  EXPECT_EQ(arg(p, "ldo").value.eval(bind), 64);
  EXPECT_DOUBLE_EQ(arg(f, "scale").fvalue, 0.125);  // 1/sqrt(Dh), Dh = 768 / 12
  EXPECT_EQ(f.grid[0].eval(bind), p.grid[0].eval(bind));
  EXPECT_EQ(f.block, p.block);
  EXPECT_EQ(f.dynamic_smem.eval(bind), p.dynamic_smem.eval(bind));
  EXPECT_EQ(f.bytes.eval(bind), p.bytes.eval(bind));
  EXPECT_EQ(f.flops.eval(bind), p.flops.eval(bind));
}

// Grouped-query attention changes only arguments: kv_heads and kv_groups (the k/v head of query
// head n is n / kv_groups), the k/v strides, and the bytes (each k/v head read once). Grid, block,
// kernel and FLOPs are those of the same q with k/v heads repeated.
TEST(GemmAttentionLowering, GroupedQueryArgumentsAndCost) {
  const Expr T = Expr::dim("T");
  const Bindings bind = {{"B", 2}, {"S", 130}, {"T", 1000}, {"SMS", 132}};
  const TensorType q = tensor(DType::kBF16, {B * Expr(32), S, 128});
  const TensorType kv = tensor(DType::kBF16, {B * Expr(8), T, 128});
  const TensorType repeated = tensor(DType::kBF16, {B * Expr(32), T, 128});
  const Lowering grouped = op("sdpa").lower(context("sdpa", {{"causal", true}, {"kv_groups", 4}}, {q, kv, kv}));
  const Lowering plain = op("sdpa").lower(context("sdpa", {{"causal", true}}, {q, repeated, repeated}));
  EXPECT_EQ(grouped.kernels.at(0).name, "sdpa_bf16_d128_causal_wgmma");
  EXPECT_EQ(kernel_translation_unit(grouped.kernels.at(0), "e"), kernel_translation_unit(plain.kernels.at(0), "e"));
  const Launch& g = grouped.launches.at(0);
  const Launch& p = plain.launches.at(0);
  EXPECT_EQ(arg(g, "N").value.eval(bind), 64);
  EXPECT_EQ(arg(g, "Skv").value.eval(bind), 1000);
  EXPECT_EQ(arg(g, "heads").value.eval(bind), 1);
  EXPECT_EQ(arg(g, "kv_heads").value.eval(bind), 1);
  EXPECT_EQ(arg(g, "kv_groups").value.eval(bind), 4);
  EXPECT_EQ(arg(p, "kv_groups").value.eval(bind), 1);
  EXPECT_EQ(g.grid[0].eval(bind), p.grid[0].eval(bind));
  EXPECT_EQ(g.flops.eval(bind), p.flops.eval(bind));
  // q and the output: 2 * 64 heads * 130 * 128; k and v: 2 * 16 heads * 1000 * 128; 2 bytes each.
  EXPECT_EQ(g.bytes.eval(bind), (2 * 64 * 130 * 128 + 2 * 16 * 1000 * 128) * 2);

  // fused.sdpa_heads, 12 query heads of 64 on 3 k/v heads, k/v rows padded: kv_heads 3.
  TensorType hkv = tensor(DType::kBF16, {B, T, 192});
  hkv.row_stride = Expr(200);
  const Lowering fused = op("fused.sdpa_heads")
                             .lower(context("fused.sdpa_heads", {{"heads", 12}, {"kv_groups", 4}, {"causal", false}},
                                            {tensor(DType::kBF16, {B, S, 768}), hkv, hkv}));
  const Launch& f = fused.launches.at(0);
  EXPECT_EQ(fused.kernels.at(0).name, "sdpa_bf16_d64_wgmma");
  EXPECT_EQ(arg(f, "N").value.eval(bind), 24);
  EXPECT_EQ(arg(f, "heads").value.eval(bind), 12);
  EXPECT_EQ(arg(f, "kv_heads").value.eval(bind), 3);
  EXPECT_EQ(arg(f, "kv_groups").value.eval(bind), 4);
  EXPECT_EQ(arg(f, "ldk").value.eval(bind), 200);
  EXPECT_EQ(arg(f, "ldv").value.eval(bind), 200);
  EXPECT_EQ(arg(f, "ldo").value.eval(bind), 768);
  EXPECT_DOUBLE_EQ(arg(f, "scale").fvalue, 0.125);
  EXPECT_EQ(f.bytes.eval(bind), (2 * 24 * 130 * 64 + 2 * 6 * 1000 * 64) * 2);
}

TEST(GemmAttentionLowering, EveryKernelCompilesWithNvrtcForSm90) {
  std::vector<KernelSource> kernels;
  std::vector<Launch> launches;
  std::set<std::string> seen;
  for (const LowerCase& c : lowering_cases()) {
    const Lowering lowering = op(c.op).lower(context(c.op, c.attrs, c.inputs));
    for (const Launch& launch : lowering.launches) {
      const KernelSource& k = lowering.kernels.at(launch.kernel);
      if (!seen.insert(kernel_translation_unit(k, k.name)).second) continue;
      kernels.push_back(k);
      launches.push_back(launch);
    }
  }
  NvrtcConfig config;
  config.arch = "sm_90";
  config.use_cache = false;
  const std::vector<CompiledKernel> compiled = op_testing::nvrtc_compile(kernels, config);
  ASSERT_EQ(compiled.size(), kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    SCOPED_TRACE(kernels[i].name);
    const std::vector<PtxEntry> entries = parse_ptx_entries(compiled[i].ptx, kernels[i].name);
    const PtxEntry* entry = find_visible_entry(entries, kernels[i].name + "_entry_point");
    ASSERT_NE(entry, nullptr);
    ASSERT_EQ(entry->params.size(), launches[i].args.size());
    for (size_t a = 0; a < entry->params.size(); ++a)
      EXPECT_EQ(entry->params[a].size, arg_layout(launches[i].args[a]).size) << "argument " << a;
    // __launch_bounds__ came from the same constant as the launch's block.
    ASSERT_TRUE(entry->maxntid.has_value());
    EXPECT_EQ((*entry->maxntid)[0], launches[i].block[0]);
  }
}

// ---- fuse_attention_heads ----------------------------------------------------------------------

const GraphPass& attention_pass() {
  for (const GraphPass& pass : registry().passes())
    if (pass.name == "fuse_attention_heads") return pass;
  throw std::runtime_error("fuse_attention_heads is not registered");
}

Graph parse(const std::string& text) { return parse_graph(text, "attention_heads_test.yaml", registry()); }

// x -> linears q, k, v -> split_heads (vh first) -> sdpa attn (inputs `attn_inputs`) -> merge_heads
// merged (heads `merge_heads`) -> proj, then `tail` nodes; outputs `outputs`.
std::string attention(const std::string& merge_heads = "3", const std::string& tail = "",
                      const std::string& outputs = "[proj]", const std::string& attn_inputs = "[qh, kh, vh]") {
  return fmt::format(R"(name: t
dims: {{B: {{min: 1, max: 64, default: 2}}, S: {{min: 1, max: 512, default: 16}}}}
inputs: {{x: {{dtype: bf16, shape: [B, S, 96]}}}}
nodes:
  - {{name: q, op: linear, inputs: [x], attrs: {{out_features: 96}}}}
  - {{name: k, op: linear, inputs: [x], attrs: {{out_features: 96}}}}
  - {{name: v, op: linear, inputs: [x], attrs: {{out_features: 96}}}}
  - {{name: vh, op: split_heads, inputs: [v], attrs: {{heads: 3}}}}
  - {{name: qh, op: split_heads, inputs: [q], attrs: {{heads: 3}}}}
  - {{name: kh, op: split_heads, inputs: [k], attrs: {{heads: 3}}}}
  - {{name: attn, op: sdpa, inputs: {}, attrs: {{causal: true, scale: 0.5}}}}
  - {{name: merged, op: merge_heads, inputs: [attn], attrs: {{heads: {}}}}}
  - {{name: proj, op: linear, inputs: [merged], attrs: {{out_features: 96}}}}
{}outputs: {}
)",
                     attn_inputs, merge_heads, tail, outputs);
}

std::vector<std::string> node_names(const Graph& graph) {
  std::vector<std::string> names;
  for (const Node& node : graph.nodes) names.push_back(node.name);
  return names;
}

TEST(AttentionHeadsFusion, RewritesSplitSdpaMerge) {
  Graph graph = parse(attention());
  const TensorType before = graph.find_node("merged")->ctx.output;
  const Position attn_pos = graph.find_node("attn")->pos;
  const auto attn_keys = graph.find_node("attn")->key_pos;
  EXPECT_EQ(attention_pass().apply(graph, registry()), 1);
  EXPECT_EQ(node_names(graph), (std::vector<std::string>{"q", "k", "v", "merged", "proj"}));
  const Node& fused = graph.nodes[3];
  EXPECT_EQ(fused.op->name, "fused.sdpa_heads");
  EXPECT_EQ(fused.ctx.node, "merged");
  EXPECT_EQ(fused.inputs, (std::vector<std::string>{"q", "k", "v"}));
  EXPECT_EQ(fused.fused_from, (std::vector<std::string>{"vh", "qh", "kh", "attn", "merged"}));  // graph order
  EXPECT_EQ(fused.ctx.attrs.integer("heads"), 3);
  EXPECT_TRUE(fused.ctx.attrs.boolean("causal"));
  EXPECT_DOUBLE_EQ(fused.ctx.attrs.real("scale"), 0.5);
  EXPECT_EQ(fused.ctx.output.shape, before.shape);
  EXPECT_EQ(fused.ctx.output.row_stride, before.row_stride);
  EXPECT_EQ(fused.ctx.output.dtype, DType::kBF16);
  EXPECT_EQ(fused.pos.line, attn_pos.line);
  EXPECT_EQ(fused.pos.column, attn_pos.column);
  EXPECT_EQ(fused.key_pos.size(), attn_keys.size());
  EXPECT_EQ(graph.nodes[4].inputs, std::vector<std::string>{"merged"});  // the consumer finds it by name
}

// a, b and c may be one tensor (here a graph input with three uses): only the intermediates count.
TEST(AttentionHeadsFusion, SelfAttentionOnOneTensor) {
  Graph graph = parse(R"(name: t
dims: {B: {min: 1, max: 64, default: 2}, S: {min: 1, max: 512, default: 16}}
inputs: {x: {dtype: f32, shape: [B, S, 68]}}
nodes:
  - {name: qh, op: split_heads, inputs: [x], attrs: {heads: 4}}
  - {name: kh, op: split_heads, inputs: [x], attrs: {heads: 4}}
  - {name: vh, op: split_heads, inputs: [x], attrs: {heads: 4}}
  - {name: attn, op: sdpa, inputs: [qh, kh, vh]}
  - {name: out, op: merge_heads, inputs: [attn], attrs: {heads: 4}}
outputs: [out]
)");
  EXPECT_EQ(attention_pass().apply(graph, registry()), 1);
  ASSERT_EQ(graph.nodes.size(), 1u);
  const Node& fused = graph.nodes[0];
  EXPECT_EQ(fused.name, "out");
  EXPECT_EQ(fused.inputs, (std::vector<std::string>{"x", "x", "x"}));
  EXPECT_FALSE(fused.ctx.attrs.boolean("causal"));
  EXPECT_EQ(shape_str(fused.ctx.output.shape), "[B, S, 68]");
}

TEST(AttentionHeadsFusion, LeavesSplitWithSecondUse) {
  Graph graph = parse(attention("3", "  - {name: other, op: relu, inputs: [kh]}\n", "[proj, other]"));
  EXPECT_EQ(attention_pass().apply(graph, registry()), 0);
  EXPECT_EQ(graph.nodes.size(), 10u);
}

TEST(AttentionHeadsFusion, LeavesOneSplitFeedingTwoInputs) {
  Graph graph = parse(attention("3", "", "[proj, vh, kh]", "[qh, qh, qh]"));
  EXPECT_EQ(attention_pass().apply(graph, registry()), 0);
  EXPECT_EQ(graph.nodes.size(), 9u);
}

TEST(AttentionHeadsFusion, LeavesIntermediatesThatAreGraphOutputs) {
  for (const char* output : {"attn", "qh"}) {
    SCOPED_TRACE(output);
    Graph graph = parse(attention("3", "", fmt::format("[proj, {}]", output)));
    EXPECT_EQ(attention_pass().apply(graph, registry()), 0);
    EXPECT_EQ(graph.nodes.size(), 9u);
  }
}

TEST(AttentionHeadsFusion, LeavesMergeWithOtherHeads) {
  Graph graph = parse(attention("1"));
  EXPECT_EQ(attention_pass().apply(graph, registry()), 0);
  EXPECT_EQ(graph.nodes.size(), 9u);
}

// Grouped-query attention: x -> linears q (q_heads of 16) and k, v (kv_heads of 16) ->
// split_heads with those head counts -> sdpa with kv_groups `groups` -> merge_heads (heads
// `merge_heads`) -> proj.
std::string grouped_attention(int q_heads, int kv_heads, int groups, int merge_heads) {
  return fmt::format(R"(name: t
dims: {{B: {{min: 1, max: 64, default: 2}}, S: {{min: 1, max: 512, default: 16}}}}
inputs: {{x: {{dtype: f16, shape: [B, S, 64]}}}}
nodes:
  - {{name: q, op: linear, inputs: [x], attrs: {{out_features: {}}}}}
  - {{name: k, op: linear, inputs: [x], attrs: {{out_features: {}}}}}
  - {{name: v, op: linear, inputs: [x], attrs: {{out_features: {}}}}}
  - {{name: qh, op: split_heads, inputs: [q], attrs: {{heads: {}}}}}
  - {{name: kh, op: split_heads, inputs: [k], attrs: {{heads: {}}}}}
  - {{name: vh, op: split_heads, inputs: [v], attrs: {{heads: {}}}}}
  - {{name: attn, op: sdpa, inputs: [qh, kh, vh], attrs: {{causal: true, kv_groups: {}}}}}
  - {{name: merged, op: merge_heads, inputs: [attn], attrs: {{heads: {}}}}}
  - {{name: proj, op: linear, inputs: [merged], attrs: {{out_features: 64}}}}
outputs: [proj]
)",
                     q_heads * 16, kv_heads * 16, kv_heads * 16, q_heads, kv_heads, kv_heads, groups, merge_heads);
}

TEST(AttentionHeadsFusion, RewritesGroupedQueryAttention) {
  // 4 query heads on 2 k/v heads, and multi-query: 4 on 1.
  for (const auto& [kv_heads, groups] : std::vector<std::pair<int, int>>{{2, 2}, {1, 4}}) {
    SCOPED_TRACE(groups);
    Graph graph = parse(grouped_attention(4, kv_heads, groups, 4));
    EXPECT_EQ(shape_str(graph.find_node("kh")->ctx.output.shape), shape_str({B * Expr(kv_heads), S, Expr(16)}));
    const TensorType before = graph.find_node("merged")->ctx.output;
    EXPECT_EQ(attention_pass().apply(graph, registry()), 1);
    EXPECT_EQ(node_names(graph), (std::vector<std::string>{"q", "k", "v", "merged", "proj"}));
    const Node& fused = graph.nodes[3];
    EXPECT_EQ(fused.op->name, "fused.sdpa_heads");
    EXPECT_EQ(fused.inputs, (std::vector<std::string>{"q", "k", "v"}));
    EXPECT_EQ(fused.fused_from, (std::vector<std::string>{"qh", "kh", "vh", "attn", "merged"}));
    EXPECT_EQ(fused.ctx.attrs.integer("heads"), 4);
    EXPECT_EQ(fused.ctx.attrs.integer("kv_groups"), groups);
    EXPECT_TRUE(fused.ctx.attrs.boolean("causal"));
    EXPECT_EQ(shape_str(fused.ctx.inputs.at(1).shape), fmt::format("[B, S, {}]", kv_heads * 16));
    EXPECT_EQ(fused.ctx.output.shape, before.shape);
    EXPECT_EQ(fused.ctx.output.dtype, DType::kF16);
  }
}

// Merged with 2 heads where q was split into 4: not the pattern.
TEST(AttentionHeadsFusion, LeavesGroupedMergeWithOtherHeads) {
  Graph graph = parse(grouped_attention(4, 2, 2, 2));
  EXPECT_EQ(attention_pass().apply(graph, registry()), 0);
  EXPECT_EQ(graph.nodes.size(), 9u);
}

// 6 query heads a batch, kv_groups 4: sdpa's shapes agree (q [12, S, 16] is 4 times k's
// [3, S, 16]) but 4 query heads never share a k/v head of one batch, and fused.sdpa_heads,
// which groups heads within a batch, cannot say this.
TEST(AttentionHeadsFusion, LeavesKvGroupsThatDoNotDivideHeads) {
  Graph graph = parse(R"(name: t
inputs: {x: {dtype: f32, shape: [2, 5, 96]}, y: {dtype: f32, shape: [3, 5, 16]}}
nodes:
  - {name: qh, op: split_heads, inputs: [x], attrs: {heads: 6}}
  - {name: kh, op: split_heads, inputs: [y], attrs: {heads: 1}}
  - {name: vh, op: split_heads, inputs: [y], attrs: {heads: 1}}
  - {name: attn, op: sdpa, inputs: [qh, kh, vh], attrs: {kv_groups: 4}}
  - {name: out, op: merge_heads, inputs: [attn], attrs: {heads: 6}}
outputs: [out]
)");
  EXPECT_EQ(attention_pass().apply(graph, registry()), 0);
  EXPECT_EQ(graph.nodes.size(), 5u);
}

// The bundled transformer graphs: every attention block fuses, and nothing else changes.
TEST(AttentionHeadsFusion, BundledTransformerGraphs) {
  for (const auto& [file, blocks] : std::vector<std::pair<std::string, int>>{
           {"transformer_block.yaml", 1}, {"transformer_block_bf16.yaml", 1}, {"tiny_lm.yaml", 2}}) {
    SCOPED_TRACE(file);
    Graph graph = load_graph(std::string(TEENY_SOURCE_DIR) + "/graphs/" + file, registry());
    const size_t nodes = graph.nodes.size();
    EXPECT_EQ(attention_pass().apply(graph, registry()), blocks);
    EXPECT_EQ(graph.nodes.size(), nodes - 4 * blocks);
    for (const Node& node : graph.nodes) {
      EXPECT_NE(node.op->name, "split_heads");
      EXPECT_NE(node.op->name, "sdpa");
      EXPECT_NE(node.op->name, "merge_heads");
    }
  }
  Graph block = load_graph(std::string(TEENY_SOURCE_DIR) + "/graphs/transformer_block_bf16.yaml", registry());
  attention_pass().apply(block, registry());
  const Node* merged = block.find_node("merged");
  ASSERT_NE(merged, nullptr);
  EXPECT_EQ(merged->inputs, (std::vector<std::string>{"q", "k", "v"}));
  EXPECT_EQ(merged->fused_from, (std::vector<std::string>{"qh", "kh", "vh", "attn", "merged"}));
  EXPECT_EQ(merged->ctx.attrs.integer("heads"), 12);
  EXPECT_TRUE(merged->ctx.attrs.boolean("causal"));
  EXPECT_FALSE(merged->ctx.attrs.has("scale"));
}

}  // namespace
}  // namespace teeny
