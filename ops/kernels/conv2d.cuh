// Convolutions over NCHW on CUDA cores (ops/vision_common.cpp, for the conv ops): the implicit GEMM
// with its 1x1 path (the default; `teeny tune`'s variant `simt`, beside conv2d_mma.cuh's `mma`),
// and the depthwise kernel, each with a per-output-channel epilogue fused into its stores.
// Activations and params share the storage type T (float, __half, __nv_bfloat16); loads convert
// to f32, products accumulate in f32 on CUDA cores, and stores round to T.
//
// A kernel is a struct (tn_conv2d_igemm, tn_conv2d_depthwise) whose static run() takes the
// epilogue; the entries (tn_conv2d, tn_conv2d_bias, tn_conv2d_bn_act) take the epilogue's params in
// the launch's order and forward the kernel's sizes.
#ifndef TEENY_CONV2D_CUH
#define TEENY_CONV2D_CUH

#include "activation.cuh"
#include "prelude.cuh"
#include "vision.cuh"

// A convolution's constants: channels, groups (groups == in channels: depthwise) and its
// window (tn_window of vision.cuh), whose members it inherits.
template <int kInChannels, int kOutChannels, int kGroups, class Window>
struct tn_conv_shape : Window {
  static constexpr int kCIn = kInChannels, kCo = kOutChannels;
  static constexpr int kCg = kInChannels / kGroups;    // input channels a group
  static constexpr int kCog = kOutChannels / kGroups;  // output channels a group
  static constexpr int kKhw = Window::kKh * Window::kKw;
  static constexpr int kReduction = kCg * kKhw;  // the GEMM's K: (c, kh, kw) of a group
  // A 1x1 window without stride or padding: the input itself is the GEMM's right operand.
  static constexpr bool kPointwise = Window::kKh == 1 && Window::kKw == 1 && Window::kSh == 1 && Window::kSw == 1 &&
                                     Window::kPh == 0 && Window::kPw == 0;
};

// ---- epilogues -------------------------------------------------------------------------------
// channel(co) reads what output channel co needs, once; the Channel it returns turns each of the
// channel's accumulators into the output value: y = Act(acc * scale + shift + residual[off]), off
// the output's offset (the residual has the output's shape), Act an activation.cuh functor.

template <typename T, template <typename> class Act, bool kResidual>
struct tn_conv_channel {
  float scale, shift;
  const T* residual;
  __device__ __forceinline__ float operator()(float acc, long long off) const {
    const float v = fmaf(acc, scale, shift);
    return Act<T>()(kResidual ? v + tn_ldg_f32(residual + off) : v);
  }
};

// The bias (or none) per channel, then Act.
template <typename T, template <typename> class Act>
struct tn_conv_bias {
  const T* bias;  // nullptr: no bias
  using Channel = tn_conv_channel<T, Act, false>;
  __device__ __forceinline__ Channel channel(int co) const {
    return {1.f, bias != nullptr ? tn_ldg_f32(bias + co) : 0.f, nullptr};
  }
};

// Inference batch norm folded per channel, then the residual (kResidual) and Act.
template <typename T, template <typename> class Act, bool kResidual>
struct tn_conv_bn_act {
  const T *weight, *bias, *mean, *var;
  float eps;
  const T* residual;
  using Channel = tn_conv_channel<T, Act, kResidual>;
  __device__ __forceinline__ Channel channel(int co) const {
    // sqrtf (IEEE) rather than rsqrtf, to stay within float rounding of PyTorch.
    const float scale = tn_ldg_f32(weight + co) / sqrtf(tn_ldg_f32(var + co) + eps);
    const float shift = tn_ldg_f32(bias + co) - tn_ldg_f32(mean + co) * scale;
    return {scale, shift, residual};
  }
};

// ---- implicit GEMM ---------------------------------------------------------------------------

// Where one output pixel (`pix` of image `img`) reads X[k, n] from x for one group: the 1x1 path
// reads x[img, group's first channel + k, pix]; otherwise `x` is the image's first channel of the
// group and (ih0, iw0) the window's corner for the pixel.
template <class Shape, typename T>
struct tn_conv_source {
  const T* x;
  int ih0 = 0, iw0 = 0;
  __device__ __forceinline__ tn_conv_source(const T* x_all, int img, int pix, int group, int in_h, int in_w, int out_w,
                                            int hw_out) {
    if constexpr (Shape::kPointwise) {
      x = x_all + ((long long)img * Shape::kCIn + group * Shape::kCg) * hw_out + pix;
    } else {
      const int oh = pix / out_w, ow = pix - oh * out_w;
      ih0 = oh * Shape::kSh - Shape::kPh;
      iw0 = ow * Shape::kSw - Shape::kPw;
      x = x_all + ((long long)img * Shape::kCIn + group * Shape::kCg) * in_h * in_w;
    }
  }
  // X[k, n]'s element, or nullptr where the window is outside the image (zero padding).
  __device__ __forceinline__ const T* at(int k, int in_h, int in_w, int hw_out) const {
    if constexpr (Shape::kPointwise) {
      return x + (long long)k * hw_out;
    } else {
      const int c = k / Shape::kKhw, r = k - c * Shape::kKhw;
      const int kh = r / Shape::kKw, kw = r - kh * Shape::kKw;
      const int ih = ih0 + kh * Shape::kDh, iw = iw0 + kw * Shape::kDw;
      if ((unsigned)ih >= (unsigned)in_h || (unsigned)iw >= (unsigned)in_w) return nullptr;
      return x + ((long long)c * in_h + ih) * in_w + iw;
    }
  }
};
//
// Per group: y[co, n] = sum_k W[co, k] * X[k, n] with n = (b, oh, ow) flattened over the batch and
// k = (c, kh, kw); X is gathered from x on the fly (im2col never materialised). A CTA computes a
// kBlockCo x kBlockP output tile; each thread a kThreadCo x kThreadP register block of adjacent
// channels and adjacent pixels, so both operands come from shared memory as vectors (16-byte
// loads for 4 values) and a warp's stores cover consecutive addresses. Shared-memory tiles are
// double-buffered: the next K slice is fetched into registers while the current one is consumed.
template <int kTileCo, int kTileP, int kTileK, int kPerThreadCo, int kPerThreadP>
struct tn_conv_tile {
  static constexpr int kBlockCo = kTileCo, kBlockP = kTileP, kBlockK = kTileK;
  static constexpr int kThreadCo = kPerThreadCo, kThreadP = kPerThreadP;
  static constexpr int kPThreads = kBlockP / kThreadP;
  static constexpr int kThreads = (kBlockCo / kThreadCo) * kPThreads;
};

// The type of kVec consecutive values of X (as floats) that one thread loads at once.
template <int kVec>
struct tn_conv_floats;
template <>
struct tn_conv_floats<1> {
  using type = float;
};
template <>
struct tn_conv_floats<4> {
  using type = float4;
};

// Four consecutive elements at p, aligned to four elements, as floats: one 16-byte (f32) or 8-byte
// (16-bit) load.
template <typename T>
__device__ __forceinline__ float4 tn_conv_load4_aligned(const T* p) {
  if constexpr (sizeof(T) == 4) {
    return __ldg(reinterpret_cast<const float4*>(p));
  } else {
    const uint2 r = __ldg(reinterpret_cast<const uint2*>(p));  // element 0 in r.x's low half
    const auto f32 = [](unsigned bits) { return tn_f32(tn_from_raw<T>((unsigned short)bits)); };
    return make_float4(f32(r.x & 0xffffu), f32(r.x >> 16), f32(r.y & 0xffffu), f32(r.y >> 16));
  }
}

// kVec = 4: the 1x1 path loads X four pixels at a time (each image's plane a multiple of 4 pixels).
template <class Shape, class Tile, int kVec>
struct tn_conv2d_igemm {
  static constexpr int kBlockCo = Tile::kBlockCo, kBlockP = Tile::kBlockP, kBlockK = Tile::kBlockK;
  static constexpr int kThreadCo = Tile::kThreadCo, kThreadP = Tile::kThreadP;
  static constexpr int kThreads = Tile::kThreads;
  static constexpr int kK = Shape::kReduction;
  // Tile loads: each thread loads kALoads values of the A (weight) tile, kALoadRows rows apart,
  // and kBLoads vectors of the B (input) tile, kBRowStep rows apart.
  static constexpr int kALoadRows = kThreads / kBlockK;
  static constexpr int kALoads = kBlockCo / kALoadRows;
  static constexpr int kBCols = kBlockP / kVec;
  static constexpr int kBRowStep = kThreads / kBCols;
  static constexpr int kBLoads = kBlockK / kBRowStep;
  static_assert(kThreads % kBlockK == 0 && kBlockCo % kALoadRows == 0, "A tile loader");
  static_assert(kThreads % kBCols == 0 && kBlockK % kBRowStep == 0, "B tile loader");
  static_assert(kVec == 1 || Shape::kPointwise, "vector loads are the 1x1 path's");
  using BVec = typename tn_conv_floats<kVec>::type;

  template <typename T, class Epilogue>
  static __device__ __forceinline__ void run(const T* x, const T* weight, const Epilogue& epilogue, T* y, int batch,
                                             int in_h, int in_w, int out_h, int out_w) {
    __shared__ __align__(16) float a_tile[2][kBlockK][kBlockCo + 4];
    __shared__ __align__(16) float b_tile[2][kBlockK][kBlockP + 4];
    const int tid = threadIdx.x;
    const int group = blockIdx.z;
    const int m0 = blockIdx.y * kBlockCo;
    const int hw_out = out_h * out_w;
    const long long n_total = (long long)batch * hw_out;
    const long long n0 = (long long)blockIdx.x * kBlockP;
    const T* w_group = weight + (long long)group * Shape::kCog * kK;
    // x allows 4-pixel loads (16 bytes in f32, 8 in 16-bit); kVec = 4 keeps every load so aligned.
    const bool x_aligned = (reinterpret_cast<unsigned long long>(x) & (4 * sizeof(T) - 1)) == 0;

    // This thread's share of the tile loads: A at (a_m + i*kALoadRows, a_k), B at (b_row + i*kBRowStep, b_col).
    const int a_k = tid % kBlockK, a_m = tid / kBlockK;
    const int b_col = (tid % kBCols) * kVec, b_row = tid / kBCols;
    const long long n_load = n0 + b_col;
    const bool n_ok = n_load < n_total;
    const int img = n_ok ? (int)(n_load / hw_out) : 0;
    const int pix = n_ok ? (int)(n_load - (long long)img * hw_out) : 0;
    const tn_conv_source<Shape, T> src(x, img, pix, group, in_h, in_w, out_w, hw_out);

    float a_reg[kALoads];
    BVec b_reg[kBLoads];
    auto load_tiles = [&](int k0) {
#pragma unroll
      for (int i = 0; i < kALoads; ++i) {
        const int m = m0 + a_m + i * kALoadRows, k = k0 + a_k;
        a_reg[i] = m < Shape::kCog && k < kK ? tn_ldg_f32(w_group + (long long)m * kK + k) : 0.f;
      }
#pragma unroll
      for (int i = 0; i < kBLoads; ++i) {
        const int k = k0 + b_row + i * kBRowStep;
        if constexpr (kVec == 4) {
          float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
          if (n_ok && k < kK) {
            const T* p = src.at(k, in_h, in_w, hw_out);
            if (x_aligned)
              v = tn_conv_load4_aligned(p);
            else
              v = make_float4(tn_ldg_f32(p), tn_ldg_f32(p + 1), tn_ldg_f32(p + 2), tn_ldg_f32(p + 3));
          }
          b_reg[i] = v;
        } else {
          const T* p = n_ok && k < kK ? src.at(k, in_h, in_w, hw_out) : nullptr;
          b_reg[i] = p != nullptr ? tn_ldg_f32(p) : 0.f;
        }
      }
    };
    auto store_tiles = [&](int s) {
#pragma unroll
      for (int i = 0; i < kALoads; ++i) a_tile[s][a_k][a_m + i * kALoadRows] = a_reg[i];
#pragma unroll
      for (int i = 0; i < kBLoads; ++i) {
        if constexpr (kVec == 4)
          *reinterpret_cast<float4*>(&b_tile[s][b_row + i * kBRowStep][b_col]) = b_reg[i];
        else
          b_tile[s][b_row + i * kBRowStep][b_col] = b_reg[i];
      }
    };

    const int tx = tid % Tile::kPThreads, ty = tid / Tile::kPThreads;
    float accs[kThreadCo][kThreadP];
#pragma unroll
    for (int i = 0; i < kThreadCo; ++i)
#pragma unroll
      for (int j = 0; j < kThreadP; ++j) accs[i][j] = 0.f;

    load_tiles(0);
    store_tiles(0);
    __syncthreads();
    int stage = 0;
    for (int k0 = 0; k0 < kK; k0 += kBlockK) {
      const bool more = k0 + kBlockK < kK;
      if (more) load_tiles(k0 + kBlockK);
#pragma unroll
      for (int kk = 0; kk < kBlockK; ++kk) {
        float a[kThreadCo], b[kThreadP];
#pragma unroll
        for (int i = 0; i < kThreadCo; ++i) a[i] = a_tile[stage][kk][ty * kThreadCo + i];
#pragma unroll
        for (int j = 0; j < kThreadP; ++j) b[j] = b_tile[stage][kk][tx * kThreadP + j];
#pragma unroll
        for (int i = 0; i < kThreadCo; ++i)
#pragma unroll
          for (int j = 0; j < kThreadP; ++j) accs[i][j] = fmaf(a[i], b[j], accs[i][j]);
      }
      if (more) {
        store_tiles(stage ^ 1);
        __syncthreads();
        stage ^= 1;
      }
    }

    long long out_off[kThreadP];  // y offset of each pixel without the channel term; -1 = outside
#pragma unroll
    for (int j = 0; j < kThreadP; ++j) {
      const long long n = n0 + tx * kThreadP + j;
      const long long im = n / hw_out;
      out_off[j] = n < n_total ? im * Shape::kCo * hw_out + (n - im * hw_out) : -1;
    }
#pragma unroll
    for (int i = 0; i < kThreadCo; ++i) {
      const int m = m0 + ty * kThreadCo + i;
      if (m < Shape::kCog) {
        const int co = group * Shape::kCog + m;
        const typename Epilogue::Channel channel = epilogue.channel(co);
#pragma unroll
        for (int j = 0; j < kThreadP; ++j) {
          const float acc = accs[i][j];
          const long long off = out_off[j] + (long long)co * hw_out;
          if (out_off[j] >= 0) y[off] = tn_cast<T>(channel(acc, off));
        }
      }
    }
  }
};

// ---- depthwise -------------------------------------------------------------------------------
//
// groups == C: each output channel reads one input channel, so there is no reduction over
// channels to tile. A CTA computes a kTileH x kTileW output tile of one (image, channel) plane,
// one output per thread, from an input patch (with halo) staged once in shared memory.
template <class Shape, int kTileH, int kTileW>
struct tn_conv2d_depthwise {
  static constexpr int kThreads = kTileH * kTileW;
  static constexpr int kMultiplier = Shape::kCo / Shape::kCIn;  // output channels an input channel
  static constexpr int kPatchH = (kTileH - 1) * Shape::kSh + (Shape::kKh - 1) * Shape::kDh + 1;
  static constexpr int kPatchW = (kTileW - 1) * Shape::kSw + (Shape::kKw - 1) * Shape::kDw + 1;

  // The grid covers the batch (blockIdx.x is image * kCo + channel), so there is no batch size.
  template <typename T, class Epilogue>
  static __device__ __forceinline__ void run(const T* x, const T* weight, const Epilogue& epilogue, T* y, int in_h,
                                             int in_w, int out_h, int out_w) {
    __shared__ float patch[kPatchH * kPatchW];
    const int tid = threadIdx.x;
    const int plane = blockIdx.x;  // img * kCo + co
    const int co = plane % Shape::kCo, img = plane / Shape::kCo;
    const int tiles_w = (out_w + kTileW - 1) / kTileW;
    const int oh0 = (blockIdx.y / tiles_w) * kTileH, ow0 = (blockIdx.y % tiles_w) * kTileW;
    const int ih0 = oh0 * Shape::kSh - Shape::kPh, iw0 = ow0 * Shape::kSw - Shape::kPw;
    const T* x_plane = x + ((long long)img * Shape::kCIn + co / kMultiplier) * in_h * in_w;
    for (int i = tid; i < kPatchH * kPatchW; i += kThreads) {
      const int ih = ih0 + i / kPatchW, iw = iw0 + i % kPatchW;
      patch[i] = (unsigned)ih < (unsigned)in_h && (unsigned)iw < (unsigned)in_w
                     ? tn_ldg_f32(x_plane + (long long)ih * in_w + iw)
                     : 0.f;
    }
    float w[Shape::kKhw];
#pragma unroll
    for (int i = 0; i < Shape::kKhw; ++i) w[i] = tn_ldg_f32(weight + co * Shape::kKh * Shape::kKw + i);
    __syncthreads();

    const int ty = tid / kTileW, tx = tid % kTileW;
    const int oh = oh0 + ty, ow = ow0 + tx;
    if (oh >= out_h || ow >= out_w) return;
    float acc = 0.f;
#pragma unroll
    for (int kh = 0; kh < Shape::kKh; ++kh)
#pragma unroll
      for (int kw = 0; kw < Shape::kKw; ++kw)
        acc = fmaf(patch[(ty * Shape::kSh + kh * Shape::kDh) * kPatchW + tx * Shape::kSw + kw * Shape::kDw],
                   w[kh * Shape::kKw + kw], acc);
    const typename Epilogue::Channel channel = epilogue.channel(co);
    const long long off = (long long)plane * out_h * out_w + oh * out_w + ow;
    y[off] = tn_cast<T>(channel(acc, off));
  }
};

// ---- entries ---------------------------------------------------------------------------------
// T: the storage type of x, the params and y; Kernel: a tn_conv2d_igemm or tn_conv2d_depthwise;
// `sizes` are its run()'s sizes.

template <typename T, class Kernel, template <typename> class Act, typename... Sizes>
__device__ __forceinline__ void tn_conv2d(const T* x, const T* weight, T* y, Sizes... sizes) {
  Kernel::run(x, weight, tn_conv_bias<T, Act>{nullptr}, y, sizes...);
}

template <typename T, class Kernel, template <typename> class Act, typename... Sizes>
__device__ __forceinline__ void tn_conv2d_bias(const T* x, const T* weight, const T* bias, T* y, Sizes... sizes) {
  Kernel::run(x, weight, tn_conv_bias<T, Act>{bias}, y, sizes...);
}

template <typename T, class Kernel, template <typename> class Act, typename... Sizes>
__device__ __forceinline__ void tn_conv2d_bn_act(const T* x, const T* weight, const T* bn_weight, const T* bn_bias,
                                                 const T* bn_mean, const T* bn_var, float eps, T* y, Sizes... sizes) {
  Kernel::run(x, weight, tn_conv_bn_act<T, Act, false>{bn_weight, bn_bias, bn_mean, bn_var, eps, nullptr}, y, sizes...);
}

// With a residual (the output's shape) added after the batch norm, before Act: ResNet's block end.
template <typename T, class Kernel, template <typename> class Act, typename... Sizes>
__device__ __forceinline__ void tn_conv2d_bn_add_act(const T* x, const T* residual, const T* weight, const T* bn_weight,
                                                     const T* bn_bias, const T* bn_mean, const T* bn_var, float eps,
                                                     T* y, Sizes... sizes) {
  Kernel::run(x, weight, tn_conv_bn_act<T, Act, true>{bn_weight, bn_bias, bn_mean, bn_var, eps, residual}, y, sizes...);
}

#endif  // TEENY_CONV2D_CUH
