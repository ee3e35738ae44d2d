// What sdpa and fused.sdpa_heads (ops/sdpa_heads.cpp) share. Both see q [X, Sq, heads*Dh] and
// k/v [X, Skv, heads*Dh], whose head n (of N = X*heads) is row block n / heads, columns
// [(n % heads)*Dh, (n % heads + 1)*Dh); sdpa is heads = 1. One kernel source serves both: heads
// and the output row stride are kernel arguments, so the two ops' kernels deduplicate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/op.h"

namespace teeny::ops {

// sdpa's attrs: causal (default false) and scale (optional, default 1/sqrt(Dh)).
std::vector<AttrSpec> sdpa_attr_specs();

// How an op names its q layout, first dim and last dim in shape-rule errors.
struct AttentionLayout {
  const char* shape;  // "[N, S, Dh]"
  const char* first;  // "N"
  const char* last;   // "head dim"
};

// The checks both shape rules make, in messages naming meta's op: q, k, v of rank 3, one dtype
// (also the output's), the same first dim, k and v the same length, the same last dim. Returns
// the dtype. Throws OpError.
DType check_attention_inputs(const OpDef& meta, const OpContext& ctx, const AttentionLayout& layout);

// Throws OpError("inputs", "<op> supports head dims up to 256 ...") unless the kernels take
// `head_dim`.
void check_sdpa_head_dim(const std::string& op, int64_t head_dim);

// The attention kernel and launch over ctx's q, k, v split into `heads` heads.
Lowering lower_attention(const OpContext& ctx, int64_t heads);

// softmax(q kᵀ · scale [+ causal mask]) v per head, in double; the output has q's layout.
HostTensor attention_reference(const RefContext& ref, int64_t heads);

}  // namespace teeny::ops
