// sdpa_wgmma.cuh instantiated for kernel_check (see check.cuh): the head dims, key tiles and
// stages ops/sdpa.cpp uses, causal and not, bf16 and f16, under the bundles' launch bounds.
#include "../sdpa_wgmma.cuh"
#include "check.cuh"

#define TN_SDPA_WGMMA_PARAMS(T)                                                                              \
  (const T* q, const T* k, const T* v, T* out, int N, int Sq, int Skv, int ldq, int ldk, int ldv, int heads, \
   int kv_heads, int kv_groups, int ldo, float scale, const __grid_constant__ tn_tensor_map q_map,           \
   const __grid_constant__ tn_tensor_map k_map, const __grid_constant__ tn_tensor_map v_map)
#define TN_SDPA_WGMMA_ARGS \
  q, k, v, out, N, Sq, Skv, ldq, ldk, ldv, heads, kv_heads, kv_groups, ldo, scale, q_map, k_map, v_map

TN_ENTRY(sdpa_bf16_d64_causal_wgmma, (384, 1)) TN_SDPA_WGMMA_PARAMS(__nv_bfloat16) {
  tn_sdpa_wgmma<__nv_bfloat16, 64, 128, 4, true>(TN_SDPA_WGMMA_ARGS);
}
TN_ENTRY(sdpa_f16_d64_wgmma, (384, 1)) TN_SDPA_WGMMA_PARAMS(__half) {
  tn_sdpa_wgmma<__half, 64, 128, 4, false>(TN_SDPA_WGMMA_ARGS);
}
TN_ENTRY(sdpa_bf16_d128_wgmma, (384, 1)) TN_SDPA_WGMMA_PARAMS(__nv_bfloat16) {
  tn_sdpa_wgmma<__nv_bfloat16, 128, 128, 3, false>(TN_SDPA_WGMMA_ARGS);
}
TN_ENTRY(sdpa_f16_d128_causal_wgmma, (384, 1)) TN_SDPA_WGMMA_PARAMS(__half) {
  tn_sdpa_wgmma<__half, 128, 128, 3, true>(TN_SDPA_WGMMA_ARGS);
}
TN_ENTRY(sdpa_bf16_d256_causal_wgmma, (384, 1)) TN_SDPA_WGMMA_PARAMS(__nv_bfloat16) {
  tn_sdpa_wgmma<__nv_bfloat16, 256, 64, 2, true>(TN_SDPA_WGMMA_ARGS);
}
TN_ENTRY(sdpa_bf16_d128_wgmma_k176, (384, 1)) TN_SDPA_WGMMA_PARAMS(__nv_bfloat16) {
  tn_sdpa_wgmma<__nv_bfloat16, 128, 176, 2, false>(TN_SDPA_WGMMA_ARGS);
}
