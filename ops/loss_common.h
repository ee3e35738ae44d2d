// What the losses (ops/cross_entropy.cpp, ops/mse_loss.cpp) share: their f32 scalar output and
// the two launches of ops/kernels/loss.cuh, a first that leaves one partial result per block in
// the node's scratch buffer "partials" and a second that averages them in a fixed order.
#pragma once

#include <string>

#include "core/op.h"

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

}  // namespace teeny::ops
