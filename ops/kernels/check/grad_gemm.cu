// gemm.cuh's gradient entries as the dense ops' gradients take them (ops/grad_gemm.h), for
// kernel_check (see check.cuh): A stored transposed ([K, M], the weight gradients) on CUDA cores
// and mma.sync at both tile sizes, B as [K, N] and as [N, K], each with its split count and
// partials; the wgmma kernel by TMA with each operand K-major or MN-major, and 3xTF32 with both
// MN-major; the sum of the splits.
#include "../gemm.cuh"
#include "check.cuh"

template <typename T>
using Epi = tn_gemm_epilogue<T, tn_act_none, false, false>;

#define TN_GRAD_PARAMS(T) \
  const T *a, const T *b, T *c, float *partials, int M, int N, int K, int lda, int ldb, int splits
#define TN_GRAD_ARGS a, b, c, partials, M, N, K, lda, ldb, splits
#define TN_TENSOR_MAPS                                                                      \
  const __grid_constant__ tn_tensor_map a_map, const __grid_constant__ tn_tensor_map b_map, \
      const __grid_constant__ tn_tensor_map c_map

TN_ENTRY(grad_linear_dweight_f32_kn_64x64x16_at_b0, (256, 2))(TN_GRAD_PARAMS(float)) {
  tn_grad_gemm<tn_simt_gemm<64, 64, 16, 256, 4, 4, false, Epi<float>, true>>(TN_GRAD_ARGS);
}
TN_ENTRY(grad_matmul_db_f32_kn_128x128x8_at_b1, (256, 2))
(TN_GRAD_PARAMS(float), int batch0, long long a_stride0, long long b_stride0) {
  tn_grad_gemm<tn_simt_gemm<128, 128, 8, 256, 8, 8, false, Epi<float>, true>>(TN_GRAD_ARGS, batch0, a_stride0,
                                                                              b_stride0);
}
TN_ENTRY(grad_matmul_da_f32_nk_128x128x8_b1, (256, 2))
(TN_GRAD_PARAMS(float), int batch0, long long a_stride0, long long b_stride0) {
  tn_grad_gemm<tn_simt_gemm<128, 128, 8, 256, 8, 8, true, Epi<float>>>(TN_GRAD_ARGS, batch0, a_stride0, b_stride0);
}
TN_ENTRY(grad_linear_dweight_bf16_kn_64x64x32_at_b0, (128, 1))(TN_GRAD_PARAMS(__nv_bfloat16)) {
  tn_grad_gemm<tn_mma_gemm<__nv_bfloat16, 64, 64, 32, 128, 2, 2, false, Epi<__nv_bfloat16>, true>>(TN_GRAD_ARGS);
}
TN_ENTRY(grad_matmul_db_f16_kn_128x128x32_at_b2, (256, 1))
(TN_GRAD_PARAMS(__half), int batch1, long long a_stride1, long long b_stride1, int batch0, long long a_stride0,
 long long b_stride0) {
  tn_grad_gemm<tn_mma_gemm<__half, 128, 128, 32, 256, 2, 4, false, Epi<__half>, true>>(
      TN_GRAD_ARGS, batch1, a_stride1, b_stride1, batch0, a_stride0, b_stride0);
}
TN_ENTRY(grad_matmul_da_bf16_nk_128x128x32_b1, (256, 1))
(TN_GRAD_PARAMS(__nv_bfloat16), int batch0, long long a_stride0, long long b_stride0) {
  tn_grad_gemm<tn_mma_gemm<__nv_bfloat16, 128, 128, 32, 256, 2, 4, true, Epi<__nv_bfloat16>>>(TN_GRAD_ARGS, batch0,
                                                                                              a_stride0, b_stride0);
}

// wgmma by TMA: dweight (A and B MN-major), dx (B MN-major), matmul's da (both K-major).
template <typename T, bool kAMnMajor, bool kBMnMajor>
using TmaGemm = tn_wgmma_gemm<T, 128, 128, 64, 384, 6, true, false, true, 32, Epi<T>, kAMnMajor, kBMnMajor>;
TN_ENTRY(grad_linear_dweight_bf16_kn_128x128x64_wgmma_pp_tma_at_b0, (384, 1))
(TN_GRAD_PARAMS(__nv_bfloat16), TN_TENSOR_MAPS) {
  tn_grad_gemm_tma<TmaGemm<__nv_bfloat16, true, true>>(TN_GRAD_ARGS, a_map, b_map, c_map);
}
TN_ENTRY(grad_linear_dx_f16_kn_128x128x64_wgmma_pp_tma_b0, (384, 1))(TN_GRAD_PARAMS(__half), TN_TENSOR_MAPS) {
  tn_grad_gemm_tma<TmaGemm<__half, false, true>>(TN_GRAD_ARGS, a_map, b_map, c_map);
}
TN_ENTRY(grad_matmul_da_bf16_nk_128x128x64_wgmma_pp_tma_b0, (384, 1))
(TN_GRAD_PARAMS(__nv_bfloat16), TN_TENSOR_MAPS) {
  tn_grad_gemm_tma<TmaGemm<__nv_bfloat16, false, false>>(TN_GRAD_ARGS, a_map, b_map, c_map);
}

// f32 wgmma (3xTF32 by cp.async) over a constant K: matmul's db (A and B MN-major, transposed as
// they load). Left out: dx (B MN-major, A K-major), where nvcc's code spills 8 bytes at the
// 168-register cap of 384 threads and NVRTC's does not (ptxas -v on NVRTC's PTX: none, with or
// without a residual).
TN_ENTRY(grad_matmul_db_f32_kn_128x128x32_wgmma_pp_at_b0, (384, 1))(TN_GRAD_PARAMS(float)) {
  tn_grad_gemm<tn_wgmma_gemm<float, 128, 128, 32, 384, 3, true, true, false, 32, Epi<float>, true, true>>(TN_GRAD_ARGS);
}

// With an epilogue reading r (grad.linear_dx's, fuse_grad_linear_epilogue): a fan-out sum and an
// activation's derivative, on CUDA cores and mma.sync. Left out, as gemm.cu leaves out linear's:
// wgmma by TMA with r, where nvcc's code spills at the 168-register cap of 384 threads and
// NVRTC's differs (ptxas -v on NVRTC's PTX: none for the sum, 16 bytes for gelu_tanh's
// derivative).
#define TN_GRAD_RES_PARAMS(T) \
  const T *a, const T *b, T *c, float *partials, const T *r, int M, int N, int K, int lda, int ldb, int ldr, int splits
#define TN_GRAD_RES_ARGS a, b, c, partials, r, M, N, K, lda, ldb, ldr, splits
template <typename T>
using Res = tn_gemm_epilogue<T, tn_act_none, false, true>;
template <typename T, template <typename> class Grad>
using DAct = tn_gemm_grad_epilogue<T, Grad>;
TN_ENTRY(grad_linear_dx_f32_kn_128x128x8_dgelu_tanh_b0, (256, 2))(TN_GRAD_RES_PARAMS(float)) {
  tn_grad_gemm_res<tn_simt_gemm<128, 128, 8, 256, 8, 8, false, DAct<float, tn_act_grad_gelu_tanh>>>(TN_GRAD_RES_ARGS);
}
TN_ENTRY(grad_linear_dx_f32_kn_64x64x16_res_b0, (256, 2))(TN_GRAD_RES_PARAMS(float)) {
  tn_grad_gemm_res<tn_simt_gemm<64, 64, 16, 256, 4, 4, false, Res<float>>>(TN_GRAD_RES_ARGS);
}
TN_ENTRY(grad_linear_dx_bf16_kn_64x64x32_dgelu_b0, (128, 1))(TN_GRAD_RES_PARAMS(__nv_bfloat16)) {
  tn_grad_gemm_res<tn_mma_gemm<__nv_bfloat16, 64, 64, 32, 128, 2, 2, false, DAct<__nv_bfloat16, tn_act_grad_gelu>>>(
      TN_GRAD_RES_ARGS);
}
TN_ENTRY(grad_gemm_sum_splits_bf16, (256))(const float* partials, __nv_bfloat16* c, long long count, int splits) {
  tn_gemm_sum_splits(partials, c, count, splits);
}
TN_ENTRY(grad_gemm_sum_splits_f32, (256))(const float* partials, float* c, long long count, int splits) {
  tn_gemm_sum_splits(partials, c, count, splits);
}
