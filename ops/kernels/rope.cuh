// rope (ops/rope.cpp): rotary position embedding, Hugging Face's rotate_half convention, on
// x [N, S, D] read through its row stride ldx into a contiguous y. Pair i of each D-vector,
// (x[i], x[i + D/2]), turns by the angle (offset + s) * theta^(-2i/D):
//   y[i] = x[i] cos - x[i + D/2] sin,   y[i + D/2] = x[i + D/2] cos + x[i] sin
// (sin_sign = -1 turns it back: the inverse, rope's gradient).
//
// The angle depends on (s, i) alone, so a thread owns one (s, i) and walks the N rows
// blockIdx.y, blockIdx.y + gridDim.y, ..., computing its cos and sin once. The angle is formed
// and reduced to one turn in f64, and only then rounded to f32 for sincospif, so cos and sin are
// within a few f32 ulps of the exact values (about 2e-7 up to position 2^20, 6e-7 at 2^31, where
// the f64 angle's own error starts to show); an angle formed in f32 would be off by up to half
// an ulp of the angle itself, 2.4e-4 rad at position 4096.
#ifndef TEENY_ROPE_CUH
#define TEENY_ROPE_CUH

#include "prelude.cuh"

// cos and sin of pair i's angle at `position`; log2_theta is log2(theta) in f64. The angle is
// formed in half turns (theta^(-2i/D) / pi = 2^(-(2i/D) log2(theta) - log2(pi))) so that the
// reduction to [-1, 1] half turns is exact in f64 and sincospif needs no reduction of its own.
__device__ __forceinline__ void tn_rope_cos_sin(long long position, int i, int D, double log2_theta, float& c,
                                                float& s) {
  const double half_turns = (double)position * exp2(-(double)(2 * i) / (double)D * log2_theta - 1.6514961294723187);
  const double reduced = half_turns - 2.0 * rint(0.5 * half_turns);
  sincospif((float)reduced, &s, &c);
}

// One thread per (s, i) of S * D/2, looping over rows. log2(theta) arrives as an f32 pair
// hi + lo (kernel arguments carry no f64), which holds it to about 2^-48 relative.
template <typename T>
__device__ __forceinline__ void tn_rope(const T* x, T* y, int N, int S, int D, int ldx, int offset, float log2_theta_hi,
                                        float log2_theta_lo, float sin_sign) {
  const int half = D / 2;
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= (long long)S * half) return;
  const int s = (int)(t / half), i = (int)(t % half);
  float c, sn;
  tn_rope_cos_sin((long long)offset + s, i, D, (double)log2_theta_hi + (double)log2_theta_lo, c, sn);
  sn *= sin_sign;
  for (long long n = blockIdx.y; n < N; n += gridDim.y) {
    const T* src = x + (n * S + s) * ldx + i;
    T* dst = y + (n * S + s) * D + i;
    const float a = tn_f32(src[0]), b = tn_f32(src[half]);
    dst[0] = tn_cast<T>(a * c - b * sn);
    dst[half] = tn_cast<T>(b * c + a * sn);
  }
}

#endif  // TEENY_ROPE_CUH
