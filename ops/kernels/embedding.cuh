// embedding (ops/embedding.cpp): rows of weight [num, dim] picked by i32 ids.
#ifndef TEENY_EMBEDDING_CUH
#define TEENY_EMBEDDING_CUH

#include "prelude.cuh"

// One warp per id (kWarpsPerBlock a block): the id is read once, from ids of any shape whose
// last dim is ids_last (row stride ids_stride), and bounds-checked: ids outside [0, num) give
// a zero row, and the weight is never read out of bounds. The row is copied in 16-byte packs
// when the weight and output rows are aligned, element by element otherwise.
template <typename T, int kWarpsPerBlock>
__device__ __forceinline__ void tn_embedding(const int* ids, const T* weight, T* y, long long count, int ids_last,
                                             int ids_stride, int num, int dim) {
  constexpr int kN = tn_pack<T>::kN;
  const long long r = (long long)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= count) return;
  const int id = ids[(r / ids_last) * ids_stride + r % ids_last];
  T* yr = y + r * dim;
  if (id < 0 || id >= num) {
    for (int c = lane; c < dim; c += 32) yr[c] = tn_cast<T>(0.f);
    return;
  }
  const T* wr = weight + (long long)id * dim;
  int head = 0;
  if (tn_aligned16(wr) && tn_aligned16(yr)) {
    head = dim / kN * kN;
    for (int c = lane * kN; c < head; c += 32 * kN) {
      float v[kN];
      tn_load16(wr + c, v);
      tn_store16(yr + c, v);
    }
  }
  for (int c = head + lane; c < dim; c += 32) yr[c] = wr[c];
}

#endif  // TEENY_EMBEDDING_CUH
