// What layernorm and rmsnorm (ops/norms.cpp) and their gradients (ops/grad_norm_dx.cpp,
// ops/grad_norm_dweight.cpp) share: the eps attr, the host statistics of a row, and the
// gradients' dy and x inputs with their conformance cases.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/op.h"
#include "ops/conformance.h"

namespace teeny::ops {

// The eps attr (> 0), described by `doc`, by default layernorm's 1e-5 or rmsnorm's 1e-6.
AttrSpec norm_eps_attr(bool rms, const std::string& doc);

// A row's statistics for the host references, in double: the mean (0 for rmsnorm) and
// rstd = 1 / sqrt(var + eps) (rmsnorm: of the mean square).
struct NormRowStats {
  double mean = 0.0;
  double rstd = 0.0;
};
NormRowStats norm_row_stats(const double* row, int64_t cols, double eps, bool rms);

// The gradients' common float dtype of dy and x, which must be of one shape [..., D]; throws
// OpError("inputs", ...) otherwise.
DType norm_grad_dtype(const OpDef& def, const OpContext& ctx);

// A gradient's case `node` over dy and x of `shape` (the dims in `dims`), named "rows SHAPE DTYPE".
ConformanceCase norm_grad_rows_case(const CaseNode& node, DType dtype, const std::vector<std::string>& dims,
                                    const std::string& shape, std::vector<Bindings> bindings);

// A gradient's case `node` over dy and x with padded rows: two linears' 17 of 20.
ConformanceCase norm_grad_padded_case(const CaseNode& node);

}  // namespace teeny::ops
