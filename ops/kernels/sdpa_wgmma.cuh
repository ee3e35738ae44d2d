// sdpa and fused.sdpa_heads on Hopper tensor cores (sm_90a), f16/bf16 with head dims 64, 128 and
// 256, FlashAttention-3's way: a work item is 128 queries of one head (tn_sdpa_tile_of's order),
// and a block's three warpgroups split the work. Warpgroup 0 is the producer: one thread loads Q
// once and then K and V tile by tile (kBKV keys) by TMA into a ring of kStages stages; K and V each
// have a `full` mbarrier (the copies' bytes landed) and an `empty` one (both consumers' MMAs
// reading it retired), so a stage's K is refilled while its V is still being read. Warpgroups 1
// and 2 are consumers of 64 query rows each: S = Q·Kᵀ by wgmma from shared memory, the online
// softmax in registers, O += P·V by wgmma with P from registers (A from registers) and V read
// transposed from its MN-major tile.
//
// The softmax runs under MMAs two ways (FlashAttention-3's section 3.1 and 3.2). Within a
// consumer: tile i's S = Q·Kᵢᵀ and tile i-1's O += Pᵢ₋₁·Vᵢ₋₁ are issued together, and the softmax of
// Sᵢ runs while the P·V product is in flight. Between consumers (pingpong, head dims up to 128):
// named barriers hand the turn to issue MMAs back and forth, so one consumer's softmax runs under
// the other's MMAs instead of both contending for the tensor cores at once.
//
// Arguments as the other attention kernels' (sdpa.cuh), plus the tensor maps of q, k and v: 2-D
// views of all rows [X * S, width], boxes of 64 columns (one 128-byte swizzle row) by 128 query
// rows or kBKV keys. A tile that runs past a head's last key reads the next head's rows (or zeros
// past the tensor): their scores are masked, and their V rows are zeroed in shared memory, so that
// a non-finite value there cannot reach this head through 0 · inf.
#ifndef TEENY_SDPA_WGMMA_CUH
#define TEENY_SDPA_WGMMA_CUH

#include "mma.cuh"
#include "sdpa.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

template <typename T, int kDH, int kBKV, int kStages, bool kCausal>
struct tn_sdpa_wgmma_block {
  static_assert(sizeof(T) == 2 && kDH % 64 == 0 && kDH <= 256, "16-bit, head dims in 64-column swizzle atoms");
  static_assert(kBKV == 64 || kBKV == 128 || kBKV == 176, "key tiles are wgmma widths");
  static constexpr int kBQ = 128;          // two consumers of 64 rows (the wgmma M)
  static constexpr int kAtoms = kDH / 64;  // 128-byte swizzle atoms along the head dim
  static constexpr unsigned kQAtomBytes = kBQ * 128, kKVAtomBytes = kBKV * 128;
  static constexpr unsigned kQBytes = kAtoms * kQAtomBytes, kKVBytes = kAtoms * kKVAtomBytes;
  static constexpr unsigned kStageBytes = 2 * kKVBytes;  // K, then V
  // At head dim 256 the O accumulators take 128 registers a thread, and FlashAttention-3 leaves
  // the two consumers unsynchronised there too.
  static constexpr bool kPingpong = kDH <= 128;

  // One work item: 128 queries from q0 of head n, and the key tiles they see.
  struct Item {
    int q0, n, tiles;
  };
  int Sq, Skv, N, heads, kv_heads, kv_groups, q_tiles, items;
  // Shared memory (1024-byte aligned for the swizzle): Q, the ring's stages, then the mbarriers:
  // Q's full and empty ones, then per stage K's full, V's full, K's empty and V's empty ones.
  unsigned q_tile, stages, q_full, q_empty, bars;

  __device__ __forceinline__ Item item(int index) const {
    Item it;
    int qt;
    tn_sdpa_tile_of(index, q_tiles, N, qt, it.n);
    it.q0 = qt * kBQ;
    const int kv_end = kCausal ? min(Skv, min(Sq, it.q0 + kBQ)) : Skv;
    it.tiles = (kv_end + kBKV - 1) / kBKV;
    return it;
  }
  __device__ __forceinline__ unsigned k_tile(int s) const { return stages + s * kStageBytes; }
  __device__ __forceinline__ unsigned v_tile(int s) const { return k_tile(s) + kKVBytes; }
  __device__ __forceinline__ unsigned k_full(int s) const { return bars + 32 * s; }
  __device__ __forceinline__ unsigned v_full(int s) const { return bars + 32 * s + 8; }
  __device__ __forceinline__ unsigned k_empty(int s) const { return bars + 32 * s + 16; }
  __device__ __forceinline__ unsigned v_empty(int s) const { return bars + 32 * s + 24; }

  __device__ __forceinline__ void init_barriers() const {
    tn_mbar_init(q_full, 1);   // the producer's expect_tx
    tn_mbar_init(q_empty, 8);  // a warp of each consumer
    for (int s = 0; s < kStages; ++s) {
      tn_mbar_init(k_full(s), 1);
      tn_mbar_init(v_full(s), 1);
      tn_mbar_init(k_empty(s), 8);
      tn_mbar_init(v_empty(s), 8);
    }
  }

  // The producer's thread: for each of the block's items, Q once the consumers are done with the
  // last one's, then its K and V tiles through the ring (ring step r in stage r % kStages).
  __device__ __forceinline__ void load(const tn_tensor_map& q_map, const tn_tensor_map& k_map,
                                       const tn_tensor_map& v_map) const {
    int step = 0;
    for (int w = 0, index = blockIdx.x; index < items; ++w, index += gridDim.x) {
      const Item it = item(index);
      const int kv_head = it.n / kv_groups;
      const int kv_row = kv_head / kv_heads * Skv, kv_col = kv_head % kv_heads * kDH;
      tn_mbar_wait(q_empty, (w & 1) ^ 1);  // the first item finds Q free
      tn_mbar_arrive_expect_tx(q_full, kQBytes);
#pragma unroll
      for (int a = 0; a < kAtoms; ++a)
        tn_tma_load(q_tile + a * kQAtomBytes, &q_map, it.n % heads * kDH + 64 * a, it.n / heads * Sq + it.q0, q_full);
      for (int i = 0; i < it.tiles; ++i, ++step) {
        const int s = step % kStages;
        const unsigned free_parity = (step / kStages & 1) ^ 1;  // the first pass finds every stage free
        tn_mbar_wait(k_empty(s), free_parity);
        tn_mbar_arrive_expect_tx(k_full(s), kKVBytes);
#pragma unroll
        for (int a = 0; a < kAtoms; ++a)
          tn_tma_load(k_tile(s) + a * kKVAtomBytes, &k_map, kv_col + 64 * a, kv_row + i * kBKV, k_full(s));
        tn_mbar_wait(v_empty(s), free_parity);
        tn_mbar_arrive_expect_tx(v_full(s), kKVBytes);
#pragma unroll
        for (int a = 0; a < kAtoms; ++a)
          tn_tma_load(v_tile(s) + a * kKVAtomBytes, &v_map, kv_col + 64 * a, kv_row + i * kBKV, v_full(s));
      }
    }
  }

  // Both consumers: ring step `step`'s V tile (keys from j0) landed, its rows past Skv set to 0
  // before either consumer reads them. A swizzle permutes chunks within a row, so whole rows are
  // the same rows unswizzled.
  __device__ __forceinline__ void await_v(unsigned char* smem, unsigned smem_addr, int step, int j0) const {
    const int s = step % kStages;
    tn_mbar_wait(v_full(s), step / kStages & 1);
    if (j0 + kBKV <= Skv) return;
    const int ctid = threadIdx.x - 128;
    constexpr int kChunks = kAtoms * kBKV * 8;  // 16-byte chunks of V
    for (int c = ctid; c < kChunks; c += 256) {
      const int atom = c / (kBKV * 8), row = c / 8 % kBKV;
      if (j0 + row >= Skv)
        *reinterpret_cast<uint4*>(smem + (v_tile(s) - smem_addr) + atom * kKVAtomBytes + row * 128 + c % 8 * 16) =
            make_uint4(0u, 0u, 0u, 0u);
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes, read by wgmma
    asm volatile("bar.sync 3, 256;\n" ::: "memory");
  }

  // Consumer c's 64 rows of Q negated (sign bits flipped), for a negative scale.
  __device__ __forceinline__ void negate_q(unsigned char* smem, unsigned smem_addr, int consumer) const {
    for (int c = threadIdx.x % 128; c < kAtoms * 64 * 8; c += 128) {
      uint4* chunk = reinterpret_cast<uint4*>(smem + (q_tile - smem_addr) + c / 512 * kQAtomBytes +
                                              consumer * 64 * 128 + c % 512 * 16);
      uint4 x = *chunk;
      x.x ^= 0x80008000u, x.y ^= 0x80008000u, x.z ^= 0x80008000u, x.w ^= 0x80008000u;
      *chunk = x;
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    if (consumer == 0)
      asm volatile("bar.sync 1, 128;\n" ::: "memory");
    else
      asm volatile("bar.sync 2, 128;\n" ::: "memory");
  }

  // Pingpong: consumer c waits for its turn to issue MMAs (barrier 4 + c completes with the other
  // consumer's pass), and passes the turn once it has issued them.
  static __device__ __forceinline__ void await_turn(int consumer) {
    if (!kPingpong) return;
    if (consumer == 0)
      asm volatile("bar.sync 4, 256;\n" ::: "memory");
    else
      asm volatile("bar.sync 5, 256;\n" ::: "memory");
  }
  static __device__ __forceinline__ void pass_turn(int consumer) {
    if (!kPingpong) return;
    if (consumer == 0)
      asm volatile("bar.arrive 5, 256;\n" ::: "memory");
    else
      asm volatile("bar.arrive 4, 256;\n" ::: "memory");
  }

  // S = Q·Kᵀ of the K tile in stage s, as one wgmma group: q_rows is this consumer's rows of Q's
  // first atom.
  __device__ __forceinline__ void issue_qk(float (&s)[kBKV / 2], unsigned q_rows, int stage) const {
    tn_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDH / 16; ++kk) {
      const unsigned step_bytes = kk % 4 * 32;  // 16 elements: 32 bytes along a swizzle row
      tn_wgmma<T, kBKV>(s, tn_wgmma_desc(q_rows + kk / 4 * kQAtomBytes + step_bytes),
                        tn_wgmma_desc(k_tile(stage) + kk / 4 * kKVAtomBytes + step_bytes), kk > 0);
    }
    tn_wgmma_commit();
  }

  // O += P·V of the V tile in stage s, as one wgmma group: V [kBKV keys][kDH] read as an MN-major
  // B.
  __device__ __forceinline__ void issue_pv(float (&o)[kDH / 2], const unsigned (&p)[kBKV / 16][4], int stage) const {
    tn_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBKV / 16; ++kk)
      tn_wgmma_rs<T, kDH, true>(o, p[kk], tn_wgmma_desc_mn(v_tile(stage) + kk * 16 * 128, kKVAtomBytes));
    tn_wgmma_commit();
  }

  // The scores of keys past Skv, and (causal) of keys after the row, to -inf; only tiles that hold
  // such keys for some of the consumer's rows from first_row on pay for it.
  __device__ __forceinline__ void mask(float (&s)[kBKV / 2], int j0, int row_a, int first_row, int t) const {
    if (j0 + kBKV <= Skv && !(kCausal && j0 + kBKV - 1 > first_row)) return;
#pragma unroll
    for (int j = 0; j < kBKV / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j0 + j * 8 + 2 * t + (e & 1), row = row_a + (e / 2) * 8;
        if (key >= Skv || (kCausal && key > row)) s[4 * j + e] = tn_neg_inf();
      }
  }

  // P as the A-fragments of P·V, 16 keys each: keys 16kk.. are accumulator n-tiles 2kk and 2kk + 1.
  static __device__ __forceinline__ void pack_p(unsigned (&p)[kBKV / 16][4], const float (&s)[kBKV / 2]) {
#pragma unroll
    for (int kk = 0; kk < kBKV / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) p[kk][r] = tn_pack2<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
  }
};

// Persistent: block b takes work items b, b + gridDim.x, ... (the grid at most one block an SM),
// so the producer loads an item's Q, K and V while the consumers finish the last one.
template <typename T, int kDH, int kBKV, int kStages, bool kCausal>
__device__ __forceinline__ void tn_sdpa_wgmma(const T* q, const T* k, const T* v, T* out, int N, int Sq, int Skv,
                                              int ldq, int ldk, int ldv, int heads, int kv_heads, int kv_groups,
                                              int ldo, float scale, const tn_tensor_map& q_map,
                                              const tn_tensor_map& k_map, const tn_tensor_map& v_map) {
  using Block = tn_sdpa_wgmma_block<T, kDH, kBKV, kStages, kCausal>;
  constexpr int kBQ = Block::kBQ;
  extern __shared__ unsigned char tn_dynamic_smem[];
  const unsigned smem_addr = tn_smem_addr(tn_dynamic_smem);
  Block block;
  block.Sq = Sq, block.Skv = Skv, block.N = N, block.heads = heads, block.kv_heads = kv_heads;
  block.kv_groups = kv_groups;
  block.q_tiles = (Sq + kBQ - 1) / kBQ;
  block.items = block.q_tiles * N;
  block.q_tile = (smem_addr + 1023) & ~1023u;
  block.stages = block.q_tile + Block::kQBytes;
  block.q_full = block.stages + kStages * Block::kStageBytes;
  block.q_empty = block.q_full + 8;
  block.bars = block.q_empty + 8;
  const int tid = threadIdx.x, warpgroup = tid / 128;
  if (tid == 0) block.init_barriers();
  __syncthreads();
  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    if (tid == 0) block.load(q_map, k_map, v_map);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");

  const int consumer = warpgroup - 1, lane = tid % 32, t = lane % 4;
  const int row_in_block = 64 * consumer + (tid % 128) / 32 * 16 + lane / 4;  // this thread's rows: +0, +8
  const unsigned q_rows = block.q_tile + consumer * 64 * 128;                 // of each Q atom
  // |scale| in log2 units, at least FLT_MIN so that a masked -inf stays -inf (sdpa.cuh's mma kernel).
  const float qk_scale = fmaxf(fabsf(scale) * tn_log2e, 1.17549435e-38f);
  // Accumulators in wgmma's layout: s[4j + 2h + e] is row row_a + 8h, key j0 + 8j + 2t + e; o alike
  // with head dims for keys. p: the last tile's P, in flight in its P·V product.
  float s[kBKV / 2], o[kDH / 2];
  unsigned p[kBKV / 16][4];
  float alpha[2];

  if (consumer == 1) Block::pass_turn(1);  // consumer 0 issues first
  int step = 0;                            // ring steps consumed
  for (int w = 0, index = blockIdx.x; index < block.items; ++w, index += gridDim.x) {
    const typename Block::Item it = block.item(index);
    const int row_a = it.q0 + row_in_block, first_row = it.q0 + 64 * consumer;
#pragma unroll
    for (int d = 0; d < kDH / 2; ++d) o[d] = 0.f;
    float m_run[2] = {tn_neg_inf(), tn_neg_inf()}, l_run[2] = {0.f, 0.f};
    tn_mbar_wait(block.q_full, w & 1);
    if (scale < 0.f) block.negate_q(tn_dynamic_smem, smem_addr, consumer);  // scores of -q: the scale is positive

    // Rounds of MMAs, each issued in this consumer's turn: S of tile 0; then S of tile i with P·V
    // of tile i - 1 (the softmax of S under the P·V); then P·V of the last tile. No MMA is in
    // flight across a loop's back edge (ptxas would serialize every wgmma: C7515).
    const auto softmax = [&](int i) {  // S of tile i retired: release K (and Q after the last)
      tn_wgmma_fence_regs(s);
      if (lane == 0) {
        tn_mbar_arrive(block.k_empty((step + i) % kStages));
        if (i == it.tiles - 1) tn_mbar_arrive(block.q_empty);
      }
      block.mask(s, i * kBKV, row_a, first_row, t);
      tn_sdpa_softmax_step<kBKV>(s, qk_scale, m_run, l_run, alpha);
    };
    const auto pv_retired = [&](int i) {  // P·V of tile i retired: release V
      tn_wgmma_wait<0>();
      tn_wgmma_fence_regs(o);
      if (lane == 0) tn_mbar_arrive(block.v_empty((step + i) % kStages));
    };
    tn_mbar_wait(block.k_full(step % kStages), step / kStages & 1);
    Block::await_turn(consumer);
    block.issue_qk(s, q_rows, step % kStages);
    Block::pass_turn(consumer);
    tn_wgmma_wait<0>();
    softmax(0);
    Block::pack_p(p, s);
    for (int i = 1; i < it.tiles; ++i) {
      const int r = step + i;
      tn_mbar_wait(block.k_full(r % kStages), r / kStages & 1);
      block.await_v(tn_dynamic_smem, smem_addr, r - 1, (i - 1) * kBKV);
      Block::await_turn(consumer);
      block.issue_qk(s, q_rows, r % kStages);
      block.issue_pv(o, p, (r - 1) % kStages);
      Block::pass_turn(consumer);
      tn_wgmma_wait<1>();  // S retired; P·V may be in flight
      softmax(i);
      pv_retired(i - 1);
#pragma unroll
      for (int d = 0; d < kDH / 2; ++d) o[d] *= alpha[d % 4 / 2];
      Block::pack_p(p, s);
    }
    const int last = step + it.tiles - 1;
    block.await_v(tn_dynamic_smem, smem_addr, last, (it.tiles - 1) * kBKV);
    Block::await_turn(consumer);
    block.issue_pv(o, p, last % kStages);
    // The block's last pass (consumer 1's) would find no one waiting for it.
    if (consumer == 0 || index + gridDim.x < block.items) Block::pass_turn(consumer);
    pv_retired(it.tiles - 1);
    step += it.tiles;

    tn_sdpa_store_rows<T, kDH, 0>(out + (long long)(it.n / heads) * Sq * ldo + it.n % heads * kDH + 2 * t,
                                  reinterpret_cast<const float(&)[kDH / 8][4]>(o), l_run, row_a, Sq, ldo);
  }
}

#endif  // TEENY_SDPA_WGMMA_CUH
