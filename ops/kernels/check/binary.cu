// binary.cuh instantiated for kernel_check (see check.cuh): each op and dtype, and broadcast
// patterns with the innermost dim full, broadcast by b, and broadcast by a.
#include "../binary.cuh"
#include "check.cuh"

TN_ENTRY(add_f32_f, (256))
(const float* a, const float* b, float* y, long long n, long long d0, long long sa0, long long sb0) {
  tn_binary<float, 256, tn_add, 'f'>(a, b, y, n, d0, sa0, sb0);
}
TN_ENTRY(sub_bf16_bf, (256))
(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* y, long long n, long long d0, long long sa0,
 long long d1, long long sa1, long long sb1) {
  tn_binary<__nv_bfloat16, 256, tn_sub, 'b', 'f'>(a, b, y, n, d0, sa0, d1, sa1, sb1);
}
TN_ENTRY(mul_f16_fb, (256))
(const __half* a, const __half* b, __half* y, long long n, long long d0, long long sa0, long long sb0, long long d1,
 long long sa1) {
  tn_binary<__half, 256, tn_mul, 'f', 'b'>(a, b, y, n, d0, sa0, sb0, d1, sa1);
}
TN_ENTRY(div_f32_aba, (256))
(const float* a, const float* b, float* y, long long n, long long d0, long long sb0, long long d1, long long sa1,
 long long d2, long long sb2) {
  tn_binary<float, 256, tn_div, 'a', 'b', 'a'>(a, b, y, n, d0, sb0, d1, sa1, d2, sb2);
}
