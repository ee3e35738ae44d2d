// sdpa's gradient ops (ops.md, "Gradients"): grad.sdpa_stats (the forward's row log-sum-exp,
// recomputed, and D = rowsum(dO · O)), grad.sdpa_dq, and grad.sdpa_dkv (dK and dV side by side,
// each k/v head's summed over the kv_groups query heads sharing it). FlashAttention-2's backward:
// scores recomputed tile by tile, nothing S x S stored, no atomics. On tensor cores at head dims in
// MMA steps (attention_mma_head_dim: ops/kernels/grad_sdpa_mma.cuh; f32 by 3xTF32), else on
// CUDA cores in f32 (ops/kernels/grad_sdpa.cuh).
// The forward op's output is untouched: its kernels never write the log-sum-exp.
// With attr `heads` (fused.sdpa_heads' backward) the ops read q, k, v, o and do in that op's
// layout, [B, S, heads*Dh] and [B, Skv, kv_heads*Dh] (ops/sdpa.h), and write dQ in q's and
// [dK | dV] as [B, Skv, 2*kv_heads*Dh], so no head is ever copied out; stats are per query head,
// [B*heads, Sq, 2].
#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/sdpa.h"

namespace teeny::ops {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxHeadDim = 256;

// Queries and keys a tile: the five staged [kB][Dh] and two [kB][kB] f32 tiles of the dK/dV
// kernel stay near 100 KiB at every head dim, and each thread's accumulators at 32 registers.
int tile_rows(int64_t head_dim) { return head_dim <= 64 ? 64 : head_dim <= 128 ? 32 : 16; }
int64_t padded_ld(int64_t head_dim) { return head_dim % 2 == 0 ? head_dim + 1 : head_dim; }

// Tensor-core kernels (grad_sdpa_mma.cuh): 4 warps of 16 rows, 64-row tiles of queries and keys,
// rows padded by 16 bytes. Shared memory: Q and double-buffered K (stats); Q, dO and
// double-buffered K and V (dQ); K, V and double-buffered Q and dO with their rows' lse and D (dK/dV,
// whose query tiles are 32 rows above head dim 64, leaving registers to its dK and dV).
constexpr int kMmaThreads = 128;
constexpr int kMmaTile = 64;
int mma_dkv_query_tile(int64_t head_dim) { return head_dim <= 64 ? 64 : 32; }
// Asks ptxas for two resident blocks, which leaves it up to 255 registers a thread: without a
// hint it may aim at four and spill the dQ kernel's accumulators.
constexpr int kMmaBlocksPerSm = 2;
// `rows` of padded T rows, then `floats` f32 values.
int64_t mma_smem_bytes(int64_t head_dim, DType dtype, int64_t rows, int64_t floats) {
  return rows * (head_dim * static_cast<int64_t>(dtype_size(dtype)) + 16) + floats * 4;
}

double attention_scale(const Attrs& attrs, int64_t head_dim) {
  return attrs.has("scale") ? attrs.real("scale") : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

// Which of an op's inputs are q, k and the tensors of q's shape (and the stats, for dq/dkv).
struct GradInputs {
  std::vector<const char*> names;  // every input, in order
  std::vector<size_t> like_q;      // of q's shape and dtype (o, do)
  bool v = false;                  // input 2 is v, of k's shape
  bool stats = false;              // the last input is stats, f32 [N, Sq, 2]
};

const GradInputs kStatsInputs{{"q", "k", "o", "do"}, {2, 3}, false, false};
const GradInputs kGradInputs{{"q", "k", "v", "do", "stats"}, {3}, true, true};

// Per query head and query, f32 [lse, D]: [N, Sq, 2] for q [N, Sq, Dh], [B*heads, Sq, 2] for q
// [B, Sq, heads*Dh].
Shape stats_shape(const Shape& q, const Attrs& attrs) {
  return {q[0] * Expr(attention_heads(attrs).heads), q[1], Expr(2)};
}

// q's and k's shapes against the head layout; returns the head dim. Throws OpError.
int64_t check_head_layout(const std::string& op, const Shape& q, const Shape& k, const Attrs& attrs) {
  const AttentionHeads h = attention_heads(attrs);
  const auto width = q[2].const_value();
  if (!width) throw OpError("inputs", fmt::format("{} needs a fixed head dim; q is {}", op, shape_str(q)));
  if (h.heads == 1) {
    if (q[0] != k[0] * Expr(h.kv_groups) || q[2] != k[2])
      throw OpError("inputs", fmt::format("{}: q [N, Sq, Dh] needs k [N / kv_groups, Skv, Dh] with kv_groups = {}; "
                                          "got q {} and k {}",
                                          op, h.kv_groups, shape_str(q), shape_str(k)));
  } else {
    if (h.heads % h.kv_groups != 0 || *width % h.heads != 0)
      throw OpError("attrs.heads", fmt::format("{}: heads = {} must divide q's width {} and be a multiple of kv_groups "
                                               "= {}",
                                               op, h.heads, *width, h.kv_groups));
    if (q[0] != k[0] || k[2] != Expr(*width / h.heads * h.kv_heads))
      throw OpError("inputs", fmt::format("{}: q [B, Sq, heads*Dh] needs k [B, Skv, heads/kv_groups*Dh] with heads = "
                                          "{}, kv_groups = {}; got q {} and k {}",
                                          op, h.heads, h.kv_groups, shape_str(q), shape_str(k)));
  }
  const int64_t head_dim = *width / h.heads;
  if (head_dim > kMaxHeadDim)
    throw OpError("inputs", fmt::format("{} supports head dims up to {}; got {}", op, kMaxHeadDim, head_dim));
  return head_dim;
}

// Shape rules shared by the three ops; returns the head dim. Throws OpError.
int64_t check_grad_inputs(const OpDef& def, const OpContext& ctx, const GradInputs& in) {
  const std::string& op = def.name;
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    if (ctx.inputs[i].shape.size() != 3)
      throw OpError("inputs", fmt::format("{} needs {} of rank 3; {} is {}", op, fmt::join(in.names, ", "), in.names[i],
                                          shape_str(ctx.inputs[i].shape)));
  OpContext floats = ctx;  // the attention tensors share a dtype; stats is f32
  if (in.stats) floats.inputs.pop_back();
  common_float_dtype(def, floats);
  const TensorType& q = ctx.inputs[0];
  const TensorType& k = ctx.inputs[1];
  if (in.v && ctx.inputs[2].shape != k.shape)
    throw OpError("inputs", fmt::format("{}: k and v must have the same shape; got {} and {}", op, shape_str(k.shape),
                                        shape_str(ctx.inputs[2].shape)));
  const int64_t head_dim = check_head_layout(op, q.shape, k.shape, ctx.attrs);
  for (size_t i : in.like_q)
    if (ctx.inputs[i].shape != q.shape)
      throw OpError("inputs", fmt::format("{}: {} must have q's shape {}; got {}", op, in.names[i], shape_str(q.shape),
                                          shape_str(ctx.inputs[i].shape)));
  if (in.stats) {
    const TensorType& stats = ctx.inputs.back();
    if (stats.dtype != DType::kF32 || stats.shape != stats_shape(q.shape, ctx.attrs))
      throw OpError("inputs", fmt::format("{}: stats must be f32 {} (grad.sdpa_stats of q {}); got {} {}", op,
                                          shape_str(stats_shape(q.shape, ctx.attrs)), shape_str(q.shape),
                                          dtype_name(stats.dtype), shape_str(stats.shape)));
  }
  attention_window(ctx.attrs);
  return head_dim;
}

TensorType infer_stats(const OpDef& def, const OpContext& ctx) {
  check_grad_inputs(def, ctx, kStatsInputs);
  if (ctx.requested_dtype && *ctx.requested_dtype != DType::kF32)
    throw OpError("dtype", fmt::format("op '{}' produces f32 [lse, D] rows; it cannot produce {}", def.name,
                                       dtype_name(*ctx.requested_dtype)));
  return contiguous(DType::kF32, stats_shape(ctx.inputs[0].shape, ctx.attrs));
}

TensorType infer_dq(const OpDef& def, const OpContext& ctx) {
  check_grad_inputs(def, ctx, kGradInputs);
  const TensorType& q = ctx.inputs[0];
  return contiguous(output_float_dtype(def, ctx, q.dtype), q.shape);
}

TensorType infer_dkv(const OpDef& def, const OpContext& ctx) {
  check_grad_inputs(def, ctx, kGradInputs);
  const TensorType& k = ctx.inputs[1];
  return contiguous(output_float_dtype(def, ctx, k.dtype), {k.shape[0], k.shape[1], k.shape[2] * Expr(2)});
}

enum class Kernel { kStats, kDq, kDkv };

Lowering lower(const OpContext& ctx, Kernel which) {
  const TensorType& q = ctx.inputs[0];
  const TensorType& k = ctx.inputs[1];
  const DType dtype = q.dtype;
  const AttentionHeads h = attention_heads(ctx.attrs);
  const int64_t head_dim = *q.shape[2].const_value() / h.heads;
  const bool mma = attention_mma_head_dim(head_dim);
  const int tile = mma ? kMmaTile : tile_rows(head_dim);
  const int threads = mma ? kMmaThreads : kThreads;
  const bool causal = ctx.attrs.boolean("causal");
  const int64_t window = attention_window(ctx.attrs);
  const Expr n = q.shape[0] * Expr(h.heads), sq = q.shape[1], skv = k.shape[1];  // query heads
  const double scale = attention_scale(ctx.attrs, head_dim);

  Launch launch;
  const int64_t ld = padded_ld(head_dim), b = tile;
  const char* entry = nullptr;
  std::string name;
  int64_t smem_bytes = 0;
  if (which == Kernel::kStats) {
    const TensorType& o = ctx.inputs[2];
    const TensorType& dout = ctx.inputs[3];
    launch.args = {input(0, "q", dtype),
                   input(1, "k", dtype),
                   input(2, "o", dtype),
                   input(3, "dout", dtype),
                   output("stats", DType::kF32),
                   i32("N", n),
                   i32("Sq", sq),
                   i32("Skv", skv),
                   i32("ldq", q.row_stride),
                   i32("ldk", k.row_stride),
                   i32("ldo", o.row_stride),
                   i32("lddo", dout.row_stride),
                   i32("heads", Expr(h.heads)),
                   i32("kv_heads", Expr(h.kv_heads)),
                   i32("kv_groups", Expr(h.kv_groups)),
                   f32("scale", scale)};
    entry = "tn_sdpa_grad_stats";
    name = "grad_sdpa_stats";
    smem_bytes = mma ? mma_smem_bytes(head_dim, dtype, 3 * kMmaTile, 0) : (2 * b * ld + b * (b + 1)) * 4;
  } else {
    const TensorType& dout = ctx.inputs[3];
    const TensorType& stats = ctx.inputs[4];
    const bool dq = which == Kernel::kDq;
    launch.args = {input(0, "q", dtype),
                   input(1, "k", dtype),
                   input(2, "v", dtype),
                   input(3, "dout", dtype),
                   input(4, "stats", DType::kF32),
                   output(dq ? "dq" : "dkv", dtype),
                   i32("N", n),
                   i32("Sq", sq),
                   i32("Skv", skv),
                   i32("ldq", q.row_stride),
                   i32("ldk", k.row_stride),
                   i32("ldv", ctx.inputs[2].row_stride),
                   i32("lddo", dout.row_stride),
                   i32("ldst", stats.row_stride),
                   i32("heads", Expr(h.heads)),
                   i32("kv_heads", Expr(h.kv_heads)),
                   i32("kv_groups", Expr(h.kv_groups)),
                   f32("scale", scale)};
    entry = dq ? "tn_sdpa_grad_dq" : "tn_sdpa_grad_dkv";
    name = dq ? "grad_sdpa_dq" : "grad_sdpa_dkv";
    const int64_t bq = mma_dkv_query_tile(head_dim);
    smem_bytes = !mma ? (4 * b * ld + (dq ? 1 : 2) * b * (b + 1) + 2 * b) * 4
                 : dq ? mma_smem_bytes(head_dim, dtype, 6 * kMmaTile, 0)
                      : mma_smem_bytes(head_dim, dtype, 2 * kMmaTile + 4 * bq, 4 * bq);
  }
  const Expr rows_of_blocks =
      which == Kernel::kDkv ? (n / Expr(kv_groups(ctx.attrs))) * ceil_div(skv, Expr(b)) : n * ceil_div(sq, Expr(b));
  launch.block = {threads, 1, 1};
  launch.grid = {rows_of_blocks, Expr(1), Expr(1)};
  launch.dynamic_smem = Expr(smem_bytes);
  const Expr elem(static_cast<int64_t>(dtype_size(dtype)));
  const Expr q_elems = n * sq * Expr(head_dim), kv_elems = (n / Expr(kv_groups(ctx.attrs))) * skv * Expr(head_dim);
  // Each pass reads q, k (and v, do) once a tile of the other side; counted once, as sdpa's.
  launch.bytes =
      which == Kernel::kStats ? (Expr(3) * q_elems + kv_elems) * elem : (Expr(3) * q_elems + Expr(2) * kv_elems) * elem;
  // q·kᵀ (and do·vᵀ, then the dQ or dK and dV products), 2 FLOPs a multiply-add; causal about half.
  const int64_t products = which == Kernel::kStats ? 1 : which == Kernel::kDq ? 3 : 4;
  launch.flops = attention_flops(Expr(2 * products) * n * Expr(head_dim), sq, skv, causal, window);

  const std::string kernel_name = fmt::format("{}_{}_d{}{}{}", name, dtype_name(dtype), head_dim,
                                              attention_mask_name(ctx.attrs), mma ? "_mma" : "");  // any heads
  KernelSource kernel = template_kernel(
      kernel_name, mma ? "grad_sdpa_mma.cuh" : "grad_sdpa.cuh",
      fmt::format("{}{}<{}, {}, {}{}, {}, {}{}>", entry, mma ? "_mma" : "", dtype_c_type(dtype), head_dim, tile,
                  mma && which == Kernel::kDkv ? fmt::format(", {}", mma_dkv_query_tile(head_dim)) : "", threads,
                  causal, window_template_arg(window)),
      launch.args, threads, TEENY_KERNEL_ORIGIN, mma ? kMmaBlocksPerSm : 0);
  return Lowering{{kernel}, {launch}};
}

// ---- host references (double) -----------------------------------------------------------------

struct HostAttention {
  int64_t n, sq, skv, dh;  // n: query heads
  AttentionHeads h;
  const Attrs* attrs;  // the mask's: causal, window
  double scale;
  // Where row i of query head n starts in q, o and do; key j of k/v head m in k and v; and in
  // [dK | dV] (ops/sdpa.h's layouts).
  int64_t q_at(int64_t n_, int64_t i) const { return ((n_ / h.heads) * sq + i) * h.heads * dh + n_ % h.heads * dh; }
  int64_t kv_at(int64_t m, int64_t j) const {
    return ((m / h.kv_heads) * skv + j) * h.kv_heads * dh + m % h.kv_heads * dh;
  }
  int64_t dkv_at(int64_t m, int64_t j) const {
    return ((m / h.kv_heads) * skv + j) * 2 * h.kv_heads * dh + m % h.kv_heads * dh;
  }
};

HostAttention host_attention(const RefContext& ref) {
  const HostTensor& q = ref.inputs[0];
  const HostTensor& k = ref.inputs[1];
  const AttentionHeads h = attention_heads(ref.op.attrs);
  const int64_t dh = q.shape[2] / h.heads;
  return {q.shape[0] * h.heads, q.shape[1], k.shape[1], dh, h, &ref.op.attrs, attention_scale(ref.op.attrs, dh)};
}

double dot(const double* a, const double* b, int64_t len) {
  double sum = 0.0;
  for (int64_t d = 0; d < len; ++d) sum += a[d] * b[d];
  return sum;
}

// Calls visit(n, i, j) for every visible (query head, query, key) in order.
void for_each_visible(const HostAttention& a, const std::function<void(int64_t, int64_t, int64_t)>& visit) {
  for (int64_t n = 0; n < a.n; ++n)
    for (int64_t i = 0; i < a.sq; ++i) {
      const KeyRange keys = visible_keys(*a.attrs, i, a.skv);
      for (int64_t j = keys.begin; j < keys.end; ++j) visit(n, i, j);
    }
}

HostTensor stats_reference(const RefContext& ref) {
  const HostAttention a = host_attention(ref);
  const std::vector<double>&q = ref.inputs[0].data, &k = ref.inputs[1].data;
  const std::vector<double>&o = ref.inputs[2].data, &dout = ref.inputs[3].data;
  HostTensor out{ref.op.output.dtype, ref.output_shape, std::vector<double>(a.n * a.sq * 2)};
  std::vector<double> max(a.n * a.sq, -INFINITY), sum(a.n * a.sq, 0.0);
  auto score = [&](int64_t n, int64_t i, int64_t j) {
    return a.scale * dot(&q[a.q_at(n, i)], &k[a.kv_at(n / a.h.kv_groups, j)], a.dh);
  };
  for_each_visible(
      a, [&](int64_t n, int64_t i, int64_t j) { max[n * a.sq + i] = std::max(max[n * a.sq + i], score(n, i, j)); });
  for_each_visible(
      a, [&](int64_t n, int64_t i, int64_t j) { sum[n * a.sq + i] += std::exp(score(n, i, j) - max[n * a.sq + i]); });
  for (int64_t r = 0; r < a.n * a.sq; ++r) {
    out.data[2 * r] = max[r] + std::log(sum[r]);
    out.data[2 * r + 1] = dot(&dout[a.q_at(r / a.sq, r % a.sq)], &o[a.q_at(r / a.sq, r % a.sq)], a.dh);
  }
  return out;
}

// dQ, or [dK | dV] rows, from p = exp(s - lse) and dS = p (dO·v - D) with the stats input's lse
// and D.
HostTensor grad_reference(const RefContext& ref, Kernel which) {
  const HostAttention a = host_attention(ref);
  const std::vector<double>&q = ref.inputs[0].data, &k = ref.inputs[1].data, &v = ref.inputs[2].data;
  const std::vector<double>&dout = ref.inputs[3].data, &stats = ref.inputs[4].data;
  int64_t elements = 1;
  for (int64_t dim : ref.output_shape) elements *= dim;
  HostTensor out{ref.op.output.dtype, ref.output_shape, std::vector<double>(elements, 0.0)};
  for_each_visible(a, [&](int64_t n, int64_t i, int64_t j) {
    const int64_t row = n * a.sq + i, m = n / a.h.kv_groups;
    const int64_t qi = a.q_at(n, i), kj = a.kv_at(m, j), dkj = a.dkv_at(m, j);
    const double p = std::exp(a.scale * dot(&q[qi], &k[kj], a.dh) - stats[2 * row]);
    const double ds = p * (dot(&dout[qi], &v[kj], a.dh) - stats[2 * row + 1]);
    for (int64_t d = 0; d < a.dh; ++d) {
      if (which == Kernel::kDq) {
        out.data[qi + d] += ds * a.scale * k[kj + d];
      } else {
        out.data[dkj + d] += ds * a.scale * q[qi + d];
        out.data[dkj + a.h.kv_heads * a.dh + d] += p * dout[qi + d];
      }
    }
  });
  return out;
}

// ---- conformance ------------------------------------------------------------------------------

// The forward (sdpa, or fused.sdpa_heads where attrs name heads), then grad.sdpa_stats and, for
// dq/dkv, the op itself, on random q, k, v, do.
ConformanceCase chain_case(const std::string& op, DType dtype, const std::string& q_shape, const std::string& kv_shape,
                           nlohmann::json attrs, std::vector<Bindings> bindings, const std::string& label) {
  const char* forward = attrs.contains("heads") ? "fused.sdpa_heads" : "sdpa";
  std::vector<CaseNode> nodes = {{"o", forward, {"q", "k", "v"}, attrs},
                                 {"st", "grad.sdpa_stats", {"q", "k", "o", "do"}, attrs}};
  if (op != "grad.sdpa_stats") nodes.push_back({"g", op, {"q", "k", "v", "do", "st"}, attrs});
  return {fmt::format("{} {}", label, dtype_name(dtype)),
          case_graph({"N", "S", "T"},
                     {{"q", dtype, q_shape}, {"k", dtype, kv_shape}, {"v", dtype, kv_shape}, {"do", dtype, q_shape}},
                     nodes),
          std::move(bindings)};
}

// Every dtype at head dims 64 (the common one) and 17 (odd rows), causal and not, sequence
// lengths 1, 17 and 129 (tiles of 64 cut short); 128 (f32 and bf16) and 256 (tiles of 16);
// q and k/v lengths apart; grouped-query attention; a negative scale; padded inputs.
std::vector<ConformanceCase> conformance_cases(const std::string& op) {
  std::vector<ConformanceCase> cases;
  const std::vector<Bindings> lengths = {
      {{"N", 1}, {"S", 1}, {"T", 1}}, {{"N", 3}, {"S", 17}, {"T", 17}}, {{"N", 2}, {"S", 129}, {"T", 129}}};
  const std::vector<Bindings> apart = {{{"N", 2}, {"S", 33}, {"T", 70}}, {{"N", 1}, {"S", 70}, {"T", 33}}};
  for (DType dtype : float_dtypes()) {
    for (int head_dim : {64, 17})
      for (bool causal : {false, true}) {
        const std::string shape = fmt::format("[N, S, {}]", head_dim);
        cases.push_back(chain_case(op, dtype, shape, shape, {{"causal", causal}}, lengths,
                                   fmt::format("{}{}", shape, causal ? " causal" : "")));
      }
    for (const auto& [groups, head_dim, causal] : {std::tuple{4, 64, true}, {3, 17, false}})
      cases.push_back(chain_case(op, dtype, fmt::format("[N*{}, S, {}]", groups, head_dim),
                                 fmt::format("[N, T, {}]", head_dim), {{"causal", causal}, {"kv_groups", groups}},
                                 apart,
                                 fmt::format("kv_groups {}, Dh {}{}", groups, head_dim, causal ? " causal" : "")));
  }
  for (const auto& [dtype, head_dim] : {std::tuple{DType::kBF16, 128}, {DType::kF32, 128}, {DType::kF32, 256}})
    cases.push_back(chain_case(op, dtype, fmt::format("[N, S, {}]", head_dim), fmt::format("[N, T, {}]", head_dim),
                               {{"causal", true}}, apart, fmt::format("Dh {} causal", head_dim)));
  cases.push_back(chain_case(op, DType::kF16, "[N, S, 64]", "[N, T, 64]", {{"causal", false}, {"scale", -0.5}}, apart,
                             "scale -0.5"));
  // The tensor-core kernels at their other head dims, with lengths that cut 64-row tiles short
  // on one side and run long on the other.
  cases.push_back(chain_case(op, DType::kBF16, "[N*2, S, 96]", "[N, T, 96]", {{"causal", true}, {"kv_groups", 2}},
                             {{{"N", 1}, {"S", 1000}, {"T", 1000}}, {{"N", 1}, {"S", 7}, {"T", 4097}}},
                             "kv_groups 2, Dh 96 causal"));
  cases.push_back(chain_case(op, DType::kF16, "[N, S, 32]", "[N, T, 32]", {{"causal", false}},
                             {{{"N", 2}, {"S", 128}, {"T", 128}}, {{"N", 1}, {"S", 4097}, {"T", 7}}}, "Dh 32"));
  // Heads in place (fused.sdpa_heads' backward): 3 heads of 64 and 128 on tensor cores (f32 by
  // 3xTF32) and of 17 on CUDA cores, and grouped-query (8 query heads on 2 k/v heads) with q and
  // k/v lengths apart.
  for (const auto& [dtype, head_dim] :
       {std::tuple{DType::kBF16, 64}, {DType::kF16, 128}, {DType::kF32, 64}, {DType::kF32, 17}}) {
    const std::string shape = fmt::format("[N, S, {}]", 3 * head_dim);
    cases.push_back(chain_case(op, dtype, shape, shape, {{"causal", true}, {"heads", 3}}, lengths,
                               fmt::format("3 heads of {} in place causal", head_dim)));
    cases.push_back(chain_case(op, dtype, fmt::format("[N, S, {}]", 8 * head_dim),
                               fmt::format("[N, T, {}]", 2 * head_dim), {{"heads", 8}, {"kv_groups", 4}}, apart,
                               fmt::format("8 heads of {} on 2 in place", head_dim)));
  }
  // Sliding windows: on the tensor-core kernels (both query tiles of dK/dV) and on CUDA cores, with
  // windows ending inside a tile, and queries past the keys' last window (Sq > Skv + W - 1).
  for (const auto& [dtype, head_dim, window] :
       {std::tuple{DType::kBF16, 64, 48}, {DType::kF16, 128, 1}, {DType::kF32, 64, 48}, {DType::kF32, 17, 5}})
    cases.push_back(chain_case(op, dtype, fmt::format("[N, S, {}]", head_dim), fmt::format("[N, T, {}]", head_dim),
                               {{"causal", true}, {"window", window}},
                               {{{"N", 2}, {"S", 129}, {"T", 129}}, {{"N", 1}, {"S", 140}, {"T", 33}}},
                               fmt::format("Dh {} causal window {}", head_dim, window)));
  std::vector<CaseNode> padded = {{"p", "linear", {"x"}, {{"out_features", 17}}},
                                  {"o", "sdpa", {"p", "p", "p"}, {{"causal", true}}},
                                  {"st", "grad.sdpa_stats", {"p", "p", "o", "p"}, {{"causal", true}}}};
  if (op != "grad.sdpa_stats") padded.push_back({"g", op, {"p", "p", "p", "p", "st"}, {{"causal", true}}});
  cases.push_back({"padded q/k/v/do (linear 17 of 20)",
                   case_graph({"N", "S"}, {{"x", DType::kF32, "[N, S, 8]"}}, padded),
                   {{{"N", 2}, {"S", 100}}}});
  return cases;
}

OpDef grad_sdpa_op(const std::string& name, const std::string& doc, const GradInputs& inputs,
                   std::vector<std::string> input_docs) {
  OpDef def;
  def.name = name;
  def.doc = doc;
  for (size_t i = 0; i < inputs.names.size(); ++i) {
    InputSpec spec;
    spec.name = inputs.names[i];
    spec.doc = input_docs.at(i);
    def.inputs.push_back(spec);
  }
  def.attrs = sdpa_attr_specs();
  AttrSpec heads = attr_spec("heads", AttrType::kInt,
                             "query heads side by side in each row of q (fused.sdpa_heads' layout); absent: a head a "
                             "row block, as sdpa's");
  heads.optional = true;
  heads.min_value = 1;
  def.attrs.push_back(heads);
  def.dtypes = float_dtypes();
  def.conformance_cases = [name] { return conformance_cases(name); };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace

OpDef grad_sdpa_stats_op() {
  OpDef def = grad_sdpa_op(
      "grad.sdpa_stats", "sdpa's row log-sum-exp of the scaled, masked scores and D = rowsum(do · o): f32 [N, Sq, 2]",
      kStatsInputs, {"[N, Sq, Dh]", "[N/kv_groups, Skv, Dh]", "sdpa's output, q's shape", "dL/do, q's shape"});
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_stats(meta, ctx); };
  def.lower = [](const OpContext& ctx) { return lower(ctx, Kernel::kStats); };
  def.reference = stats_reference;
  return def;
}

OpDef grad_sdpa_dq_op() {
  OpDef def = grad_sdpa_op(
      "grad.sdpa_dq", "sdpa's gradient of q, from the recomputed scores and grad.sdpa_stats", kGradInputs,
      {"[N, Sq, Dh]", "[N/kv_groups, Skv, Dh]", "k's shape", "dL/do, q's shape", "grad.sdpa_stats, f32 [N, Sq, 2]"});
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_dq(meta, ctx); };
  def.lower = [](const OpContext& ctx) { return lower(ctx, Kernel::kDq); };
  def.reference = [](const RefContext& ref) { return grad_reference(ref, Kernel::kDq); };
  return def;
}

OpDef grad_sdpa_dkv_op() {
  OpDef def = grad_sdpa_op(
      "grad.sdpa_dkv",
      "sdpa's gradients of k and v side by side, [N/kv_groups, Skv, 2*Dh], summed over the query heads sharing a "
      "k/v head",
      kGradInputs,
      {"[N, Sq, Dh]", "[N/kv_groups, Skv, Dh]", "k's shape", "dL/do, q's shape", "grad.sdpa_stats, f32 [N, Sq, 2]"});
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_dkv(meta, ctx); };
  def.lower = [](const OpContext& ctx) { return lower(ctx, Kernel::kDkv); };
  def.reference = [](const RefContext& ref) { return grad_reference(ref, Kernel::kDkv); };
  return def;
}

}  // namespace teeny::ops
