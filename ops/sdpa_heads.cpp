// fused.sdpa_heads: merge_heads(sdpa(split_heads(q), split_heads(k), split_heads(v))) in one
// launch, for q [B, S, H*Dh] and k/v [B, T, Hkv*Dh] with H = Hkv*kv_groups (grouped-query
// attention: query head h reads k/v head h / kv_groups). sdpa's kernel reads each head in place
// (padded row strides included) and writes it into its columns of the [B, S, H*Dh] output, so
// the four head copies never run. Lowering, kernels, reference and backward are sdpa's
// (ops/sdpa.h; the gradient ops read the heads in place too); the graph pass that forms this op
// from five nodes, before a training graph is differentiated: ops/fuse_attention_heads.cpp.
#include <tuple>

#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/head_copy.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/sdpa.h"

namespace teeny::ops {
namespace {

constexpr const char* kOp = "fused.sdpa_heads";

TensorType infer_sdpa_heads(const OpDef& meta, const OpContext& ctx) {
  const int64_t heads = ctx.attrs.integer("heads"), groups = kv_groups(ctx.attrs);
  if (heads % groups != 0) {
    throw OpError("attrs.kv_groups",
                  fmt::format("{}: heads = {} is not divisible by kv_groups = {}", kOp, heads, groups));
  }
  const DType dtype = check_attention_inputs(meta, ctx, {"[B, S, H*Dh]", "B", "width H*Dh", 2});
  const TensorType& q = ctx.inputs.at(0);
  const auto width = q.shape[2].const_value();
  if (!width) {
    throw OpError("inputs", fmt::format("{} needs a fixed width H*Dh; q is {}", kOp, shape_str(q.shape)));
  }
  if (*width % heads != 0) {
    throw OpError("attrs.heads", fmt::format("{}: the width {} is not divisible by heads = {}", kOp, *width, heads));
  }
  check_sdpa_head_dim(kOp, *width / heads);
  return contiguous(dtype, q.shape);
}

std::vector<ConformanceCase> sdpa_heads_cases() {
  std::vector<ConformanceCase> cases;
  const std::vector<Bindings> sizes = {{{"B", 1}, {"S", 1}}, {{"B", 3}, {"S", 17}}, {{"B", 2}, {"S", 130}}};
  for (DType dtype : float_dtypes()) {
    const std::string dt = dtype_name(dtype);
    // Dh 64 and 128: tensor cores for f16/bf16; 17: the CUDA-core kernel with scalar loads.
    for (int heads : {1, 3, 12}) {
      for (int head_dim : {64, 17, 128}) {
        for (bool causal : {false, true}) {
          const std::string shape = fmt::format("[B, S, {}]", heads * head_dim);
          cases.push_back({fmt::format("{} heads of {}{} {}", heads, head_dim, causal ? " causal" : "", dt),
                           case_graph({"B", "S"}, {{"q", dtype, shape}, {"k", dtype, shape}, {"v", dtype, shape}},
                                      {{"o", kOp, {"q", "k", "v"}, {{"heads", heads}, {"causal", causal}}}}),
                           sizes});
        }
      }
    }
    for (bool causal : {false, true}) {
      cases.push_back(
          {fmt::format("q [B, S, 192], k/v [B, T, 192], 3 heads{} {}", causal ? " causal" : "", dt),
           case_graph({"B", "S", "T"},
                      {{"q", dtype, "[B, S, 192]"}, {"k", dtype, "[B, T, 192]"}, {"v", dtype, "[B, T, 192]"}},
                      {{"o", kOp, {"q", "k", "v"}, {{"heads", 3}, {"causal", causal}, {"scale", 0.3}}}}),
           {{{"B", 2}, {"S", 33}, {"T", 70}}, {{"B", 1}, {"S", 70}, {"T", 33}}}});
    }
    // Grouped-query attention: 8 query heads on one k/v head (multi-query, ratio 8), and 6 on 2
    // (ratio 3) with head dim 17, whose k/v heads start mid-vector.
    for (const auto& [heads, groups, head_dim, causal] : {std::tuple{8, 8, 64, true}, {6, 3, 17, false}}) {
      const std::string kv = fmt::format("[B, T, {}]", heads / groups * head_dim);
      cases.push_back(
          {fmt::format("{} heads of {}, kv_groups {}{} {}", heads, head_dim, groups, causal ? " causal" : "", dt),
           case_graph({"B", "S", "T"},
                      {{"q", dtype, fmt::format("[B, S, {}]", heads * head_dim)}, {"k", dtype, kv}, {"v", dtype, kv}},
                      {{"o", kOp, {"q", "k", "v"}, {{"heads", heads}, {"kv_groups", groups}, {"causal", causal}}}}),
           {{{"B", 1}, {"S", 1}, {"T", 1000}},
            {{"B", 3}, {"S", 7}, {"T", 128}},
            {{"B", 2}, {"S", 128}, {"T", 7}},
            {{"B", 1}, {"S", 1000}, {"T", 1000}}}});
    }
    // A sliding window over grouped heads (Mistral's layout: 8 query heads on 2 k/v heads).
    cases.push_back(
        {fmt::format("8 heads of 64, kv_groups 4, causal window 40 {}", dt),
         case_graph({"B", "S"}, {{"q", dtype, "[B, S, 512]"}, {"k", dtype, "[B, S, 128]"}, {"v", dtype, "[B, S, 128]"}},
                    {{"o", kOp, {"q", "k", "v"}, {{"heads", 8}, {"kv_groups", 4}, {"causal", true}, {"window", 40}}}}),
         {{{"B", 1}, {"S", 1}}, {{"B", 2}, {"S", 150}}}});
    // 3 heads of 17 in rows padded to 52 (f32) or 56 (16-bit) elements; one tensor as q, k and v.
    cases.push_back({"padded q/k/v (linear 51 of 52/56), 3 heads " + dt,
                     case_graph({"B", "S"}, {{"x", dtype, "[B, S, 8]"}},
                                {{"p", "linear", {"x"}, {{"out_features", 51}}},
                                 {"o", kOp, {"p", "p", "p"}, {{"heads", 3}, {"causal", true}}}}),
                     {{{"B", 1}, {"S", 1}}, {{"B", 2}, {"S", 100}}}});
  }
  return cases;
}

}  // namespace

OpDef sdpa_heads_op() {
  OpDef def;
  def.name = kOp;
  def.doc =
      "merge_heads(sdpa(split_heads(q), split_heads(k), split_heads(v))) in one kernel; q [B, S, H*Dh], "
      "k/v [B, T, Hkv*Dh] (H = Hkv*kv_groups) -> [B, S, H*Dh]";
  def.inputs = {{"q", "[B, S, H*Dh]"}, {"k", "[B, T, Hkv*Dh]"}, {"v", "[B, T, Hkv*Dh]"}};
  def.attrs = {heads_attr_spec()};
  for (AttrSpec& spec : sdpa_attr_specs()) def.attrs.push_back(std::move(spec));
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_sdpa_heads(meta, ctx); };
  def.lower = [](const OpContext& ctx) { return lower_attention(ctx, attention_heads(ctx.attrs)); };
  def.tuning = attention_tuning(attention_heads);
  def.reference = [](const RefContext& ref) { return attention_reference(ref, attention_heads(ref.op.attrs)); };
  def.backward = attention_backward;
  def.conformance_cases = sdpa_heads_cases;
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
