// rope.cuh instantiated for kernel_check (see check.cuh): every dtype.
#include "../rope.cuh"
#include "check.cuh"

TN_ENTRY(rope_f32, (256))
(const float* x, float* y, int N, int S, int D, int ldx, int offset, float log2_theta_hi, float log2_theta_lo,
 float sin_sign) {
  tn_rope<float>(x, y, N, S, D, ldx, offset, log2_theta_hi, log2_theta_lo, sin_sign);
}
TN_ENTRY(rope_bf16, (256))
(const __nv_bfloat16* x, __nv_bfloat16* y, int N, int S, int D, int ldx, int offset, float log2_theta_hi,
 float log2_theta_lo, float sin_sign) {
  tn_rope<__nv_bfloat16>(x, y, N, S, D, ldx, offset, log2_theta_hi, log2_theta_lo, sin_sign);
}
TN_ENTRY(rope_f16, (256))
(const __half* x, __half* y, int N, int S, int D, int ldx, int offset, float log2_theta_hi, float log2_theta_lo,
 float sin_sign) {
  tn_rope<__half>(x, y, N, S, D, ldx, offset, log2_theta_hi, log2_theta_lo, sin_sign);
}
