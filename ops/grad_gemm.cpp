#include "ops/grad_gemm.h"

#include <fmt/format.h>

#include "ops/kernel_util.h"

namespace teeny::ops {

namespace {

// The reduction is split (tn_grad_gemm) until the (tile, split) units make kSplitWaves waves of
// the units in flight at once (in_flight_per_sm), each split at least kMinSplitK long (16-bit
// wgmma: kMinSplitKWgmma, its k-steps are so much faster that a short split would spend more on
// writing its partial tile than on its MMAs; 3xTF32, three MMAs a k-step, kMinSplitKTf32): a
// weight gradient's few output tiles
// over a long sum (768 x 768 outputs are 36 tiles of 128 x 128) otherwise leave most SMs idle, and
// a last wave of units that is mostly empty costs more than writing and adding the partials. The
// count is a function of the dims alone, sized for a GPU of kSplitSms SMs whatever the device:
// the split decides how the sum is rounded, and a gradient keeps the same bits on every GPU (one
// with more or fewer SMs runs the same units in a few more or fewer waves).
constexpr int kSplitWaves = 2;
constexpr int kMinSplitK = 256;
constexpr int kMinSplitKWgmma = 1024;
constexpr int kMinSplitKTf32 = 512;
constexpr int kMinSplitKSimtF32 = 64;
constexpr int kTf32MaxK = 4096;
constexpr int kSplitSms = 132;
constexpr int kSumThreads = 256;

// Units an SM computes at once: the persistent wgmma kernel's two consumers, else the blocks
// __launch_bounds__ asks an SM to hold.
int in_flight_per_sm(const GemmTile& tile) { return tile.wgmma() ? tile.threads / 128 - 1 : tile.min_blocks; }

// Splits of whole k-steps: `wanted`, then as many as cover K's k-steps at that length (so no
// split is empty).
Expr whole_splits(const GemmTile& tile, const Expr& k, const Expr& wanted) {
  const Expr k_steps = ceil_div(k, Expr(tile.bk));
  return ceil_div(k_steps, ceil_div(k_steps, wanted));
}

// The heuristic's split count, of whole k-steps (whole_splits). f32 on CUDA cores, whose FMAs are
// slow enough that a 64-long split outweighs its partial tile, splits as short as
// kMinSplitKSimtF32 while the units fill at most one wave: a small batch's weight gradient (1024
// rows over 4 tiles) then fills 64 SMs instead of 16, while 16384 rows keep splits of 256, as
// twice the partials cost more than a second wave gains.
Expr split_count(const GemmTile& tile, DType dtype, const Expr& units, const Expr& k) {
  const Expr in_flight = Expr(kSplitSms * in_flight_per_sm(tile));
  const Expr min_k(tile.split_tf32 ? kMinSplitKTf32 : tile.wgmma() ? kMinSplitKWgmma : kMinSplitK);
  Expr by_k = ceil_div(k, min_k);
  if (!tile.wgmma() && dtype == DType::kF32)
    by_k = max(by_k, min(ceil_div(k, Expr(kMinSplitKSimtF32)), ceil_div(in_flight, units)));
  if (by_k.is_const() && *by_k.const_value() <= 1) return Expr(1);  // too short to split on any device
  return whole_splits(tile, k, max(Expr(1), min(ceil_div(in_flight * Expr(kSplitWaves), units), by_k)));
}

// f32 on sm_90 over one matrix may run as 3xTF32 (any layout, any stride) where the sum is a
// layer's width (K a constant up to kTf32MaxK: an input gradient's). A sum over the rows (any
// number of them, even where they are a constant) misses f32's per-element tolerance there where
// terms cancel (over 12000 rows, 6e-4: 2e-7 of the sum of |terms|), in one sum or split into sums
// of 500 rows added in f32 alike: the error is the tensor cores' rounding toward zero as they add
// a step's products, not the sum's length. CUDA cores' FMAs round to nearest.
bool tf32_ok(const GradGemm& gemm, int target_sm) {
  return target_sm == 90 && gemm.batch.empty() && gemm.dtype == DType::kF32 && !gemm.sums_rows && gemm.k.is_const() &&
         *gemm.k.const_value() <= kTf32MaxK;
}

// 16-bit on sm_90 over one matrix may load by TMA where the rows of A, B, C and R are 16-byte
// multiples (TMA's strides; C is [M, N]).
bool tma_ok(const GradGemm& gemm, int target_sm) {
  const auto rows_ok = [&](const Expr& stride) { return is_16_byte_multiple(stride, gemm.dtype); };
  return target_sm == 90 && gemm.batch.empty() && gemm.dtype != DType::kF32 && rows_ok(gemm.lda) && rows_ok(gemm.ldb) &&
         rows_ok(gemm.n) && (!gemm.epilogue.residual || rows_ok(gemm.ldr));
}

bool at_least(const Expr& dim, int64_t size) { return dim.is_const() && *dim.const_value() >= size; }

// The heuristic's tile. The wgmma kernel where it applies: 3xTF32 where the output is at least
// one tile wide, as linear's; 16-bit by TMA. Otherwise an output of constant M and N (a weight
// gradient) takes the wide CUDA-core tile even where N is narrow: its sum splits until the tiles
// fill the GPU, and the 128x128 register tiles make twice the FMAs a shared-memory load of the
// 64x64 ones. Otherwise the [K, N] heuristic picks among the one-tile-a-block kernels (it never
// picks wgmma for a [K, N] B); their tiles serve either B layout.
GemmTile grad_gemm_tile(const GradGemm& gemm, int target_sm) {
  if (tf32_ok(gemm, target_sm) && at_least(gemm.n, gemm_tf32_tile().bn)) return gemm_tf32_tile();
  if (tma_ok(gemm, target_sm)) return fit_gemm_epilogue(gemm_tma_tile(gemm.dtype), gemm.epilogue);
  const GemmTile wide_tile = gemm_f32_block_tile(true);
  if (gemm.dtype == DType::kF32 && at_least(gemm.m, wide_tile.bm) && at_least(gemm.n, wide_tile.bn)) return wide_tile;
  return choose_gemm_tile(gemm.dtype, GemmBLayout::kKN, gemm.n, gemm.k, target_sm);
}

// Every tile the GEMM can run, the heuristic's among them: the one-tile-a-block kernels, and the
// wgmma kernel where it applies.
std::vector<GemmTile> grad_gemm_tiles(const GradGemm& gemm, int target_sm) {
  std::vector<GemmTile> tiles = gemm_tile_candidates(gemm.dtype, GemmBLayout::kKN, target_sm, false);
  if (tf32_ok(gemm, target_sm)) tiles.push_back(gemm_tf32_tile());
  if (tma_ok(gemm, target_sm)) tiles.push_back(fit_gemm_epilogue(gemm_tma_tile(gemm.dtype), gemm.epilogue));
  return tiles;
}

// The GEMM's arguments past a, b, c and the partials: the sizes, the split count, then tn_matmul's
// batch dims (innermost first, as tn_matmul_batch_offsets takes them) or the tensor maps.
std::vector<KernelArg> gemm_args(const GradGemm& gemm, const GemmTile& tile, const Expr& splits) {
  const bool r = gemm.epilogue.residual;
  std::vector<KernelArg> args = {gemm.a, gemm.b, output("c", gemm.dtype), scratch("partials", "partials", DType::kF32)};
  if (r) args.push_back(gemm.residual);
  for (KernelArg arg :
       {i32("M", gemm.m), i32("N", gemm.n), i32("K", gemm.k), i32("lda", gemm.lda), i32("ldb", gemm.ldb)})
    args.push_back(std::move(arg));
  if (r) args.push_back(i32("ldr", gemm.ldr));
  args.push_back(i32("splits", splits));
  for (size_t i = gemm.batch.size(); i-- > 0;) {
    args.push_back(i32(fmt::format("batch{}", i), gemm.batch[i].extent));
    args.push_back(i64(fmt::format("a_stride{}", i), gemm.batch[i].a_stride));
    args.push_back(i64(fmt::format("b_stride{}", i), gemm.batch[i].b_stride));
  }
  if (tile.tma) {
    const GemmOperands operands{gemm.a.name, gemm.b.name, "c",    r ? gemm.residual.name : "", gemm.m, gemm.n, gemm.k,
                                gemm.lda,    gemm.ldb,    gemm.n, r ? gemm.ldr : Expr(0)};
    for (KernelArg& map : gemm_tensor_maps(tile, operands, gemm.a_layout, gemm.b_layout))
      args.push_back(std::move(map));
  }
  return args;
}

// The second launch of a split GEMM: the partials added in split order into c.
Launch sum_splits_launch(const GradGemm& gemm, const Expr& outputs, const Expr& splits, int kernel) {
  Launch launch;
  launch.kernel = kernel;
  launch.args = {scratch("partials", "partials", DType::kF32), output("c", gemm.dtype), i64("count", outputs),
                 i32("splits", splits)};
  launch.block = {kSumThreads, 1, 1};
  launch.grid = {grid_stride_blocks(ceil_div(outputs, Expr(4 * kSumThreads)), kSumThreads), Expr(1), Expr(1)};
  launch.dynamic_smem = Expr(0);
  launch.bytes = outputs * (splits * Expr(4) + Expr(static_cast<int64_t>(dtype_size(gemm.dtype))));
  launch.flops = outputs * (splits - Expr(1));
  launch.when = le(Expr(2), splits);
  return launch;
}

Expr batch_count(const GradGemm& gemm) {
  Expr batches(1);
  for (const GradGemm::BatchDim& dim : gemm.batch) batches = batches * dim.extent;
  return batches;
}

// The GEMM on `tile`, its sum split `fixed_splits` ways (0: as the heuristic splits it): its
// launch, and the sum of its splits where it has two or more.
Lowering lower_tile(const GradGemm& gemm, const GemmTile& tile, int fixed_splits = 0) {
  const bool r = gemm.epilogue.residual;
  const Expr batches = batch_count(gemm);
  const Expr units = gemm_tiles(tile, gemm.m, gemm.n) * batches;
  const Expr outputs = batches * gemm.m * gemm.n;
  const Expr splits = r                  ? Expr(1)
                      : fixed_splits > 0 ? whole_splits(tile, gemm.k, Expr(fixed_splits))
                                         : split_count(tile, gemm.dtype, units, gemm.k);

  Lowering lowering;
  lowering.scratch.push_back({"partials", DType::kF32, max(Expr(1), le(Expr(2), splits) * splits * outputs)});
  Launch launch;
  launch.args = gemm_args(gemm, tile, splits);
  launch.block = {tile.threads, 1, 1};
  launch.grid = {gemm_grid(tile, units * splits), Expr(1), Expr(1)};
  launch.dynamic_smem = Expr(gemm_dynamic_smem(tile, gemm.epilogue));
  const Expr elem(static_cast<int64_t>(dtype_size(gemm.dtype)));
  // Split, the tiles go to the partials (f32) instead of c.
  const Expr written = outputs * (elem + le(Expr(2), splits) * (splits * Expr(4) - elem));
  launch.bytes = (gemm.a_elements + gemm.b_elements + (r ? outputs : Expr(0))) * elem + written;
  launch.flops = Expr(2) * outputs * gemm.k;

  const bool a_transposed = gemm.a_layout == GemmALayout::kKM;
  const std::string name = fmt::format("{}{}{}_b{}", gemm_kernel_name(gemm.op, gemm.dtype, gemm.b_layout, false, tile),
                                       a_transposed ? "_at" : "", gemm.epilogue.suffix(), gemm.batch.size());
  const std::string gemm_class =
      gemm_kernel_class(gemm.dtype, gemm.b_layout, false, tile, gemm.epilogue, gemm.a_layout);
  const std::string entry = fmt::format("{}{}", tile.tma ? "tn_grad_gemm_tma" : "tn_grad_gemm", r ? "_res" : "");
  KernelSource kernel = template_kernel(name, "gemm.cuh", fmt::format("{}<{}>", entry, gemm_class), launch.args,
                                        tile.threads, TEENY_KERNEL_ORIGIN, tile.min_blocks);
  kernel.arch_specific = tile.wgmma();
  lowering.kernels.push_back(std::move(kernel));
  lowering.launches.push_back(std::move(launch));
  if (splits == Expr(1)) return lowering;

  Launch sum = sum_splits_launch(gemm, outputs, splits, 1);
  lowering.kernels.push_back(template_kernel(fmt::format("grad_gemm_sum_splits_{}", dtype_name(gemm.dtype)), "gemm.cuh",
                                             "tn_gemm_sum_splits", sum.args, kSumThreads, TEENY_KERNEL_ORIGIN));
  lowering.launches.push_back(std::move(sum));
  return lowering;
}

// A tunable variant: a tile and its split count (0: the heuristic's), named by the tile, then the
// fixed count if any ("128x128x8_split16").
struct TileChoice {
  OpVariant variant;
  GemmTile tile;
  int splits = 0;
};

// Every variant: each tile the GEMM can run, with the heuristic's split count and fixed ones,
// powers of two up to 128, each only where K holds a k-step a split; none where an epilogue
// reads R (the sum never splits).
std::vector<TileChoice> tile_choices(const GradGemm& gemm, int target_sm) {
  std::vector<TileChoice> choices;
  for (const GemmTile& tile : grad_gemm_tiles(gemm, target_sm)) {
    const std::string name = gemm_tile_name(tile);
    choices.push_back({{name}, tile, 0});
    for (int splits = 1; splits <= 128 && !gemm.epilogue.residual; splits *= 2) {
      TileChoice choice{{fmt::format("{}_split{}", name, splits)}, tile, splits};
      if (splits > 1) choice.variant.limits.push_back({"K", {int64_t{splits} * tile.bk, INT64_MAX}});
      choices.push_back(std::move(choice));
    }
  }
  return choices;
}

// The heuristic's lowering: its tile, and on 3xTF32 a small batch's input gradient on CUDA cores
// (kTf32MinTilesGrad; constant rows fold to one of the two).
Lowering lower_heuristic(const GradGemm& gemm, int target_sm) {
  const GemmTile tile = grad_gemm_tile(gemm, target_sm);
  if (!tile.split_tf32) return lower_tile(gemm, tile);
  const Expr tiles = gemm_tiles(tile, gemm.m, gemm.n);
  const Expr few = le(tiles, Expr(kTf32MinTilesGrad - 1));
  if (few == Expr(0)) return lower_tile(gemm, tile);
  const GemmTile simt = gemm_f32_small_batch_tile();
  if (few == Expr(1)) return lower_tile(gemm, simt);
  Lowering lowering;
  append_lowering(lowering, lower_tile(gemm, simt), few, gemm.op);
  append_lowering(lowering, lower_tile(gemm, tile), le(Expr(kTf32MinTilesGrad), tiles), gemm.op);
  return lowering;
}

}  // namespace

Lowering lower_grad_gemm(const GradGemm& gemm, int target_sm, const std::string& variant) {
  if (gemm.epilogue.residual && !gemm.batch.empty())
    throw Error("internal: a gradient GEMM's epilogue reads R of one matrix only");
  if (variant.empty()) return lower_heuristic(gemm, target_sm);
  for (const TileChoice& choice : tile_choices(gemm, target_sm))
    if (choice.variant.name == variant) return lower_tile(gemm, choice.tile, choice.splits);
  throw OpError("op", fmt::format("{} has no variant '{}' here", gemm.op, variant));
}

OpTuning grad_gemm_tuning(std::function<GradGemm(const OpContext&)> gemm_of, std::vector<int> row_inputs) {
  OpTuning tuning;
  tuning.dims = [gemm_of](const OpContext& ctx) {
    const GradGemm gemm = gemm_of(ctx);
    std::vector<std::pair<std::string, Expr>> dims;
    if (!gemm.batch.empty()) dims.emplace_back("Batch", batch_count(gemm));
    for (auto [name, value] : {std::pair{"M", gemm.m}, {"N", gemm.n}, {"K", gemm.k}}) dims.emplace_back(name, value);
    return dims;
  };
  tuning.variants = [gemm_of](const OpContext& ctx) {
    std::vector<OpVariant> variants;
    for (TileChoice& choice : tile_choices(gemm_of(ctx), ctx.target_sm)) variants.push_back(std::move(choice.variant));
    return variants;
  };
  tuning.row_inputs = std::move(row_inputs);
  return tuning;
}

std::vector<double> host_gemm(const HostGemm& g, const std::vector<double>& a, const std::vector<double>& b,
                              const std::vector<int64_t>& a_offsets, const std::vector<int64_t>& b_offsets) {
  const size_t batches = a_offsets.size();
  std::vector<double> c(batches * g.m * g.n, 0.0);
  for (size_t z = 0; z < batches; ++z) {
    const double* pa = a.data() + a_offsets[z];
    const double* pb = b.data() + b_offsets[z];
    double* pc = c.data() + z * g.m * g.n;
    // Row i of C gathers A(i, p) times row p of B: B's rows stream (tune checks whole weight
    // gradients of 16384 rows against this).
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t p = 0; p < g.k; ++p) {
        const double a_ip = pa[i * g.a_row + p * g.a_col];
        const double* b_row = pb + p * g.b_row;
        for (int64_t j = 0; j < g.n; ++j) pc[i * g.n + j] += a_ip * b_row[j * g.b_col];
      }
  }
  return c;
}

}  // namespace teeny::ops
