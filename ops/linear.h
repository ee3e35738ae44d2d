// linear's pieces that fused.linear (ops/fused_linear.cpp) is built from, so the fused layer
// has linear's shape rule, params, GEMM and reference.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/op.h"
#include "ops/dense_gemm.h"

namespace teeny::ops {

// out_features, bias, in_features.
std::vector<AttrSpec> linear_attr_specs();

// The output of x [..., in] -> [..., out_features] (input 0; rows padded to 16 bytes).
TensorType infer_linear(const OpDef& meta, const OpContext& ctx);

// weight [out, in] and, with attr bias, bias [out].
std::vector<ParamSpec> linear_params(const OpContext& ctx);

// The GEMM launch(es), with the epilogue's activation and residual (input 1) applied.
// The linear for the context's variant, or (none named) the heuristic's per range of M.
Lowering lower_linear(const OpContext& ctx, const GemmEpilogue& epilogue);

// linear's tuning (core/op.h OpTuning): dims M (rows), N, K; variants: each small-M kernel
// ("gemv_m8", up to its rows) and each GEMM tile ("128x128x64_wgmma_pp_tma", any M).
OpTuning linear_tuning(std::function<GemmEpilogue(const OpContext&)> epilogue_of);

// x Wᵀ + b in double precision.
HostTensor linear_reference(const RefContext& ref);

// linear's backward from `dz`, dL/d(x Wᵀ + b), for the node `g` differentiates: dx = dz · W
// (grad.linear_dx, reading the weight), dW = dzᵀ · x over every row (grad.linear_dweight,
// reading x: the tensor the forward pass saves) and db = Σ_rows dz (grad.sum_rows), each where
// it is needed.
void linear_backward(GradBuilder& g, const std::string& dz);

}  // namespace teeny::ops
