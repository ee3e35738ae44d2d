// sdpa: softmax(q kᵀ · scale [+ causal mask]) v for q [N, Sq, Dh], k/v [N / kv_groups, Skv, Dh]
// (query head n reads k/v head n / kv_groups: grouped-query attention, ops/sdpa.h).
//
// Flash-attention style (ops/kernels/sdpa.cuh): one block per (head, tile of queries); K and V
// stream through shared memory with an online softmax, so nothing S×S is ever stored. Four
// kernels: on sm_90 Hopper's warpgroup MMAs fed by TMA for f16/bf16 head dims 64, 128 and 256
// (ops/kernels/sdpa_wgmma.cuh); mma.sync tensor cores for other f16/bf16 head dims in MMA steps
// (up to 128), register tiles for f32 head dim 64, and otherwise one to four threads per query
// (head dims up to 256). The kernels also read heads in place from [B, S, H*Dh] tensors and write
// them merged, for fused.sdpa_heads (ops/sdpa.h).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "core/autodiff.h"
#include "ops/conformance.h"
#include "ops/grad_util.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/sdpa.h"

namespace teeny::ops {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kQueriesPerBlock = 64;

int threads_per_query(int64_t head_dim) { return head_dim <= 64 ? 1 : head_dim <= 128 ? 2 : 4; }
// Scores for a tile live in registers next to q and the accumulator: 16 keeps d <= 256 unspilled.
constexpr int kKeysPerTile = 16;
// Tensor-core path: 4 warps x 16 query rows = kQueriesPerBlock, 64 keys per tile. One 16-row
// m-tile a warp leaves registers for kMmaBlocksPerSm blocks an SM. Tried on the H200 and
// measured slower or no faster for their extra code: two m-tiles a warp (each K/V fragment
// read once for both, but 2 blocks an SM), and warpgroup MMAs (2 warpgroups x 64 rows; 1
// warpgroup software-pipelined over 3 K/V buffers).
constexpr int kMmaWarps = 4;
constexpr int kMmaKeysPerTile = 64;
// The register cap (128 a thread) aims at 4 resident blocks, whose tile loads hide each
// other's latency better than the 3 that an uncapped kernel's registers allow. A window's masks
// and first-tile arithmetic do not fit 128 registers without spilling, so windowed kernels aim
// at 3.
constexpr int kMmaBlocksPerSm = 4;
constexpr int kMmaWindowBlocksPerSm = 3;
// The tensor-core kernel's variants for `teeny tune`: the blocks an SM its register cap aims at.
// Above head dim 64 the cap of 4 spills (more so with a window), and fewer blocks with more
// registers each may run faster; which does is measured, not assumed.
constexpr int kMmaBlockChoices[] = {4, 3, 2};

std::string mma_variant_name(int blocks) { return fmt::format("mma_b{}", blocks); }
constexpr const char* kWgmmaVariant = "wgmma";

// The blocks an SM that the context's variant names, or 0 where it names none (or the wgmma
// kernel).
int variant_blocks_per_sm(const OpContext& ctx) {
  if (ctx.variant.empty() || ctx.variant == kWgmmaVariant) return 0;
  for (int blocks : kMmaBlockChoices)
    if (ctx.variant == mma_variant_name(blocks)) return blocks;
  throw OpError("op", fmt::format("attention has no variant '{}' here", ctx.variant));
}

// The Hopper kernel (ops/kernels/sdpa_wgmma.cuh), persistent (a block an SM, each taking work
// items of 128 queries in turn) over a producer and two consumer warpgroups; key tiles by wgmma_key_tiles; as many
// ring stages as fit beside Q in shared memory, up to 4.
constexpr int kWgmmaQueriesPerBlock = 128;
constexpr int kWgmmaThreads = 384;
constexpr int kWgmmaMaxStages = 4;
int64_t wgmma_smem_with(int64_t head_dim, int keys, int64_t stages) {
  // Q, the stages' K and V tiles (16-bit), 1024 bytes to align them for the swizzle, and the
  // mbarriers: a full and an empty one for Q and for each stage's K and V.
  return int64_t{kWgmmaQueriesPerBlock} * head_dim * 2 + stages * 2 * keys * head_dim * 2 + 1024 + 8 * (2 + 4 * stages);
}
int wgmma_stages(int64_t head_dim, int keys) {
  int stages = kWgmmaMaxStages;
  while (stages > 2 && wgmma_smem_with(head_dim, keys, stages) > kSm90MaxBlockSmem) --stages;
  return stages;
}
int64_t wgmma_dynamic_smem(int64_t head_dim, int keys) {
  return wgmma_smem_with(head_dim, keys, wgmma_stages(head_dim, keys));
}

// The key tiles of the wgmma kernel, each with the key counts it runs at and its kernel name's
// suffix: 128 keys (64 at head dim 256, whose O accumulators take 128 registers a thread). At
// head dim 128 without a mask, key ranges of 4096 or more take tiles of 176 (FlashAttention-3's):
// fewer tiles' fixed costs; shorter ones keep 128, where an item's pipeline fill and drain of the
// larger tile cost more than that saves. Causal items end on 128-key diagonals.
struct WgmmaKeyTile {
  int keys;
  Expr when;
  std::string suffix;
};
std::vector<WgmmaKeyTile> wgmma_key_tiles(int64_t head_dim, bool causal, const Expr& skv) {
  if (head_dim > 128) return {{64, Expr(1), ""}};
  if (head_dim < 128 || causal) return {{128, Expr(1), ""}};
  constexpr int64_t kLongKeys = 4096;
  return {{128, le(skv, Expr(kLongKeys - 1)), ""}, {176, le(Expr(kLongKeys), skv), "_k176"}};
}

// Whether the wgmma kernel takes this problem: sm_90, 16-bit, head dims of whole 64-column
// swizzle atoms, no window, and rows TMA can stride (16-byte multiples).
bool wgmma_ok(const OpContext& ctx, int64_t head_dim) {
  const DType dtype = ctx.output.dtype;
  return ctx.target_sm == 90 && dtype != DType::kF32 && head_dim % 64 == 0 && attention_window(ctx.attrs) == 0 &&
         is_16_byte_multiple(ctx.inputs.at(0).row_stride, dtype) &&
         is_16_byte_multiple(ctx.inputs.at(1).row_stride, dtype) &&
         is_16_byte_multiple(ctx.inputs.at(2).row_stride, dtype);
}

// Decode path: at most this many query rows (the 64-query tiles' kernels do the same work in
// less time from about here on: the decode kernel's CUDA-core work grows with the rows, the
// tensor cores' does not), 128 threads a block, the combine 128 threads a row. The decode
// kernels are bound by reading K and V, and a block keeps enough of it in flight to stream an
// SM's share of the bandwidth alone, so the block count is sized in SMs: splits as short as
// kDecodeMinKeys up to about one wave (kDecodeWaveBlocksPerSm blocks an SM), and past that only
// splits of kDecodeLongKeys or more, up to kDecodeBlocksPerSm blocks an SM. A block of a few
// hundred keys spends much of its time outside the stream (staging Q, filling its rings, merging
// its warps, writing partials), which one wave hides behind the other blocks' loads but a
// second wave of such blocks pays again.
constexpr int kDecodeMaxRows = 8;
constexpr int kDecodeThreads = 128;
constexpr int kDecodeMinKeys = 128;
constexpr int kDecodeLongKeys = 512;
constexpr int kDecodeWaveBlocksPerSm = 2;
constexpr int kDecodeBlocksPerSm = 8;
// The shapes alone cap the splits at this many blocks, which sizes the partials before the GPU is
// known (the arena is planned at compile time): above kDecodeBlocksPerSm an SM of the largest GPUs.
constexpr int kDecodeMaxBlocks = 2048;
constexpr int kDecodeCombineThreads = 128;
// The decode path on tensor cores (f16/bf16, head dims of whole 16-column MMA steps): 4 warps a
// block, each streaming 16-key tiles through its own cp.async ring, as deep as keeps the block's
// shared memory about 110 KiB or less (two blocks an SM up to head dim 128).
constexpr int kDecodeMmaWarps = 4;
constexpr int kDecodeMmaRows = 16;  // the packed query rows of a block: one m16 MMA tile
constexpr int kDecodeMmaKeys = 16;  // keys a tile of a warp's ring
int decode_mma_stages(int64_t head_dim) { return head_dim <= 64 ? 4 : head_dim <= 128 ? 3 : 2; }
int64_t decode_mma_smem(int64_t head_dim, DType dtype) {  // Q and the rings: tn_sdpa_decode_mma_smem
  const int64_t row = (head_dim + 8) * static_cast<int64_t>(dtype_size(dtype));
  return kDecodeMmaRows * row + int64_t{kDecodeMmaWarps} * decode_mma_stages(head_dim) * 2 * kDecodeMmaKeys * row;
}
bool decode_on_tensor_cores(DType dtype, int64_t head_dim) { return dtype != DType::kF32 && head_dim % 16 == 0; }
// The query rows up to which the decode path runs: a block's 16 MMA rows on tensor cores (rows
// cost it nothing until they fill them), kDecodeMaxRows on CUDA cores.
int decode_max_rows(DType dtype, int64_t head_dim) {
  return decode_on_tensor_cores(dtype, head_dim) ? kDecodeMmaRows : kDecodeMaxRows;
}
// f32 register-tiled path, head dim 64: 16 x 16 threads over 64 x 64 tiles, 102 KiB of shared
// memory a block. Each thread computes 4 x 4 scores from float4 shared reads (16 FMAs per two
// 16-byte loads), where the one-thread-per-query kernel does one FMA per shared load.
constexpr int kF32TiledThreads = 256;
constexpr int kF32TiledKeysPerTile = 64;
constexpr int kF32TiledBlocksPerSm = 2;

TensorType infer_sdpa(const OpDef& meta, const OpContext& ctx) {
  const DType dtype = check_attention_inputs(meta, ctx, {"[N, S, Dh]", "N", "head dim", 0});
  const TensorType& q = ctx.inputs.at(0);
  const auto head_dim = q.shape[2].const_value();
  if (!head_dim) {
    throw OpError("inputs", fmt::format("sdpa needs a fixed head dim; q is {}", shape_str(q.shape)));
  }
  check_sdpa_head_dim("sdpa", *head_dim);
  return contiguous(dtype, q.shape);
}

double sdpa_scale(const OpContext& ctx, int64_t head_dim) {
  return ctx.attrs.has("scale") ? ctx.attrs.real("scale") : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

// The register-tiled CUDA-core kernel: f32, head dim 64.
bool use_f32_tiled(DType dtype, int64_t head_dim) { return dtype == DType::kF32 && head_dim == 64; }

// g where `q` is structurally g times `k` (B*32 and B*8: 4; 12 and 3: 4), for a kv_groups hint.
std::optional<int64_t> group_ratio(const Expr& q, const Expr& k) {
  auto factor = [](const Expr& e) -> int64_t {
    if (e.is_const()) return *e.const_value();
    return e.kind() == Expr::Kind::kMul && e.rhs().is_const() ? *e.rhs().const_value() : 1;
  };
  const int64_t fq = factor(q), fk = factor(k);
  if (fk <= 0 || fq % fk != 0 || fq / fk < 2 || k * Expr(fq / fk) != q) return std::nullopt;
  return fq / fk;
}

// q's dim `dim` must be kv_groups times k's and v's where it is the layout's grouped dim, else
// equal to theirs (k and v share a shape). A note names the kv_groups that would match, if any.
void check_q_dim_against_kv(const std::string& op, const AttentionLayout& layout, size_t dim, const OpContext& ctx) {
  const TensorType& q = ctx.inputs.at(0);
  const TensorType& k = ctx.inputs.at(1);
  const bool grouped = dim == layout.grouped_dim;
  const int64_t groups = grouped ? kv_groups(ctx.attrs) : 1;
  if (q.shape[dim] == k.shape[dim] * Expr(groups)) return;
  const std::string what = dim == 0 ? fmt::format("first dim {}", layout.first) : layout.last;
  const std::string got =
      fmt::format("got {}, {}, {}", shape_str(q.shape), shape_str(k.shape), shape_str(ctx.inputs.at(2).shape));
  OpError error("inputs", groups == 1 ? fmt::format("{}: q, k, v must have the same {}; {}", op, what, got)
                                      : fmt::format("{}: q's {} must be kv_groups = {} times k's and v's; {}", op, what,
                                                    groups, got));
  if (const std::optional<int64_t> ratio = group_ratio(q.shape[dim], k.shape[dim]); grouped && ratio) {
    error.note(fmt::format("kv_groups: {} would match (grouped-query attention, {} query heads per k/v head)", *ratio,
                           *ratio));
  }
  throw error;
}

// k or v, [X_kv, Skv, kv_heads*Dh], with its heads repeated into q's layout [rows, Skv, heads*Dh]:
// query head n gets k/v head n / kv_groups (PyTorch's repeat_interleave over the head dim).
HostTensor repeat_kv_heads(const HostTensor& x, int64_t rows, const AttentionHeads& h, int64_t head_dim) {
  const int64_t skv = x.shape[1], x_width = x.shape[2], width = h.heads * head_dim;
  HostTensor out{x.dtype, {rows, skv, width}, std::vector<double>(rows * skv * width)};
  for (int64_t n = 0; n < rows * h.heads; ++n) {
    const int64_t m = n / h.kv_groups;
    for (int64_t j = 0; j < skv; ++j) {
      const double* from = &x.data[((m / h.kv_heads) * skv + j) * x_width + (m % h.kv_heads) * head_dim];
      std::copy(from, from + head_dim, &out.data[((n / h.heads) * skv + j) * width + (n % h.heads) * head_dim]);
    }
  }
  return out;
}

}  // namespace

AttentionHeads attention_heads(const Attrs& attrs) {
  const int64_t heads = attrs.has("heads") ? attrs.integer("heads") : 1, groups = kv_groups(attrs);
  return heads == 1 ? AttentionHeads{1, 1, groups} : AttentionHeads{heads, heads / groups, groups};
}

void attention_backward(GradBuilder& g) {
  const nlohmann::json& attrs = g.ctx().attrs.json();
  const std::string &q = g.input(0), &k = g.input(1), &v = g.input(2), &dout = g.grad_output();
  const std::string stats = g.add("grad.sdpa_stats", {q, k, g.output(), dout}, attrs);
  if (g.needs_input_grad(0)) g.input_grad(0, g.add("grad.sdpa_dq", {q, k, v, dout, stats}, attrs));
  if (!g.needs_input_grad(1) && !g.needs_input_grad(2)) return;
  const std::string dkv = g.add("grad.sdpa_dkv", {q, k, v, dout, stats}, attrs);
  const Expr& width = g.ctx().inputs.at(1).shape[2];  // k's: its heads' dK, then their dV
  for (size_t i : {1, 2})
    if (g.needs_input_grad(i))
      g.input_grad(i,
                   g.add("grad.slice", {dkv}, {{"axis", 2}, {"sizes", shape_attr({width, width})}, {"index", i - 1}}));
}

std::vector<AttrSpec> sdpa_attr_specs() {
  AttrSpec scale = attr_spec("scale", AttrType::kFloat, "score scale; default 1/sqrt(Dh)");
  scale.optional = true;
  AttrSpec groups =
      attr_spec("kv_groups", AttrType::kInt, "query heads per k/v head (grouped-query attention)", nlohmann::json(1));
  groups.min_value = 1;
  AttrSpec window = attr_spec("window", AttrType::kInt,
                              "sliding window: each query sees only its last W keys, its own included (needs causal)");
  window.optional = true;
  window.min_value = 1;
  return {attr_spec("causal", AttrType::kBool, "mask keys after the query (PyTorch is_causal)", nlohmann::json(false)),
          scale, groups, window};
}

int64_t kv_groups(const Attrs& attrs) { return attrs.has("kv_groups") ? attrs.integer("kv_groups") : 1; }

int64_t attention_window(const Attrs& attrs) {
  if (!attrs.has("window")) return 0;
  if (!attrs.has("causal") || !attrs.boolean("causal"))
    throw OpError("attrs.window",
                  "a sliding window needs causal: true (it keeps the last window keys up to the query)");
  return attrs.integer("window");
}

std::string attention_mask_name(const Attrs& attrs) {
  if (!attrs.has("causal") || !attrs.boolean("causal")) return "";
  const int64_t window = attention_window(attrs);
  return window > 0 ? fmt::format("_causal_w{}", window) : "_causal";
}

std::string window_template_arg(int64_t window) { return window > 0 ? fmt::format(", {}", window) : ""; }

Expr attention_flops(const Expr& per_score, const Expr& sq, const Expr& skv, bool causal, int64_t window) {
  const Expr full = per_score * sq * skv;
  if (window > 0) return min(full / Expr(2), per_score * sq * Expr(window));
  return causal ? full / Expr(2) : full;
}

KeyRange visible_keys(const Attrs& attrs, int64_t query, int64_t skv) {
  if (!attrs.has("causal") || !attrs.boolean("causal")) return {0, skv};
  const int64_t end = std::min(skv, query + 1), window = attention_window(attrs);
  return {window > 0 ? std::min(end, std::max<int64_t>(0, query - window + 1)) : 0, end};
}

DType check_attention_inputs(const OpDef& meta, const OpContext& ctx, const AttentionLayout& layout) {
  const std::string& op = meta.name;
  const TensorType& k = ctx.inputs.at(1);
  const TensorType& v = ctx.inputs.at(2);
  const char* names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    if (ctx.inputs[i].shape.size() != 3) {
      throw OpError("inputs", fmt::format("{} needs q, k, v of shape {}; {} is {}", op, layout.shape, names[i],
                                          shape_str(ctx.inputs[i].shape)));
    }
  }
  const DType dtype = common_float_dtype(meta, ctx);
  output_float_dtype(meta, ctx, dtype);
  attention_window(ctx.attrs);
  if (k.shape != v.shape) {
    throw OpError("inputs", fmt::format("{}: k and v must have the same shape; got {} and {}", op, shape_str(k.shape),
                                        shape_str(v.shape)));
  }
  check_q_dim_against_kv(op, layout, 0, ctx);
  check_q_dim_against_kv(op, layout, 2, ctx);
  return dtype;
}

OpTuning attention_tuning(std::function<AttentionHeads(const Attrs&)> heads_of) {
  OpTuning tuning;
  tuning.dims = [heads_of](const OpContext& ctx) {
    return std::vector<std::pair<std::string, Expr>>{{"N", ctx.inputs.at(0).shape[0] * Expr(heads_of(ctx.attrs).heads)},
                                                     {"Sq", ctx.inputs.at(0).shape[1]},
                                                     {"Skv", ctx.inputs.at(1).shape[1]}};
  };
  tuning.variants = [heads_of](const OpContext& ctx) {
    std::vector<OpVariant> variants;
    const int64_t head_dim = *ctx.inputs.at(0).shape[2].const_value() / heads_of(ctx.attrs).heads;
    if (attention_tensor_cores(ctx.output.dtype, head_dim))
      for (int blocks : kMmaBlockChoices) variants.push_back({mma_variant_name(blocks)});
    if (wgmma_ok(ctx, head_dim)) variants.push_back({kWgmmaVariant});
    return variants;
  };
  // An output row (a query's, every head of it) needs its batch's keys and its position: the
  // reference computes sampled rows from whole inputs.
  tuning.reference_rows = true;
  return tuning;
}

bool attention_mma_head_dim(int64_t head_dim) { return head_dim % 16 == 0 && head_dim <= 128; }

bool attention_tensor_cores(DType dtype, int64_t head_dim) {
  return dtype != DType::kF32 && attention_mma_head_dim(head_dim);
}

void check_sdpa_head_dim(const std::string& op, int64_t head_dim) {
  const int tpq = threads_per_query(head_dim);
  if (head_dim > kMaxHeadDim || head_dim % tpq != 0) {
    throw OpError("inputs", fmt::format("{} supports head dims up to {} (multiples of {} above {}); got {}", op,
                                        kMaxHeadDim, tpq, tpq == 2 ? 64 : 128, head_dim));
  }
}

// The decode path (ops/kernels/sdpa_decode.cuh) for Sq <= decode_max_rows, which `tiled` (the
// 64-query-tile kernel's launch) leaves: the keys split by the SMs of the GPU it runs on (as the
// decode constants' comment says; so the split count, and with it the bits, can differ between
// GPUs of different SM counts), then the combine where there are two or more. On tensor cores a
// block takes up to 16 rows of the query heads that share a k/v head; otherwise one query head.
struct AttentionDims {
  Expr n, sq, skv, ldo;  // query heads, query and key lengths, the output's row stride
};

void add_decode(Lowering& lowering, const Launch& tiled, const AttentionDims& dims, const AttentionHeads& h,
                DType dtype, int64_t head_dim, const Attrs& attrs) {
  const bool causal = attrs.boolean("causal");
  const int64_t window = attention_window(attrs);
  const Expr& n = dims.n;
  const Expr& sq = dims.sq;
  const Expr& skv = dims.skv;
  const Expr when = le(sq, Expr(decode_max_rows(dtype, head_dim)));
  if (when == Expr(0)) return;
  const bool mma = decode_on_tensor_cores(dtype, head_dim);
  // Blocks a split: the chunks of packed rows of every k/v head, or the query heads.
  const Expr units = mma ? n / Expr(h.kv_groups) * ceil_div(Expr(h.kv_groups) * sq, Expr(kDecodeMmaRows)) : n;
  const Expr keys = causal ? min(skv, sq) : skv;
  const Expr most_splits =
      max(Expr(1), min(ceil_div(keys, Expr(kDecodeMinKeys)), ceil_div(Expr(kDecodeMaxBlocks), units)));
  const Expr one_wave = device_sms() * Expr(kDecodeWaveBlocksPerSm) / units;
  const Expr long_splits = min(ceil_div(keys, Expr(kDecodeLongKeys)), device_sms() * Expr(kDecodeBlocksPerSm) / units);
  const Expr splits = max(Expr(1), min(most_splits, max(one_wave, long_splits)));
  const Expr combined = when * le(Expr(2), splits);
  lowering.scratch.push_back(
      {"partials", DType::kF32,
       max(Expr(1), when * le(Expr(2), most_splits) * most_splits * n * sq * Expr(head_dim + 2))});

  Launch decode = tiled;
  decode.kernel = static_cast<int>(lowering.kernels.size());
  decode.args.push_back(scratch("partials", "partials", DType::kF32));
  decode.args.push_back(i32("splits", splits));
  decode.grid = {units * splits, Expr(1), Expr(1)};
  decode.when = when;
  const std::string name =
      fmt::format("sdpa_{}_d{}{}_decode{}", dtype_name(dtype), head_dim, attention_mask_name(attrs), mma ? "_mma" : "");
  if (mma) {
    const int threads = kDecodeMmaWarps * 32;
    decode.block = {threads, 1, 1};
    decode.dynamic_smem = Expr(decode_mma_smem(head_dim, dtype));
    lowering.kernels.push_back(
        template_kernel(name, "sdpa_decode.cuh",
                        fmt::format("tn_sdpa_decode_mma<{}, {}, {}, {}, {}{}>", dtype_c_type(dtype), head_dim,
                                    kDecodeMmaWarps, decode_mma_stages(head_dim), causal, window_template_arg(window)),
                        decode.args, threads, TEENY_KERNEL_ORIGIN));
  } else {
    decode.block = {kDecodeThreads, 1, 1};
    const int64_t keys_a_tile = head_dim <= 64 ? 64 : head_dim <= 128 ? 32 : 16;  // tn_sdpa_decode_tile
    decode.dynamic_smem = Expr((kDecodeMaxRows * head_dim + keys_a_tile * (2 * head_dim + 1) +
                                kDecodeMaxRows * keys_a_tile + 3 * kDecodeMaxRows) *
                               4);
    lowering.kernels.push_back(
        template_kernel(name, "sdpa_decode.cuh",
                        fmt::format("tn_sdpa_decode<{}, {}, {}, {}, {}{}>", dtype_c_type(dtype), head_dim,
                                    kDecodeMaxRows, kDecodeThreads, causal, window_template_arg(window)),
                        decode.args, kDecodeThreads, TEENY_KERNEL_ORIGIN));
  }
  lowering.launches.push_back(decode);

  Launch combine;
  combine.kernel = static_cast<int>(lowering.kernels.size());
  combine.args = {scratch("partials", "partials", DType::kF32),
                  output("out", dtype),
                  i32("N", n),
                  i32("Sq", sq),
                  i32("heads", Expr(h.heads)),
                  i32("ldo", dims.ldo),
                  i32("splits", splits)};
  combine.block = {kDecodeCombineThreads, 1, 1};
  combine.grid = {n * sq, Expr(1), Expr(1)};
  combine.dynamic_smem = Expr(4) * splits;  // the splits' weights
  combine.when = combined;
  const Expr elem(static_cast<int64_t>(dtype_size(dtype)));
  combine.bytes = n * sq * (splits * Expr(head_dim + 2) * Expr(4) + Expr(head_dim) * elem);
  combine.flops = Expr(2) * n * sq * splits * Expr(head_dim);
  lowering.kernels.push_back(template_kernel(
      fmt::format("sdpa_{}_d{}_decode_combine", dtype_name(dtype), head_dim), "sdpa_decode.cuh",
      fmt::format("tn_sdpa_decode_combine<{}, {}, {}>", dtype_c_type(dtype), head_dim, kDecodeCombineThreads),
      combine.args, kDecodeCombineThreads, TEENY_KERNEL_ORIGIN));
  lowering.launches.push_back(combine);
}

Lowering lower_attention(const OpContext& ctx, const AttentionHeads& h) {
  const TensorType& q = ctx.inputs.at(0);
  const TensorType& k = ctx.inputs.at(1);
  const TensorType& v = ctx.inputs.at(2);
  const DType dtype = ctx.output.dtype;
  const int64_t head_dim = *q.shape[2].const_value() / h.heads;
  const bool causal = ctx.attrs.boolean("causal");
  const int64_t window = attention_window(ctx.attrs);
  const int variant_blocks = variant_blocks_per_sm(ctx);
  // The heuristic takes the wgmma kernel wherever it runs (Hopper's MMAs fed by TMA, the softmax
  // of one warpgroup under the other's MMAs); the mma variants stay `teeny tune`'s to pick.
  const bool wgmma = ctx.variant == kWgmmaVariant || (ctx.variant.empty() && wgmma_ok(ctx, head_dim));
  if (wgmma && !wgmma_ok(ctx, head_dim))
    throw OpError("op",
                  "attention's wgmma variant needs sm_90, f16/bf16, head dim 64, 128 or 256, no window, and "
                  "rows of 16-byte multiples");
  const bool tensor_cores = !wgmma && attention_tensor_cores(dtype, head_dim);
  const int tpq = threads_per_query(head_dim);
  const bool f32_tiled = use_f32_tiled(dtype, head_dim);
  const int threads = wgmma          ? kWgmmaThreads
                      : tensor_cores ? kMmaWarps * 32
                      : f32_tiled    ? kF32TiledThreads
                                     : kQueriesPerBlock * tpq;
  const int queries_per_block = wgmma ? kWgmmaQueriesPerBlock : kQueriesPerBlock;
  const Expr n = q.shape[0] * Expr(h.heads), n_kv = k.shape[0] * Expr(h.kv_heads), sq = q.shape[1], skv = k.shape[1];

  Launch launch;
  launch.args = {input(0, "q", dtype),
                 input(1, "k", dtype),
                 input(2, "v", dtype),
                 output("out", dtype),
                 i32("N", n),
                 i32("Sq", sq),
                 i32("Skv", skv),
                 i32("ldq", q.row_stride),
                 i32("ldk", k.row_stride),
                 i32("ldv", v.row_stride),
                 i32("heads", Expr(h.heads)),
                 i32("kv_heads", Expr(h.kv_heads)),
                 i32("kv_groups", Expr(h.kv_groups)),
                 i32("ldo", ctx.output.row_stride),
                 f32("scale", sdpa_scale(ctx, head_dim))};
  launch.block = {threads, 1, 1};
  const Expr items = n * ceil_div(sq, Expr(queries_per_block));
  launch.grid = {wgmma ? min(items, device_sms()) : items, Expr(1), Expr(1)};
  // The mma kernel's double-buffered K and V tiles, rows padded by 8 elements; the f32 tiled
  // kernel's Q, P and double-buffered K and V: six 64 x 68 float tiles. (Each wgmma launch sets
  // its own, by its key tile.)
  launch.dynamic_smem =
      Expr(tensor_cores ? int64_t{2} * 2 * kMmaKeysPerTile * (head_dim + 8) * static_cast<int64_t>(dtype_size(dtype))
           : f32_tiled  ? int64_t{6} * 64 * 68 * 4
                        : 0);
  const Expr elem(static_cast<int64_t>(dtype_size(dtype)));
  // Per head, whatever the layout: q read and the output written once, each k/v head read once
  // (the query heads sharing it run together, so it stays in L2).
  launch.bytes = (Expr(2) * n * sq * Expr(head_dim) + Expr(2) * n_kv * skv * Expr(head_dim)) * elem;
  launch.flops = attention_flops(Expr(4) * n * Expr(head_dim), sq, skv, causal, window);

  const int mma_blocks = variant_blocks > 0 ? variant_blocks : window > 0 ? kMmaWindowBlocksPerSm : kMmaBlocksPerSm;
  const std::string name = fmt::format("sdpa_{}_d{}{}{}{}", dtype_name(dtype), head_dim, attention_mask_name(ctx.attrs),
                                       wgmma          ? "_wgmma"
                                       : tensor_cores ? "_mma"
                                       : f32_tiled    ? "_tiled"
                                                      : "",
                                       variant_blocks > 0 ? fmt::format("_b{}", variant_blocks) : "");
  const std::string w = window_template_arg(window);
  const char* c_type = dtype_c_type(dtype);
  Lowering lowering;
  const Expr tiled_when = le(Expr(decode_max_rows(dtype, head_dim) + 1), sq);
  // The tiled kernel's launch under `when` (and the decode path's bound), unless that never holds.
  const auto add_tiled = [&](KernelSource kernel, Launch tiled, const Expr& when) {
    tiled.when = tiled_when * when;
    if (tiled.when == Expr(0)) return;
    tiled.kernel = static_cast<int>(lowering.kernels.size());
    lowering.kernels.push_back(std::move(kernel));
    lowering.launches.push_back(std::move(tiled));
  };
  if (wgmma) {
    // TMA boxes of 64 columns (one 128-byte swizzle row) by the block's queries or a key tile,
    // over all rows of q, k and v; the decode path's launch is `launch`'s, without them.
    const auto map = [](const char* of, const TensorType& x, int box_rows) {
      return TensorMapSpec{of, x.shape[2], x.shape[0] * x.shape[1], x.row_stride, 64, box_rows, 128};
    };
    for (const WgmmaKeyTile& tile : wgmma_key_tiles(head_dim, causal, skv)) {
      Launch tiled = launch;
      tiled.args.push_back(tensor_map("q_map", map("q", q, kWgmmaQueriesPerBlock)));
      tiled.args.push_back(tensor_map("k_map", map("k", k, tile.keys)));
      tiled.args.push_back(tensor_map("v_map", map("v", v, tile.keys)));
      tiled.dynamic_smem = Expr(wgmma_dynamic_smem(head_dim, tile.keys));
      KernelSource kernel = template_kernel(name + tile.suffix, "sdpa_wgmma.cuh",
                                            fmt::format("tn_sdpa_wgmma<{}, {}, {}, {}, {}>", c_type, head_dim,
                                                        tile.keys, wgmma_stages(head_dim, tile.keys), causal),
                                            tiled.args, threads, TEENY_KERNEL_ORIGIN, 1);
      kernel.arch_specific = true;
      add_tiled(std::move(kernel), std::move(tiled), tile.when);
    }
  } else if (tensor_cores) {
    add_tiled(template_kernel(name, "sdpa.cuh",
                              fmt::format("tn_sdpa_mma<{}, {}, {}, {}, {}, {}{}>", c_type, head_dim, kQueriesPerBlock,
                                          kMmaKeysPerTile, threads, causal, w),
                              launch.args, threads, TEENY_KERNEL_ORIGIN, mma_blocks),
              launch, Expr(1));
  } else if (f32_tiled) {
    add_tiled(template_kernel(name, "sdpa.cuh",
                              fmt::format("tn_sdpa_f32_tiled<{}, {}, {}, {}, {}{}>", head_dim, kQueriesPerBlock,
                                          kF32TiledKeysPerTile, threads, causal, w),
                              launch.args, threads, TEENY_KERNEL_ORIGIN, kF32TiledBlocksPerSm),
              launch, Expr(1));
  } else {
    add_tiled(template_kernel(name, "sdpa.cuh",
                              fmt::format("tn_sdpa_per_query<{}, {}, {}, {}, {}, {}{}>", c_type, head_dim, tpq,
                                          kQueriesPerBlock, kKeysPerTile, causal, w),
                              launch.args, threads, TEENY_KERNEL_ORIGIN, 1),
              launch, Expr(1));
  }
  add_decode(lowering, launch, {n, sq, skv, ctx.output.row_stride}, h, dtype, head_dim, ctx.attrs);
  return lowering;
}

HostTensor attention_reference(const RefContext& ref, const AttentionHeads& h) {
  const HostTensor& q = ref.inputs.at(0);
  const int64_t batch = q.shape[0], sq = q.shape[1], width = q.shape[2], heads = h.heads;
  const int64_t dh = width / heads;
  // Grouped-query attention as PyTorch spells it: repeat the k/v heads, then plain attention.
  const HostTensor k = repeat_kv_heads(ref.inputs.at(1), batch, h, dh);
  const HostTensor v = repeat_kv_heads(ref.inputs.at(2), batch, h, dh);
  const int64_t skv = k.shape[1];
  const double scale = sdpa_scale(ref.op, dh);
  // Output row b * sq + i is query i of batch b, every head: all of them, or those asked for.
  std::vector<int64_t> rows = ref.rows;
  if (rows.empty()) {
    rows.resize(batch * sq);
    std::iota(rows.begin(), rows.end(), int64_t{0});
  }
  HostTensor out{ref.op.output.dtype, ref.output_shape, std::vector<double>(rows.size() * width, 0.0)};
  std::vector<double> scores(skv);
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t b = rows[r] / sq, i = rows[r] % sq;
    const KeyRange keys = visible_keys(ref.op.attrs, i, skv);  // none: the output row stays 0
    for (int64_t h = 0; h < heads; ++h) {
      const double* qi = &q.data[rows[r] * width + h * dh];
      double max_score = -INFINITY;
      for (int64_t j = keys.begin; j < keys.end; ++j) {
        const double* kj = &k.data[(b * skv + j) * width + h * dh];
        double dot = 0.0;
        for (int64_t d = 0; d < dh; ++d) dot += qi[d] * kj[d];
        scores[j] = dot * scale;
        max_score = std::max(max_score, scores[j]);
      }
      double total = 0.0;
      for (int64_t j = keys.begin; j < keys.end; ++j) total += scores[j] = std::exp(scores[j] - max_score);
      double* oi = &out.data[r * width + h * dh];
      for (int64_t j = keys.begin; j < keys.end; ++j) {
        const double* vj = &v.data[(b * skv + j) * width + h * dh];
        for (int64_t d = 0; d < dh; ++d) oi[d] += scores[j] / total * vj[d];
      }
    }
  }
  return out;
}

OpDef sdpa_op() {
  OpDef def;
  def.name = "sdpa";
  def.doc =
      "softmax(q kᵀ · scale [+ causal mask]) v, q [N, S, Dh], k/v [N / kv_groups, S, Dh]; flash-style "
      "tiling, never materialises S×S";
  def.inputs = {{"q", "[N, Sq, Dh]"}, {"k", "[N/kv_groups, Skv, Dh]"}, {"v", "[N/kv_groups, Skv, Dh]"}};
  def.attrs = sdpa_attr_specs();
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_sdpa(meta, ctx); };
  def.lower = [](const OpContext& ctx) { return lower_attention(ctx, attention_heads(ctx.attrs)); };
  def.tuning = attention_tuning(attention_heads);
  def.reference = [](const RefContext& ref) { return attention_reference(ref, attention_heads(ref.op.attrs)); };
  def.backward = attention_backward;
  def.conformance_cases = [] {
    std::vector<ConformanceCase> cases;
    const std::vector<Bindings> lengths = {
        {{"N", 1}, {"S", 1}}, {{"N", 3}, {"S", 17}}, {{"N", 2}, {"S", 100}}, {{"N", 5}, {"S", 257}}};
    for (DType dtype : float_dtypes()) {
      const std::string dt = dtype_name(dtype);
      for (int head_dim : {64, 17, 128, 256}) {
        for (bool causal : {false, true}) {
          const std::string shape = fmt::format("[N, S, {}]", head_dim);
          cases.push_back({fmt::format("[N, S, {}]{} {}", head_dim, causal ? " causal" : "", dt),
                           case_graph({"N", "S"}, {{"q", dtype, shape}, {"k", dtype, shape}, {"v", dtype, shape}},
                                      {{"o", "sdpa", {"q", "k", "v"}, {{"causal", causal}}}}),
                           lengths});
        }
      }
      // Negative and zero scales too: the tensor-core kernel negates Q for the first and keeps
      // masked keys at -inf for the second.
      for (bool causal : {false, true})
        for (double scale : {0.3, -0.5, 0.0}) {
          cases.push_back(
              {fmt::format("q [N, S, 64], k/v [N, T, 64]{} scale {} {}", causal ? " causal" : "", scale, dt),
               case_graph({"N", "S", "T"},
                          {{"q", dtype, "[N, S, 64]"}, {"k", dtype, "[N, T, 64]"}, {"v", dtype, "[N, T, 64]"}},
                          {{"o", "sdpa", {"q", "k", "v"}, {{"causal", causal}, {"scale", scale}}}}),
               {{{"N", 2}, {"S", 33}, {"T", 70}}, {{"N", 1}, {"S", 70}, {"T", 33}}}});
        }
      // Grouped-query attention: kv_groups 4 and 8 (multi-query where N counts batches) and an
      // odd 3, one head dim per kernel, decode (Sq 1) and prefill lengths, Sq and Skv apart.
      for (const auto& [groups, head_dim, causal] : {std::tuple{4, 64, true}, {8, 128, false}, {3, 17, true}}) {
        const std::string kv = fmt::format("[N, T, {}]", head_dim);
        cases.push_back(
            {fmt::format("q [N*{}, S, {}], k/v {}, kv_groups {}{} {}", groups, head_dim, kv, groups,
                         causal ? " causal" : "", dt),
             case_graph(
                 {"N", "S", "T"},
                 {{"q", dtype, fmt::format("[N*{}, S, {}]", groups, head_dim)}, {"k", dtype, kv}, {"v", dtype, kv}},
                 {{"o", "sdpa", {"q", "k", "v"}, {{"causal", causal}, {"kv_groups", groups}}}}),
             {{{"N", 1}, {"S", 1}, {"T", 1000}},
              {{"N", 3}, {"S", 7}, {"T", 128}},
              {{"N", 2}, {"S", 128}, {"T", 7}},
              {{"N", 1}, {"S", 1000}, {"T", 1000}}}});
      }
      // Sliding windows on each kernel (head dims 64 and 17): a window of 1 (the diagonal alone), and
      // of 48, which ends inside a 64-key tile and whose start moves across tiles; with Sq > Skv the
      // last queries' windows lie past the keys (their output is 0).
      for (int head_dim : {64, 17})
        for (int window : {1, 48}) {
          const std::string q = fmt::format("[N, S, {}]", head_dim), kv = fmt::format("[N, T, {}]", head_dim);
          cases.push_back({fmt::format("{} causal window {} {}", q, window, dt),
                           case_graph({"N", "S", "T"}, {{"q", dtype, q}, {"k", dtype, kv}, {"v", dtype, kv}},
                                      {{"o", "sdpa", {"q", "k", "v"}, {{"causal", true}, {"window", window}}}}),
                           {{{"N", 1}, {"S", 1}, {"T", 1}},
                            {{"N", 2}, {"S", 129}, {"T", 129}},
                            {{"N", 1}, {"S", 300}, {"T", 300}},
                            {{"N", 2}, {"S", 140}, {"T", 33}},
                            {{"N", 1}, {"S", 33}, {"T", 140}}}});
        }
      // The decode path (Sq <= 8 on CUDA cores, 16 on tensor cores): one split, two and many,
      // grouped heads packed in one and two chunks of 16 rows, and the first lengths past it (9,
      // 17); causal (under which the rows see their first keys alone) and a window.
      for (int head_dim : {64, 17, 128, 256})
        for (const nlohmann::json& mask :
             {nlohmann::json{{"causal", false}}, nlohmann::json{{"causal", true}, {"window", 3}}}) {
          nlohmann::json attrs = mask;
          attrs["kv_groups"] = 2;
          const std::string kv = fmt::format("[N, T, {}]", head_dim);
          cases.push_back(
              {fmt::format("decode q [N*2, S, {}], k/v {} {} {}", head_dim, kv, mask.dump(), dt),
               case_graph({"N", "S", "T"},
                          {{"q", dtype, fmt::format("[N*2, S, {}]", head_dim)}, {"k", dtype, kv}, {"v", dtype, kv}},
                          {{"o", "sdpa", {"q", "k", "v"}, attrs}}),
               {{{"N", 1}, {"S", 1}, {"T", 1}},
                {{"N", 2}, {"S", 4}, {"T", 300}},
                {{"N", 1}, {"S", 8}, {"T", 5000}},
                {{"N", 3}, {"S", 9}, {"T", 700}},
                {{"N", 1}, {"S", 16}, {"T", 2000}},
                {{"N", 2}, {"S", 17}, {"T", 300}}}});
        }
      cases.push_back({"padded q/k/v (linear 17 of 20/24) " + dt,
                       case_graph({"N", "S"}, {{"x", dtype, "[N, S, 8]"}},
                                  {{"p", "linear", {"x"}, {{"out_features", 17}}},
                                   {"o", "sdpa", {"p", "p", "p"}, {{"causal", true}}}}),
                       {{{"N", 2}, {"S", 100}}}});
    }
    return cases;
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
