// The tiled GEMM shared by `linear` and `matmul`: C[M, N] = A[M, K] · B (+ bias[N]). This file
// chooses the tile, the launch geometry and the kernel class; the kernels are device templates in
// ops/kernels/gemm_simt.cuh, gemm_mma.cuh and gemm_wgmma.cuh, entered through gemm.cuh.
//
// A is row-major with row stride lda. B is either [N, K] (a linear weight, K contiguous) or
// [K, N] (a matmul operand, N contiguous). f32 runs on CUDA cores (shared-memory tiles,
// register blocking, float4 loads); f16/bf16 run on tensor cores with f32 accumulation: on
// sm_90 with B as [N, K], a persistent warp-specialised kernel: one warpgroup fills a ring of
// 128-byte-swizzled shared stages (one thread by TMA where rows are 16-byte multiples, else all
// by cp.async), the others run Hopper's warpgroup MMA (wgmma, sm_90a) on them; otherwise
// mma.sync m16n8k16 fed by ldmatrix with cp.async double buffering. Any M/N/K works: tails are
// masked, and unaligned strides fall back to scalar loads at run time.
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/expr.h"
#include "core/op.h"

namespace teeny::ops {

enum class GemmBLayout { kNK, kKN };
// A is [M, K] (kMK), or stored as [K, M] (kKM: the gradient GEMMs' dyᵀ and aᵀ). The wgmma
// kernel reads a kKM A and a kKN B (MN-major) only in 16 bits, loading by TMA.
enum class GemmALayout { kMK, kKM };

// The launch constants one kernel is generated from.
struct GemmTile {
  int bm = 0, bn = 0, bk = 0;  // block tile
  int threads = 0;             // threads per block (1-D)
  int min_blocks = 0;          // __launch_bounds__ occupancy hint (caps registers)
  int stages = 0;              // wgmma path only: shared-memory pipeline depth (0: the other paths)
  // wgmma path only: each MMA warpgroup computes whole tiles, alternately (see
  // ops/kernels/gemm_wgmma.cuh), instead of all of them splitting each tile's rows.
  bool pingpong = false;
  // wgmma path only, f32: 3xTF32 (stages hold each operand's TF32 high and low parts).
  bool split_tf32 = false;
  // wgmma path only, 16-bit: the loader is one thread issuing TMA copies through the tensor
  // maps a_map / b_map (see gemm_tensor_maps) instead of a warpgroup of cp.async copies.
  bool tma = false;
  bool wgmma() const { return stages > 0; }
};

// What the epilogue applies after the bias: C = activation(A·B + bias) + residual. The
// residual R has C's dtype and shape, row stride ldr (the block functions' R and ldr).
// An input gradient's GEMM (ops/grad_gemm.h) applies instead C = act'(A·B, R): with
// activation_grad, that activation's derivative (grad.activation's, ops/grad_activation.cpp) times
// the product, R the tensor it reads (the forward activation's input or output); residual is then
// set.
struct GemmEpilogue {
  std::string activation;  // an ops/activation.h name; empty: none
  bool residual = false;
  std::string activation_grad{};  // an activation name; empty: none
  // Kernel-name suffix: "", "_gelu_tanh", "_res", "_relu_res", "_dgelu_tanh", ...
  std::string suffix() const;
};

// Picks a tile for the dtype and B layout on the target SM from the output width `n` (a narrow
// N gets a small tile so small layers still fill the GPU) and the reduction length `k` (on
// sm_90, a short K takes the pingpong schedule, whose epilogues overlap the other warpgroup's
// MMAs). On sm_90 a wide f32 linear runs on tensor cores as 3xTF32 (ops/kernels/gemm_wgmma.cuh).
// `tma_ok`: A's and B's rows are 16-byte multiples (a TMA requirement), so on sm_90 a 16-bit
// GEMM may load by TMA.
GemmTile choose_gemm_tile(DType dtype, GemmBLayout layout, const Expr& n, const Expr& k, int target_sm,
                          bool tma_ok = false);

// The 16-bit wgmma tile that loads by TMA (sm_90; every operand row a 16-byte multiple): 128x128x64,
// 6 stages, pingpong. The only 16-bit wgmma tile that reads MN-major operands.
GemmTile gemm_tma_tile(DType dtype);

// The f32 CUDA-core tiles (256 threads, two blocks an SM): 128x128x8, or 64x64x16 for outputs too
// narrow to fill the GPU with the wide one's tiles.
GemmTile gemm_f32_block_tile(bool wide);

// The CUDA-core tile an f32 output `n` wide takes: the narrow one under 512 columns.
GemmTile gemm_f32_cuda_core_tile(const Expr& n);

// The CUDA-core tile of a small f32 batch (under kTf32MinTilesGrad 128x128 tiles: under half a
// wave of a 132-SM GPU): the narrow one, whatever the width, so that its four times as many
// units fill more of the GPU (an input gradient of 1024 rows by 1024 ran 64 wide units).
GemmTile gemm_f32_small_batch_tile();

// The f32 wgmma tile (sm_90, 3xTF32, loading by cp.async): 128x128x32, 3 stages, pingpong. It reads
// either operand K-major or MN-major (transposed as it loads).
GemmTile gemm_tf32_tile();

// A small f32 batch runs on CUDA cores, split over K into many short units, where the 3xTF32 tiles
// would be fewer than these: its 3xTF32 units are too few to fill the GPU, and each is slow, its
// k-steps waiting on loads that the TF32 split lags behind. Constants (1024 rows of 256 are 16
// tiles), not the device's SM count, so which kernel runs follows from the dims alone. `linear`
// switches under a quarter wave of a 132-SM GPU: at 64 tiles (1024 rows of 1024, 4096 of 256)
// its 3xTF32 kernel measured faster. An input gradient, whose 3xTF32 kernel transposes B as it
// loads, switches under half a wave: at 64 tiles its CUDA-core kernel measured faster.
constexpr int kTf32MinTilesLinear = 33;
constexpr int kTf32MinTilesGrad = 66;

// Every tile the GEMM can run for the dtype and B layout on the target SM (each valid at any M, N
// and K), for `teeny tune` to measure: choose_gemm_tile picks one of them.
std::vector<GemmTile> gemm_tile_candidates(DType dtype, GemmBLayout layout, int target_sm, bool tma_ok);

// The tile's part of kernel and variant names: "64x64x32", "128x128x64_wgmma_pp_tma", ...
std::string gemm_tile_name(const GemmTile& tile);

// The tile with as many pipeline stages as fit beside the epilogue's shared memory (a TMA
// kernel with a residual stages a whole output tile).
GemmTile fit_gemm_epilogue(GemmTile tile, const GemmEpilogue& epilogue);

// The pointer arguments a TMA kernel's tensor maps view: `a` [M, K] or stored [K, M] (row stride
// lda), `b` [N, K] or [K, N] (ldb), the output `c` [M, N] (ldc) and, if named, the residual `r`
// [M, N] (ldr).
struct GemmOperands {
  std::string a, b, c, r;
  Expr m, n, k, lda, ldb, ldc, ldr;
};

// The TMA kernel's tensor-map arguments a_map, b_map, c_map and (with a residual) r_map, in the
// boxes the kernel loads and stores. Tiles store through shared memory by TMA (faster over
// GPT-2's bf16 layers than 16-byte stores from registers), with a residual, which first
// arrives there by TMA under the mainloop.
std::vector<KernelArg> gemm_tensor_maps(const GemmTile& tile, const GemmOperands& operands,
                                        GemmALayout a_layout = GemmALayout::kMK,
                                        GemmBLayout b_layout = GemmBLayout::kNK);

// Dynamic shared memory of a launch of the tile's kernel, in bytes (0 unless wgmma).
int64_t gemm_dynamic_smem(const GemmTile& tile, const GemmEpilogue& epilogue);

// The GEMM kernel class of ops/kernels/gemm*.cuh for the dtype, layout, tile and epilogue, e.g.
// "tn_wgmma_gemm<__nv_bfloat16, 128, 128, 64, 384, 6, true, false, true, 32, tn_gemm_epilogue<...>>":
// its block() computes output tile `pid` (grouped tile order) or, in the persistent wgmma kernel,
// tiles pid, pid + gridDim.x, .... Columns in [N, ldc) of the tile's rows are written as zeros
// (row padding). The entries of ops/kernels/gemm.cuh (tn_linear, tn_matmul, ...) take it as
// their `Gemm`. Throws Error for MN-major operands (a kKM A, a kKN B) on a 16-bit wgmma tile that
// is not gemm_tma_tile's.
std::string gemm_kernel_class(DType dtype, GemmBLayout layout, bool has_bias, const GemmTile& tile,
                              const GemmEpilogue& epilogue = {}, GemmALayout a_layout = GemmALayout::kMK);

// The GEMM epilogue class: "tn_gemm_epilogue<T, Act, bias, residual>".
std::string gemm_epilogue_class(DType dtype, bool has_bias, const GemmEpilogue& epilogue);

// Small-M linear (ops/kernels/gemv.cuh): x with at most gemv_max_rows(dtype) rows streams the
// weight once. One variant per bound on M, ascending; M runs the first that holds it.
struct GemvVariant {
  int max_rows = 0;          // serves M up to this (and above the previous variant's)
  int threads = 0;           // a block
  int rows_per_block = 0;    // of the weight
  std::string kernel_class;  // e.g. "tn_gemv_mma<__nv_bfloat16, 16, 2, 2, tn_gemm_epilogue<...>>"
};
std::vector<GemvVariant> gemv_variants(DType dtype, bool has_bias, const GemmEpilogue& epilogue);
int gemv_max_rows(DType dtype);
std::string gemv_variant_name(const GemvVariant& variant);  // "gemv_m8": up to 8 rows

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

}  // namespace teeny::ops
