// The tiled GEMM shared by `linear` and `matmul`: C[M, N] = A[M, K] · B (+ bias[N]).
//
// A is row-major with row stride lda. B is either [N, K] (a linear weight, K contiguous) or
// [K, N] (a matmul operand, N contiguous). f32 runs on CUDA cores (shared-memory tiles,
// register blocking, float4 loads); f16/bf16 run on tensor cores (mma.sync m16n8k16 fed by
// ldmatrix, cp.async double buffering) with f32 accumulation. Any M/N/K works: tails are
// masked, and unaligned strides fall back to scalar loads at run time.
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
};

// Picks a tile for the dtype; `n` is the output width (a narrow N gets the small tile so
// small layers still fill the GPU).
GemmTile choose_gemm_tile(DType dtype, const Expr& n);

// Source of `__device__ void tn_gemm_block(A, B, bias, C, M, N, K, lda, ldb, ldc, pid)`,
// computing output tile `pid` (grouped tile order), for the given dtype, layout and tile.
// Columns in [N, ldc) of the tile's rows are written as zeros (row padding). `bias` may be
// null only when has_bias is false. Includes kernel_prelude().
std::string gemm_device_source(DType dtype, GemmBLayout layout, bool has_bias, const GemmTile& tile);

// Output tiles per matrix: the launch grid's x for M x N.
Expr gemm_tiles(const GemmTile& tile, const Expr& m, const Expr& n);

// Kernel base name, e.g. "gemm_bf16_nk_bias_128x128x32".
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
