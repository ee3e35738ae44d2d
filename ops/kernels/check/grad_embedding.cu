// grad_embedding.cuh instantiated for kernel_check (see check.cuh): the sorting launches at the
// block size ops/grad_embedding.cpp gives them, and the row sums in each dtype.
#include "../grad_embedding.cuh"
#include "check.cuh"

TN_ENTRY(grad_embedding_count, (1024))
(const int* ids, int* counts, int count, int ids_last, int ids_stride, int num) {
  tn_embedding_grad_count<1024>(ids, counts, count, ids_last, ids_stride, num);
}
TN_ENTRY(grad_embedding_offsets, (1024))(int* counts, int* ends, int blocks, int num) {
  tn_embedding_grad_offsets<1024>(counts, ends, blocks, num);
}
TN_ENTRY(grad_embedding_place, (1024))
(const int* ids, int* counts, int* order, int count, int ids_last, int ids_stride, int num) {
  tn_embedding_grad_place<1024>(ids, counts, order, count, ids_last, ids_stride, num);
}
TN_ENTRY(grad_embedding_rows_f32, (128))
(const float* dy, int* order, int* ends, float* dweight, int dim, int dy_stride) {
  tn_embedding_grad_rows<float, 128>(dy, order, ends, dweight, dim, dy_stride);
}
TN_ENTRY(grad_embedding_rows_bf16, (128))
(const __nv_bfloat16* dy, int* order, int* ends, __nv_bfloat16* dweight, int dim, int dy_stride) {
  tn_embedding_grad_rows<__nv_bfloat16, 128>(dy, order, ends, dweight, dim, dy_stride);
}
TN_ENTRY(grad_embedding_rows_f16, (128))
(const __half* dy, int* order, int* ends, __half* dweight, int dim, int dy_stride) {
  tn_embedding_grad_rows<__half, 128>(dy, order, ends, dweight, dim, dy_stride);
}
