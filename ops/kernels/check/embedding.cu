// embedding.cuh instantiated for kernel_check (see check.cuh), for every float dtype.
#include "../embedding.cuh"
#include "check.cuh"

TN_ENTRY(embedding_f32, (256))
(const int* ids, const float* weight, float* y, long long count, int ids_last, int ids_stride, int num, int dim) {
  tn_embedding<float, 8>(ids, weight, y, count, ids_last, ids_stride, num, dim);
}
TN_ENTRY(embedding_bf16, (256))
(const int* ids, const __nv_bfloat16* weight, __nv_bfloat16* y, long long count, int ids_last, int ids_stride, int num,
 int dim) {
  tn_embedding<__nv_bfloat16, 8>(ids, weight, y, count, ids_last, ids_stride, num, dim);
}
TN_ENTRY(embedding_f16, (256))
(const int* ids, const __half* weight, __half* y, long long count, int ids_last, int ids_stride, int num, int dim) {
  tn_embedding<__half, 8>(ids, weight, y, count, ids_last, ids_stride, num, dim);
}
