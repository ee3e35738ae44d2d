// What the losses (ops/cross_entropy.cpp, ops/mse_loss.cpp) and their gradient ops
// (ops/grad_cross_entropy.cpp, ops/grad_mse_loss.cpp) share: the f32 scalar output, the two
// launches of ops/kernels/loss.cuh, a first that leaves one partial result per block in the
// node's scratch buffer "partials" and a second that averages them in a fixed order, cross
// entropy's inputs and row plan, and what the backward rules require of the loss node.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/autodiff.h"
#include "core/op.h"
#include "ops/kernel_util.h"

namespace teeny::ops {

// The scalar a loss produces: f32 [] whatever its inputs' dtype; the node's `dtype:` may only
// say f32. Throws OpError("dtype", ...).
TensorType loss_output(const OpDef& def, const OpContext& ctx);

// The blocks of the first launch, for `blocks` blocks of work of `threads` threads each: at most
// 2^18 threads in all, one wave of a 132-SM Hopper. A constant, not the device symbol SMS, so
// that the partials, and so the loss's bits, are the same on every GPU (and the scratch buffer
// is sized before the device is known).
Expr loss_parts(const Expr& blocks, int threads);

// Declares the scratch buffer "partials" (f32, `parts` partials of `values_per_part` values) and
// adds the second launch: one block averaging them into the node's output. counted: each
// partial is (sum, count) and the mean is over the counts; else each is a sum and the mean is
// over `n` terms.
void add_loss_mean(Lowering& lowering, const std::string& op, const Expr& parts, bool counted, const Expr& n);

// Checks cross entropy's inputs (logits [..., classes] of a float dtype of `def`, i32 targets of
// the logits' shape without the class dim), for cross_entropy and grad.cross_entropy. Throws
// OpError("inputs", ...) naming `def`.
void check_logits_and_targets(const OpDef& def, const OpContext& ctx);

// The rows of cross entropy's logits: every dim but the last, flattened.
Expr logit_rows(const Shape& logits);

// plan_rows's group for a row of `classes` logits, with at most 4 packs a thread (a short row,
// fewer): the forward's log-sum-exp and the gradient stream a long row in chunks of that many.
RowPlan cross_entropy_plan(const Expr& classes, DType dtype);

// Cross entropy's ignore_index attr (an i32 the kernel compares targets with; default -100, as
// PyTorch's), documented as `doc`.
AttrSpec ignore_index_attr(const std::string& doc);

// The GPU conformance cases of an op reading (logits, targets) as cross entropy does, a node
// `node` of op `op`: constant widths that pick each row plan (a warp per row for 1, 7 and 1000
// classes, 1000 in two chunks in 16 bits), `vocabularies` ({classes, a larger batch}: rows a
// block streams), a symbolic width (random targets stay below 8, so widths 1 and 3 hold targets
// out of range: NaN), tokens [B, S, classes], ignored targets (class 0 of 7: about a seventh of
// the rows; of 1: every row), in each float dtype; then padded logits rows.
std::vector<ConformanceCase> logits_cases(const std::string& op, const std::string& node,
                                          const std::vector<std::pair<int, int64_t>>& vocabularies);

// A loss's rule takes the gradient of its output as 1, so `op` is differentiated only as the
// `train:` loss. Throws Error naming the node where the loss depends on it through other nodes.
void require_loss_root(const GradBuilder& g, const std::string& op);

}  // namespace teeny::ops
