// embedding's weight gradient (ops/grad_embedding.cpp): row v of dweight [num, dim] is the sum of
// dy's rows at the positions whose id is v, added in increasing position order, so duplicate ids
// sum and the result has the same bits on every run: a scatter-add without atomics on floats.
//
// Four launches. The first three are a counting sort of the positions by id that keeps each id's
// positions in increasing order, over blocks that each take a run of whole tiles of positions:
// tn_embedding_grad_count counts each block's positions of each id, tn_embedding_grad_offsets (one
// block) turns the counts into the slot where each block's first position of each id goes, and
// tn_embedding_grad_place sorts each tile's positions by id and puts them there. They leave
// order[] (positions grouped by id, ascending within an id) and ends[v], one past v's last slot
// (v's slots: [ends[v - 1], ends[v]), from 0 for v = 0). tn_embedding_grad_rows: a block per id
// and column range sums that id's rows of dy in slot order, f32, and stores dweight (zero where
// the id does not occur). Ids outside [0, num) are skipped, as the forward pass gives them a zero
// row.
#ifndef TEENY_GRAD_EMBEDDING_CUH
#define TEENY_GRAD_EMBEDDING_CUH

#include "prelude.cuh"

// Exclusive prefix sum of one value a thread across the block; *total gets the block's sum.
template <int kThreads>
__device__ __forceinline__ int tn_block_exclusive_scan(int v, int* warp_sums, int* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int inclusive = v;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += up;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int s = lane < kThreads / 32 ? warp_sums[lane] : 0;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, s, d);
      if (lane >= d) s += up;
    }
    if (lane < kThreads / 32) warp_sums[lane] = s;  // inclusive over the warps
  }
  __syncthreads();
  const int before = (warp == 0 ? 0 : warp_sums[warp - 1]) + inclusive - v;
  *total = warp_sums[kThreads / 32 - 1];
  __syncthreads();  // warp_sums is reused by the next call
  return before;
}

// Sorts kThreads keys in shared memory ascending, one a thread (kThreads a power of two).
template <int kThreads>
__device__ __forceinline__ void tn_block_bitonic_sort(unsigned long long* keys) {
  const int t = threadIdx.x;
  for (int size = 2; size <= kThreads; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      const int partner = t ^ stride;
      if (partner > t) {
        const unsigned long long a = keys[t], b = keys[partner];
        const bool ascending = (t & size) == 0;
        if ((a > b) == ascending) {
          keys[t] = b;
          keys[partner] = a;
        }
      }
    }
  }
  __syncthreads();
}

// The first index in sorted keys[0, n) whose id (high word) is `id`.
__device__ __forceinline__ int tn_first_of_id(const unsigned long long* keys, int n, unsigned id) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if ((unsigned)(keys[mid] >> 32) < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// The order launches take the positions in tiles of kThreads, a block's share a run of whole tiles
// (tn_embedding_tiles); counts is [gridDim.x][num], a row a block. ids of any shape whose last dim
// is ids_last (row stride ids_stride).
struct tn_embedding_tiles {
  int first, end;  // this block's tiles [first, end)
};
template <int kThreads>
__device__ __forceinline__ tn_embedding_tiles tn_embedding_block_tiles(int count) {
  const int tiles = (count + kThreads - 1) / kThreads, per_block = (tiles + gridDim.x - 1) / gridDim.x;
  const int first = (int)blockIdx.x * per_block;
  return {first, min(tiles, first + per_block)};
}
__device__ __forceinline__ int tn_embedding_id(const int* ids, int p, int ids_last, int ids_stride) {
  return ids[(long long)(p / ids_last) * ids_stride + p % ids_last];
}

// Order launch 1, a block per run of tiles: how many of its positions hold each id, into its row
// of counts (integer atomics, whose totals do not depend on their order).
template <int kThreads>
__device__ __forceinline__ void tn_embedding_grad_count(const int* ids, int* counts, int count, int ids_last,
                                                        int ids_stride, int num) {
  int* row = counts + (long long)blockIdx.x * num;
  for (int v = threadIdx.x; v < num; v += kThreads) row[v] = 0;
  __syncthreads();
  const tn_embedding_tiles tiles = tn_embedding_block_tiles<kThreads>(count);
  for (int p = tiles.first * kThreads + threadIdx.x; p < min(count, tiles.end * kThreads); p += kThreads) {
    const int id = tn_embedding_id(ids, p, ids_last, ids_stride);
    if (id >= 0 && id < num) atomicAdd(&row[id], 1);
  }
}

// Order launch 2, one block: counts -> offsets in place, counts[b][v] becoming the slot of block
// b's first position of id v (ids in order, an id's positions block by block), and ends[v] one
// past v's last slot.
template <int kThreads>
__device__ __forceinline__ void tn_embedding_grad_offsets(int* counts, int* ends, int blocks, int num) {
  __shared__ int warp_sums[32];
  int carry = 0;
  for (int base = 0; base < num; base += kThreads) {
    const int v = base + threadIdx.x;
    int n = 0;
    if (v < num)
      for (int b = 0; b < blocks; ++b) n += counts[(long long)b * num + v];
    int total;
    const int before = tn_block_exclusive_scan<kThreads>(n, warp_sums, &total);
    if (v < num) {
      int slot = carry + before;
      for (int b = 0; b < blocks; ++b) {
        int& c = counts[(long long)b * num + v];
        const int here = c;
        c = slot;
        slot += here;
      }
      ends[v] = slot;
    }
    carry += total;
  }
}

// Order launch 3, a block per run of tiles: places its positions tile by tile. A tile's
// (id, position) keys are sorted in shared memory (bitonic; the keys are unique, so the order is
// unique), and each position lands at its id's next free slot in the block's row of offsets plus
// its rank among the tile's positions of that id; the row then advances past the tile.
template <int kThreads>
__device__ __forceinline__ void tn_embedding_grad_place(const int* ids, int* offsets, int* order, int count,
                                                        int ids_last, int ids_stride, int num) {
  static_assert((kThreads & (kThreads - 1)) == 0 && kThreads >= 64, "bitonic tiles need a power of two");
  __shared__ unsigned long long keys[kThreads];
  __shared__ int first_slot[kThreads];
  int* next = offsets + (long long)blockIdx.x * num;
  const int t = threadIdx.x;
  const tn_embedding_tiles tiles = tn_embedding_block_tiles<kThreads>(count);
  for (int tile = tiles.first; tile < tiles.end; ++tile) {
    const int p = tile * kThreads + t;
    const int id = p < count ? tn_embedding_id(ids, p, ids_last, ids_stride) : -1;
    keys[t] = id >= 0 && id < num ? ((unsigned long long)id << 32) | (unsigned)t : ~0ull;
    tn_block_bitonic_sort<kThreads>(keys);
    const unsigned long long key = keys[t];  // this thread now places the t-th smallest key
    const bool valid = key != ~0ull;
    const unsigned key_id = (unsigned)(key >> 32);
    const int first = valid ? tn_first_of_id(keys, kThreads, key_id) : 0;
    if (valid && first == t) first_slot[t] = __ldcg(&next[key_id]);  // the last tile's stores, past L1
    __syncthreads();
    if (valid) {
      const int slot = first_slot[first] + (t - first);
      order[slot] = tile * kThreads + (int)(key & 0xffffffffu);
      if (t + 1 == kThreads || (unsigned)(keys[t + 1] >> 32) != key_id) next[key_id] = slot + 1;
    }
    __syncthreads();
  }
}

// Block (v, column range): dweight[v][c] = Σ over v's slots, in order, of dy[order[slot]][c].
template <typename T, int kThreads>
__device__ __forceinline__ void tn_embedding_grad_rows(const T* dy, const int* order, const int* ends, T* dweight,
                                                       int dim, int dy_stride) {
  const int v = blockIdx.x;
  const int c = blockIdx.y * kThreads + threadIdx.x;
  if (c >= dim) return;
  const int begin = v == 0 ? 0 : ends[v - 1], end = ends[v];
  float sum = 0.f;
#pragma unroll 4
  for (int slot = begin; slot < end; ++slot) sum += tn_f32(dy[(long long)order[slot] * dy_stride + c]);
  dweight[(long long)v * dim + c] = tn_cast<T>(sum);
}

#endif  // TEENY_GRAD_EMBEDDING_CUH
