// sdpa.cuh instantiated for kernel_check (see check.cuh): the three kernels at the tiles and head
// dims ops/sdpa.cpp uses (per-query kernel: 1, 2 and 4 threads a query). The tensor-core kernel
// runs under __launch_bounds__(128, 4) in bundles; here it is checked at the most blocks an SM
// that compile without spills: at 4, nvcc's PTX for head dim 64 spills 8 bytes where NVRTC's
// (the bundle's) does not, and head dim 128 spills under NVRTC too. Each kernel also with a
// sliding window (the last template argument). The decode path (sdpa_decode.cuh) at the three
// key-tile sizes its head dims pick, its tensor-core kernel at the ring depths ops/sdpa.cpp gives
// head dims 64, 128 and 256, and its combine.
#include "../sdpa.cuh"
#include "../sdpa_decode.cuh"
#include "check.cuh"

#define TN_SDPA_PARAMS(T)                                                                                    \
  (const T* q, const T* k, const T* v, T* out, int N, int Sq, int Skv, int ldq, int ldk, int ldv, int heads, \
   int kv_heads, int kv_groups, int ldo, float scale)
#define TN_SDPA_ARGS q, k, v, out, N, Sq, Skv, ldq, ldk, ldv, heads, kv_heads, kv_groups, ldo, scale

TN_ENTRY(sdpa_bf16_d64_causal_mma, (128, 3)) TN_SDPA_PARAMS(__nv_bfloat16) {
  tn_sdpa_mma<__nv_bfloat16, 64, 64, 64, 128, true>(TN_SDPA_ARGS);
}
TN_ENTRY(sdpa_f16_d128_mma, (128, 2)) TN_SDPA_PARAMS(__half) {
  tn_sdpa_mma<__half, 128, 64, 64, 128, false>(TN_SDPA_ARGS);
}
TN_ENTRY(sdpa_f32_d64_causal_tiled, (256, 2)) TN_SDPA_PARAMS(float) {
  tn_sdpa_f32_tiled<64, 64, 64, 256, true>(TN_SDPA_ARGS);
}
TN_ENTRY(sdpa_f32_d17_causal, (64, 1)) TN_SDPA_PARAMS(float) {
  tn_sdpa_per_query<float, 17, 1, 64, 16, true>(TN_SDPA_ARGS);
}
TN_ENTRY(sdpa_f32_d128, (128, 1)) TN_SDPA_PARAMS(float) {
  tn_sdpa_per_query<float, 128, 2, 64, 16, false>(TN_SDPA_ARGS);
}
TN_ENTRY(sdpa_bf16_d256_causal, (256, 1)) TN_SDPA_PARAMS(__nv_bfloat16) {
  tn_sdpa_per_query<__nv_bfloat16, 256, 4, 64, 16, true>(TN_SDPA_ARGS);
}
TN_ENTRY(sdpa_bf16_d64_causal_w48_mma, (128, 3)) TN_SDPA_PARAMS(__nv_bfloat16) {
  tn_sdpa_mma<__nv_bfloat16, 64, 64, 64, 128, true, 48>(TN_SDPA_ARGS);
}
TN_ENTRY(sdpa_f32_d64_causal_w48_tiled, (256, 2)) TN_SDPA_PARAMS(float) {
  tn_sdpa_f32_tiled<64, 64, 64, 256, true, 48>(TN_SDPA_ARGS);
}
TN_ENTRY(sdpa_f32_d17_causal_w5, (64, 1)) TN_SDPA_PARAMS(float) {
  tn_sdpa_per_query<float, 17, 1, 64, 16, true, 5>(TN_SDPA_ARGS);
}
#define TN_SDPA_DECODE_PARAMS(T)                                                                             \
  (const T* q, const T* k, const T* v, T* out, int N, int Sq, int Skv, int ldq, int ldk, int ldv, int heads, \
   int kv_heads, int kv_groups, int ldo, float scale, float* partials, int splits)
#define TN_SDPA_DECODE_ARGS TN_SDPA_ARGS, partials, splits
TN_ENTRY(sdpa_bf16_d64_decode, (128)) TN_SDPA_DECODE_PARAMS(__nv_bfloat16) {
  tn_sdpa_decode<__nv_bfloat16, 64, 8, 128, false>(TN_SDPA_DECODE_ARGS);
}
TN_ENTRY(sdpa_f16_d128_causal_w3_decode, (128)) TN_SDPA_DECODE_PARAMS(__half) {
  tn_sdpa_decode<__half, 128, 8, 128, true, 3>(TN_SDPA_DECODE_ARGS);
}
TN_ENTRY(sdpa_f32_d256_decode, (128)) TN_SDPA_DECODE_PARAMS(float) {
  tn_sdpa_decode<float, 256, 8, 128, false>(TN_SDPA_DECODE_ARGS);
}
TN_ENTRY(sdpa_bf16_d64_decode_mma, (128)) TN_SDPA_DECODE_PARAMS(__nv_bfloat16) {
  tn_sdpa_decode_mma<__nv_bfloat16, 64, 4, 4, false>(TN_SDPA_DECODE_ARGS);
}
TN_ENTRY(sdpa_f16_d128_causal_w3_decode_mma, (128)) TN_SDPA_DECODE_PARAMS(__half) {
  tn_sdpa_decode_mma<__half, 128, 4, 3, true, 3>(TN_SDPA_DECODE_ARGS);
}
TN_ENTRY(sdpa_bf16_d256_decode_mma, (128)) TN_SDPA_DECODE_PARAMS(__nv_bfloat16) {
  tn_sdpa_decode_mma<__nv_bfloat16, 256, 4, 2, false>(TN_SDPA_DECODE_ARGS);
}
TN_ENTRY(sdpa_bf16_d64_decode_combine, (128))
(const float* partials, __nv_bfloat16* out, int N, int Sq, int heads, int ldo, int splits) {
  tn_sdpa_decode_combine<__nv_bfloat16, 64, 128>(partials, out, N, Sq, heads, ldo, splits);
}
