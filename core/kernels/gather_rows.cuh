// A training batch gathered on the GPU from a data set held there (core/device_batches.cpp): row
// r of the batch is the `row` elements of `src` from element starts[r]; the batch is written in
// the graph input's layout, rows of `last` elements `stride` apart. Elements are copied as raw
// bits, so one entry serves every dtype of that size.
template <typename E>
__device__ __forceinline__ void teeny_gather(const E* src, const long long* starts, E* dst, long long row,
                                             long long total, int last, int stride) {
  for (long long f = (long long)blockIdx.x * blockDim.x + threadIdx.x; f < total;
       f += (long long)gridDim.x * blockDim.x) {
    const long long r = f / row;
    const long long to = last == stride ? f : f / last * stride + f % last;
    dst[to] = src[starts[r] + (f - r * row)];
  }
}

extern "C" __global__ void teeny_gather_rows_2(const unsigned short* src, const long long* starts, unsigned short* dst,
                                               long long row, long long total, int last, int stride) {
  teeny_gather(src, starts, dst, row, total, last, stride);
}

extern "C" __global__ void teeny_gather_rows_4(const unsigned int* src, const long long* starts, unsigned int* dst,
                                               long long row, long long total, int last, int stride) {
  teeny_gather(src, starts, dst, row, total, last, stride);
}
