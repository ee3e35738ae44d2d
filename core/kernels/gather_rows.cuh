// A training batch gathered on the GPU from a data set held there (core/device_batches.cpp): row
// r of the batch is the `row` elements of `src` from element starts[r]; the batch is written in
// the graph input's layout, rows of `last` elements `stride` apart. Elements are copied as raw
// bits, so one entry serves every dtype of that size. Blocks stride over the batch's rows in y
// and over a row's elements in x, so no element divides its index by the row length.
template <typename E>
__device__ __forceinline__ void teeny_gather(const E* src, const long long* starts, E* dst, long long rows, int row,
                                             int last, int stride) {
  // Padded rows (last < stride) hold whole rows of the last dim; a 1-D input's row is one element.
  const bool dense = last == stride;
  const long long out_row = dense ? row : (long long)(row / last) * stride;
  for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
    const E* from = src + starts[r];
    E* to = dst + r * out_row;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < row; e += gridDim.x * blockDim.x)
      to[dense ? e : e / last * stride + e % last] = from[e];
  }
}

extern "C" __global__ void teeny_gather_rows_2(const unsigned short* src, const long long* starts, unsigned short* dst,
                                               long long rows, int row, int last, int stride) {
  teeny_gather(src, starts, dst, rows, row, last, stride);
}

extern "C" __global__ void teeny_gather_rows_4(const unsigned int* src, const long long* starts, unsigned int* dst,
                                               long long rows, int row, int last, int stride) {
  teeny_gather(src, starts, dst, rows, row, last, stride);
}
