// conv2d's gradients (ops/grad_conv2d_dx.cpp, ops/grad_conv2d_dweight.cpp) over NCHW, for every
// window, stride, padding, dilation and group count conv2d takes (the constants of tn_conv_shape,
// conv2d.cuh). Loads convert to f32, products accumulate in f32, and stores round to T.
//
// dx: the transposed ("dgrad") implicit GEMM, or for depthwise convolutions one thread per dx
// element. Every dx element is written by exactly one thread: no atomics.
// dweight: the weight-gradient ("wgrad") reduction over the output pixels n = (image, oh, ow),
// split into parts of kPartN pixels, a fixed function of the shapes. A block writes its part's
// f32 sums to partials[part][co][c, kh, kw], and tn_column_sums (grad_columns.cuh) adds the parts
// in order: no atomics, the same bits on every run and every GPU.
#ifndef TEENY_GRAD_CONV2D_CUH
#define TEENY_GRAD_CONV2D_CUH

#include "conv2d.cuh"

// ---- dx: transposed implicit GEMM ---------------------------------------------------------------
//
// Per group: dx[c, n] = sum_k A[c, k] * D[k, n] over n = (image, ih, iw), the input's pixels,
// and k = (m, kh, kw), the group's output channels and the window's taps: A[c, k] =
// W[group*kCog + m, c, kh, kw], and D[k, n] = dy[image, group*kCog + m, oh, ow] for the output
// pixel whose tap (kh, kw) lands on (ih, iw): oh = (ih + kPh - kh*kDh) / kSh where that divides
// exactly and lies in [0, out_h) (ow likewise), else 0. The tiling is the forward implicit GEMM's
// (tn_conv_tile's Co is the input channels c here): a CTA computes a kBlockC x kBlockP tile of dx
// in kThreadC x kThreadP register blocks, the K slices double-buffered in shared memory.
template <class Shape, class Tile>
struct tn_conv2d_dgrad {
  static constexpr int kBlockC = Tile::kBlockCo, kBlockP = Tile::kBlockP, kBlockK = Tile::kBlockK;
  static constexpr int kThreadC = Tile::kThreadCo, kThreadP = Tile::kThreadP;
  static constexpr int kThreads = Tile::kThreads;
  static constexpr int kK = Shape::kCog * Shape::kKhw;
  // Tile loads: each thread loads kALoads values of the A (weight) tile, kALoadRows rows apart,
  // and kBLoads values of its one pixel column of the B (dy) tile, kBRowStep rows apart.
  static constexpr int kALoadRows = kThreads / kBlockK;
  static constexpr int kALoads = kBlockC / kALoadRows;
  static constexpr int kBRowStep = kThreads / kBlockP;
  static constexpr int kBLoads = kBlockK / kBRowStep;
  static_assert(kThreads % kBlockK == 0 && kBlockC % kALoadRows == 0, "A tile loader");
  static_assert(kThreads % kBlockP == 0 && kBlockK % kBRowStep == 0, "B tile loader");

  template <typename T>
  static __device__ __forceinline__ void run(const T* dy, const T* weight, T* dx, int batch, int in_h, int in_w,
                                             int out_h, int out_w) {
    __shared__ __align__(16) float a_tile[2][kBlockK][kBlockC + 4];
    __shared__ __align__(16) float b_tile[2][kBlockK][kBlockP + 4];
    const int tid = threadIdx.x;
    const int group = blockIdx.z;
    const int c0 = blockIdx.y * kBlockC;
    const long long hw_in = (long long)in_h * in_w, hw_out = (long long)out_h * out_w;
    const long long n_total = batch * hw_in;
    const long long n0 = (long long)blockIdx.x * kBlockP;
    const T* w_group = weight + (long long)group * Shape::kCog * Shape::kReduction;

    // This thread's share of the tile loads: A at (a_c + i*kALoadRows, a_k), B at (b_row + i*kBRowStep, b_col).
    const int a_k = tid % kBlockK, a_c = tid / kBlockK;
    const int b_col = tid % kBlockP, b_row = tid / kBlockP;
    const long long n_load = n0 + b_col;
    const bool n_ok = n_load < n_total;
    const long long img = n_ok ? n_load / hw_in : 0;
    const int pix = n_ok ? (int)(n_load - img * hw_in) : 0;
    const int ih = pix / in_w, iw = pix - ih * in_w;
    const T* dy_src = dy + (img * Shape::kCo + group * Shape::kCog) * hw_out;

    float a_reg[kALoads], b_reg[kBLoads];
    auto load_tiles = [&](int k0) {
#pragma unroll
      for (int i = 0; i < kALoads; ++i) {
        const int c = c0 + a_c + i * kALoadRows, k = k0 + a_k;
        const int m = k / Shape::kKhw, tap = k - m * Shape::kKhw;
        a_reg[i] = c < Shape::kCg && k < kK
                       ? tn_ldg_f32(w_group + (long long)m * Shape::kReduction + c * Shape::kKhw + tap)
                       : 0.f;
      }
#pragma unroll
      for (int i = 0; i < kBLoads; ++i) {
        const int k = k0 + b_row + i * kBRowStep;
        const int m = k / Shape::kKhw, tap = k - m * Shape::kKhw;
        const int kh = tap / Shape::kKw, kw = tap - kh * Shape::kKw;
        // The tap lands where th = oh * kSh and tw = ow * kSw for an output pixel (oh, ow).
        const int th = ih + Shape::kPh - kh * Shape::kDh, tw = iw + Shape::kPw - kw * Shape::kDw;
        const int oh = th / Shape::kSh, ow = tw / Shape::kSw;
        const bool lands = n_ok && k < kK && th >= 0 && tw >= 0 && oh * Shape::kSh == th && ow * Shape::kSw == tw &&
                           oh < out_h && ow < out_w;
        // One predicated load (a branch around it costs 16-bit kernels spills).
        b_reg[i] = lands ? tn_ldg_f32(dy_src + m * hw_out + (long long)oh * out_w + ow) : 0.f;
      }
    };
    auto store_tiles = [&](int s) {
#pragma unroll
      for (int i = 0; i < kALoads; ++i) a_tile[s][a_k][a_c + i * kALoadRows] = a_reg[i];
#pragma unroll
      for (int i = 0; i < kBLoads; ++i) b_tile[s][b_row + i * kBRowStep][b_col] = b_reg[i];
    };

    const int tx = tid % Tile::kPThreads, ty = tid / Tile::kPThreads;
    // The image and pixel of this thread's first output, found before the accumulators take the
    // registers (a 64-bit division is a call that would spill them).
    const long long n_out = n0 + tx * kThreadP;
    const long long out_first_img = n_out / hw_in, out_first_pix = n_out - out_first_img * hw_in;
    float accs[kThreadC][kThreadP];
#pragma unroll
    for (int i = 0; i < kThreadC; ++i)
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
        float a[kThreadC], b[kThreadP];
#pragma unroll
        for (int i = 0; i < kThreadC; ++i) a[i] = a_tile[stage][kk][ty * kThreadC + i];
#pragma unroll
        for (int j = 0; j < kThreadP; ++j) b[j] = b_tile[stage][kk][tx * kThreadP + j];
#pragma unroll
        for (int i = 0; i < kThreadC; ++i)
#pragma unroll
          for (int j = 0; j < kThreadP; ++j) accs[i][j] = fmaf(a[i], b[j], accs[i][j]);
      }
      if (more) {
        store_tiles(stage ^ 1);
        __syncthreads();
        stage ^= 1;
      }
    }

    long long out_off[kThreadP];  // dx offset of each pixel without the channel term; -1 = outside
    long long out_img = out_first_img, out_pix = out_first_pix;
#pragma unroll
    for (int j = 0; j < kThreadP; ++j) {
      out_off[j] = n_out + j < n_total ? out_img * Shape::kCIn * hw_in + out_pix : -1;
      if (++out_pix == hw_in) {
        out_pix = 0;
        ++out_img;
      }
    }
#pragma unroll
    for (int i = 0; i < kThreadC; ++i) {
      const int c = c0 + ty * kThreadC + i;
      if (c >= Shape::kCg) continue;
      const long long channel = (long long)(group * Shape::kCg + c) * hw_in;
#pragma unroll
      for (int j = 0; j < kThreadP; ++j)
        if (out_off[j] >= 0) dx[out_off[j] + channel] = tn_cast<T>(accs[i][j]);
    }
  }
};

// ---- dx: depthwise ------------------------------------------------------------------------------
//
// groups == C: input channel c feeds output channels c*kMultiplier ... + kMultiplier - 1 alone,
// so dx[image, c, ih, iw] sums kMultiplier * kKhw terms; one thread per dx element (`count` of
// them), adjacent threads on adjacent pixels.
template <class Shape, int kThreads>
struct tn_conv2d_dgrad_depthwise {
  static constexpr int kMultiplier = Shape::kCo / Shape::kCIn;

  template <typename T>
  static __device__ __forceinline__ void run(const T* dy, const T* weight, T* dx, long long count, int in_h, int in_w,
                                             int out_h, int out_w) {
    const long long i = (long long)blockIdx.x * kThreads + threadIdx.x;
    if (i >= count) return;
    const long long rows = i / in_w;  // plane * in_h + ih
    const int iw = (int)(i - rows * in_w);
    const long long plane = rows / in_h;  // image * C + c
    const int ih = (int)(rows - plane * in_h);
    const int c = (int)(plane % Shape::kCIn);
    const long long img = plane / Shape::kCIn;
    const long long hw_out = (long long)out_h * out_w;
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < kMultiplier; ++j) {
      const int co = c * kMultiplier + j;
      const T* dy_plane = dy + (img * Shape::kCo + co) * hw_out;
      const T* w = weight + co * Shape::kKhw;
#pragma unroll
      for (int kh = 0; kh < Shape::kKh; ++kh) {
        const int th = ih + Shape::kPh - kh * Shape::kDh;
        if (th < 0 || th % Shape::kSh != 0 || th / Shape::kSh >= out_h) continue;
#pragma unroll
        for (int kw = 0; kw < Shape::kKw; ++kw) {
          const int tw = iw + Shape::kPw - kw * Shape::kDw;
          if (tw < 0 || tw % Shape::kSw != 0 || tw / Shape::kSw >= out_w) continue;
          acc = fmaf(tn_ldg_f32(dy_plane + (long long)(th / Shape::kSh) * out_w + tw / Shape::kSw),
                     tn_ldg_f32(w + kh * Shape::kKw + kw), acc);
        }
      }
    }
    dx[i] = tn_cast<T>(acc);
  }
};

// ---- dweight: implicit GEMM over parts of the pixels --------------------------------------------
//
// Per group: dW[m, w] = sum_n dy[m, n] * X[w, n] over the output pixels n = (image, oh, ow), with
// w = (c, kh, kw) the weight's columns and X gathered from x as the forward implicit GEMM does
// (0 in the padding). Block (part, tile, group) sums the pixels of its part for a kBlockM x
// kBlockW tile of dW (tn_conv_tile's Co is m, its P the columns w and its K slice kBlockN
// pixels), kThreadM x kThreadW a thread, each thread over the part's slices in order.
template <class Shape, class Tile, int kPartN>
struct tn_conv2d_wgrad {
  static constexpr int kBlockM = Tile::kBlockCo, kBlockW = Tile::kBlockP, kBlockN = Tile::kBlockK;
  static constexpr int kThreadM = Tile::kThreadCo, kThreadW = Tile::kThreadP;
  static constexpr int kThreads = Tile::kThreads;
  static constexpr int kW = Shape::kReduction;  // a weight row's columns: (c, kh, kw)
  static constexpr int kTilesW = (kW + kBlockW - 1) / kBlockW;
  // Tile loads: each thread loads pixel n_col of a slice for kALoads rows of dy and kBLoads
  // columns of X, kLoadRows apart; the columns are the thread's for the whole part.
  static constexpr int kLoadRows = kThreads / kBlockN;
  static constexpr int kALoads = kBlockM / kLoadRows;
  static constexpr int kBLoads = kBlockW / kLoadRows;
  static_assert(kThreads % kBlockN == 0 && kBlockM % kLoadRows == 0 && kBlockW % kLoadRows == 0, "tile loaders");
  static_assert(kPartN % kBlockN == 0, "whole slices a part");

  template <typename T>
  static __device__ __forceinline__ void run(const T* dy, const T* x, float* partials, int batch, int in_h, int in_w,
                                             int out_h, int out_w) {
    __shared__ __align__(16) float a_tile[2][kBlockN][kBlockM + 4];
    __shared__ __align__(16) float b_tile[2][kBlockN][kBlockW + 4];
    const int tid = threadIdx.x;
    const long long part = blockIdx.x;
    const int group = blockIdx.z;
    const int m0 = (blockIdx.y / kTilesW) * kBlockM, w0 = (blockIdx.y % kTilesW) * kBlockW;
    const long long hw_in = (long long)in_h * in_w, hw_out = (long long)out_h * out_w;
    const long long n_total = batch * hw_out;
    const long long n_begin = part * kPartN;
    const long long n_end = min(n_total, n_begin + kPartN);
    const int n_col = tid % kBlockN, row = tid / kBlockN;

    // This thread's X columns: the channel's plane offset in an image (-1: past the weight's
    // columns) and the tap's offset from the window's corner.
    long long x_plane[kBLoads];
    int tap_h[kBLoads], tap_w[kBLoads];
#pragma unroll
    for (int i = 0; i < kBLoads; ++i) {
      const int w = w0 + row + i * kLoadRows;
      const int c = w / Shape::kKhw, tap = w - c * Shape::kKhw;
      const int kh = tap / Shape::kKw, kw = tap - kh * Shape::kKw;
      x_plane[i] = w < kW ? (long long)(group * Shape::kCg + c) * hw_in : -1;
      tap_h[i] = kh * Shape::kDh - Shape::kPh;
      tap_w[i] = kw * Shape::kDw - Shape::kPw;
    }

    // The image and pixel of this thread's pixel in the next slice, stepped kBlockN pixels a slice
    // (a 64-bit division a slice would be a call in the main loop).
    long long n = n_begin + n_col;
    long long img = n / hw_out;
    int pix = (int)(n - img * hw_out);
    float a_reg[kALoads], b_reg[kBLoads];
    auto load_tiles = [&]() {
      const bool n_ok = n < n_end;
      const int oh = pix / out_w, ow = pix - oh * out_w;
      const T* dy_src = dy + (img * Shape::kCo + group * Shape::kCog + m0) * hw_out + pix;
#pragma unroll
      for (int i = 0; i < kALoads; ++i) {
        const int m = row + i * kLoadRows;
        a_reg[i] = n_ok && m0 + m < Shape::kCog ? tn_ldg_f32(dy_src + m * hw_out) : 0.f;
      }
      const T* x_img = x + img * Shape::kCIn * hw_in;
#pragma unroll
      for (int i = 0; i < kBLoads; ++i) {
        const int ih = oh * Shape::kSh + tap_h[i], iw = ow * Shape::kSw + tap_w[i];
        b_reg[i] = n_ok && x_plane[i] >= 0 && (unsigned)ih < (unsigned)in_h && (unsigned)iw < (unsigned)in_w
                       ? tn_ldg_f32(x_img + x_plane[i] + (long long)ih * in_w + iw)
                       : 0.f;
      }
      n += kBlockN;
      for (pix += kBlockN; pix >= hw_out; pix -= hw_out) ++img;
    };
    auto store_tiles = [&](int s) {
#pragma unroll
      for (int i = 0; i < kALoads; ++i) a_tile[s][n_col][row + i * kLoadRows] = a_reg[i];
#pragma unroll
      for (int i = 0; i < kBLoads; ++i) b_tile[s][n_col][row + i * kLoadRows] = b_reg[i];
    };

    const int tx = tid % Tile::kPThreads, ty = tid / Tile::kPThreads;
    float accs[kThreadM][kThreadW];
#pragma unroll
    for (int i = 0; i < kThreadM; ++i)
#pragma unroll
      for (int j = 0; j < kThreadW; ++j) accs[i][j] = 0.f;

    load_tiles();
    store_tiles(0);
    __syncthreads();
    int stage = 0;
    for (long long s0 = n_begin; s0 < n_end; s0 += kBlockN) {
      const bool more = s0 + kBlockN < n_end;
      if (more) load_tiles();
#pragma unroll
      for (int kk = 0; kk < kBlockN; ++kk) {
        float a[kThreadM], b[kThreadW];
#pragma unroll
        for (int i = 0; i < kThreadM; ++i) a[i] = a_tile[stage][kk][ty * kThreadM + i];
#pragma unroll
        for (int j = 0; j < kThreadW; ++j) b[j] = b_tile[stage][kk][tx * kThreadW + j];
#pragma unroll
        for (int i = 0; i < kThreadM; ++i)
#pragma unroll
          for (int j = 0; j < kThreadW; ++j) accs[i][j] = fmaf(a[i], b[j], accs[i][j]);
      }
      if (more) {
        store_tiles(stage ^ 1);
        __syncthreads();
        stage ^= 1;
      }
    }

    float* out = partials + part * Shape::kCo * kW;
#pragma unroll
    for (int i = 0; i < kThreadM; ++i) {
      const int m = m0 + ty * kThreadM + i;
      if (m >= Shape::kCog) continue;
      float* out_row = out + (long long)(group * Shape::kCog + m) * kW;
#pragma unroll
      for (int j = 0; j < kThreadW; ++j) {
        const int w = w0 + tx * kThreadW + j;
        if (w < kW) out_row[w] = accs[i][j];
      }
    }
  }
};

// ---- dweight: depthwise -------------------------------------------------------------------------
//
// groups == C: output channel co's kKhw weights read input channel co / kMultiplier alone. Block
// (part, co) strides its kThreads threads over the part's pixels, each keeping kKhw sums, then
// adds them across the block (tn_block_sum, a fixed order).
template <class Shape, int kThreads, int kPartN>
struct tn_conv2d_wgrad_depthwise {
  static constexpr int kMultiplier = Shape::kCo / Shape::kCIn;

  template <typename T>
  static __device__ __forceinline__ void run(const T* dy, const T* x, float* partials, int batch, int in_h, int in_w,
                                             int out_h, int out_w) {
    __shared__ float smem32[32];
    const long long part = blockIdx.x;
    const int co = blockIdx.y;
    const long long hw_in = (long long)in_h * in_w, hw_out = (long long)out_h * out_w;
    const long long n_total = batch * hw_out;
    const long long n_begin = part * kPartN;
    const long long n_end = min(n_total, n_begin + kPartN);
    float acc[Shape::kKhw];
#pragma unroll
    for (int t = 0; t < Shape::kKhw; ++t) acc[t] = 0.f;
    for (long long n = n_begin + threadIdx.x; n < n_end; n += kThreads) {
      const long long img = n / hw_out;
      const int pix = (int)(n - img * hw_out);
      const int oh = pix / out_w, ow = pix - oh * out_w;
      const float g = tn_ldg_f32(dy + (img * Shape::kCo + co) * hw_out + pix);
      const T* x_plane = x + (img * Shape::kCIn + co / kMultiplier) * hw_in;
#pragma unroll
      for (int kh = 0; kh < Shape::kKh; ++kh) {
        const int ih = oh * Shape::kSh - Shape::kPh + kh * Shape::kDh;
#pragma unroll
        for (int kw = 0; kw < Shape::kKw; ++kw) {
          const int iw = ow * Shape::kSw - Shape::kPw + kw * Shape::kDw;
          if ((unsigned)ih < (unsigned)in_h && (unsigned)iw < (unsigned)in_w)
            acc[kh * Shape::kKw + kw] =
                fmaf(g, tn_ldg_f32(x_plane + (long long)ih * in_w + iw), acc[kh * Shape::kKw + kw]);
        }
      }
    }
    float* out = partials + part * Shape::kCo * Shape::kKhw + co * Shape::kKhw;
#pragma unroll
    for (int t = 0; t < Shape::kKhw; ++t) {
      const float sum = tn_block_sum<kThreads>(acc[t], smem32);
      if (threadIdx.x == 0) out[t] = sum;
    }
  }
};

// ---- entries ------------------------------------------------------------------------------------
// T: the storage type of dy, x, the weight and dx; Kernel: one of the structs above; `sizes` its
// run()'s sizes.

template <typename T, class Kernel, typename... Sizes>
__device__ __forceinline__ void tn_conv2d_dx(const T* dy, const T* weight, T* dx, Sizes... sizes) {
  Kernel::run(dy, weight, dx, sizes...);
}

template <typename T, class Kernel, typename... Sizes>
__device__ __forceinline__ void tn_conv2d_dweight_partials(const T* dy, const T* x, float* partials, Sizes... sizes) {
  Kernel::run(dy, x, partials, sizes...);
}

#endif  // TEENY_GRAD_CONV2D_CUH
