// Convolutions on tensor cores (`teeny tune`'s variant `mma` of the conv ops, ops/vision_common.cpp):
// conv2d.cuh's implicit GEMM, per group y[co, n] = sum_k W[co, k] * X[k, n] with n = (image,
// pixel) and k = (channel, kh, kw), on warp MMAs (mma.cuh): m16n8k16 for 16-bit T, and for f32
// 3xTF32 m16n8k8, which keeps f32 accuracy as `linear` does. Accumulation is f32 either way, and
// the epilogues and entries are conv2d.cuh's.
//
// Both shared tiles are k-contiguous, so ldmatrix reads both without transposes: W's rows as they
// lie in memory (16-byte cp.async chunks where a row allows), and X transposed, one row per pixel.
// Each thread owns one pixel of the tile and gathers 16-byte runs of its k (neighbouring threads
// own neighbouring pixels, so a warp's loads of one k fall in one image row where the stride is 1).
// K advances 64 bytes of a row a step, double-buffered: the next step's gather is in flight in
// registers and its W chunks in cp.async while the current step's MMAs run.
#ifndef TEENY_CONV2D_MMA_CUH
#define TEENY_CONV2D_MMA_CUH

#include "conv2d.cuh"
#include "gemm_common.cuh"
#include "mma.cuh"

// A CTA's output tile, kBlockCo channels x kBlockP pixels, over a kWarpsCo x kWarpsP grid of
// warps; every pixel of the tile has an owner (kBlockP divides the block).
template <int kTileCo, int kTileP, int kWarpRows, int kWarpCols>
struct tn_conv_mma_tile {
  static constexpr int kBlockCo = kTileCo, kBlockP = kTileP, kWarpsCo = kWarpRows, kWarpsP = kWarpCols;
  static constexpr int kThreads = kWarpsCo * kWarpsP * 32;
  static constexpr int kWarpCo = kBlockCo / kWarpsCo, kWarpP = kBlockP / kWarpsP;
  static_assert(kWarpCo % 16 == 0 && kWarpP % 16 == 0, "whole m16 tiles, n-tiles in pairs");
  static_assert(kThreads % kBlockP == 0, "one pixel per thread");
};

template <class Shape, class Tile>
struct tn_conv2d_mma {
  static constexpr int kBlockCo = Tile::kBlockCo, kBlockP = Tile::kBlockP, kThreads = Tile::kThreads;
  static constexpr int kMI = Tile::kWarpCo / 16, kNI = Tile::kWarpP / 8;
  static constexpr int kK = Shape::kReduction;
  static constexpr int kOwnersPerPixel = kThreads / kBlockP;  // threads sharing one pixel's chunks

  // Per element type: a step's k (64 bytes), a 16-byte chunk's, and the padded row (80 bytes:
  // ldmatrix's eight rows fall in distinct banks).
  template <typename T>
  struct Layout {
    static constexpr int kBK = 64 / sizeof(T), kChunk = 16 / sizeof(T), kLd = kBK + kChunk;
    static constexpr int kChunksPerRow = kBK / kChunk;                                     // 4
    static constexpr int kAChunks = (kBlockCo * kChunksPerRow + kThreads - 1) / kThreads;  // the last maybe partial
    static constexpr int kBChunks = kBlockP * kChunksPerRow / kThreads;
    static_assert(kBChunks * kOwnersPerPixel == kChunksPerRow, "a pixel's chunks divide over its owners");
  };

  template <typename T, class Epilogue>
  static __device__ __forceinline__ void run(const T* x, const T* weight, const Epilogue& epilogue, T* y, int batch,
                                             int in_h, int in_w, int out_h, int out_w) {
    using L = Layout<T>;
    __shared__ __align__(16) T a_tile[2][kBlockCo][L::kLd];
    __shared__ __align__(16) T b_tile[2][kBlockP][L::kLd];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp / Tile::kWarpsP, wn = warp % Tile::kWarpsP;
    const int group = blockIdx.z;
    const int m0 = blockIdx.y * kBlockCo;
    const int hw_out = out_h * out_w;
    const long long n_total = (long long)batch * hw_out;
    const long long n0 = (long long)blockIdx.x * kBlockP;
    const T* w_group = weight + (long long)group * Shape::kCog * kK;
    const bool w_vec = kK % L::kChunk == 0 && tn_aligned16(weight);

    // This thread's pixel and its first chunk of each step (the others kOwnersPerPixel apart).
    const int my_p = tid % kBlockP, my_chunk = tid / kBlockP;
    const long long n_mine = n0 + my_p;
    const bool n_ok = n_mine < n_total;
    const int img = n_ok ? (int)(n_mine / hw_out) : 0;
    const int pix = n_ok ? (int)(n_mine - (long long)img * hw_out) : 0;
    const tn_conv_source<Shape, T> src(x, img, pix, group, in_h, in_w, out_w, hw_out);

    // X[k, my pixel]'s bits, zero outside the image, the reduction or the batch.
    auto gather = [&](int k) -> unsigned {
      if (!n_ok || k >= kK) return 0u;
      const T* p = src.at(k, in_h, in_w, hw_out);
      if (p == nullptr) return 0u;
      if constexpr (sizeof(T) == 4)
        return __float_as_uint(__ldg(reinterpret_cast<const float*>(p)));
      else
        return __ldg(reinterpret_cast<const unsigned short*>(p));
    };
    // A step's chunks of this pixel as 16-byte words (two 16-bit elements a word, low first).
    unsigned b_reg[L::kBChunks][4];
    auto gather_step = [&](int k0) {
#pragma unroll
      for (int c = 0; c < L::kBChunks; ++c) {
        const int k = k0 + (my_chunk + c * kOwnersPerPixel) * L::kChunk;
#pragma unroll
        for (int w = 0; w < 4; ++w)
          b_reg[c][w] = sizeof(T) == 4 ? gather(k + w) : gather(k + 2 * w) | gather(k + 2 * w + 1) << 16;
      }
    };
    auto store_gathered = [&](int buf) {
#pragma unroll
      for (int c = 0; c < L::kBChunks; ++c)
        *reinterpret_cast<uint4*>(&b_tile[buf][my_p][(my_chunk + c * kOwnersPerPixel) * L::kChunk]) =
            make_uint4(b_reg[c][0], b_reg[c][1], b_reg[c][2], b_reg[c][3]);
    };
    auto load_weights = [&](int buf, int k0) {
#pragma unroll
      for (int c = 0; c < L::kAChunks; ++c) {
        const int idx = tid + c * kThreads, row = idx / L::kChunksPerRow, col = (idx % L::kChunksPerRow) * L::kChunk;
        if (row < kBlockCo)
          tn_load_chunk(&a_tile[buf][row][col], w_group + (long long)(m0 + row) * kK, m0 + row < Shape::kCog, k0 + col,
                        kK, w_vec);
      }
      tn_cp_async_commit();
    };

    float acc[kMI][kNI][4];
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int j = 0; j < kNI; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    gather_step(0);
    load_weights(0, 0);
    store_gathered(0);
    tn_cp_async_wait<0>();
    __syncthreads();
    constexpr int kSteps = (kK + L::kBK - 1) / L::kBK;
    for (int step = 0; step < kSteps; ++step) {
      const int buf = step & 1;
      const bool more = step + 1 < kSteps;
      // The other buffers were last read in the previous step, before its closing barrier.
      if (more) {
        load_weights(buf ^ 1, (step + 1) * L::kBK);
        gather_step((step + 1) * L::kBK);
      }
#pragma unroll
      for (int kk = 0; kk < L::kBK / tn_mma_k<T>; ++kk) {
        tn_afrag<T> a[kMI];
#pragma unroll
        for (int i = 0; i < kMI; ++i) tn_load_afrag(a[i], &a_tile[buf][wm * Tile::kWarpCo + i * 16], kk * tn_mma_k<T>);
        // Matrices: (n 0-7, k half 0), (n 0-7, k half 1), (n 8-15, k half 0), (n 8-15, k half 1).
        const int mat = lane / 8;
#pragma unroll
        for (int j = 0; j < kNI; j += 2) {
          unsigned r[4];
          tn_ldmatrix_x4(r, &b_tile[buf][wn * Tile::kWarpP + j * 8 + (mat / 2) * 8 + lane % 8]
                                   [kk * tn_mma_k<T> + (mat % 2) * tn_pack<T>::kN]);
#pragma unroll
          for (int i = 0; i < kMI; ++i) {
            tn_mma_step<T>(acc[i][j], a[i], r[0], r[1]);
            tn_mma_step<T>(acc[i][j + 1], a[i], r[2], r[3]);
          }
        }
      }
      if (more) {
        store_gathered(buf ^ 1);
        tn_cp_async_wait<0>();
      }
      __syncthreads();
    }
    store(acc, epilogue, y, m0 + wm * Tile::kWarpCo, n0 + wn * Tile::kWarpP, group, hw_out, n_total);
  }

  // Lane (g, t) holds rows g and g + 8 of each m16 tile, columns 2t and 2t + 1 of each n-tile.
  template <typename T, class Epilogue>
  static __device__ __forceinline__ void store(const float (&acc)[kMI][kNI][4], const Epilogue& epilogue, T* y,
                                               int warp_m0, long long warp_n0, int group, int hw_out,
                                               long long n_total) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    long long out_off[kNI][2];  // y offset of each column without the channel term; -1 = outside
#pragma unroll
    for (int j = 0; j < kNI; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long n = warp_n0 + j * 8 + 2 * t + h;
        const long long im = n / hw_out;
        out_off[j][h] = n < n_total ? im * Shape::kCo * hw_out + (n - im * hw_out) : -1;
      }
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int m = warp_m0 + i * 16 + g + half * 8;
        if (m >= Shape::kCog) continue;
        const int co = group * Shape::kCog + m;
        const typename Epilogue::Channel channel = epilogue.channel(co);
#pragma unroll
        for (int j = 0; j < kNI; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const long long off = out_off[j][h] + (long long)co * hw_out;
            if (out_off[j][h] >= 0) y[off] = tn_cast<T>(channel(acc[i][j][half * 2 + h], off));
          }
      }
  }
};

#endif  // TEENY_CONV2D_MMA_CUH
