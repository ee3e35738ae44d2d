// The column sums of ops/kernels/grad_columns.cuh that bias and norm-weight gradients share
// (ops/grad_sum_rows.cpp, ops/grad_norm_dweight.cpp): a partials launch over parts of
// kGradRowsPerPart rows into the node's scratch buffer "partials", then one that adds each
// column's parts in order. The part count is a function of the rows alone, so the sums, and
// their bits, do not depend on the GPU.
#pragma once

#include <string>
#include <vector>

#include "core/op.h"

namespace teeny::ops {

struct ColumnSums {
  std::string name;  // kernel-name prefix, e.g. "grad_sum_rows"
  DType dtype = DType::kF32;
  Expr rows, cols;
  // The partials template (ops/kernels/grad_columns.cuh), given <T, lanes, rows per part>, and
  // its arguments, scratch("partials", "partials", f32) among them.
  std::string partials_function;
  std::vector<KernelArg> partials_args;
  Expr bytes, flops;  // what the partials launch reads and computes, beyond the partials
};

// Parts of the rows, each one block's partial sum per column.
Expr column_parts(const Expr& rows);

// Declares the scratch buffer "partials" and adds both launches, the sums into output "out".
void add_column_sums(Lowering& lowering, const ColumnSums& sums);

}  // namespace teeny::ops
