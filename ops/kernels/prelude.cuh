// The teeny kernel prelude: what every kernel header builds on (16-bit float types and
// conversions, 16-byte vector access, warp/block reductions, row access). Kernels include no
// CUDA headers (NVRTC has no default include path, and bundles must compile the same on any
// machine). Device-side names start with `tn_`.
//
// The API (stable; every kernel header relies on it):
//   __half, __nv_bfloat16            2-byte storage types (defined unless cuda_fp16.h /
//                                    cuda_bf16.h were included first)
//   float tn_f32(T v)                T in {float, __half, __nv_bfloat16, int} -> float
//   T tn_cast<T>(float v)            float -> T, round to nearest even
//   tn_pack<T>::kN                   elements of T per 16 bytes (4 for float, 8 for 16-bit)
//   void tn_load16<T>(const T* p, float (&v)[tn_pack<T>::kN])   p must be 16-byte aligned
//   void tn_store16<T>(T* p, const float (&v)[tn_pack<T>::kN])
//   bool tn_aligned16(const void* p)
//   float tn_warp_sum(float), tn_warp_max(float)         xor-shuffle, all lanes get the result
//   float tn_block_sum<kThreads>(float, float* smem32), tn_block_max<kThreads>(...)
//                                    smem32: __shared__ float[32]; every thread gets the result;
//                                    safe to call repeatedly with the same smem32
//   tn_row_load<T, kThreads, kItems>(row, n, vec, t, fill, float (&v)[kItems][kN])
//   tn_row_store<T, kThreads, kItems>(row, n, vec, t, const float (&v)[kItems][kN])
//                                    a group of kThreads owns a row; thread t holds packs
//                                    starting at columns (it * kThreads + t) * kN; columns >= n
//                                    read as `fill`, are never written; vec: row 16-B aligned
//   float tn_group_sum<kThreads>(float, float* smem32), tn_group_max<kThreads>(...)
//                                    warp shuffle when kThreads == 32, else block-wide
//   float tn_neg_inf()
//   tn_kahan_sum                     compensated f32 sum: add(x), then .sum; for one thread's
//                                    long serial sums (error independent of the length)
#ifndef TEENY_PRELUDE_CUH
#define TEENY_PRELUDE_CUH

#ifndef __CUDA_FP16_TYPES_EXIST__
struct __align__(2) __half {
  unsigned short tn_bits;
};
#endif
#ifndef __CUDA_BF16_TYPES_EXIST__
struct __align__(2) __nv_bfloat16 {
  unsigned short tn_bits;
};
#endif

template <typename T>
__device__ __forceinline__ unsigned short tn_raw(T v) {
  return *reinterpret_cast<const unsigned short*>(&v);
}
template <typename T>
__device__ __forceinline__ T tn_from_raw(unsigned short b) {
  return *reinterpret_cast<const T*>(&b);
}

__device__ __forceinline__ float tn_f32(float v) { return v; }
__device__ __forceinline__ float tn_f32(int v) { return (float)v; }
__device__ __forceinline__ float tn_f32(__nv_bfloat16 v) { return __uint_as_float(((unsigned)tn_raw(v)) << 16); }
__device__ __forceinline__ float tn_f32(__half v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(tn_raw(v)));
  return f;
}

template <typename T>
__device__ __forceinline__ T tn_cast(float v);
template <>
__device__ __forceinline__ float tn_cast<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 tn_cast<__nv_bfloat16>(float v) {
  unsigned short b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(v));
  return tn_from_raw<__nv_bfloat16>(b);
}
template <>
__device__ __forceinline__ __half tn_cast<__half>(float v) {
  unsigned short b;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(v));
  return tn_from_raw<__half>(b);
}

template <typename T>
struct tn_pack {
  static constexpr int kN = 16 / sizeof(T);
};

// GELU, tanh form, in the precision the storage type T keeps. bf16 takes tanh.approx (one MUFU
// op, absolute error about 2^-11: under bf16's 2^-9 rounding, and a third faster than the
// exp/divide form in GPT-2's fused 3072-wide GEMM epilogue); f32 and f16 (atol 1e-3) take
// 0.5 v (1 + tanh(z)) = v / (1 + exp(-2z)), whose exp overflowing to inf gives -0, the limit.
template <typename T>
struct tn_is_bf16 {
  static constexpr bool kValue = false;
};
template <>
struct tn_is_bf16<__nv_bfloat16> {
  static constexpr bool kValue = true;
};
template <typename T>
__device__ __forceinline__ float tn_gelu_tanh(float v) {
  const float z = 0.7978845608028654f * (v + 0.044715f * v * v * v);
  if (tn_is_bf16<T>::kValue) {
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(z));
    return 0.5f * v * (1.f + t);
  }
  return __fdividef(v, 1.f + __expf(-2.f * z));
}

__device__ __forceinline__ bool tn_aligned16(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

__device__ __forceinline__ void tn_unpack16(const uint4& r, float (&v)[4]) {
  v[0] = __uint_as_float(r.x);
  v[1] = __uint_as_float(r.y);
  v[2] = __uint_as_float(r.z);
  v[3] = __uint_as_float(r.w);
}
template <typename T>
__device__ __forceinline__ void tn_unpack16(const uint4& r, float (&v)[8]) {
  const unsigned w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = tn_f32(tn_from_raw<T>((unsigned short)(w[k] & 0xffffu)));
    v[2 * k + 1] = tn_f32(tn_from_raw<T>((unsigned short)(w[k] >> 16)));
  }
}

template <typename T>
__device__ __forceinline__ void tn_load16(const T* p, float (&v)[tn_pack<T>::kN]) {
  const uint4 r = __ldg(reinterpret_cast<const uint4*>(p));
  if constexpr (sizeof(T) == 4)
    tn_unpack16(r, v);
  else
    tn_unpack16<T>(r, v);
}

template <typename T>
__device__ __forceinline__ void tn_store16(T* p, const float (&v)[tn_pack<T>::kN]) {
  uint4 r;
  if constexpr (sizeof(T) == 4) {
    r.x = __float_as_uint(v[0]);
    r.y = __float_as_uint(v[1]);
    r.z = __float_as_uint(v[2]);
    r.w = __float_as_uint(v[3]);
  } else {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      w[k] = (unsigned)tn_raw(tn_cast<T>(v[2 * k])) | ((unsigned)tn_raw(tn_cast<T>(v[2 * k + 1])) << 16);
    r.x = w[0];
    r.y = w[1];
    r.z = w[2];
    r.w = w[3];
  }
  *reinterpret_cast<uint4*>(p) = r;
}

__device__ __forceinline__ float tn_neg_inf() { return __int_as_float(0xff800000); }

// Kahan's compensated summation. No multiply is involved, so FMA contraction cannot fold away
// the compensation term.
struct tn_kahan_sum {
  float sum = 0.f, carry = 0.f;
  __device__ __forceinline__ void add(float v) {
    const float y = v - carry;
    const float t = sum + y;
    carry = (t - sum) - y;
    sum = t;
  }
};

__device__ __forceinline__ float tn_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float tn_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reductions for a 1-D block of kThreads (a multiple of 32).
template <int kThreads>
__device__ __forceinline__ float tn_block_sum(float v, float* smem32) {
  v = tn_warp_sum(v);
  if constexpr (kThreads > 32) {
    __syncthreads();  // smem32 may still be read by a previous call
    if ((threadIdx.x & 31) == 0) smem32[threadIdx.x >> 5] = v;
    __syncthreads();
    v = (threadIdx.x & 31) < kThreads / 32 ? smem32[threadIdx.x & 31] : 0.f;
    v = tn_warp_sum(v);
  }
  return v;
}
template <int kThreads>
__device__ __forceinline__ float tn_block_max(float v, float* smem32) {
  v = tn_warp_max(v);
  if constexpr (kThreads > 32) {
    __syncthreads();
    if ((threadIdx.x & 31) == 0) smem32[threadIdx.x >> 5] = v;
    __syncthreads();
    v = (threadIdx.x & 31) < kThreads / 32 ? smem32[threadIdx.x & 31] : tn_neg_inf();
    v = tn_warp_max(v);
  }
  return v;
}
// Row access for groups of kThreads threads that own one row each (a warp or a block).
// Thread t of the group holds kItems packs of tn_pack<T>::kN consecutive elements: pack `it`
// starts at column (it * kThreads + t) * kN. Columns >= n read as `fill` and are not written.
// `vec`: the row pointer is 16-byte aligned, so whole packs use one 16-byte access.
template <typename T, int kThreads, int kItems>
__device__ __forceinline__ void tn_row_load(const T* row, int n, bool vec, int t, float fill,
                                            float (&v)[kItems][tn_pack<T>::kN]) {
  constexpr int kN = tn_pack<T>::kN;
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const int c0 = (it * kThreads + t) * kN;
    if (vec && c0 + kN <= n) {
      tn_load16(row + c0, v[it]);
    } else {
#pragma unroll
      for (int k = 0; k < kN; ++k) v[it][k] = c0 + k < n ? tn_f32(row[c0 + k]) : fill;
    }
  }
}
template <typename T, int kThreads, int kItems>
__device__ __forceinline__ void tn_row_store(T* row, int n, bool vec, int t, const float (&v)[kItems][tn_pack<T>::kN]) {
  constexpr int kN = tn_pack<T>::kN;
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const int c0 = (it * kThreads + t) * kN;
    if (vec && c0 + kN <= n) {
      tn_store16(row + c0, v[it]);
    } else {
#pragma unroll
      for (int k = 0; k < kN; ++k)
        if (c0 + k < n) row[c0 + k] = tn_cast<T>(v[it][k]);
    }
  }
}

// Group-wide reductions: a warp (kThreads == 32) or the whole block.
template <int kThreads>
__device__ __forceinline__ float tn_group_sum(float v, float* smem32) {
  if constexpr (kThreads == 32)
    return tn_warp_sum(v);
  else
    return tn_block_sum<kThreads>(v, smem32);
}
template <int kThreads>
__device__ __forceinline__ float tn_group_max(float v, float* smem32) {
  if constexpr (kThreads == 32)
    return tn_warp_max(v);
  else
    return tn_block_max<kThreads>(v, smem32);
}

#endif  // TEENY_PRELUDE_CUH
