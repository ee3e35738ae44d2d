// What the ops share when they lower to kernels: the kernel descriptor of a device template in
// ops/kernels/ (template_kernel), row plans, attr schema helpers, dtype and stride helpers.
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/op.h"

namespace teeny::ops {

// A kernel whose generated entry takes `params` and forwards them, in order, to `function` (a
// device template in ops/kernels/<header>, with its template arguments), under
// __launch_bounds__(max_threads[, min_blocks]). Pass TEENY_KERNEL_ORIGIN for file, line.
KernelSource template_kernel(std::string name, std::string header, std::string function, std::vector<KernelArg> params,
                             int max_threads, const char* file, int line, int min_blocks = 0);

// How a row-wise kernel (softmax, norms) spreads rows over threads: a group of `threads`
// (a warp, or a whole block) per row, `rows_per_block` groups per block, and `items` 16-byte
// packs per thread cached in registers, so rows up to threads * items * pack width are read
// from memory once; longer rows (or symbolic ones beyond that) stream in chunks.
struct RowPlan {
  int threads = 256;
  int rows_per_block = 1;
  int items = 4;
  int block() const { return threads * rows_per_block; }
};
RowPlan plan_rows(const Expr& cols, DType dtype);

// An attr schema entry without the aggregate's missing-initializer noise.
AttrSpec attr_spec(std::string name, AttrType type, std::string doc,
                   std::optional<nlohmann::json> default_value = std::nullopt, std::vector<std::string> choices = {});

// Shared memory one block may take on sm_90 (227 KiB opt-in), which sizes the Hopper kernels'
// pipelines. A stage count is a constant of a kernel's source, so it is chosen per arch, not per
// device: every sm_90 part has this limit, and binding checks each launch against the device's
// SMEM_PER_BLOCK.
constexpr int64_t kSm90MaxBlockSmem = 227 * 1024;

// Elements of `dtype` per 16-byte vector.
int vector_width(DType dtype);

// Whether `elements` of `dtype` are a constant whole number of 16-byte units (TMA's row strides).
bool is_16_byte_multiple(const Expr& elements, DType dtype);

// The grid of a grid-stride kernel with `blocks` blocks of work: at most one full wave of the
// bound device, i.e. the blocks of `threads` threads an SM holds at once (2048 threads on sm_80
// and sm_90) times its SM count (the device symbol SMS), so any GPU of the arch is filled and
// no block is left for a second wave.
Expr grid_stride_blocks(const Expr& blocks, int threads);

// Output dtype of an op whose inputs decide it: `input`. The node's `dtype:` may only repeat it,
// since no kernel converts on the way out. Throws OpError("dtype", ...).
DType output_float_dtype(const OpDef& def, const OpContext& ctx, DType input);

// Output dtype of an op whose inputs do not decide it (embedding's table): the node's `dtype:`
// if given (one of `def.dtypes`), else `fallback`. Throws OpError("dtype", ...).
DType chosen_float_dtype(const OpDef& def, const OpContext& ctx, DType fallback);

// Element strides of a tensor (row-major, honouring a padded row stride), as expressions.
std::vector<Expr> element_strides(const TensorType& type);

// Concrete row-major strides of a contiguous host shape.
std::vector<int64_t> host_strides(const std::vector<int64_t>& shape);

// The product of dims [begin, end) of a symbolic shape; 1 for an empty range.
Expr product_range(const Shape& shape, size_t begin, size_t end);

// A contiguous host shape viewed as [outer, len, inner] around `axis`, as the references of the
// ops along one axis walk it: element (o, d, i) at (o * len + d) * inner + i.
struct HostAxisView {
  int64_t outer = 1, len = 1, inner = 1;
};
HostAxisView host_axis_view(const std::vector<int64_t>& shape, size_t axis);

// Throws OpError("inputs", "<op>: <a_name> has shape .. but <b_name> has ..; they must match")
// unless a and b have one shape (a gradient and the tensor it pairs with).
void require_same_shape(const std::string& op, const TensorType& a, const char* a_name, const TensorType& b,
                        const char* b_name);

}  // namespace teeny::ops
