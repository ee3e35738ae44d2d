// What sdpa and fused.sdpa_heads (ops/sdpa_heads.cpp) share. Both see q [X, Sq, heads*Dh] and
// k/v [X_kv, Skv, kv_heads*Dh]: query head n (of N = X*heads) is row block n / heads, columns
// [(n % heads)*Dh, (n % heads + 1)*Dh), and reads k/v head n / kv_groups, laid out alike with
// kv_heads. sdpa has heads = kv_heads = 1 (X = N, X_kv = N / kv_groups); fused.sdpa_heads has
// X_kv = X and kv_heads = heads / kv_groups. One kernel source serves both: the head counts and
// the output row stride are kernel arguments, so the two ops' kernels deduplicate.
//
// Grouped-query attention (kv_groups > 1; multi-query when every query head of a batch shares
// one k/v head): query head h of batch b reads k/v head h / kv_groups of batch b, PyTorch's
// enable_gqa order. With N = b*H + h and H = H_kv*kv_groups that k/v head is number
// b*H_kv + h / kv_groups = n / kv_groups, which is why one division serves both layouts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/op.h"

namespace teeny::ops {

// sdpa's attrs: causal (default false), scale (optional, default 1/sqrt(Dh)), kv_groups
// (default 1) and window (optional: a sliding window of keys, with causal).
std::vector<AttrSpec> sdpa_attr_specs();

// The kv_groups attr, 1 where absent (nodes whose attrs were built by hand rather than by the
// spec reader, which fills in defaults).
int64_t kv_groups(const Attrs& attrs);

// The window attr (keys a query sees under a sliding window), 0 where absent. Throws OpError when
// it is set without causal.
int64_t attention_window(const Attrs& attrs);

// The keys query `query` attends to among skv, [begin, end): all of them; under causal those up to
// the query (PyTorch's is_causal: the mask aligned to the top-left, whatever Sq and Skv); with a
// window of W only the last W of those. Empty (begin == end) where the window lies wholly past
// the last key (query >= Skv + W - 1): such a query's output is 0.
struct KeyRange {
  int64_t begin = 0, end = 0;
};
KeyRange visible_keys(const Attrs& attrs, int64_t query, int64_t skv);

// The kernel-name part of the mask: "", "_causal" or "_causal_w<W>".
std::string attention_mask_name(const Attrs& attrs);

// The kernels' trailing template argument for a window: ", W", or nothing without one (their
// default, 0).
std::string window_template_arg(int64_t window);

// FLOPs of an attention pass doing `per_score` FLOPs per (query, key) pair over the visible ones:
// all, about half under causal, at most W a query under a window.
Expr attention_flops(const Expr& per_score, const Expr& sq, const Expr& skv, bool causal, int64_t window);

// How an op names its q layout, first dim and last dim in shape-rule errors, and which dim of
// q is kv_groups times k's and v's (the others are equal).
struct AttentionLayout {
  const char* shape;  // "[N, S, Dh]"
  const char* first;  // "N"
  const char* last;   // "head dim"
  size_t grouped_dim;
};

// The checks both shape rules make, in messages naming meta's op: q, k, v of rank 3, one dtype
// (also the output's), k and v of one shape, q's grouped dim kv_groups times k's and its other
// dims equal to k's but the length. Returns the dtype. Throws OpError.
DType check_attention_inputs(const OpDef& meta, const OpContext& ctx, const AttentionLayout& layout);

// Throws OpError("inputs", "<op> supports head dims up to 256 ...") unless the kernels take
// `head_dim`.
void check_sdpa_head_dim(const std::string& op, int64_t head_dim);

// Whether attention's forward kernels at this dtype and head dim run on tensor cores: 16-bit
// storage and head dims in MMA steps, up to what keeps the accumulators in registers. The gradient
// kernels run every float dtype there (f32 by 3xTF32): attention_mma_head_dim.
bool attention_tensor_cores(DType dtype, int64_t head_dim);
bool attention_mma_head_dim(int64_t head_dim);

// The heads of q and of k/v in each row block, and how many query heads share a k/v head.
struct AttentionHeads {
  int64_t heads = 1, kv_heads = 1, kv_groups = 1;
};

// The head layout `attrs` name: with `heads` above 1 (fused.sdpa_heads, and the gradient ops of
// one), that many query heads and heads / kv_groups k/v heads side by side in each row block;
// without (sdpa), a head a row block.
AttentionHeads attention_heads(const Attrs& attrs);

// sdpa's and fused.sdpa_heads' backward, FlashAttention-2's (ops/grad_sdpa.cpp): the row
// statistics (log-sum-exp, recomputed, and rowsum(dO · O)), then dQ and [dK | dV] from scores
// recomputed tile by tile, each reading and writing the node's head layout in place; dK and dV
// are cut from the one tensor the dK/dV kernel writes, [.., Skv, 2 * k's width].
void attention_backward(GradBuilder& g);

// What `teeny tune` may choose for attention (the tensor-core kernel's blocks an SM), over the
// dims N (query heads), Sq and Skv; heads_of gives the op's head layout from its attrs.
OpTuning attention_tuning(std::function<AttentionHeads(const Attrs&)> heads_of);

// The attention kernel and launch over ctx's q, k, v split into `h`'s heads (ctx.variant: one of
// attention_tuning's, or the heuristic's where empty).
Lowering lower_attention(const OpContext& ctx, const AttentionHeads& h);

// softmax(q kᵀ · scale [+ causal mask]) v per head, in double; the output has q's layout.
HostTensor attention_reference(const RefContext& ref, const AttentionHeads& h);

}  // namespace teeny::ops
