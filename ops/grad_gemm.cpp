#include "ops/grad_gemm.h"

#include <fmt/format.h>

#include "ops/kernel_util.h"

namespace teeny::ops {

Lowering lower_grad_gemm(const GradGemm& gemm, int target_sm) {
  // The [K, N] heuristic picks among the one-tile-a-block kernels only (wgmma reads B as [N, K]
  // and its persistent blocks walk a single matrix); their tiles serve either B layout.
  const GemmTile tile = choose_gemm_tile(gemm.dtype, GemmBLayout::kKN, gemm.n, gemm.k, target_sm);
  Expr batches(1);
  for (const GradGemm::BatchDim& dim : gemm.batch) batches = batches * dim.extent;

  Launch launch;
  launch.args = {gemm.a,           gemm.b,           output("c", gemm.dtype), i32("M", gemm.m),
                 i32("N", gemm.n), i32("K", gemm.k), i32("lda", gemm.lda),    i32("ldb", gemm.ldb)};
  // Innermost first, as tn_matmul_batch_offsets takes them.
  for (size_t i = gemm.batch.size(); i-- > 0;) {
    launch.args.push_back(i32(fmt::format("batch{}", i), gemm.batch[i].extent));
    launch.args.push_back(i64(fmt::format("a_stride{}", i), gemm.batch[i].a_stride));
    launch.args.push_back(i64(fmt::format("b_stride{}", i), gemm.batch[i].b_stride));
  }
  launch.block = {tile.threads, 1, 1};
  launch.grid = {gemm_tiles(tile, gemm.m, gemm.n) * batches, Expr(1), Expr(1)};
  launch.dynamic_smem = Expr(0);
  const Expr elem(static_cast<int64_t>(dtype_size(gemm.dtype)));
  launch.bytes = (gemm.a_elements + gemm.b_elements + batches * gemm.m * gemm.n) * elem;
  launch.flops = Expr(2) * batches * gemm.m * gemm.n * gemm.k;

  const bool a_transposed = gemm.a_layout == GemmALayout::kKM;
  const std::string name = fmt::format("{}{}_b{}", gemm_kernel_name(gemm.op, gemm.dtype, gemm.b_layout, false, tile),
                                       a_transposed ? "_at" : "", gemm.batch.size());
  const std::string gemm_class = gemm_kernel_class(gemm.dtype, gemm.b_layout, false, tile, {}, gemm.a_layout);
  Lowering lowering;
  lowering.kernels.push_back(template_kernel(name, "gemm.cuh", fmt::format("tn_matmul<{}>", gemm_class), launch.args,
                                             tile.threads, TEENY_KERNEL_ORIGIN, tile.min_blocks));
  lowering.launches.push_back(std::move(launch));
  return lowering;
}

std::vector<double> host_gemm(const HostGemm& g, const std::vector<double>& a, const std::vector<double>& b,
                              const std::vector<int64_t>& a_offsets, const std::vector<int64_t>& b_offsets) {
  const size_t batches = a_offsets.size();
  std::vector<double> c(batches * g.m * g.n, 0.0);
  for (size_t z = 0; z < batches; ++z) {
    const double* pa = a.data() + a_offsets[z];
    const double* pb = b.data() + b_offsets[z];
    double* pc = c.data() + z * g.m * g.n;
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < g.k; ++p) acc += pa[i * g.a_row + p * g.a_col] * pb[p * g.b_row + j * g.b_col];
        pc[i * g.n + j] = acc;
      }
  }
  return c;
}

}  // namespace teeny::ops
