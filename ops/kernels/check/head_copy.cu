// head_copy.cuh instantiated for kernel_check (see check.cuh): both layouts, 16-byte units of
// each dtype and single elements.
#include "../head_copy.cuh"
#include "check.cuh"

TN_ENTRY(split_heads_f32_u4, (256))
(const float* x, float* y, long long units, int S, int heads, int head_dim, int ldx) {
  tn_head_copy<float, 4, tn_split_heads>(x, y, units, S, heads, head_dim, ldx);
}
TN_ENTRY(split_heads_f16_u1, (256))
(const __half* x, __half* y, long long units, int S, int heads, int head_dim, int ldx) {
  tn_head_copy<__half, 1, tn_split_heads>(x, y, units, S, heads, head_dim, ldx);
}
TN_ENTRY(merge_heads_bf16_u8, (256))
(const __nv_bfloat16* x, __nv_bfloat16* y, long long units, int S, int heads, int head_dim, int ldx) {
  tn_head_copy<__nv_bfloat16, 8, tn_merge_heads>(x, y, units, S, heads, head_dim, ldx);
}
TN_ENTRY(merge_heads_f32_u1, (256))
(const float* x, float* y, long long units, int S, int heads, int head_dim, int ldx) {
  tn_head_copy<float, 1, tn_merge_heads>(x, y, units, S, heads, head_dim, ldx);
}
