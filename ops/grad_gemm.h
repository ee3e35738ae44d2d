// The GEMMs of the dense ops' gradients (ops/grad_linear_dx.cpp, ops/grad_linear_dweight.cpp,
// ops/grad_matmul.cpp): C = A·B over the output's batch dims, through gemm.cuh's entries
// tn_grad_gemm and tn_grad_gemm_tma, C contiguous. A is [M, K] or stored as [K, M] (the weight
// gradients' dyᵀ and aᵀ, whose sums run over the rows: read transposed in place, with no
// transpose node); B is [K, N] or [N, K]. On sm_90, over one matrix, the persistent wgmma kernel,
// which reads either operand K-major or MN-major: 16-bit by TMA where rows are 16-byte multiples,
// f32 as 3xTF32 where the output is a tile wide and K a layer's width (dx; not a weight
// gradient's sum over the rows); otherwise a one-tile-a-block kernel (CUDA cores or mma.sync).
// Where the output tiles cannot fill the GPU, the sum over K is split: each split writes its
// partial tiles (f32) to the scratch buffer `partials` and a second launch adds them in split
// order, so each output is still one sum in a fixed order (no atomics) and a gradient has the
// same bits on every run.
// An epilogue that reads a tensor R (an activation's derivative, or a fan-out gradient added in:
// grad.linear_dx's) takes one 2-D matrix and never splits: R is applied once, to the whole sum.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/op.h"
#include "ops/dense_gemm.h"

namespace teeny::ops {

struct GradGemm {
  std::string op;  // kernel-name prefix, e.g. "grad_linear_dx"
  DType dtype = DType::kF32;
  GemmALayout a_layout = GemmALayout::kMK;
  GemmBLayout b_layout = GemmBLayout::kKN;
  KernelArg a, b;  // the operands' pointer arguments, an input or a param each
  Expr m, n, k;
  Expr lda, ldb;  // row strides of A and B as stored
  // Per output batch dim, outermost first: its extent and A's and B's element strides (0 where
  // the operand broadcasts).
  struct BatchDim {
    Expr extent, a_stride, b_stride;
  };
  std::vector<BatchDim> batch;
  Expr a_elements, b_elements;  // what the launch reads, for the cost
  // The sum runs over a batch's rows (a weight gradient, matmul's db), however many: never on
  // 3xTF32 (grad_gemm.cpp), even where the rows are a constant.
  bool sums_rows = false;
  // C = A·B + R, or act'(A·B, R) (GemmEpilogue::activation_grad); `residual` is R's pointer
  // argument (row stride ldr) where epilogue.residual.
  GemmEpilogue epilogue{};
  KernelArg residual{};
  Expr ldr{};
};

// The launches of `gemm`: the GEMM and the sum of its splits where it has more than one. Without
// a variant, the heuristic's tile (wgmma where it applies, else the tile the GEMM heuristic picks
// for its N and K) and split count; a variant (grad_gemm_tuning) names a tile, and a fixed split
// count after it ("128x128x8_split16") or none for the heuristic's. Throws OpError for a variant
// the GEMM does not have.
Lowering lower_grad_gemm(const GradGemm& gemm, int target_sm, const std::string& variant = "");

// A gradient GEMM op's tuning (`teeny tune`): dims M, N and K of the GEMM (and Batch, its
// matrices, where it has batch dims); a variant per tile the GEMM can run, each with the
// heuristic's split count and, where the sum may split, with fixed counts 1, 2, 4, ... (a count
// only for sums of at least that many k-steps). `row_inputs` as OpTuning's.
OpTuning grad_gemm_tuning(std::function<GradGemm(const OpContext&)> gemm_of, std::vector<int> row_inputs = {});

// C[z] = op(A[z]) · op(B[z]) on the host in double, for the ops' references: A element (i, p) of
// batch z at a[a_offset(z) + i * a_row + p * a_col], B's (p, j) likewise, C [batches, m, n].
struct HostGemm {
  int64_t m = 0, n = 0, k = 0;
  int64_t a_row = 0, a_col = 0, b_row = 0, b_col = 0;
};
std::vector<double> host_gemm(const HostGemm& g, const std::vector<double>& a, const std::vector<double>& b,
                              const std::vector<int64_t>& a_offsets, const std::vector<int64_t>& b_offsets);

}  // namespace teeny::ops
