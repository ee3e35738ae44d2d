#include "ops/grad_columns.h"

#include <fmt/format.h>

#include "ops/kernel_util.h"

namespace teeny::ops {
namespace {

// A part is 256 rows, 32 a lane: long enough that the partials stay small next to the input
// (1/256 of its rows in f32), short enough that 8192 rows of 768 columns make 768 blocks.
constexpr int kGradRowsPerPart = 256;
constexpr int kLanes = 8;
constexpr int kColumnTile = 32;  // kTnGradColumns
constexpr int kSumThreads = 256;

}  // namespace

Expr column_parts(const Expr& rows) { return ceil_div(rows, Expr(kGradRowsPerPart)); }

void add_column_sums(Lowering& lowering, const ColumnSums& sums) {
  const Expr parts = column_parts(sums.rows);
  const char* c_type = dtype_c_type(sums.dtype);
  lowering.scratch.push_back({"partials", DType::kF32, parts * sums.cols});

  Launch partials;
  partials.kernel = static_cast<int>(lowering.kernels.size());
  partials.args = sums.partials_args;
  partials.block = {kColumnTile * kLanes, 1, 1};
  partials.grid = {parts, ceil_div(sums.cols, Expr(kColumnTile)), Expr(1)};
  partials.bytes = sums.bytes + parts * sums.cols * Expr(4);
  partials.flops = sums.flops;
  lowering.kernels.push_back(
      template_kernel(fmt::format("{}_partials_{}", sums.name, dtype_name(sums.dtype)), "grad_columns.cuh",
                      fmt::format("{}<{}, {}, {}>", sums.partials_function, c_type, kLanes, kGradRowsPerPart),
                      partials.args, kColumnTile * kLanes, TEENY_KERNEL_ORIGIN));
  lowering.launches.push_back(std::move(partials));

  Launch total;
  total.kernel = static_cast<int>(lowering.kernels.size());
  total.args = {scratch("partials", "partials", DType::kF32), output("out", sums.dtype), i32("parts", parts),
                i32("cols", sums.cols)};
  total.block = {kSumThreads, 1, 1};
  total.grid = {ceil_div(sums.cols, Expr(kSumThreads)), Expr(1), Expr(1)};
  total.bytes = parts * sums.cols * Expr(4) + sums.cols * Expr(static_cast<int64_t>(dtype_size(sums.dtype)));
  total.flops = parts * sums.cols;
  lowering.kernels.push_back(template_kernel(
      fmt::format("grad_column_sums_{}", dtype_name(sums.dtype)), "grad_columns.cuh",
      fmt::format("tn_column_sums<{}, {}>", c_type, kSumThreads), total.args, kSumThreads, TEENY_KERNEL_ORIGIN));
  lowering.launches.push_back(std::move(total));
}

}  // namespace teeny::ops
