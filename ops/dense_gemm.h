// The tiled GEMM shared by `linear` and `matmul`: C[M, N] = A[M, K] · B (+ bias[N]).
//
// A is row-major with row stride lda. B is either [N, K] (a linear weight, K contiguous) or
// [K, N] (a matmul operand, N contiguous). f32 runs on CUDA cores (shared-memory tiles,
// register blocking, float4 loads); f16/bf16 run on tensor cores with f32 accumulation: on
// sm_90 with B as [N, K], a persistent warp-specialised kernel: one warpgroup fills a ring of
// 128-byte-swizzled shared stages (one thread by TMA where rows are 16-byte multiples, else all
// by cp.async), the others run Hopper's warpgroup MMA (wgmma, sm_90a) on them; otherwise mma.sync m16n8k16 fed by
// ldmatrix with cp.async double buffering. Any M/N/K works: tails are masked, and unaligned
// strides fall back to scalar loads at run time.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/expr.h"
#include "core/op.h"

namespace teeny::ops {

enum class GemmBLayout { kNK, kKN };

// The launch constants one kernel is generated from.
struct GemmTile {
  int bm, bn, bk;  // block tile
  int threads;     // threads per block (1-D)
  int min_blocks;  // __launch_bounds__ occupancy hint (caps registers)
  int stages = 0;  // wgmma path only: shared-memory pipeline depth (0: the other paths)
  // wgmma path only: each MMA warpgroup computes whole tiles, alternately (see kGemmWgmma),
  // instead of all of them splitting each tile's rows.
  bool pingpong = false;
  // wgmma path only, f32: 3xTF32 (stages hold each operand's TF32 high and low parts).
  bool split_tf32 = false;
  // wgmma path only, 16-bit: the loader is one thread issuing TMA copies through the tensor
  // maps a_map / b_map (see gemm_tensor_maps) instead of a warpgroup of cp.async copies.
  bool tma = false;
  bool wgmma() const { return stages > 0; }
};

// What the epilogue applies after the bias: C = activation(A·B + bias) + residual. The
// residual R has C's dtype and shape, row stride ldr (tn_gemm_block's trailing arguments).
struct GemmEpilogue {
  std::string activation;  // an ops/activation.h name; empty: none
  bool residual = false;
  // Kernel-name suffix: "", "_gelu_tanh", "_res", "_relu_res", ...
  std::string suffix() const;
};

// Picks a tile for the dtype and B layout on the target SM from the output width `n` (a narrow
// N gets a small tile so small layers still fill the GPU) and the reduction length `k` (on
// sm_90, a short K takes the pingpong schedule, whose epilogues overlap the other warpgroup's
// MMAs). On sm_90 a wide f32 linear runs on tensor cores as 3xTF32 (see kGemmWgmma).
// `tma_ok`: A's and B's rows are 16-byte multiples (a TMA requirement), so on sm_90 a 16-bit
// GEMM may load by TMA.
GemmTile choose_gemm_tile(DType dtype, GemmBLayout layout, const Expr& n, const Expr& k, int target_sm,
                          bool tma_ok = false);

// The tile with as many pipeline stages as fit beside the epilogue's shared memory (a TMA
// kernel with a residual stages a whole output tile).
GemmTile fit_gemm_epilogue(GemmTile tile, const GemmEpilogue& epilogue);

// The pointer arguments a TMA kernel's tensor maps view: `a` [M, K] (row stride lda), `b`
// [N, K] (ldb), the output `c` [M, N] (ldc) and, if named, the residual `r` [M, N] (ldr).
struct GemmOperands {
  std::string a, b, c, r;
  Expr m, n, k, lda, ldb, ldc, ldr;
};

// The TMA kernel's tensor-map arguments a_map, b_map, c_map and (with a residual) r_map, in the
// boxes the kernel loads and stores. Tiles store through shared memory by TMA (measured on the
// H200 over GPT-2's bf16 layers at M = 32768, against 16-byte stores from registers, same
// run: q 70.3 / 71.7 us, fc + GELU 297.9 / 311.2); with a residual, which first arrives there
// by TMA under the mainloop.
std::vector<KernelArg> gemm_tensor_maps(const GemmTile& tile, const GemmOperands& operands);

// Dynamic shared memory of a launch of the tile's kernel, in bytes (0 unless wgmma).
int64_t gemm_dynamic_smem(const GemmTile& tile, const GemmEpilogue& epilogue);

// Source of `__device__ void tn_gemm_block(A, B, bias, C, M, N, K, lda, ldb, ldc, pid, R, ldr)`,
// computing output tile `pid` (grouped tile order), for the given dtype, layout and tile; the
// persistent wgmma kernel computes tiles pid, pid + gridDim.x, ... instead.
// Columns in [N, ldc) of the tile's rows are written as zeros (row padding). `bias` may be
// null only when has_bias is false; R (default null) is read only with epilogue.residual.
// The f32 block takes a last `accumulate` (split-K): it atomically adds to C, and a null bias
// or R adds none, so only one split passes them. Includes kernel_prelude().
std::string gemm_device_source(DType dtype, GemmBLayout layout, bool has_bias, const GemmTile& tile,
                               const GemmEpilogue& epilogue = {});

// Output tiles per matrix.
Expr gemm_tiles(const GemmTile& tile, const Expr& m, const Expr& n);

// The launch grid's x for `units` of work (output tiles, times the K splits where split): one
// block per unit, or for the persistent wgmma kernel at most one per SM of the bound device
// (min(units, SMS); its blocks stride over the units, so any SM count is correct).
Expr gemm_grid(const GemmTile& tile, const Expr& units);

// Kernel base name, e.g. "linear_bf16_nk_bias_128x128x32" ("..._wgmma" on that path,
// "..._wgmma_pp" for its pingpong schedule, then "_tma" when it loads by TMA).
std::string gemm_kernel_name(const std::string& op, DType dtype, GemmBLayout layout, bool has_bias,
                             const GemmTile& tile);

// Device helpers for tensor-core kernels of a 16-bit dtype (bf16 or f16): tn_smem_addr,
// tn_cp_async16 / _commit / _wait<N>, tn_ldmatrix_x4(_trans), tn_mma16816 (f32 accumulate),
// tn_pack2(lo, hi) (two floats -> one 32-bit pair of the dtype).
std::string mma_primitives(DType dtype);

// kernel_entry(args) with `__launch_bounds__(threads, min_blocks)` before the name, so the PTX
// carries .maxntid (checked against the launch's block) and ptxas caps registers for occupancy.
std::string bounded_kernel_entry(const std::vector<KernelArg>& args, int threads, int min_blocks);

}  // namespace teeny::ops
