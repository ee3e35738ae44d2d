// Shared pieces of generated CUDA C++ kernel source, reused by every op family.
//
// Kernels are self-contained translation units: they include no CUDA headers (NVRTC has no
// default include path, and bundles must compile the same on any machine), so prelude()
// provides the 16-bit float types, conversions, 16-byte vector access and warp/block
// reductions. Device-side names start with `tn_`.
//
// Device API provided by prelude() (stable; other op families rely on it):
//   __half, __nv_bfloat16            2-byte storage types (defined unless cuda_fp16.h /
//                                    cuda_bf16.h were included first)
//   float tn_f32(T v)                T in {float, __half, __nv_bfloat16, int} -> float
//   T tn_cast<T>(float v)            float -> T, round to nearest even
//   tn_pack<T>::kN                   elements of T per 16 bytes (4 for float, 8 for 16-bit)
//   void tn_load16<T>(const T* p, float (&v)[tn_pack<T>::kN])   p must be 16-byte aligned
//   void tn_store16<T>(T* p, const float (&v)[tn_pack<T>::kN])
//   bool tn_aligned16(const void* p)
//   float tn_warp_sum(float), tn_warp_max(float)         xor-shuffle, all lanes get the result
//   float tn_block_sum<kThreads>(float, float* smem32), tn_block_max<kThreads>(...)
//                                    smem32: __shared__ float[32]; every thread gets the result;
//                                    safe to call repeatedly with the same smem32
//   tn_row_load<T, kThreads, kItems>(row, n, vec, t, fill, float (&v)[kItems][kN])
//   tn_row_store<T, kThreads, kItems>(row, n, vec, t, const float (&v)[kItems][kN])
//                                    a group of kThreads owns a row; thread t holds packs
//                                    starting at columns (it * kThreads + t) * kN; columns >= n
//                                    read as `fill`, are never written; vec: row 16-B aligned
//   float tn_group_sum<kThreads>(float, float* smem32), tn_group_max<kThreads>(...)
//                                    warp shuffle when kThreads == 32, else block-wide
//   float tn_neg_inf()
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/op.h"

namespace teeny::ops {

// The device helpers listed above, as source text to put before a kernel.
const std::string& kernel_prelude();

// A kernel whose generated entry takes `params` and forwards them, in order, to `function` (a
// device template in ops/kernels/<header>, with its template arguments), under
// __launch_bounds__(max_threads[, min_blocks]). Pass TEENY_KERNEL_ORIGIN for file, line.
KernelSource template_kernel(std::string name, std::string header, std::string function,
                             std::vector<KernelArg> params, int max_threads, const char* file,
                             int line, int min_blocks = 0);

// `typedef <c type> <alias>;` for generated sources ("typedef __nv_bfloat16 T_IN;").
std::string kernel_typedef(const std::string& alias, DType dtype);

// `constexpr int <name> = <value>;` — how ops print their launch constants into the source.
std::string kernel_constant(const std::string& name, long long value);

// The entry declaration generated from the launch's argument list, so names and C types are
// written once: `extern "C" __global__ void TEENY_ENTRY(const float* x, float* y, int n)`.
// With `max_threads` > 0 (the launch's block size): `... void __launch_bounds__(256)
// TEENY_ENTRY(...)`, which becomes the PTX .maxntid that compile checks the block against
// and lets ptxas budget registers for that block.
std::string kernel_entry(const std::vector<KernelArg>& args, int max_threads = 0);

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
                   std::optional<nlohmann::json> default_value = std::nullopt,
                   std::vector<std::string> choices = {});

// Elements of `dtype` per 16-byte vector.
int vector_width(DType dtype);

// The grid of a grid-stride kernel with `blocks` blocks of work: at most one full wave of the
// bound device, i.e. the blocks of `threads` threads an SM holds at once (2048 threads on sm_80
// and sm_90) times its SM count (the device symbol SMS), so any GPU of the arch is filled and
// no block is left for a second wave.
Expr grid_stride_blocks(const Expr& blocks, int threads);

// Output dtype for a float op: the node's `dtype:` if given (must be one of `def.dtypes`),
// else `input`. Throws OpError("dtype", ...).
DType output_float_dtype(const OpDef& def, const OpContext& ctx, DType input);

// Element strides of a tensor (row-major, honouring a padded row stride), as expressions.
std::vector<Expr> element_strides(const TensorType& type);

// Concrete row-major strides of a contiguous host shape.
std::vector<int64_t> host_strides(const std::vector<int64_t>& shape);

}  // namespace teeny::ops
