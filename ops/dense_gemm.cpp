#include "ops/dense_gemm.h"

#include <fmt/format.h>

#include "ops/activation.h"
#include "ops/kernel_util.h"

namespace teeny::ops {
namespace {

// The longest K for which the wgmma GEMM takes the pingpong schedule.
constexpr int kPingpongMaxK = 1024;
// Columns of one TMA store of the 16-bit wgmma epilogue (c_map's box; 64 bytes of 16-bit
// elements, a 64-byte swizzle row); the kernel class gets it as kStoreGroupCols.
constexpr int kTmaStoreBox = 32;
// Small-M kernels (ops/kernels/gemv.cuh), one variant per bound on M: a kernel sized for 8 or 16
// x rows wastes its reductions (f32: one warp sum per accumulator) and registers on one row, so
// M picks the smallest variant that holds it (each launch's `when`). 16-bit: x rows come in MMA
// groups of 8, one group up to 8 rows, two up to 16 (the most that stays clear of spills); 16
// warps a block, each with 2 K chunks a step double-buffered, stream the weight faster than 8
// warps with 4 single-buffered chunks, from 4096 to 28672 rows and columns (sweep against cuBLAS
// with a cold L2). f32: 4 weight rows a block, M accumulators each; 8 warps, but 4 for 16 rows,
// where 64 accumulators a thread leave room for fewer loads in flight and the x re-reads, not the
// weight stream, dominate at small N and K.
constexpr int kGemvMmaWarps = 16;
constexpr int kGemvMmaUnroll = 2;
constexpr int kGemvF32RowsN = 4;
struct GemvBucket {
  int max_rows, warps;
};
constexpr GemvBucket kGemvF32Buckets[] = {{1, 8}, {4, 8}, {8, 8}, {16, 4}};
constexpr GemvBucket kGemvMmaBuckets[] = {{8, kGemvMmaWarps}, {16, kGemvMmaWarps}};

const char* layout_name(GemmBLayout layout) { return layout == GemmBLayout::kNK ? "nk" : "kn"; }

// A tile of the kernels that compute one output tile a block: f32 on CUDA cores, 16-bit by
// mma.sync.
GemmTile block_tile(int bm, int bn, int bk, int threads, int min_blocks) {
  GemmTile tile;
  tile.bm = bm;
  tile.bn = bn;
  tile.bk = bk;
  tile.threads = threads;
  tile.min_blocks = min_blocks;
  return tile;
}

enum class WgmmaSchedule { kCooperative, kPingpong };
enum class WgmmaLoader { kCpAsync, kTma };

// A tile of the persistent wgmma kernel: 128 rows, K steps of one 128-byte swizzle row, one
// loader and two consumer warpgroups, one block an SM; f32 runs as 3xTF32.
GemmTile wgmma_tile(DType dtype, int bn, int stages, WgmmaSchedule schedule,
                    WgmmaLoader loader = WgmmaLoader::kCpAsync) {
  GemmTile tile = block_tile(128, bn, 128 / static_cast<int>(dtype_size(dtype)), 384, 1);
  tile.stages = stages;
  tile.pingpong = schedule == WgmmaSchedule::kPingpong;
  tile.split_tf32 = dtype == DType::kF32;
  tile.tma = loader == WgmmaLoader::kTma;
  return tile;
}

}  // namespace

GemmTile gemm_tma_tile(DType dtype) { return wgmma_tile(dtype, 128, 6, WgmmaSchedule::kPingpong, WgmmaLoader::kTma); }

// 3xTF32 stages are 64 KiB (f32 high and low parts of both 128-row tiles): three fit.
GemmTile gemm_f32_block_tile(bool wide) {
  return wide ? block_tile(128, 128, 8, 256, 2) : block_tile(64, 64, 16, 256, 2);
}

GemmTile gemm_f32_cuda_core_tile(const Expr& n) {
  return gemm_f32_block_tile(!(n.is_const() && *n.const_value() < 512));
}

GemmTile gemm_f32_small_batch_tile() { return gemm_f32_block_tile(false); }

GemmTile gemm_tf32_tile() { return wgmma_tile(DType::kF32, 128, 3, WgmmaSchedule::kPingpong); }

GemmTile choose_gemm_tile(DType dtype, GemmBLayout layout, const Expr& n, const Expr& k, int target_sm, bool tma_ok) {
  const bool narrow = n.is_const() && *n.const_value() < 512;
  if (dtype == DType::kF32) {
    // Given enough rows (the callers switch a small batch to CUDA cores: kTf32MinTilesLinear), 3xTF32
    // beats CUDA cores even at N = 128 (tiny_lm's 256-wide layers at 16384 rows ran twice as
    // fast), so only outputs under one tile wide stay on CUDA cores.
    const bool under_one_tile = !n.is_const() || *n.const_value() < 128;
    if (target_sm == 90 && layout == GemmBLayout::kNK && !under_one_tile) return gemm_tf32_tile();
    return gemm_f32_cuda_core_tile(n);
  }
  if (narrow) return block_tile(64, 64, 32, 128, 1);
  // wgmma reads B from shared memory K-major, i.e. in the [N, K] layout. Stages fill ~192 KiB.
  // Loading by TMA (rows of A and B 16-byte multiples), the pingpong 128x128 tile beat the
  // cooperative 256x128 and 128x256 ones over GPT-2's layers, and every TMA kernel beat its
  // cp.async counterpart (next): one loader thread frees the loader warpgroup's issue slots and
  // L1 for the consumers. Tried on the pingpong kernel and dropped: 2-CTA clusters sharing each
  // B tile by TMA multicast (no faster: L2-to-SM traffic is not the limit), and prefetching a
  // tile's residual rows into L2 as its loads start (slower).
  if (target_sm == 90 && layout == GemmBLayout::kNK && tma_ok) return gemm_tma_tile(dtype);
  // Loading by cp.async: with a short K a tile is a few k-steps, and the cooperative kernel
  // idles the tensor cores through each tile's drain and epilogue, which pingpong overlaps (it
  // was the fastest at K = 768 for every N of GPT-2); with a long K the cooperative tiles are
  // faster, 128x256 for wide outputs (N = 3072, 4096^3), 128x192 for GPT-2's K = 3072, N = 768.
  // M (the batch) is unknown when compiling, so N and K pick: short K takes pingpong, else wide
  // outputs take 128x256 and the rest 128x192 (GPT-2's 768 is four such tiles).
  if (target_sm == 90 && layout == GemmBLayout::kNK) {
    if (k.is_const() && *k.const_value() <= kPingpongMaxK) return wgmma_tile(dtype, 128, 6, WgmmaSchedule::kPingpong);
    const bool wide = n.is_const() && *n.const_value() >= 2048;
    return wide ? wgmma_tile(dtype, 256, 4, WgmmaSchedule::kCooperative)
                : wgmma_tile(dtype, 192, 5, WgmmaSchedule::kCooperative);
  }
  return block_tile(128, 128, 32, 256, 1);
}

std::vector<GemmTile> gemm_tile_candidates(DType dtype, GemmBLayout layout, int target_sm, bool tma_ok) {
  const bool wgmma = target_sm == 90 && layout == GemmBLayout::kNK;
  if (dtype == DType::kF32) {
    std::vector<GemmTile> tiles = {gemm_f32_block_tile(false), gemm_f32_block_tile(true)};
    if (wgmma) tiles.push_back(gemm_tf32_tile());
    return tiles;
  }
  std::vector<GemmTile> tiles = {block_tile(64, 64, 32, 128, 1), block_tile(128, 128, 32, 256, 1)};
  if (!wgmma) return tiles;
  // Pingpong keeps 128 columns (its consumers hold a whole tile's accumulators each); TMA loads
  // only feed it (its store boxes are whole pingpong tiles).
  tiles.push_back(wgmma_tile(dtype, 128, 6, WgmmaSchedule::kPingpong));
  if (tma_ok) tiles.push_back(gemm_tma_tile(dtype));
  tiles.push_back(wgmma_tile(dtype, 192, 5, WgmmaSchedule::kCooperative));
  tiles.push_back(wgmma_tile(dtype, 256, 4, WgmmaSchedule::kCooperative));
  return tiles;
}

std::string gemm_tile_name(const GemmTile& tile) {
  return fmt::format("{}x{}x{}{}{}", tile.bm, tile.bn, tile.bk,
                     tile.wgmma() ? (tile.pingpong ? "_wgmma_pp" : "_wgmma") : "", tile.tma ? "_tma" : "");
}

int64_t gemm_dynamic_smem(const GemmTile& tile, const GemmEpilogue& epilogue) {
  // A and B tiles of 128-byte rows per stage (twice for 3xTF32), + 1024 to align the swizzled
  // tiles inside the allocation, + a full and an empty mbarrier (8 bytes each) per stage, +
  // pingpong's two turn mbarriers.
  if (!tile.wgmma()) return 0;
  const int64_t stage_bytes = int64_t{tile.bm + tile.bn} * 128 * (tile.split_tf32 ? 2 : 1);
  const int64_t consumers = tile.threads / 128 - 1;
  // TMA: store buffers of 32 columns (16-bit), two a consumer, or a whole tile's and an
  // 8-byte residual mbarrier with a residual.
  const int64_t buffers = epilogue.residual ? tile.bn / kTmaStoreBox : 2;
  const int64_t store_bytes =
      tile.tma ? consumers * (buffers * tile.bm * kTmaStoreBox * 2 + (epilogue.residual ? 8 : 0)) : 0;
  return int64_t{tile.stages} * (stage_bytes + 16) + (tile.pingpong ? 16 : 0) + store_bytes + 1024;
}

Expr gemm_tiles(const GemmTile& tile, const Expr& m, const Expr& n) {
  return ceil_div(m, Expr(tile.bm)) * ceil_div(n, Expr(tile.bn));
}

Expr gemm_grid(const GemmTile& tile, const Expr& units) { return tile.wgmma() ? min(units, device_sms()) : units; }

GemmTile fit_gemm_epilogue(GemmTile tile, const GemmEpilogue& epilogue) {
  while (tile.stages > 2 && gemm_dynamic_smem(tile, epilogue) > kSm90MaxBlockSmem) --tile.stages;
  return tile;
}

std::vector<KernelArg> gemm_tensor_maps(const GemmTile& tile, const GemmOperands& ops, GemmALayout a_layout,
                                        GemmBLayout b_layout) {
  // A K-major box is a K step (tile.bk elements, 128 bytes: one swizzle row) by the tile's rows;
  // an MN-major one 128 bytes of M or N (tile.bk elements again: one atom of tn_wgmma_gemm's
  // MN-major tiles) by the K step's rows. C's and R's boxes: a 32-column group of the tile's
  // rows, 64 bytes wide (kStoreGroupCols of tn_wgmma_gemm).
  const TensorMapSpec a = a_layout == GemmALayout::kMK
                              ? TensorMapSpec{ops.a, ops.k, ops.m, ops.lda, tile.bk, tile.bm, 128}
                              : TensorMapSpec{ops.a, ops.m, ops.k, ops.lda, tile.bk, tile.bk, 128};
  const TensorMapSpec b = b_layout == GemmBLayout::kNK
                              ? TensorMapSpec{ops.b, ops.k, ops.n, ops.ldb, tile.bk, tile.bn, 128}
                              : TensorMapSpec{ops.b, ops.n, ops.k, ops.ldb, tile.bk, tile.bk, 128};
  std::vector<KernelArg> maps = {tensor_map("a_map", a), tensor_map("b_map", b),
                                 tensor_map("c_map", {ops.c, ops.n, ops.m, ops.ldc, kTmaStoreBox, tile.bm, 64})};
  if (!ops.r.empty()) maps.push_back(tensor_map("r_map", {ops.r, ops.n, ops.m, ops.ldr, kTmaStoreBox, tile.bm, 64}));
  return maps;
}

std::string gemm_kernel_name(const std::string& op, DType dtype, GemmBLayout layout, bool has_bias,
                             const GemmTile& tile) {
  return fmt::format("{}_{}_{}{}_{}", op, dtype_name(dtype), layout_name(layout), has_bias ? "_bias" : "",
                     gemm_tile_name(tile));
}

std::string GemmEpilogue::suffix() const {
  if (!activation_grad.empty()) return "_d" + activation_grad;
  return (activation.empty() ? "" : "_" + activation) + (residual ? "_res" : "");
}

std::string gemm_epilogue_class(DType dtype, bool has_bias, const GemmEpilogue& epilogue) {
  if (!epilogue.activation_grad.empty())
    return fmt::format("tn_gemm_grad_epilogue<{}, tn_act_grad_{}>", dtype_c_type(dtype), epilogue.activation_grad);
  const std::string functor = epilogue.activation.empty() ? "tn_act_none" : activation(epilogue.activation).functor;
  return fmt::format("tn_gemm_epilogue<{}, {}, {}, {}>", dtype_c_type(dtype), functor, has_bias, epilogue.residual);
}

std::vector<GemvVariant> gemv_variants(DType dtype, bool has_bias, const GemmEpilogue& epilogue) {
  const std::string epilogue_class = gemm_epilogue_class(dtype, has_bias, epilogue);
  std::vector<GemvVariant> variants;
  if (dtype == DType::kF32) {
    for (const GemvBucket& b : kGemvF32Buckets)
      variants.push_back(
          {b.max_rows, 32 * b.warps, kGemvF32RowsN,
           fmt::format("tn_gemv_simt<{}, {}, {}, {}>", 32 * b.warps, kGemvF32RowsN, b.max_rows, epilogue_class)});
    return variants;
  }
  for (const GemvBucket& b : kGemvMmaBuckets)
    variants.push_back({b.max_rows, 32 * b.warps, 16,
                        fmt::format("tn_gemv_mma<{}, {}, {}, {}, {}>", dtype_c_type(dtype), b.warps, b.max_rows / 8,
                                    kGemvMmaUnroll, epilogue_class)});
  return variants;
}

std::string gemv_variant_name(const GemvVariant& variant) { return fmt::format("gemv_m{}", variant.max_rows); }

int gemv_max_rows(DType dtype) { return gemv_variants(dtype, false, {}).back().max_rows; }

std::string gemm_kernel_class(DType dtype, GemmBLayout layout, bool has_bias, const GemmTile& tile,
                              const GemmEpilogue& epilogue, GemmALayout a_layout) {
  const std::string type = dtype_c_type(dtype);
  const std::string epilogue_class = gemm_epilogue_class(dtype, has_bias, epilogue);
  // The A-layout argument is left out where it is the default, so the other kernels' sources
  // (and their cache keys) stay as they were.
  const std::string a_transposed = a_layout == GemmALayout::kKM ? ", true" : "";
  if (tile.wgmma()) {
    // MN-major operands (the layouts' defaults left out, as above): 16-bit TMA-loaded, or f32.
    const bool mn_major = a_layout == GemmALayout::kKM || layout == GemmBLayout::kKN;
    if (mn_major && !tile.tma && !tile.split_tf32)
      throw Error("internal: the 16-bit wgmma GEMM reads MN-major operands only by TMA");
    const std::string majors =
        mn_major ? fmt::format(", {}, {}", a_layout == GemmALayout::kKM, layout == GemmBLayout::kKN) : "";
    return fmt::format("tn_wgmma_gemm<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}{}>", type, tile.bm, tile.bn, tile.bk,
                       tile.threads, tile.stages, tile.pingpong, tile.split_tf32, tile.tma, kTmaStoreBox,
                       epilogue_class, majors);
  }
  const bool b_transposed = layout == GemmBLayout::kNK;
  if (dtype == DType::kF32) {
    // 128x128 tiles: 8x8 per thread; 64x64 tiles: 4x4 per thread (256 threads either way).
    const int micro = tile.bm == 128 ? 8 : 4;
    return fmt::format("tn_simt_gemm<{}, {}, {}, {}, {}, {}, {}, {}{}>", tile.bm, tile.bn, tile.bk, tile.threads, micro,
                       micro, b_transposed, epilogue_class, a_transposed);
  }
  const int warps_m = 2;
  return fmt::format("tn_mma_gemm<{}, {}, {}, {}, {}, {}, {}, {}, {}{}>", type, tile.bm, tile.bn, tile.bk, tile.threads,
                     warps_m, tile.threads / 32 / warps_m, b_transposed, epilogue_class, a_transposed);
}

}  // namespace teeny::ops
