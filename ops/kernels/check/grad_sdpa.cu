// sdpa's gradient kernels instantiated for kernel_check (see check.cuh). grad_sdpa.cuh: each
// kernel at the tiles ops/grad_sdpa.cpp picks per head dim (64 rows up to 64, 32 up to 128, 16 up
// to 256), in each dtype where it runs (off the tensor-core head dims), causal and not, and an odd
// head dim. grad_sdpa_mma.cuh: each kernel in every dtype (f32 at 64 and 128), causal and not,
// at the head dims whose register use differs most (32, 64, 96, 128), with the two-blocks-an-SM
// bound ops/grad_sdpa.cpp gives them. Each path's kernels also with a sliding window (the last
// template argument).
#include "../grad_sdpa.cuh"
#include "../grad_sdpa_mma.cuh"
#include "check.cuh"

#define TN_GRAD_SDPA_STATS_PARAMS(T)                                                                                   \
  (const T* q, const T* k, const T* o, const T* dout, float* stats, int N, int Sq, int Skv, int ldq, int ldk, int ldo, \
   int lddo, int heads, int kv_heads, int kv_groups, float scale)
#define TN_GRAD_SDPA_STATS_ARGS q, k, o, dout, stats, N, Sq, Skv, ldq, ldk, ldo, lddo, heads, kv_heads, kv_groups, scale
#define TN_GRAD_SDPA_PARAMS(T)                                                                                     \
  (const T* q, const T* k, const T* v, const T* dout, const float* stats, T* out, int N, int Sq, int Skv, int ldq, \
   int ldk, int ldv, int lddo, int ldst, int heads, int kv_heads, int kv_groups, float scale)
#define TN_GRAD_SDPA_ARGS \
  q, k, v, dout, stats, out, N, Sq, Skv, ldq, ldk, ldv, lddo, ldst, heads, kv_heads, kv_groups, scale

TN_ENTRY(grad_sdpa_stats_f32_d64_causal, (256)) TN_GRAD_SDPA_STATS_PARAMS(float) {
  tn_sdpa_grad_stats<float, 64, 64, 256, true>(TN_GRAD_SDPA_STATS_ARGS);
}
TN_ENTRY(grad_sdpa_stats_f32_d128, (256)) TN_GRAD_SDPA_STATS_PARAMS(float) {
  tn_sdpa_grad_stats<float, 128, 32, 256, false>(TN_GRAD_SDPA_STATS_ARGS);
}
TN_ENTRY(grad_sdpa_stats_f16_d256_causal, (256)) TN_GRAD_SDPA_STATS_PARAMS(__half) {
  tn_sdpa_grad_stats<__half, 256, 16, 256, true>(TN_GRAD_SDPA_STATS_ARGS);
}
TN_ENTRY(grad_sdpa_dq_f32_d64_causal, (256)) TN_GRAD_SDPA_PARAMS(float) {
  tn_sdpa_grad_dq<float, 64, 64, 256, true>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dq_bf16_d17, (256)) TN_GRAD_SDPA_PARAMS(__nv_bfloat16) {
  tn_sdpa_grad_dq<__nv_bfloat16, 17, 64, 256, false>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dq_f16_d256_causal, (256)) TN_GRAD_SDPA_PARAMS(__half) {
  tn_sdpa_grad_dq<__half, 256, 16, 256, true>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dkv_f32_d64_causal, (256)) TN_GRAD_SDPA_PARAMS(float) {
  tn_sdpa_grad_dkv<float, 64, 64, 256, true>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dkv_f32_d128, (256)) TN_GRAD_SDPA_PARAMS(float) {
  tn_sdpa_grad_dkv<float, 128, 32, 256, false>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dkv_f16_d256_causal, (256)) TN_GRAD_SDPA_PARAMS(__half) {
  tn_sdpa_grad_dkv<__half, 256, 16, 256, true>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dkv_f32_d17, (256)) TN_GRAD_SDPA_PARAMS(float) {
  tn_sdpa_grad_dkv<float, 17, 64, 256, false>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_stats_f32_d64_causal_mma, (128, 2)) TN_GRAD_SDPA_STATS_PARAMS(float) {
  tn_sdpa_grad_stats_mma<float, 64, 64, 128, true>(TN_GRAD_SDPA_STATS_ARGS);
}
TN_ENTRY(grad_sdpa_dq_f32_d64_causal_mma, (128, 2)) TN_GRAD_SDPA_PARAMS(float) {
  tn_sdpa_grad_dq_mma<float, 64, 64, 128, true>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dkv_f32_d64_causal_mma, (128, 2)) TN_GRAD_SDPA_PARAMS(float) {
  tn_sdpa_grad_dkv_mma<float, 64, 64, 64, 128, true>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_stats_f32_d128_causal_mma, (128, 2)) TN_GRAD_SDPA_STATS_PARAMS(float) {
  tn_sdpa_grad_stats_mma<float, 128, 64, 128, true>(TN_GRAD_SDPA_STATS_ARGS);
}
TN_ENTRY(grad_sdpa_dq_f32_d128_mma, (128, 2)) TN_GRAD_SDPA_PARAMS(float) {
  tn_sdpa_grad_dq_mma<float, 128, 64, 128, false>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dkv_f32_d128_mma, (128, 2)) TN_GRAD_SDPA_PARAMS(float) {
  tn_sdpa_grad_dkv_mma<float, 128, 64, 32, 128, false>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_stats_bf16_d64_causal_mma, (128, 2)) TN_GRAD_SDPA_STATS_PARAMS(__nv_bfloat16) {
  tn_sdpa_grad_stats_mma<__nv_bfloat16, 64, 64, 128, true>(TN_GRAD_SDPA_STATS_ARGS);
}
TN_ENTRY(grad_sdpa_stats_f16_d128_mma, (128, 2)) TN_GRAD_SDPA_STATS_PARAMS(__half) {
  tn_sdpa_grad_stats_mma<__half, 128, 64, 128, false>(TN_GRAD_SDPA_STATS_ARGS);
}
TN_ENTRY(grad_sdpa_stats_bf16_d96_causal_mma, (128, 2)) TN_GRAD_SDPA_STATS_PARAMS(__nv_bfloat16) {
  tn_sdpa_grad_stats_mma<__nv_bfloat16, 96, 64, 128, true>(TN_GRAD_SDPA_STATS_ARGS);
}
TN_ENTRY(grad_sdpa_stats_f16_d32_mma, (128, 2)) TN_GRAD_SDPA_STATS_PARAMS(__half) {
  tn_sdpa_grad_stats_mma<__half, 32, 64, 128, false>(TN_GRAD_SDPA_STATS_ARGS);
}
TN_ENTRY(grad_sdpa_dq_bf16_d64_causal_mma, (128, 2)) TN_GRAD_SDPA_PARAMS(__nv_bfloat16) {
  tn_sdpa_grad_dq_mma<__nv_bfloat16, 64, 64, 128, true>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dq_f16_d128_mma, (128, 2)) TN_GRAD_SDPA_PARAMS(__half) {
  tn_sdpa_grad_dq_mma<__half, 128, 64, 128, false>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dq_bf16_d96_causal_mma, (128, 2)) TN_GRAD_SDPA_PARAMS(__nv_bfloat16) {
  tn_sdpa_grad_dq_mma<__nv_bfloat16, 96, 64, 128, true>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dq_f16_d32_mma, (128, 2)) TN_GRAD_SDPA_PARAMS(__half) {
  tn_sdpa_grad_dq_mma<__half, 32, 64, 128, false>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dkv_bf16_d64_causal_mma, (128, 2)) TN_GRAD_SDPA_PARAMS(__nv_bfloat16) {
  tn_sdpa_grad_dkv_mma<__nv_bfloat16, 64, 64, 64, 128, true>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dkv_f16_d128_mma, (128, 2)) TN_GRAD_SDPA_PARAMS(__half) {
  tn_sdpa_grad_dkv_mma<__half, 128, 64, 32, 128, false>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dkv_bf16_d96_causal_mma, (128, 2)) TN_GRAD_SDPA_PARAMS(__nv_bfloat16) {
  tn_sdpa_grad_dkv_mma<__nv_bfloat16, 96, 64, 32, 128, true>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dkv_f16_d32_mma, (128, 2)) TN_GRAD_SDPA_PARAMS(__half) {
  tn_sdpa_grad_dkv_mma<__half, 32, 64, 64, 128, false>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_stats_f32_d64_causal_w48, (256)) TN_GRAD_SDPA_STATS_PARAMS(float) {
  tn_sdpa_grad_stats<float, 64, 64, 256, true, 48>(TN_GRAD_SDPA_STATS_ARGS);
}
TN_ENTRY(grad_sdpa_dq_f32_d64_causal_w48, (256)) TN_GRAD_SDPA_PARAMS(float) {
  tn_sdpa_grad_dq<float, 64, 64, 256, true, 48>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dkv_f32_d64_causal_w48, (256)) TN_GRAD_SDPA_PARAMS(float) {
  tn_sdpa_grad_dkv<float, 64, 64, 256, true, 48>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_stats_bf16_d64_causal_w48_mma, (128, 2)) TN_GRAD_SDPA_STATS_PARAMS(__nv_bfloat16) {
  tn_sdpa_grad_stats_mma<__nv_bfloat16, 64, 64, 128, true, 48>(TN_GRAD_SDPA_STATS_ARGS);
}
TN_ENTRY(grad_sdpa_dq_bf16_d64_causal_w48_mma, (128, 2)) TN_GRAD_SDPA_PARAMS(__nv_bfloat16) {
  tn_sdpa_grad_dq_mma<__nv_bfloat16, 64, 64, 128, true, 48>(TN_GRAD_SDPA_ARGS);
}
TN_ENTRY(grad_sdpa_dkv_f16_d128_causal_w1_mma, (128, 2)) TN_GRAD_SDPA_PARAMS(__half) {
  tn_sdpa_grad_dkv_mma<__half, 128, 64, 32, 128, true, 1>(TN_GRAD_SDPA_ARGS);
}
