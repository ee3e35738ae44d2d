// GEMM on Hopper tensor cores (sm_90a): C[M, N] = A[M, K] · B[N, K]ᵀ (+ bias, act, + residual),
// f16/bf16, or f32 as 3xTF32, with f32 accumulation. Operands may also be stored MN-major
// (kAMnMajor: A as [K, M], kBMnMajor: B as [K, N]; the gradients' GEMMs): 16-bit ones load by TMA
// and wgmma reads them transposed from shared memory; f32 ones the loader transposes into K-major
// tiles as it copies them (wgmma reads TF32 K-major only). Warp-specialised and persistent:
// warpgroup 0 loads, the other kConsumers warpgroups compute with wgmma m64nBNk16 from shared
// memory. Each block walks output tiles first_tile, first_tile + gridDim.x, ... (its tiles
// t = 0, 1, ...; grid = at most one block per SM), so the loads of a block's next tile run
// during an epilogue. Two schedules: cooperative, the consumers split every tile's rows (64
// each); pingpong (kPingpong), consumer c computes whole tiles t = c, c + kConsumers, ...
// (kBM / 64 row blocks), so one consumer's epilogue overlaps the other's MMAs.
//
// Loader and consumers share a ring of kStages shared-memory stages guarded by mbarriers: a
// stage's `full` barrier completes when its copies (and any zero-fill stores) have landed, its
// `empty` barrier when every warp computing on it has retired the MMAs reading it. The loader is
// either one thread issuing a TMA copy per operand tile (kTma: the tensor maps a_map, b_map
// swizzle and zero-fill the tails; the barrier counts the bytes) or the whole warpgroup issuing
// cp.async copies of 16-byte chunks. TMA kernels also store by TMA (c_map) through store
// buffers past the ring, and load a residual into them by TMA (r_map) at each tile's start.
// The loader fills the ring with the tiles' k-steps in order, so k-step kt of tile t is ring
// step t * k_tiles + kt. Consumers keep one MMA group in flight (wgmma.wait_group 1) and release
// a stage one step late. Tiles are [rows][64] of 128-byte rows in wgmma's 128-byte swizzle
// (16-byte chunk c of row r sits at chunk c ^ (r % 8); the swizzle is a function of the
// address, so every tile starts on a 1024-byte boundary). An MN-major tile is instead rows of K
// in atoms of 64 columns of M or N (kBK rows of 128 bytes each, one TMA box), atom after atom.
//
// f32 (3xTF32): each operand x is split into TF32 parts hi = tf32(x) and lo = tf32(x - hi),
// and D += A_lo B_hi + A_hi B_lo + A_hi B_hi (A_lo B_lo, ~2^-22 relative, is dropped), which
// keeps f32 accuracy on TF32 tensor cores. The loader splits the chunks it copied once they
// land: hi in place, lo in a mirror of the stage, kOperandBytes further on. An MN-major operand
// arrives by 4-byte copies, element by element into its K-major place; the loader warpgroup then
// syncs before splitting, as a thread's chunks hold other threads' copies.
#ifndef TEENY_GEMM_WGMMA_CUH
#define TEENY_GEMM_WGMMA_CUH

#include "gemm_common.cuh"
#include "mma.cuh"
#include "prelude.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

// The kernel for one tile configuration: kBM x kBN output tiles, K in steps of kBK (one 128-byte
// swizzle row), kThreads = 128 (the loader) + 128 a consumer, kStages ring stages; kStoreGroupCols
// is the TMA store's box width (c_map's and r_map's).
template <typename T, int BM, int BN, int BK, int Threads, int kStages, bool kPingpong, bool kSplitTf32, bool kTma,
          int kStoreGroupCols, class Epilogue, bool kAMnMajor = false, bool kBMnMajor = false>
struct tn_wgmma_gemm {
  static constexpr int kBM = BM, kBN = BN, kBK = BK, kThreads = Threads;
  static constexpr bool kPersistent = true;
  static constexpr bool kHasBias = Epilogue::kHasBias, kHasResidual = Epilogue::kHasResidual;
  static constexpr int kChunkElems = tn_pack<T>::kN;  // elements per 16-byte chunk
  static constexpr int kConsumers = kThreads / 128 - 1;
  static_assert(kBM % (kPingpong ? 64 : 64 * kConsumers) == 0,
                "consumers compute row blocks of 64 (the wgmma M); cooperative ones kBM / kConsumers rows each");
  static constexpr int kRowBlocks = kPingpong ? kBM / 64 : kBM / (64 * kConsumers);  // per consumer and tile
  static constexpr int kTileStep = kPingpong ? kConsumers : 1;                       // between a consumer's tiles
  static constexpr int kStageWarps = kPingpong ? 4 : 4 * kConsumers;                 // computing on one stage
  static_assert(kBK * (int)sizeof(T) == 128, "a K tile row is one 128-byte swizzle row");
  static_assert(kBN % 16 == 0 && kBN <= 256, "wgmma N");
  static_assert(kStages >= 2, "one stage computing while the next loads");
  static constexpr int kAcc = kBN / 2;  // f32 accumulators per thread and row block: 64 x kBN over 128 threads
  // The residual epilogue's prefetch into L2, for the cp.async kernels (TMA kernels load the
  // residual by TMA): 16-bit only (3xTF32 has no registers to spare), and only for short
  // mainloops, where the epilogue is not hidden under the other consumer's; in longer ones
  // (GPT-2's K = 3072) it measured slower. It issues a few k-steps before the end: issued at the
  // tile's start, the lines helped less.
  static constexpr int kResidualPrefetchSteps = 6, kResidualPrefetchMaxKTiles = 16;
  static_assert(kRowBlocks * kAcc <= 128, "accumulators must leave registers for addresses (168 per thread)");
  static_assert(kSplitTf32 == (sizeof(T) == 4), "f32 runs as 3xTF32; 16-bit types directly");
  static_assert(!(kTma && kSplitTf32), "3xTF32 splits its chunks in the loader threads, so it copies by cp.async");
  static_assert(!(kAMnMajor || kBMnMajor) || (kTma && sizeof(T) == 2) || (kSplitTf32 && !kTma),
                "MN-major operands: 16-bit loaded by TMA, or f32 transposed by the cp.async loader");
  // How the stage tiles hold each operand: MN-major only as 16-bit TMA loads them.
  static constexpr bool kASmemMn = kAMnMajor && !kSplitTf32, kBSmemMn = kBMnMajor && !kSplitTf32;
  static constexpr bool kTransposing = kSplitTf32 && (kAMnMajor || kBMnMajor);
  static_assert(kBM % 64 == 0 && (!kBSmemMn || kBN % 64 == 0), "MN-major tiles are whole atoms of 64 columns");
  // An MN-major atom: kBK rows of K, 128 bytes each. A row block of 64 rows of A takes 8 KiB in
  // either layout (64 rows of 128 bytes, or one atom); a 16-element k-step of an MMA is 32 bytes
  // along each row of a K-major tile and 16 rows of an MN-major one.
  static constexpr int kMnAtomBytes = kBK * 128;
  static constexpr int kAKStepBytes = kASmemMn ? 16 * 128 : 32, kBKStepBytes = kBSmemMn ? 16 * 128 : 32;
  static constexpr int kATileBytes = kBM * 128, kBTileBytes = kBN * 128;
  static constexpr int kOperandBytes = kATileBytes + kBTileBytes;
  static constexpr int kStageBytes = kOperandBytes * (kSplitTf32 ? 2 : 1);
  static constexpr int kAChunks = kBM * 8 / 128, kBChunks = kBN * 8 / 128;  // 16-byte chunks per loader thread
  // TMA kernels store whole tiles through shared memory, a 32-column group (kBM rows of 64
  // bytes, in TMA's 64-byte swizzle) a buffer. Without a residual each consumer has two buffers,
  // filled in turns, so one group's TMA store runs while the next is written; with one, a whole
  // tile's, into which the tile's residual arrives by TMA during the mainloop.
  static_assert(!kTma || kPingpong, "the TMA store boxes are whole pingpong tiles (kBM rows)");
  static_assert(!kTma || kStoreGroupCols * sizeof(T) == 64, "a store group row is one 64-byte swizzle row");
  static constexpr int kStoreGroups = kBN / kStoreGroupCols, kStoreBufs = kHasResidual ? kStoreGroups : 2;
  static constexpr int kStoreBufBytes = kBM * kStoreGroupCols * (int)sizeof(T);
  static constexpr int kStoreBytes = kTma ? kConsumers * kStoreBufs * kStoreBufBytes : 0;

  // The block's dynamic shared memory: the ring's stages (1024-byte aligned for the swizzle),
  // the TMA store buffers ([consumer][kStoreBufs][kStoreBufBytes]), then the mbarriers: a full and
  // an empty one per stage, pingpong's turn barrier per consumer and, for TMA with a residual, a
  // residual barrier per consumer.
  struct Smem {
    unsigned char* stages;
    unsigned char* store_bufs;
    unsigned full_bar, empty_bar, turn_bar, residual_bar;
  };
  static __device__ __forceinline__ void init_barriers(const Smem& smem) {
    for (int s = 0; s < kStages; ++s) {
      tn_mbar_init(smem.full_bar + s * 8, kTma ? 1 : 4);  // TMA: the issuing thread's; else one per loader warp
      tn_mbar_init(smem.empty_bar + s * 8, kStageWarps);  // one per warp computing on the stage
    }
    if (kPingpong)
      for (int c = 0; c < kConsumers; ++c)
        tn_mbar_init(smem.turn_bar + c * 8, 4);  // one per warp of the previous consumer
    if (kTma && kHasResidual)
      for (int c = 0; c < kConsumers; ++c) tn_mbar_init(smem.residual_bar + c * 8, 1);  // the consumer's leader's
  }

  // A position in the ring: the stage and the parity of the ring's current pass.
  struct Ring {
    int stage;
    unsigned phase;
    __device__ __forceinline__ void advance() {
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
  };

  // ---- the loader -------------------------------------------------------------------------

  // x -> (tf32(x), tf32(x - tf32(x))) for the 4 floats of the chunk at `p`: the high parts in
  // place, the low parts kOperandBytes on. Both are exact TF32 values, so the MMA reads them
  // whole whether it rounds or truncates its operands.
  static __device__ __forceinline__ void split_tf32_chunk(unsigned char* p) {
    float4 v = *reinterpret_cast<float4*>(p);
    float* e = reinterpret_cast<float*>(&v);
    float lo[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      unsigned hi, lo_bits;
      asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(hi) : "f"(e[i]));
      asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(lo_bits) : "f"(e[i] - __uint_as_float(hi)));
      e[i] = __uint_as_float(hi);
      lo[i] = __uint_as_float(lo_bits);
    }
    *reinterpret_cast<float4*>(p) = v;
    *reinterpret_cast<float4*>(p + kOperandBytes) = make_float4(lo[0], lo[1], lo[2], lo[3]);
  }

  // The loader's share of one operand tile (rows r0.. of P, K columns k0..k0 + kBK - 1): chunk
  // column `chunk` of rows row + 16c. Rows share their swizzle (row % 8) for every c, so chunk c
  // lands 2048 bytes past chunk 0. Whole tiles (`whole`: aligned rows, all inside) take one
  // cp.async per chunk and no checks; others check every element and zero-fill.
  template <int kChunks>
  static __device__ __forceinline__ void load_operand(unsigned char* tile, const T* __restrict__ P, int r0, int rows,
                                                      int ld, bool vec, bool whole, int k0, int K, int row, int chunk) {
    if (whole && k0 + kBK <= K) {
      const unsigned dst = tn_smem_addr(tile + tn_swizzled(row, chunk));
      const T* src = P + (long long)(r0 + row) * ld + chunk * kChunkElems + k0;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) tn_cp_async16_to(dst + c * 2048, src + (long long)c * 16 * ld);
    } else {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int r = row + 16 * c;
        tn_load_chunk(reinterpret_cast<T*>(tile + tn_swizzled(r, chunk)), P + (long long)(r0 + r) * ld, r0 + r < rows,
                      k0 + chunk * kChunkElems, K, vec);
      }
    }
  }

  // An f32 operand stored MN-major (P as [K, rows], row stride ld: element (r, k) at
  // P[k * ld + r]) into its K-major tile, rows r0.. and K columns k0..k0 + kBK - 1, one 4-byte
  // copy an element, zeros outside [rows, K). A warp's lanes take 8 consecutive rows of 4
  // consecutive k: it reads four whole 32-byte sectors, and the 8 rows' swizzles put the 4
  // columns of their chunk in 32 distinct banks. Warp w takes rows 8w + 32j + lane % 8 and k
  // 4g + lane / 8 (chunk g, whose swizzled place depends on the row only through lane % 8).
  template <int kRows>
  static __device__ __forceinline__ void load_operand_mn(unsigned char* tile, const T* __restrict__ P, int r0, int rows,
                                                         int ld, int k0, int K, int tid) {
    static_assert(sizeof(T) == 4 && kBK == 32 && kRows % 32 == 0, "f32 K tiles of 32; rows in groups of 32");
    const int lane = tid % 32, r = tid / 32 * 8 + lane % 8, k = lane / 8;
    const T* src = P + (long long)(k0 + k) * ld + r0 + r;
    const unsigned dst = tn_smem_addr(tile) + r * 128 + k * 4;
#pragma unroll 1
    for (int g = 0; g < kBK / 4; ++g, src += 4LL * ld) {
      const bool k_inside = k0 + 4 * g + k < K;
      const unsigned chunk_dst = dst + ((g ^ (lane % 8)) << 4);
#pragma unroll
      for (int j = 0; j < kRows / 32; ++j) {
        const bool inside = k_inside && r0 + r + 32 * j < rows;
        tn_cp_async4_zfill(chunk_dst + j * 32 * 128, inside ? src + 32 * j : P, inside);
      }
    }
  }

  // Stage `s` is full for this warp: lane 0's arrive, after the warp's convergence point, also
  // releases the lanes' stores.
  static __device__ __forceinline__ void arrive_full(const Smem& smem, int tid, int s) {
    __syncwarp();
    if (tid % 32 == 0) tn_mbar_arrive(smem.full_bar + s * 8);
  }

  // 3xTF32: this thread's chunks of stage `s`, copied one step earlier, split once they landed
  // (transposed, once every loader thread's copies have: barrier 3, the loader warpgroup's).
  static __device__ __forceinline__ void split_stage(const Smem& smem, int tid, int row, int chunk, int s) {
    if (kTransposing) asm volatile("bar.sync 3, 128;\n" ::: "memory");
    unsigned char* a_tile = smem.stages + s * kStageBytes;
#pragma unroll
    for (int c = 0; c < kAChunks; ++c) split_tf32_chunk(a_tile + tn_swizzled(row + 16 * c, chunk));
#pragma unroll
    for (int c = 0; c < kBChunks; ++c) split_tf32_chunk(a_tile + kATileBytes + tn_swizzled(row + 16 * c, chunk));
    arrive_full(smem, tid, s);
  }

  // The TMA copies of one operand tile of kRows rows of M or N from row r0, K from k0: one box
  // of K-major rows, or MN-major one box an atom (the map's columns are M or N, its rows K).
  template <bool kMnMajor, int kRows>
  static __device__ __forceinline__ void load_operand_tma(unsigned dst, const tn_tensor_map* map, int k0, int r0,
                                                          unsigned bar) {
    if constexpr (kMnMajor) {
#pragma unroll
      for (int j = 0; j < kRows / 64; ++j) tn_tma_load(dst + j * kMnAtomBytes, map, r0 + 64 * j, k0, bar);
    } else {
      tn_tma_load(dst, map, k0, r0, bar);
    }
  }

  // One thread's TMA copies of a stage's two operand tiles, counted on its full barrier.
  static __device__ __forceinline__ void load_stage_tma(unsigned char* a_tile, unsigned bar, const tn_tensor_map* a_map,
                                                        const tn_tensor_map* b_map, int k0, int m0, int n0) {
    const unsigned a_addr = tn_smem_addr(a_tile);
    tn_mbar_arrive_expect_tx(bar, kStageBytes);
    load_operand_tma<kAMnMajor, kBM>(a_addr, a_map, k0, m0, bar);
    load_operand_tma<kBMnMajor, kBN>(a_addr + kATileBytes, b_map, k0, n0, bar);
  }

  // Warpgroup 0 (with TMA only its first thread): fills the ring with the k-steps of units
  // first_tile, first_tile + gridDim.x, ..., in order.
  static __device__ __forceinline__ void load_units(const Smem& smem, const T* __restrict__ A, const T* __restrict__ B,
                                                    int M, int N, int K, int lda, int ldb, int first_tile, int tiles,
                                                    int units, int k_tiles, const tn_tensor_map* a_map,
                                                    const tn_tensor_map* b_map) {
    const int tid = threadIdx.x;
    const int row = tid / 8, chunk = tid % 8;  // this loader thread's rows row + 16c, chunk column
    const bool a_vec = lda % kChunkElems == 0 && tn_aligned16(A);
    const bool b_vec = ldb % kChunkElems == 0 && tn_aligned16(B);
    Ring ring{0, 0};
    int pending = -1;  // 3xTF32: the stage copied last step, not yet split
    for (int unit = first_tile; unit < units; unit += gridDim.x) {
      int tile_m, tile_n;
      tn_gemm_tile_coords<kBM, kBN>(unit % tiles, M, N, tile_m, tile_n);
      const int m0 = tile_m * kBM, n0 = tile_n * kBN, k_base = unit / tiles * k_tiles * kBK;
      const bool a_whole = a_vec && m0 + kBM <= M, b_whole = b_vec && n0 + kBN <= N;
      for (int kt = 0; kt < k_tiles; ++kt, ring.advance()) {
        // A fresh barrier's previous phase counts as done.
        tn_mbar_wait(smem.empty_bar + ring.stage * 8, ring.phase ^ 1);
        unsigned char* a_tile = smem.stages + ring.stage * kStageBytes;
        const int k0 = k_base + kt * kBK;
        if (kTma) {
          load_stage_tma(a_tile, smem.full_bar + ring.stage * 8, a_map, b_map, k0, m0, n0);
          continue;
        }
        if constexpr (kAMnMajor && kSplitTf32)
          load_operand_mn<kBM>(a_tile, A, m0, M, lda, k0, K, tid);
        else
          load_operand<kAChunks>(a_tile, A, m0, M, lda, a_vec, a_whole, k0, K, row, chunk);
        if constexpr (kBMnMajor && kSplitTf32)
          load_operand_mn<kBN>(a_tile + kATileBytes, B, n0, N, ldb, k0, K, tid);
        else
          load_operand<kBChunks>(a_tile + kATileBytes, B, n0, N, ldb, b_vec, b_whole, k0, K, row, chunk);
        if (kSplitTf32) {
          // This step's copies stay in flight while the previous step's are split.
          tn_cp_async_commit();
          if (pending >= 0) {
            tn_cp_async_wait<1>();
            split_stage(smem, tid, row, chunk, pending);
          }
          pending = ring.stage;
        } else {
          // The phase waits for every lane's copies (and the zero-fill stores, by the arrive).
          tn_mbar_track_cp_async(smem.full_bar + ring.stage * 8);
          arrive_full(smem, tid, ring.stage);
        }
      }
    }
    if (kSplitTf32 && pending >= 0) {
      tn_cp_async_wait<0>();
      split_stage(smem, tid, row, chunk, pending);
    }
  }

  // ---- the consumers: MMAs -------------------------------------------------------------------

  // Keeps the compiler from moving accumulator reads or writes across the asynchronous MMAs.
  static __device__ __forceinline__ void fence_acc(float (&acc)[kRowBlocks][kAcc]) {
#pragma unroll
    for (int i = 0; i < kRowBlocks; ++i)
#pragma unroll
      for (int j = 0; j < kAcc; ++j) asm volatile("" : "+f"(acc[i][j])::"memory");
  }

  // The epilogue's residual lines into L2 under the last k-steps, so its loads hit L2. Each
  // quad of lanes owns 2 rows of a row block; lane q takes row q / 2 and every other line.
  static __device__ __forceinline__ void prefetch_residual(const T* __restrict__ R, int M, int N, int ldr, int row,
                                                           int n0, int lane) {
    constexpr int kLineElems = 128 / sizeof(T), kLines = kBN / kLineElems;
#pragma unroll
    for (int i = 0; i < kRowBlocks; ++i) {
      const int m = row + 64 * i + 8 * (lane % 4 / 2);
#pragma unroll
      for (int l = lane % 2; l < kLines; l += 2)
        if (m < M && n0 + l * kLineElems < N)
          asm volatile("prefetch.global.L2 [%0];\n" ::"l"(R + (long long)m * ldr + n0 + l * kLineElems));
    }
  }

  // The descriptor of an operand's MMA slice at `addr`, in its layout.
  template <bool kMnMajor>
  static __device__ __forceinline__ unsigned long long operand_desc(unsigned addr) {
    return kMnMajor ? tn_wgmma_desc_mn(addr, kMnAtomBytes) : tn_wgmma_desc(addr);
  }

  // The MMAs of one stage into acc, as one wgmma group: A's rows at a_addr, B's at b_addr.
  static __device__ __forceinline__ void multiply_stage(float (&acc)[kRowBlocks][kAcc], unsigned a_addr,
                                                        unsigned b_addr) {
    fence_acc(acc);
    tn_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)  // one MMA's K: 16 16-bit or 8 TF32 elements
#pragma unroll
      for (int i = 0; i < kRowBlocks; ++i) {
        const unsigned a = a_addr + i * 64 * 128 + kk * kAKStepBytes, b = b_addr + kk * kBKStepBytes;
        if (kSplitTf32) {  // the small terms first, into the still-small accumulator
          tn_wgmma<T, kBN>(acc[i], tn_wgmma_desc(a + kOperandBytes), tn_wgmma_desc(b));
          tn_wgmma<T, kBN>(acc[i], tn_wgmma_desc(a), tn_wgmma_desc(b + kOperandBytes));
        }
        tn_wgmma<T, kBN, kASmemMn, kBSmemMn>(acc[i], operand_desc<kASmemMn>(a), operand_desc<kBSmemMn>(b));
      }
    tn_wgmma_commit();
  }

  // A tile's k-steps into acc, the first at ring position `ring`: each waits for its stage, and
  // releases the previous one once that one's MMAs have retired. Pingpong: then passes the turn.
  static __device__ __forceinline__ void multiply_tile(const Smem& smem, Ring ring, float (&acc)[kRowBlocks][kAcc],
                                                       const T* __restrict__ R, int M, int N, int ldr, int k_tiles,
                                                       int consumer, int lane, int row, int n0) {
    int previous = -1;  // the stage whose MMAs are still in flight
    for (int kt = 0; kt < k_tiles; ++kt, ring.advance()) {
      if (kHasResidual && !kTma && sizeof(T) == 2 && k_tiles <= kResidualPrefetchMaxKTiles &&
          kt == max(k_tiles - kResidualPrefetchSteps, 0))
        prefetch_residual(R, M, N, ldr, row, n0, lane);
      tn_mbar_wait(smem.full_bar + ring.stage * 8, ring.phase);
      // cp.async copies are generic-proxy writes, and wgmma reads shared memory through the
      // async proxy (as TMA writes it).
      if (!kTma) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      const unsigned a_addr =
          tn_smem_addr(smem.stages + ring.stage * kStageBytes) + (kPingpong ? 0 : consumer * kRowBlocks * 64 * 128);
      const unsigned b_addr = tn_smem_addr(smem.stages + ring.stage * kStageBytes + kATileBytes);
      multiply_stage(acc, a_addr, b_addr);
      tn_wgmma_wait<1>();
      fence_acc(acc);
      if (previous >= 0 && lane == 0) tn_mbar_arrive(smem.empty_bar + previous * 8);
      previous = ring.stage;
    }
    if (kPingpong && lane == 0)
      tn_mbar_arrive(smem.turn_bar + (consumer + 1) % kConsumers * 8);  // this warp's waits are done
    tn_wgmma_wait<0>();
    fence_acc(acc);
    if (previous >= 0 && lane == 0) tn_mbar_arrive(smem.empty_bar + previous * 8);
  }

  // ---- the consumers: epilogues ----------------------------------------------------------------
  // Accumulator 4j + 2h + e of row block i is row `row` + 64i + 8h, column `col` + 8j + e.

  // The 128 threads of consumer warpgroup c (barrier 0 is __syncthreads'), by immediate barrier
  // ids (a register id costs a register and reserves all 16 barriers).
  static __device__ __forceinline__ void consumer_sync(int c) {
    static_assert(kConsumers <= 2, "barriers 1 and 2");
    if (c == 0)
      asm volatile("bar.sync 1, 128;\n" ::: "memory");
    else
      asm volatile("bar.sync 2, 128;\n" ::: "memory");
  }

  // The 16-bit epilogue's bias pairs for column group q (32 columns): columns col + 8 (4q + p),
  // packed, as registers are short there; zeros without a bias.
  static __device__ __forceinline__ void bias_pairs(const T* __restrict__ bias, int col, int q, unsigned (&b)[4]) {
#pragma unroll
    for (int p = 0; p < 4; ++p) b[p] = kHasBias ? *reinterpret_cast<const unsigned*>(bias + col + (4 * q + p) * 8) : 0u;
  }
  // One output pair of the 16-bit epilogue, packed: Epilogue(a + bias) + residual from packed
  // pairs.
  static __device__ __forceinline__ unsigned epilogue_pair(float a0, float a1, unsigned bias_pair,
                                                           unsigned residual_pair) {
    float r0 = 0.f, r1 = 0.f, b0, b1;
    if (kHasResidual) tn_unpack2<T>(residual_pair, r0, r1);
    tn_unpack2<T>(bias_pair, b0, b1);
    return tn_pack2<T>(Epilogue::apply(a0 + b0, r0), Epilogue::apply(a1 + b1, r1));
  }

  // TMA with a residual: the tile's residual into the consumer's store buffers, under the
  // mainloop, once the previous tile's stores have read them (by the consumer's leader).
  static __device__ __forceinline__ void load_residual_tma(const Smem& smem, const tn_tensor_map* r_map, int consumer,
                                                           int m0, int n0) {
    tn_bulk_wait_read<0>();
    const unsigned bufs = tn_smem_addr(smem.store_bufs + consumer * kStoreBufs * kStoreBufBytes);
    tn_mbar_arrive_expect_tx(smem.residual_bar + consumer * 8, kStoreGroups * kStoreBufBytes);
#pragma unroll
    for (int g = 0; g < kStoreGroups; ++g)
      tn_tma_load(bufs + g * kStoreBufBytes, r_map, n0 + kStoreGroupCols * g, m0, smem.residual_bar + consumer * 8);
  }

  // Split-K (3xTF32, T is float): the unit's partial sums atomically added into C, which the
  // caller zeroed; the first split adds the bias and residual.
  static __device__ __forceinline__ void store_split_k(const float (&acc)[kRowBlocks][kAcc], const T* __restrict__ bias,
                                                       T* __restrict__ C, const T* __restrict__ R, int M, int N,
                                                       int ldc, int ldr, int row, int col, bool first_split) {
#pragma unroll
    for (int i = 0; i < kRowBlocks; ++i)
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int m = row + 64 * i + (e / 2) * 8, n = col + j * 8 + e % 2;
          if (m >= M || n >= N) continue;
          float v = acc[i][4 * j + e];
          if (first_split)
            v += (kHasBias ? tn_f32(bias[n]) : 0.f) + (kHasResidual ? tn_f32(R[(long long)m * ldr + n]) : 0.f);
          atomicAdd(reinterpret_cast<float*>(C + (long long)m * ldc + n), v);
        }
  }

  // 16-bit, whole tiles, rows 16-byte aligned: each quad of lanes (one row, 32 columns) trades
  // its pairs in a 4x4 transpose, so a lane stores 8 consecutive columns as one 16-byte store,
  // and loads its residual so (the transpose maps those back to the accumulator layout); a warp
  // then writes whole 32-byte sectors instead of halves. Column group q (32 columns) at a time:
  // its bias loads once for the group's rows, all issued before the first store (reloaded for
  // every store, each load waited out an L1 latency alone), and its rows' residual loads
  // likewise (C may be R, so loads after a store to C wait for it).
  static __device__ __forceinline__ void store_tile_16byte(const float (&acc)[kRowBlocks][kAcc],
                                                           const T* __restrict__ bias, T* __restrict__ C,
                                                           const T* __restrict__ R, int ldc, int ldr, int lane, int row,
                                                           int col, int n0) {
    const int quad_lane = lane % 4;
#pragma unroll
    for (int q = 0; q < kBN / 32; ++q) {
      const int n = n0 + 32 * q + 8 * quad_lane;  // this lane's 8 columns after the transpose
      unsigned b[4];
      bias_pairs(bias, col, q, b);
#pragma unroll
      for (int i = 0; i < kRowBlocks; ++i) {
        uint4 res[2];
        if (kHasResidual)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            res[h] = *reinterpret_cast<const uint4*>(R + (long long)(row + 64 * i + 8 * h) * ldr + n);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          unsigned r[4] = {0u, 0u, 0u, 0u};
          if (kHasResidual) {
            const uint4 v = res[h];
            r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
            tn_quad_transpose(r, quad_lane);
          }
          unsigned u[4];
#pragma unroll
          for (int p = 0; p < 4; ++p) {
            const int j = 4 * q + p;
            u[p] = epilogue_pair(acc[i][4 * j + 2 * h], acc[i][4 * j + 2 * h + 1], b[p], r[p]);
          }
          tn_quad_transpose(u, quad_lane);
          *reinterpret_cast<uint4*>(C + (long long)(row + 64 * i + 8 * h) * ldc + n) =
              make_uint4(u[0], u[1], u[2], u[3]);
        }
      }
    }
  }

  // Ragged or misaligned tiles, or f32 partial sums (TC): every pair checked (tn_store_pair).
  template <typename TC>
  static __device__ __forceinline__ void store_tile_checked(const float (&acc)[kRowBlocks][kAcc],
                                                            const T* __restrict__ bias, TC* __restrict__ C,
                                                            const T* __restrict__ R, int M, int N, int ldc, int ldr,
                                                            int row, int col) {
#pragma unroll
    for (int i = 0; i < kRowBlocks; ++i)
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          tn_store_pair<Epilogue>(C, bias, R, M, N, ldc, ldr, row + 64 * i + h * 8, col + j * 8, acc[i][4 * j + 2 * h],
                                  acc[i][4 * j + 2 * h + 1]);
  }

  // Computes work units first_tile, first_tile + gridDim.x, ...: unit u is output tile u % tiles
  // (grouped tile order) over K split u / tiles of `splits`. Every unit takes the same number of
  // k-steps (the ring arithmetic relies on it); steps past K load zeros. With splits > 1, units
  // given `partials` (the gradients' GEMMs: no bias, no residual) write their f32 partial sums to
  // matrix u / tiles of it ([splits][M][N]), which a second launch adds in order; f32 ones
  // without (linear's) add into C, which the caller zeroed, and split 0 adds the bias and
  // residual. The tensor
  // maps are needed with kTma only (r_map with a residual too).
  //
  // The TMA and the register-pair epilogues stay in this function, as does the shared-memory
  // layout (Smem's fields are computed here): moved into functions of their own, they changed
  // the kernels' code (operand order and address arithmetic after inlining).
  static __device__ __forceinline__ void block(
      const T* __restrict__ A, const T* __restrict__ B, const T* __restrict__ bias, T* __restrict__ C, int M, int N,
      int K, int lda, int ldb, int ldc, int first_tile, const T* __restrict__ R = nullptr, int ldr = 0, int splits = 1,
      const tn_tensor_map* a_map = nullptr, const tn_tensor_map* b_map = nullptr, const tn_tensor_map* c_map = nullptr,
      const tn_tensor_map* r_map = nullptr, float* __restrict__ partials = nullptr) {
    extern __shared__ unsigned char tn_dynamic_smem[];
    unsigned char* stages = tn_dynamic_smem + ((1024 - (tn_smem_addr(tn_dynamic_smem) & 1023)) & 1023);
    unsigned char* store_bufs = stages + kStages * kStageBytes;
    const unsigned full_bar = tn_smem_addr(store_bufs + kStoreBytes), empty_bar = full_bar + kStages * 8;
    const unsigned turn_bar = empty_bar + kStages * 8;
    const unsigned residual_bar = turn_bar + kConsumers * 8;
    const Smem smem{stages, store_bufs, full_bar, empty_bar, turn_bar, residual_bar};
    const int tid = threadIdx.x, warpgroup = tid / 128;
    if (tid == 0) init_barriers(smem);
    __syncthreads();
    const int tiles = ((M + kBM - 1) / kBM) * ((N + kBN - 1) / kBN), units = tiles * splits;
    const int k_tiles = ((K + kBK - 1) / kBK + splits - 1) / splits;  // k-steps per unit
    if (warpgroup == 0) {
      if (kTma && tid != 0) return;  // one thread issues both operand tiles of a stage as two TMA copies
      load_units(smem, A, B, M, N, K, lda, ldb, first_tile, tiles, units, k_tiles, a_map, b_map);
      return;
    }

    const int consumer = warpgroup - 1, lane = tid % 32;
    unsigned residual_phase = 0;  // TMA with a residual: parity of the consumer's residual barrier
    // Cooperative consumers all compute each of the block's tiles t; pingpong consumer c computes
    // t = c, c + kConsumers, ...
    for (int t = kPingpong ? consumer : 0, unit = first_tile + t * (int)gridDim.x; unit < units;
         t += kTileStep, unit += kTileStep * (int)gridDim.x) {
      int tile_m, tile_n;
      tn_gemm_tile_coords<kBM, kBN>(unit % tiles, M, N, tile_m, tile_n);
      const int m0 = tile_m * kBM, n0 = tile_n * kBN;
      // Inside M and N, with no row padding to zero and 4-byte aligned pairs, the stores and
      // bias loads need no checks, so they issue back to back instead of behind branches.
      const bool whole =
          m0 + kBM <= M && (n0 + kBN < N || (n0 + kBN == N && ldc == N)) && ldc % 2 == 0 &&
          (reinterpret_cast<unsigned long long>(C) & (2 * sizeof(T) - 1)) == 0 &&
          (!kHasResidual || (ldr % 2 == 0 && (reinterpret_cast<unsigned long long>(R) & (2 * sizeof(T) - 1)) == 0));
      // 16-bit with 16-byte aligned rows: 16-byte stores (by TMA, or store_tile_16byte's).
      const bool whole16 = sizeof(T) == 2 && whole && ldc % 8 == 0 && tn_aligned16(C) &&
                           (reinterpret_cast<unsigned long long>(bias) & 3) == 0 &&
                           (!kHasResidual || (ldr % 8 == 0 && tn_aligned16(R)));
      const bool leader = tid % 128 == 0;  // of this consumer
      if (kTma && kHasResidual && whole16 && leader) load_residual_tma(smem, r_map, consumer, m0, n0);
      const Ring first_step{t * k_tiles % kStages, (unsigned)(t * k_tiles / kStages & 1)};  // the tile's k-step 0
      // Pingpong: tile t's consumer waits until tile t - 1's consumer has passed all its `full`
      // waits. The parity waits need that order: waiting for pass n of a stage returns at once
      // while pass n - 1 is incomplete, i.e. before the copies of pass n have even started. It
      // also makes the consumers take turns on the tensor cores, one's epilogue under the other's
      // MMAs. Consumer c's turn barrier completes once per tile of the previous consumer: tile
      // t - 1 completes pass (t - 1) / kConsumers.
      if (kPingpong && t > 0) tn_mbar_wait(turn_bar + consumer * 8, (t - 1) / kConsumers & 1);
      float acc[kRowBlocks][kAcc];
#pragma unroll
      for (int i = 0; i < kRowBlocks; ++i)
#pragma unroll
        for (int j = 0; j < kAcc; ++j) acc[i][j] = 0.f;
      // Accumulator 4j + 2h + e of row block i is row `row` + 64i + 8h, column `col` + 8j + e.
      const int row = m0 + (kPingpong ? 0 : consumer * kRowBlocks * 64) + (tid % 128) / 32 * 16 + lane / 4;
      const int col = n0 + (lane % 4) * 2;
      multiply_tile(smem, first_step, acc, R, M, N, ldr, k_tiles, consumer, lane, row, n0);

      if (kSplitTf32 && splits > 1 && partials == nullptr) {
        store_split_k(acc, bias, C, R, M, N, ldc, ldr, row, col, unit < tiles);
      } else if (splits > 1) {
        store_tile_checked(acc, bias, partials + (long long)(unit / tiles) * M * N, R, M, N, N, ldr, row, col);
      } else if (kTma && whole16) {
        // Through shared memory, 32 columns at a time: the consumer's threads write their pairs
        // into a buffer (over the group's residual, which they read first), and one thread
        // stores it by TMA, which runs on while the next group is written (a warp's 16-byte
        // global stores, after a quad transpose each, kept the epilogue longer than the other
        // consumer's MMAs). Pair p of a lane's row rr sits in 16-byte chunk p ^ (rr / 2 % 4) of
        // the row (the 64-byte swizzle), so a warp's 8 rows of a chunk hit distinct banks.
        const int tile_row = (tid % 128) / 32 * 16 + lane / 4;
        if (kHasResidual) {
          tn_mbar_wait(residual_bar + consumer * 8, residual_phase);
          residual_phase ^= 1;
        }
#pragma unroll
        for (int q = 0; q < kStoreGroups; ++q) {
          unsigned b[4];
          bias_pairs(bias, col, q, b);
          unsigned char* buf = store_bufs + (consumer * kStoreBufs + q % kStoreBufs) * kStoreBufBytes;
          if (!kHasResidual) {
            if (leader) tn_bulk_wait_read<1>();  // the buffer's last store (two groups back) has read it
            consumer_sync(consumer);
          }
#pragma unroll
          for (int i = 0; i < kRowBlocks; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int rr = tile_row + 64 * i + 8 * h;
              unsigned char* line = buf + rr * 64 + 4 * (lane % 4);
              unsigned* pairs[4];
              unsigned res[4] = {0u, 0u, 0u, 0u};  // the row's residual pairs, all read before its writes
#pragma unroll
              for (int p = 0; p < 4; ++p) {
                pairs[p] = reinterpret_cast<unsigned*>(line + ((p ^ (rr >> 1 & 3)) << 4));
                if (kHasResidual) res[p] = *pairs[p];
              }
#pragma unroll
              for (int p = 0; p < 4; ++p) {
                const int j = 4 * q + p;
                *pairs[p] = epilogue_pair(acc[i][4 * j + 2 * h], acc[i][4 * j + 2 * h + 1], b[p], res[p]);
              }
            }
          asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // these writes, before TMA reads them
          consumer_sync(consumer);
          if (leader) tn_tma_store(c_map, n0 + kStoreGroupCols * q, m0, tn_smem_addr(buf));
        }
      } else if (whole16) {
        store_tile_16byte(acc, bias, C, R, ldc, ldr, lane, row, col, n0);
      } else if (whole) {
        // A pair per store, with no checks.
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          const float b0 = kHasBias ? tn_f32(bias[col + j * 8]) : 0.f;
          const float b1 = kHasBias ? tn_f32(bias[col + j * 8 + 1]) : 0.f;
#pragma unroll
          for (int i = 0; i < kRowBlocks; ++i) {
            T* out = C + (long long)(row + 64 * i) * ldc + col + j * 8;
            float r[4] = {0.f, 0.f, 0.f, 0.f};
            if (kHasResidual) {  // pairs as one load each (`whole` checked their alignment)
              const T* res = R + (long long)(row + 64 * i) * ldr + col + j * 8;
              tn_load2(res, r[0], r[1]);
              tn_load2(res + 8LL * ldr, r[2], r[3]);
            }
            tn_store2(out, Epilogue::apply(acc[i][4 * j] + b0, r[0]), Epilogue::apply(acc[i][4 * j + 1] + b1, r[1]));
            tn_store2(out + 8LL * ldc, Epilogue::apply(acc[i][4 * j + 2] + b0, r[2]),
                      Epilogue::apply(acc[i][4 * j + 3] + b1, r[3]));
          }
        }
      } else {
        store_tile_checked(acc, bias, C, R, M, N, ldc, ldr, row, col);
      }
    }
    // Shared memory must outlast the TMA stores reading it.
    if (kTma && tid % 128 == 0) tn_bulk_wait_read<0>();
  }
};

#endif  // TEENY_GEMM_WGMMA_CUH
