#include "ops/kernel_util.h"

#include <fmt/format.h>

#include <algorithm>

namespace teeny::ops {

const std::string& kernel_prelude() {
  static const std::string text = R"CUDA(// ---- teeny kernel prelude (ops/kernel_util.cpp) ----
#ifndef __CUDA_FP16_TYPES_EXIST__
struct __align__(2) __half { unsigned short tn_bits; };
#endif
#ifndef __CUDA_BF16_TYPES_EXIST__
struct __align__(2) __nv_bfloat16 { unsigned short tn_bits; };
#endif

template <typename T> __device__ __forceinline__ unsigned short tn_raw(T v) {
  return *reinterpret_cast<const unsigned short*>(&v);
}
template <typename T> __device__ __forceinline__ T tn_from_raw(unsigned short b) {
  return *reinterpret_cast<const T*>(&b);
}

__device__ __forceinline__ float tn_f32(float v) { return v; }
__device__ __forceinline__ float tn_f32(int v) { return (float)v; }
__device__ __forceinline__ float tn_f32(__nv_bfloat16 v) {
  return __uint_as_float(((unsigned)tn_raw(v)) << 16);
}
__device__ __forceinline__ float tn_f32(__half v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(tn_raw(v)));
  return f;
}

template <typename T> __device__ __forceinline__ T tn_cast(float v);
template <> __device__ __forceinline__ float tn_cast<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 tn_cast<__nv_bfloat16>(float v) {
  unsigned short b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(v));
  return tn_from_raw<__nv_bfloat16>(b);
}
template <> __device__ __forceinline__ __half tn_cast<__half>(float v) {
  unsigned short b;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(v));
  return tn_from_raw<__half>(b);
}

template <typename T> struct tn_pack { static constexpr int kN = 16 / sizeof(T); };

// GELU, tanh form, in the precision the storage type T keeps. bf16 takes tanh.approx (one MUFU
// op, absolute error about 2^-11: under bf16's 2^-9 rounding, and a third faster than the
// exp/divide form in GPT-2's fused 3072-wide GEMM epilogue); f32 and f16 (atol 1e-3) take
// 0.5 v (1 + tanh(z)) = v / (1 + exp(-2z)), whose exp overflowing to inf gives -0, the limit.
template <typename T> struct tn_is_bf16 { static constexpr bool kValue = false; };
template <> struct tn_is_bf16<__nv_bfloat16> { static constexpr bool kValue = true; };
template <typename T> __device__ __forceinline__ float tn_gelu_tanh(float v) {
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
  v[0] = __uint_as_float(r.x); v[1] = __uint_as_float(r.y);
  v[2] = __uint_as_float(r.z); v[3] = __uint_as_float(r.w);
}
template <typename T> __device__ __forceinline__ void tn_unpack16(const uint4& r, float (&v)[8]) {
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
  if constexpr (sizeof(T) == 4) tn_unpack16(r, v); else tn_unpack16<T>(r, v);
}

template <typename T>
__device__ __forceinline__ void tn_store16(T* p, const float (&v)[tn_pack<T>::kN]) {
  uint4 r;
  if constexpr (sizeof(T) == 4) {
    r.x = __float_as_uint(v[0]); r.y = __float_as_uint(v[1]);
    r.z = __float_as_uint(v[2]); r.w = __float_as_uint(v[3]);
  } else {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      w[k] = (unsigned)tn_raw(tn_cast<T>(v[2 * k])) |
             ((unsigned)tn_raw(tn_cast<T>(v[2 * k + 1])) << 16);
    r.x = w[0]; r.y = w[1]; r.z = w[2]; r.w = w[3];
  }
  *reinterpret_cast<uint4*>(p) = r;
}

__device__ __forceinline__ float tn_neg_inf() { return __int_as_float(0xff800000); }

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
__device__ __forceinline__ void tn_row_store(T* row, int n, bool vec, int t,
                                             const float (&v)[kItems][tn_pack<T>::kN]) {
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
  if constexpr (kThreads == 32) return tn_warp_sum(v); else return tn_block_sum<kThreads>(v, smem32);
}
template <int kThreads>
__device__ __forceinline__ float tn_group_max(float v, float* smem32) {
  if constexpr (kThreads == 32) return tn_warp_max(v); else return tn_block_max<kThreads>(v, smem32);
}
// ---- end of prelude ----
)CUDA";
  return text;
}

std::string kernel_typedef(const std::string& alias, DType dtype) {
  return fmt::format("typedef {} {};\n", dtype_c_type(dtype), alias);
}

std::string kernel_constant(const std::string& name, long long value) {
  return fmt::format("constexpr int {} = {};\n", name, value);
}

std::string kernel_entry(const std::vector<KernelArg>& args, int max_threads) {
  std::string params;
  for (const KernelArg& arg : args) {
    if (!params.empty()) params += ", ";
    params += arg_c_type(arg) + " " + arg.name;
  }
  const std::string bounds =
      max_threads > 0 ? fmt::format("__launch_bounds__({}) ", max_threads) : std::string();
  return fmt::format("extern \"C\" __global__ void {}{}({})", bounds, kEntryPlaceholder, params);
}

RowPlan plan_rows(const Expr& cols, DType dtype) {
  constexpr int kElementsPerThread = 16;  // registers per thread for the cached row
  constexpr int kMaxThreads = 512;        // <= 128 registers per thread at full occupancy
  constexpr int kMaxItems = 8;
  const int width = vector_width(dtype);
  RowPlan plan;
  plan.items = std::max(1, kElementsPerThread / width);
  const std::optional<int64_t> n = cols.const_value();
  if (!n) return plan;  // symbolic: 256 threads; long rows take the streaming path
  // A row of up to 32 elements a lane gets one warp: its reductions are shuffles only, with
  // no block barrier (GPT-2's 768-wide bf16 rows ran at 2.3 TB/s on 64-thread blocks). Longer
  // rows take more threads, kElementsPerThread a lane.
  constexpr int kWarpRowElements = 32;
  int64_t threads = 32;
  if (*n > 32 * kWarpRowElements)
    while (threads < kMaxThreads && threads * plan.items * width < *n) threads *= 2;
  plan.threads = static_cast<int>(threads);
  const int64_t items = (*n + threads * width - 1) / (threads * width);
  if (items <= kMaxItems) plan.items = static_cast<int>(std::max<int64_t>(1, items));
  if (plan.threads == 32) plan.rows_per_block = 4;
  return plan;
}

AttrSpec attr_spec(std::string name, AttrType type, std::string doc,
                   std::optional<nlohmann::json> default_value, std::vector<std::string> choices) {
  AttrSpec spec;
  spec.name = std::move(name);
  spec.type = type;
  spec.doc = std::move(doc);
  spec.default_value = std::move(default_value);
  spec.choices = std::move(choices);
  return spec;
}

int vector_width(DType dtype) { return static_cast<int>(16 / dtype_size(dtype)); }

DType output_float_dtype(const OpDef& def, const OpContext& ctx, DType input) {
  if (!ctx.requested_dtype) return input;
  const DType out = *ctx.requested_dtype;
  if (std::find(def.dtypes.begin(), def.dtypes.end(), out) == def.dtypes.end()) {
    std::vector<std::string> names;
    for (DType d : def.dtypes) names.push_back(dtype_name(d));
    throw OpError("dtype", fmt::format("op '{}' cannot produce dtype {} (supported: {})",
                                       def.name, dtype_name(out), fmt::join(names, ", ")));
  }
  return out;
}

std::vector<Expr> element_strides(const TensorType& type) {
  const size_t rank = type.shape.size();
  std::vector<Expr> strides(rank, Expr(1));
  if (rank == 0) return strides;
  Expr running = type.row_stride;
  for (size_t k = rank - 1; k-- > 0;) {
    strides[k] = running;
    running = running * type.shape[k];
  }
  return strides;
}

std::vector<int64_t> host_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;) strides[k - 1] = strides[k] * shape[k];
  return strides;
}

}  // namespace teeny::ops
