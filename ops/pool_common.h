// What the pools (ops/pool2d.cpp) and their gradients (ops/grad_pool2d.cpp, ops/grad_upsample.cpp)
// share: the window attrs and their checks, the pooled shape, and the one-thread-per-element
// launch of ops/kernels/grad_pool2d.cuh.
#pragma once

#include <string>
#include <vector>

#include "core/op.h"
#include "ops/vision_common.h"

namespace teeny::ops {

// kernel_size (required), stride (default: the kernel size), padding (default 0).
std::vector<AttrSpec> pool_attr_specs();
Window2d pool_window(const Attrs& attrs);

// x [B, C, H, W] pooled by the window of `attrs`: [B, C, Ho, Wo] with floor((H + 2p - k) / s) + 1
// (PyTorch's ceil_mode = false). Throws OpError at attrs.padding for padding over half the kernel
// (PyTorch's rule: every window overlaps the input) and as window_extent does.
Shape pooled_shape(const Shape& x, const Attrs& attrs);

// A pool's gradient: one thread per dx element, flat over dx [B, C, H, W] (ctx.output) so that
// each element gathers what its windows pass back in a fixed order (no atomics). `function` is
// the template of grad_pool2d.cuh, instantiated <T, threads, shape_argument> (the window or the
// scale) and called with `inputs` (dy, then x where read), then
// (dx, count, in_h, in_w, out_h, out_w), out_* dy's extents; `per_element` the loads of dy or x
// and the flops per dx element.
Lowering pool_grad_lowering(const OpContext& ctx, const std::string& kernel_name, const std::string& function,
                            const std::string& shape_argument, std::vector<KernelArg> inputs,
                            const Expr& per_element_loads, const Expr& per_element_flops);

// A conformance case of a pool's gradient op `op`: dx = op(dy[, x]) with dy [B, C, out_h, out_w]
// and, where `reads_x`, x [B, C, h, w], in `dtype`, at B = 1 and 5.
struct PoolGradCase {
  std::string label;
  int64_t channels = 1, h = 1, w = 1, out_h = 1, out_w = 1;
  nlohmann::json attrs = nlohmann::json::object();
};
std::vector<ConformanceCase> pool_grad_cases(const std::string& op, bool reads_x,
                                             const std::vector<PoolGradCase>& cases);

}  // namespace teeny::ops
