// The pointwise activations as functors over f32 values, `Op<T>` for the storage type T of the
// kernel they are in. The elementwise ops and the GEMM epilogues both use them, named by
// ops/activation.cpp's table, so a fused layer computes exactly what the unfused pair does.
//
// The logistic forms use __expf and __fdividef (a few ulp, within every dtype's tolerance)
// instead of expf, tanhf and IEEE division, whose longer instruction sequences dominate a fused
// GEMM epilogue.
#ifndef TEENY_ACTIVATION_CUH
#define TEENY_ACTIVATION_CUH

#include "prelude.cuh"

template <typename T>
struct tn_act_relu {
  __device__ __forceinline__ float operator()(float v) const { return (v < 0.f ? 0.f : v); }
};

template <typename T>
struct tn_act_silu {
  __device__ __forceinline__ float operator()(float v) const { return __fdividef(v, 1.f + __expf(-v)); }
};

template <typename T>
struct tn_act_sigmoid {
  __device__ __forceinline__ float operator()(float v) const { return __fdividef(1.f, 1.f + __expf(-v)); }
};

template <typename T>
struct tn_act_tanh {
  __device__ __forceinline__ float operator()(float v) const { return tanhf(v); }
};

// GELU, erf form.
template <typename T>
struct tn_act_gelu {
  __device__ __forceinline__ float operator()(float v) const {
    return (0.5f * v * (1.f + erff(v * 0.7071067811865476f)));
  }
};

// GELU, tanh form, in the precision T keeps (tn_gelu_tanh).
template <typename T>
struct tn_act_gelu_tanh {
  __device__ __forceinline__ float operator()(float v) const { return tn_gelu_tanh<T>(v); }
};

// No activation: the identity.
template <typename T>
struct tn_act_none {
  __device__ __forceinline__ float operator()(float v) const { return v; }
};

#endif  // TEENY_ACTIVATION_CUH
