// embedding's weight gradient (ops/grad_embedding.cpp): row v of dweight [num, dim] is the sum of
// dy's rows at the positions whose id is v, added in increasing position order, so duplicate ids
// sum and the result has the same bits on every run: a scatter-add without atomics on floats.
//
// Two launches. tn_embedding_grad_order, one block: a counting sort of the positions by id that
// keeps each id's positions in increasing order. It counts each id's positions (integer atomics,
// whose totals do not depend on their order), turns the counts into each id's first slot (an
// exclusive scan), then places the positions tile by tile: a tile's (id, position) keys are
// sorted in shared memory (bitonic; the keys are unique, so the order is unique), and each
// position lands at its id's next free slot plus its rank among the tile's positions of that id.
// It leaves order[] (positions grouped by id, ascending within an id) and ends[v], one past v's
// last slot (v's slots: [ends[v - 1], ends[v]), from 0 for v = 0). tn_embedding_grad_rows: a
// block per id and column range sums that id's rows of dy in slot order, f32, and stores dweight
// (zero where the id does not occur). Ids outside [0, num) are skipped, as the forward pass gives
// them a zero row.
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

// One block of kThreads. ids of any shape whose last dim is ids_last (row stride ids_stride).
// ends is read through L2 (__ldcg): the block's own atomics and stores change it between phases.
template <int kThreads>
__device__ __forceinline__ void tn_embedding_grad_order(const int* ids, int* ends, int* order, int count, int ids_last,
                                                        int ids_stride, int num) {
  static_assert((kThreads & (kThreads - 1)) == 0 && kThreads >= 64, "bitonic tiles need a power of two");
  __shared__ unsigned long long keys[kThreads];
  __shared__ int first_slot[kThreads];
  __shared__ int warp_sums[32];
  const int t = threadIdx.x;
  auto id_at = [&](int p) { return ids[(long long)(p / ids_last) * ids_stride + p % ids_last]; };

  for (int v = t; v < num; v += kThreads) ends[v] = 0;
  __syncthreads();
  for (int p = t; p < count; p += kThreads) {
    const int id = id_at(p);
    if (id >= 0 && id < num) atomicAdd(&ends[id], 1);
  }
  __syncthreads();
  // Counts -> each id's first slot; the placement below advances it to one past its last.
  int carry = 0;
  for (int base = 0; base < num; base += kThreads) {
    const int v = base + t;
    const int n = v < num ? __ldcg(&ends[v]) : 0;
    int total;
    const int before = tn_block_exclusive_scan<kThreads>(n, warp_sums, &total);
    if (v < num) ends[v] = carry + before;
    carry += total;
  }
  __syncthreads();
  for (int tile = 0; tile < count; tile += kThreads) {
    const int p = tile + t;
    const int id = p < count ? id_at(p) : -1;
    keys[t] = id >= 0 && id < num ? ((unsigned long long)id << 32) | (unsigned)t : ~0ull;
    tn_block_bitonic_sort<kThreads>(keys);
    const unsigned long long key = keys[t];  // this thread now places the t-th smallest key
    const bool valid = key != ~0ull;
    const unsigned key_id = (unsigned)(key >> 32);
    const int first = valid ? tn_first_of_id(keys, kThreads, key_id) : 0;
    if (valid && first == t) first_slot[t] = __ldcg(&ends[key_id]);
    __syncthreads();
    if (valid) {
      const int slot = first_slot[first] + (t - first);
      order[slot] = tile + (int)(key & 0xffffffffu);
      if (t + 1 == kThreads || (unsigned)(keys[t + 1] >> 32) != key_id) ends[key_id] = slot + 1;
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
