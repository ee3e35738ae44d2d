// What split_heads and merge_heads share: one copy kernel over 16-byte output units (per
// element when the head width or the input's row stride does not allow), reads honouring a
// padded input row stride, the output contiguous. The two differ only in where output unit i
// reads from, and in their conformance shapes.
#pragma once

#include <string>
#include <vector>

#include "core/op.h"

namespace teeny::ops {

// The `heads` attr of split_heads, merge_heads and fused.sdpa_heads: required, at least 1.
AttrSpec heads_attr_spec();

// The copy kernel of ops/kernels/head_copy.cuh with `layout` (its tn_split_heads or
// tn_merge_heads), which says where each output unit reads from.
Lowering lower_head_copy(const OpContext& ctx, const std::string& op, const Expr& head_dim, const char* layout);

// Cases over every float dtype: `shapes` with heads 12, and a linear (18 of 20 or 24 padded
// columns) feeding heads 2 from `padded_input`.
std::vector<ConformanceCase> head_copy_cases(const std::string& op, const std::vector<std::string>& shapes,
                                             const std::string& padded_input);

}  // namespace teeny::ops
