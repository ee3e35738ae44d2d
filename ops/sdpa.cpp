// sdpa: softmax(q kᵀ · scale [+ causal mask]) v for q [N, Sq, Dh], k/v [N, Skv, Dh].
//
// Flash-attention style: one block per (n, tile of kBQ queries); K/V stream through shared
// memory in tiles of kBKV keys with an online softmax, so nothing S×S is ever stored. kTPQ
// threads share one query row (each owns kDH / kTPQ of its dims, partial dot products are
// combined with shuffles), which keeps q and the output accumulator in registers for head
// dims up to 256. Causal: tiles wholly above the diagonal are never loaded, and within each
// group of heads the heaviest query tiles are scheduled first. The causal mask is PyTorch's
// `is_causal` (key j is visible to query i iff j <= i). Math in f32 whatever the storage
// dtype. The kernels also read heads in place from [B, S, H*Dh] tensors and write them
// merged, for fused.sdpa_heads (ops/sdpa.h).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/dense_gemm.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/sdpa.h"

namespace teeny::ops {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kQueriesPerBlock = 64;

int threads_per_query(int64_t head_dim) { return head_dim <= 64 ? 1 : head_dim <= 128 ? 2 : 4; }
// Scores for a tile live in registers next to q and the accumulator: 16 keeps d <= 256 unspilled.
constexpr int kKeysPerTile = 16;
// Tensor-core path: 4 warps x 16 query rows = kQueriesPerBlock, 64 keys per tile. Measured in
// GPT-2's bf16 block (B = 64, S = 512, H200): two 16-row m-tiles a warp (each K/V fragment read
// once for both; 243 registers, 2 blocks an SM) took 300 us against 181, and a warpgroup-MMA
// kernel without intra-warpgroup pipelining (2 warpgroups x 64 rows) 228 against 187, and one
// software-pipelined (1 warpgroup, S of tile j + 1 issued before tile j's softmax, 3 K/V
// buffers; branch wip/wgmma-sdpa) 185 against 186: no gain for its extra code.
constexpr int kMmaWarps = 4;
constexpr int kMmaKeysPerTile = 64;
// Resident blocks the register cap aims at: 4 (128 registers) hide the tile loads' latency
// better than the 3 an uncapped 160 allow (GPT-2, B = 64, S = 512 on the H200: 185 vs 197 us).
constexpr int kMmaBlocksPerSm = 4;
// f32 register-tiled path: 16 x 16 threads over 64 x 64 tiles; 102 KiB of shared memory a block.
// tiny_lm's attention (B = 64, S = 512, H200): 326 us against 631 for one thread per query.
constexpr int kF32TiledThreads = 256;
constexpr int kF32TiledBlocksPerSm = 2;

TensorType infer_sdpa(const OpDef& meta, const OpContext& ctx) {
  const DType dtype = check_attention_inputs(meta, ctx, {"[N, S, Dh]", "N", "head dim"});
  const TensorType& q = ctx.inputs.at(0);
  const auto head_dim = q.shape[2].const_value();
  if (!head_dim) {
    throw OpError("inputs", fmt::format("sdpa needs a fixed head dim; q is {}", shape_str(q.shape)));
  }
  check_sdpa_head_dim("sdpa", *head_dim);
  return contiguous(dtype, q.shape);
}

double sdpa_scale(const OpContext& ctx, int64_t head_dim) {
  return ctx.attrs.has("scale") ? ctx.attrs.f("scale") : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

const char* kNegInf = "#define TN_NEG_INF __uint_as_float(0xff800000u)  // no math.h under NVRTC\n";

// Both kernels' helpers. tn_sdpa_tile maps a block to (query tile qt, head n): heads in groups
// of kHeadGroup, each group's query tiles heaviest first (causal), so a group's K and V stay
// in L2 while all of its query tiles read them (query-tile-major order over all heads reads
// them from DRAM again for every query tile once they outgrow L2).
const char* kSdpaShared = R"CUDA(
// 2^x in one MUFU op: exp2f adds denormal handling, and a p below 2^-126 is as good as 0.
__device__ __forceinline__ float tn_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
constexpr int kHeadGroup = 32;
__device__ __forceinline__ void tn_sdpa_tile(int q_tiles, int N, int& qt, int& n) {
  const int per_group = kHeadGroup * q_tiles;
  const int group = (int)blockIdx.x / per_group, r = (int)blockIdx.x % per_group;
  const int group_heads = min(kHeadGroup, N - group * kHeadGroup);
  qt = q_tiles - 1 - r / group_heads;
  n = group * kHeadGroup + r % group_heads;
}
)CUDA";

const char* kSdpaConstants = R"CUDA(
constexpr int kDHT = kDH / kTPQ;                   // dims owned by one thread
constexpr int kVec = tn_pack<T>::kN;               // elements per 16-byte load
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kThreads == kBQ * kTPQ, "block = queries x threads per query");
)CUDA";

const char* kSdpaBody = R"CUDA( {
  __shared__ __align__(16) float Ks[kBKV][kDH];
  __shared__ __align__(16) float Vs[kBKV][kDH];
  int qt, n;
  tn_sdpa_tile((Sq + kBQ - 1) / kBQ, N, qt, n);
  const int tid = threadIdx.x, part = tid % kTPQ;
  const int qi = qt * kBQ + tid / kTPQ;
  // Head n: row block n / heads, columns from (n % heads) * kDH.
  const long long batch = n / heads;
  const int hcol = (n % heads) * kDH;
  const T* qn = q + batch * Sq * ldq + hcol;
  const T* kn = k + batch * Skv * ldk + hcol;
  const T* vn = v + batch * Skv * ldv + hcol;

  // q pre-scaled so scores are in log2 units: softmax via exp2.
  float qr[kDHT], acc[kDHT];
  const float qscale = scale * kLog2e;
#pragma unroll
  for (int d = 0; d < kDHT; ++d) {
    qr[d] = qi < Sq ? tn_f32(qn[(long long)qi * ldq + part * kDHT + d]) * qscale : 0.f;
    acc[d] = 0.f;
  }
  float m_run = TN_NEG_INF, l_run = 0.f;
  const int q_last = min(Sq, (qt + 1) * kBQ) - 1;
  const int kv_end = kCausal ? min(Skv, q_last + 1) : Skv;
  // kn/vn include the head's column offset, so a head that starts mid-vector reads scalars.
  const bool kv_vec = kDH % kVec == 0 && ldk % kVec == 0 && ldv % kVec == 0 && tn_aligned16(kn) &&
                      tn_aligned16(vn);

  for (int j0 = 0; j0 < kv_end; j0 += kBKV) {
    __syncthreads();  // the previous tile is consumed
    if (kv_vec) {
      for (int idx = tid; idx < kBKV * kDH / kVec; idx += kThreads) {
        const int r = idx / (kDH / kVec), c = (idx % (kDH / kVec)) * kVec, j = j0 + r;
        float kv[kVec], vv[kVec];
        if (j < Skv) {
          tn_load16(kn + (long long)j * ldk + c, kv);
          tn_load16(vn + (long long)j * ldv + c, vv);
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) kv[e] = vv[e] = 0.f;
        }
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          Ks[r][c + e] = kv[e];
          Vs[r][c + e] = vv[e];
        }
      }
    } else {
      for (int idx = tid; idx < kBKV * kDH; idx += kThreads) {
        const int r = idx / kDH, c = idx % kDH, j = j0 + r;
        Ks[r][c] = j < Skv ? tn_f32(kn[(long long)j * ldk + c]) : 0.f;
        Vs[r][c] = j < Skv ? tn_f32(vn[(long long)j * ldv + c]) : 0.f;
      }
    }
    __syncthreads();

    float s[kBKV];
    float tile_max = TN_NEG_INF;
#pragma unroll
    for (int j = 0; j < kBKV; ++j) {
      float dot = 0.f;
#pragma unroll
      for (int d = 0; d < kDHT; ++d) dot = fmaf(qr[d], Ks[j][part * kDHT + d], dot);
#pragma unroll
      for (int o = 1; o < kTPQ; o <<= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      const int kj = j0 + j;
      s[j] = (kj < Skv && (!kCausal || kj <= qi)) ? dot : TN_NEG_INF;
      tile_max = fmaxf(tile_max, s[j]);
    }
    // Key 0 is visible to every row, so m_run is finite from the first tile on.
    const float m_new = fmaxf(m_run, tile_max);
    const float alpha = tn_exp2(m_run - m_new);
    l_run *= alpha;
#pragma unroll
    for (int d = 0; d < kDHT; ++d) acc[d] *= alpha;
#pragma unroll
    for (int j = 0; j < kBKV; ++j) {
      const float p = tn_exp2(s[j] - m_new);
      l_run += p;
#pragma unroll
      for (int d = 0; d < kDHT; ++d) acc[d] = fmaf(p, Vs[j][part * kDHT + d], acc[d]);
    }
    m_run = m_new;
  }

  if (qi < Sq) {
    const float inv = 1.f / l_run;
    T* dst = out + (batch * Sq + qi) * ldo + hcol + part * kDHT;
#pragma unroll
    for (int d = 0; d < kDHT; ++d) dst[d] = tn_cast<T>(acc[d] * inv);
  }
}
)CUDA";


// f16/bf16 with head dims that are multiples of 16 (<= 128): FlashAttention-2 on tensor cores.
// 4 warps, each owning 16 query rows; S = Q·Kᵀ and O += P·V are m16n8k16 MMAs (f32
// accumulators). The S accumulators map onto P's A-fragments directly, so P never leaves
// registers; the row max/sum live in the quad of lanes that shares a row. Q is staged through
// the K buffer once, then kept as fragments. K and V tiles are double-buffered in dynamic
// shared memory: the next tile's cp.async copies run while the current one is computed.
const char* kSdpaMmaBody = R"CUDA( {
  constexpr int kLd = kDH + 8;  // padded rows: ldmatrix's 8 row reads hit distinct banks
  constexpr float kLog2e = 1.4426950408889634f;
  static_assert(kBKV == kBQ && kThreads == kBQ / 16 * 32, "Q is staged through the K tile; 16 rows per warp");
  extern __shared__ __align__(16) unsigned char tn_sdpa_smem[];
  T (*Ks)[kBKV][kLd] = reinterpret_cast<T (*)[kBKV][kLd]>(tn_sdpa_smem);  // [2][kBKV][kLd]
  T (*Vs)[kBKV][kLd] = Ks + 2;
  int qt, n;
  tn_sdpa_tile((Sq + kBQ - 1) / kBQ, N, qt, n);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4, mat = lane / 8;
  const int q0 = qt * kBQ;
  // Head n: row block n / heads, columns from (n % heads) * kDH (kDH % 16 == 0: 16-byte aligned).
  const long long batch = n / heads;
  const int hcol = (n % heads) * kDH;
  const T* qn = q + batch * Sq * ldq + hcol;
  const T* kn = k + batch * Skv * ldk + hcol;
  const T* vn = v + batch * Skv * ldv + hcol;
  auto load_tile = [&](T (*dst)[kLd], const T* src, int ld, int row0, int rows) {
    tn_sdpa_copy_tile<kBKV, kDH>(dst, src, ld, row0, rows, tn_from_raw<T>(0));
  };

  // Q (staged in buffer 1) and K/V tile 0 (buffer 0) load together, as two copy groups.
  unsigned qf[kDH / 16][4];
  load_tile(Ks[1], qn, ldq, q0, Sq);
  tn_cp_async_commit();
  load_tile(Ks[0], kn, ldk, 0, Skv);
  load_tile(Vs[0], vn, ldv, 0, Skv);
  tn_cp_async_commit();
  tn_cp_async_wait<1>();  // Q's group
  __syncthreads();
#pragma unroll
  for (int kk = 0; kk < kDH / 16; ++kk)
    tn_ldmatrix_x4(qf[kk], &Ks[1][warp * 16 + lane % 16][kk * 16 + (lane / 16) * 8]);
  if (scale < 0.f)  // scores of -q, so the softmax scale below is positive (negation is exact)
#pragma unroll
    for (int kk = 0; kk < kDH / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) qf[kk][i] ^= 0x80008000u;

  float o[kDH / 8][4];
#pragma unroll
  for (int d = 0; d < kDH / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  float m_run[2] = {TN_NEG_INF, TN_NEG_INF}, l_run[2] = {0.f, 0.f};  // rows g and g + 8
  const int row_a = q0 + warp * 16 + g;
  // |scale| in log2 units, at least FLT_MIN so that a masked -inf stays -inf (at scale 0 every
  // weight is then 2^(tiny) = 1, as softmax of zeros gives).
  const float qk_scale = fmaxf(fabsf(scale) * kLog2e, 1.17549435e-38f);
  const int q_last = min(Sq, q0 + kBQ) - 1;
  const int kv_end = kCausal ? min(Skv, q_last + 1) : Skv;

  // The loop's first barrier fences the Q reads of buffer 1 before tile 1 overwrites it.
  for (int j0 = 0, buf = 0; j0 < kv_end; j0 += kBKV, buf ^= 1) {
    tn_cp_async_wait<0>();  // this tile's copies (the only group in flight)
    // Everyone's copies of this tile have landed, and everyone is done with the other buffer.
    __syncthreads();
    if (j0 + kBKV < kv_end) {
      load_tile(Ks[buf ^ 1], kn, ldk, j0 + kBKV, Skv);
      load_tile(Vs[buf ^ 1], vn, ldv, j0 + kBKV, Skv);
    }
    tn_cp_async_commit();

    float s[kBKV / 8][4];
#pragma unroll
    for (int j = 0; j < kBKV / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kDH / 16; ++kk) {
#pragma unroll
      for (int j = 0; j < kBKV / 8; j += 2) {
        unsigned r[4];  // keys j*8.. (k 0-7, 8-15), keys j*8+8.. (k 0-7, 8-15)
        tn_ldmatrix_x4(r, &Ks[buf][j * 8 + (mat / 2) * 8 + lane % 8][kk * 16 + (mat % 2) * 8]);
        tn_mma16816(s[j], qf[kk], r[0], r[1]);
        tn_mma16816(s[j + 1], qf[kk], r[2], r[3]);
      }
    }

    // Mask: only tiles past Skv or reaching the block's first query under causality hold
    // hidden keys, and the branch is the same for the whole block, so other tiles skip the tests.
    if (j0 + kBKV > Skv || (kCausal && j0 + kBKV - 1 > q0)) {
#pragma unroll
      for (int j = 0; j < kBKV / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = j0 + j * 8 + 2 * t + (e & 1), row = row_a + (e / 2) * 8;
          if (key >= Skv || (kCausal && key > row)) s[j][e] = TN_NEG_INF;
        }
    }
    // The online-softmax update per row (h = 0: g, 1: g + 8), in log2 units: the running max
    // m_run is kept scaled, and p = 2^(s·c − m_run) is one FFMA and one MUFU op. c > 0 keeps the
    // order of the raw scores (Q was negated for a negative scale) and -inf at -inf.
    // Row maxima and sums reduce as trees (depth 4 over a row's 16 values here), not as chains
    // of dependent FMNMX / FADD ops that stall the warp.
    float part[2][kBKV / 8];  // [row h][partial]
#pragma unroll
    for (int j = 0; j < kBKV / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) part[h][j] = fmaxf(s[j][2 * h], s[j][2 * h + 1]);
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tile_max = tn_tree_reduce(part[h], [](float a, float b) { return fmaxf(a, b); });
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      // Key 0 is visible to every row, so the max is finite from the first tile on.
      const float m_new = fmaxf(m_run[h], tile_max * qk_scale);
      alpha[h] = tn_exp2(m_run[h] - m_new);
      m_run[h] = m_new;
    }
#pragma unroll
    for (int j = 0; j < kBKV / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = tn_exp2(fmaf(s[j][e], qk_scale, -m_run[e / 2]));
#pragma unroll
    for (int j = 0; j < kBKV / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) part[h][j] = s[j][2 * h] + s[j][2 * h + 1];
#pragma unroll
    for (int h = 0; h < 2; ++h)  // this lane's partial row sums; the quad's are summed at the end
      l_run[h] = fmaf(l_run[h], alpha[h], tn_tree_reduce(part[h], [](float a, float b) { return a + b; }));
#pragma unroll
    for (int d = 0; d < kDH / 8; ++d) {
      o[d][0] *= alpha[0]; o[d][1] *= alpha[0];
      o[d][2] *= alpha[1]; o[d][3] *= alpha[1];
    }

    // O += P·V: P's A-fragment for keys kj*16.. is S tiles 2kj (cols 0-7) and 2kj+1 (cols 8-15).
#pragma unroll
    for (int kj = 0; kj < kBKV / 16; ++kj) {
      const unsigned pa[4] = {tn_pack2(s[2 * kj][0], s[2 * kj][1]), tn_pack2(s[2 * kj][2], s[2 * kj][3]),
                              tn_pack2(s[2 * kj + 1][0], s[2 * kj + 1][1]),
                              tn_pack2(s[2 * kj + 1][2], s[2 * kj + 1][3])};
#pragma unroll
      for (int d = 0; d < kDH / 8; d += 2) {
        unsigned r[4];  // dims d*8.. (keys 0-7, 8-15), dims d*8+8.. (keys 0-7, 8-15)
        tn_ldmatrix_x4_trans(r, &Vs[buf][kj * 16 + (mat % 2) * 8 + lane % 8][d * 8 + (mat / 2) * 8]);
        tn_mma16816(o[d], pa, r[0], r[1]);
        tn_mma16816(o[d + 1], pa, r[2], r[3]);
      }
    }
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    const int row = row_a + h * 8;
    if (row >= Sq) continue;
    const float inv = 1.f / l_run[h];
    T* dst = out + (batch * Sq + row) * ldo + hcol + 2 * t;  // ldo and hcol even: 4-byte stores
#pragma unroll
    for (int d = 0; d < kDH / 8; ++d)
      *reinterpret_cast<unsigned*>(dst + d * 8) = tn_pack2(o[d][2 * h] * inv, o[d][2 * h + 1] * inv);
  }
}
)CUDA";

// f32, head dim 64: register-tiled on CUDA cores. A block of 256 threads takes 64 queries; per
// tile of 64 keys, thread (qg, kg) = (tid / 16, tid % 16) computes the scores of queries
// 4qg..4qg+3 against keys kg, kg+16, kg+32, kg+48 (float4 reads along the head dim: 16 FMAs per
// two 16-byte shared loads), the 16 threads of a query group reduce its rows by shuffles, P goes
// through shared memory, and the same thread accumulates O for its 4 queries and dims
// 4kg..4kg+3. Rows of Q, K and P are padded to 68 floats: the 8 threads of a 16-byte-load phase
// read keys kg.. 16 rows apart, which then fall in distinct banks. K and V are double-buffered
// by cp.async (rows of 16-byte-aligned heads; others are copied element by element).
const char* kSdpaF32TiledBody = R"CUDA( {
  constexpr int kLd = 68;
  static_assert(kDH == 64 && kBQ == 64 && kBKV == 64 && kThreads == 256, "64 x 64 tiles over 16 x 16 threads");
  extern __shared__ __align__(16) float tn_sdpa_f32_smem[];
  float (*Qs)[kLd] = reinterpret_cast<float (*)[kLd]>(tn_sdpa_f32_smem);  // [query][dim]
  float (*Ps)[kLd] = Qs + kBQ;                                           // [key][query]
  float (*Ks)[kBKV][kLd] = reinterpret_cast<float (*)[kBKV][kLd]>(Ps + kBKV);  // [2][key][dim]
  float (*Vs)[kBKV][kLd] = Ks + 2;                                              // [2][key][dim]
  int qt, n;
  tn_sdpa_tile((Sq + kBQ - 1) / kBQ, N, qt, n);
  const int tid = threadIdx.x, qg = tid / 16, kg = tid % 16;
  const int q0 = qt * kBQ;
  const long long batch = n / heads;
  const int hcol = (n % heads) * kDH;
  const float* qn = q + batch * Sq * ldq + hcol;
  const float* kn = k + batch * Skv * ldk + hcol;
  const float* vn = v + batch * Skv * ldv + hcol;

  auto load_tile = [&](float (*dst)[kLd], const float* src, int ld, int row0, int rows) {
    tn_sdpa_copy_tile<64, 64>(dst, src, ld, row0, rows, 0.f);
  };

  load_tile(Qs, qn, ldq, q0, Sq);
  load_tile(Ks[0], kn, ldk, 0, Skv);
  load_tile(Vs[0], vn, ldv, 0, Skv);
  tn_cp_async_commit();

  const float qk_scale = scale * 1.4426950408889634f;  // scores in log2 units: softmax via exp2
  float o[4][4];  // [query 4qg + i][dim 4kg + e]
  float m_run[4], l_run[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m_run[i] = TN_NEG_INF;
    l_run[i] = 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e) o[i][e] = 0.f;
  }
  const int q_last = min(Sq, q0 + kBQ) - 1;
  const int kv_end = kCausal ? min(Skv, q_last + 1) : Skv;

  for (int j0 = 0, buf = 0; j0 < kv_end; j0 += kBKV, buf ^= 1) {
    tn_cp_async_wait<0>();
    __syncthreads();  // this tile has landed everywhere; the other buffer and Ps are free
    if (j0 + kBKV < kv_end) {
      load_tile(Ks[buf ^ 1], kn, ldk, j0 + kBKV, Skv);
      load_tile(Vs[buf ^ 1], vn, ldv, j0 + kBKV, Skv);
    }
    tn_cp_async_commit();

    float s[4][4];  // [query 4qg + i][key kg + 16c]
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[i][c] = 0.f;
#pragma unroll 4
    for (int d = 0; d < kDH; d += 4) {
      float4 qv[4], kv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) qv[i] = *reinterpret_cast<const float4*>(&Qs[4 * qg + i][d]);
#pragma unroll
      for (int c = 0; c < 4; ++c) kv[c] = *reinterpret_cast<const float4*>(&Ks[buf][kg + 16 * c][d]);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          s[i][c] = fmaf(qv[i].x, kv[c].x, fmaf(qv[i].y, kv[c].y, fmaf(qv[i].z, kv[c].z, fmaf(qv[i].w, kv[c].w, s[i][c]))));
    }

    const bool masked = j0 + kBKV > Skv || (kCausal && j0 + kBKV - 1 > q0);
    float alpha[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = q0 + 4 * qg + i;
      float tile_max = TN_NEG_INF;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int key = j0 + kg + 16 * c;
        const bool visible = !masked || (key < Skv && (!kCausal || key <= row));
        s[i][c] = visible ? s[i][c] * qk_scale : TN_NEG_INF;
        tile_max = fmaxf(tile_max, s[i][c]);
      }
#pragma unroll
      for (int x = 1; x < 16; x <<= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, x));
      // Key 0 is visible to every row, so the max is finite from the first tile on.
      const float m_new = fmaxf(m_run[i], tile_max);
      alpha[i] = tn_exp2(m_run[i] - m_new);
      m_run[i] = m_new;
      l_run[i] *= alpha[i];  // this thread's partial row sum; the 16 are summed at the end
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        s[i][c] = tn_exp2(s[i][c] - m_new);
        l_run[i] += s[i][c];
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][e] *= alpha[i];
    }
#pragma unroll
    for (int c = 0; c < 4; ++c)
      *reinterpret_cast<float4*>(&Ps[kg + 16 * c][4 * qg]) = make_float4(s[0][c], s[1][c], s[2][c], s[3][c]);
    __syncthreads();  // P of the whole tile

#pragma unroll 4
    for (int key = 0; key < kBKV; ++key) {
      const float4 p = *reinterpret_cast<const float4*>(&Ps[key][4 * qg]);
      const float4 vv = *reinterpret_cast<const float4*>(&Vs[buf][key][4 * kg]);
      const float pi[4] = {p.x, p.y, p.z, p.w}, ve[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[i][e] = fmaf(pi[i], ve[e], o[i][e]);
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int x = 1; x < 16; x <<= 1) l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], x);
    const int row = q0 + 4 * qg + i;
    if (row >= Sq) continue;
    const float inv = 1.f / l_run[i];
    float* dst = out + (batch * Sq + row) * ldo + hcol + 4 * kg;
    const float4 r = make_float4(o[i][0] * inv, o[i][1] * inv, o[i][2] * inv, o[i][3] * inv);
    if (ldo % 4 == 0 && tn_aligned16(out)) {
      *reinterpret_cast<float4*>(dst) = r;
    } else {
      dst[0] = r.x, dst[1] = r.y, dst[2] = r.z, dst[3] = r.w;
    }
  }
}
)CUDA";

// The tile copy of the kernels staging K and V in shared memory (after the cp.async primitives).
// v[0] op v[1] op ... op v[kN - 1] as a tree (kN a power of two; v is overwritten).
const char* kSdpaTreeReduce = R"CUDA(
template <int kN, typename Op>
__device__ __forceinline__ float tn_tree_reduce(float (&v)[kN], Op op) {
  static_assert((kN & (kN - 1)) == 0, "a power of two");
#pragma unroll
  for (int w = kN / 2; w > 0; w /= 2)
#pragma unroll
    for (int i = 0; i < w; ++i) v[i] = op(v[i], v[i + w]);
  return v[0];
}
)CUDA";

const char* kSdpaCopyTile = R"CUDA(
// Rows [row0, row0 + kRows) of a [rows, kCols] matrix into dst, `zero` past `rows`: 16-byte
// chunks by cp.async where rows are 16-byte aligned (the caller commits and waits), else
// element by element.
template <int kRows, int kCols, typename E, int kLd>
__device__ __forceinline__ void tn_sdpa_copy_tile(E (*dst)[kLd], const E* src, int ld, int row0, int rows, E zero) {
  constexpr int kVecN = 16 / sizeof(E), kRowChunks = kCols / kVecN;
  const bool vec = ld % kVecN == 0 && tn_aligned16(src);
  // Whole tiles of aligned rows (all but a sequence's last): each thread copies one column
  // chunk of every kRowStep-th row, unrolled, one address add a chunk and no per-chunk tests.
  constexpr int kRowStep = kThreads / kRowChunks;
  constexpr bool kWholeRounds = kThreads % kRowChunks == 0 && kRows % kRowStep == 0;
  if (kWholeRounds && vec && row0 + kRows <= rows) {
    const int r = threadIdx.x / kRowChunks, col = threadIdx.x % kRowChunks * kVecN;
    const E* from = src + (long long)(row0 + r) * ld + col;
    const long long step = (long long)kRowStep * ld;
#pragma unroll
    for (int i = 0; i < kRows / kRowStep; ++i) tn_cp_async16(&dst[r + i * kRowStep][col], from + i * step);
    return;
  }
#pragma unroll 1
  for (int c = threadIdx.x; c < kRows * kRowChunks; c += kThreads) {
    const int r = c / kRowChunks, col = (c % kRowChunks) * kVecN, row = row0 + r;
    if (vec && row < rows) {
      tn_cp_async16(&dst[r][col], src + (long long)row * ld + col);
    } else {
#pragma unroll
      for (int e = 0; e < kVecN; ++e) dst[r][col + e] = row < rows ? src[(long long)row * ld + col + e] : zero;
    }
  }
}
)CUDA";

// The tensor-core kernel: 16-bit storage, head dims in MMA steps, accumulators in registers.
bool use_tensor_cores(DType dtype, int64_t head_dim) {
  return dtype != DType::kF32 && head_dim % 16 == 0 && head_dim <= 128;
}

// The register-tiled CUDA-core kernel: f32, head dim 64.
bool use_f32_tiled(DType dtype, int64_t head_dim) { return dtype == DType::kF32 && head_dim == 64; }

}  // namespace

std::vector<AttrSpec> sdpa_attr_specs() {
  return {
      {"causal", AttrType::kBool, "mask keys after the query (PyTorch is_causal)", nlohmann::json(false), {},
       false, std::nullopt},
      {"scale", AttrType::kFloat, "score scale; default 1/sqrt(Dh)", std::nullopt, {}, true, std::nullopt},
  };
}

DType check_attention_inputs(const OpDef& meta, const OpContext& ctx, const AttentionLayout& layout) {
  const std::string& op = meta.name;
  const TensorType& q = ctx.inputs.at(0);
  const TensorType& k = ctx.inputs.at(1);
  const TensorType& v = ctx.inputs.at(2);
  const char* names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    if (ctx.inputs[i].shape.size() != 3) {
      throw OpError("inputs", fmt::format("{} needs q, k, v of shape {}; {} is {}", op, layout.shape, names[i],
                                          shape_str(ctx.inputs[i].shape)));
    }
  }
  const DType dtype = common_float_dtype(meta, ctx);
  if (output_float_dtype(meta, ctx, dtype) != dtype) {
    throw OpError("dtype", fmt::format("{} computes in its input dtype {}", op, dtype_name(dtype)));
  }
  if (q.shape[0] != k.shape[0] || q.shape[0] != v.shape[0]) {
    throw OpError("inputs", fmt::format("{}: q, k, v must have the same first dim {}; got {}, {}, {}", op,
                                        layout.first, shape_str(q.shape), shape_str(k.shape), shape_str(v.shape)));
  }
  if (k.shape[1] != v.shape[1]) {
    throw OpError("inputs", fmt::format("{}: k and v must have the same length; got {} and {}", op,
                                        shape_str(k.shape), shape_str(v.shape)));
  }
  if (q.shape[2] != k.shape[2] || q.shape[2] != v.shape[2]) {
    throw OpError("inputs", fmt::format("{}: q, k, v must have the same {}; got {}, {}, {}", op, layout.last,
                                        shape_str(q.shape), shape_str(k.shape), shape_str(v.shape)));
  }
  return dtype;
}

void check_sdpa_head_dim(const std::string& op, int64_t head_dim) {
  const int tpq = threads_per_query(head_dim);
  if (head_dim > kMaxHeadDim || head_dim % tpq != 0) {
    throw OpError("inputs", fmt::format("{} supports head dims up to {} (multiples of {} above {}); got {}", op,
                                        kMaxHeadDim, tpq, tpq == 2 ? 64 : 128, head_dim));
  }
}

Lowering lower_attention(const OpContext& ctx, int64_t heads) {
  const TensorType& q = ctx.inputs.at(0);
  const TensorType& k = ctx.inputs.at(1);
  const TensorType& v = ctx.inputs.at(2);
  const DType dtype = ctx.output.dtype;
  const int64_t head_dim = *q.shape[2].const_value() / heads;
  const bool causal = ctx.attrs.b("causal");
  const bool tensor_cores = use_tensor_cores(dtype, head_dim);
  const int tpq = threads_per_query(head_dim);
  const bool f32_tiled = use_f32_tiled(dtype, head_dim);
  const int threads = tensor_cores ? kMmaWarps * 32 : f32_tiled ? kF32TiledThreads : kQueriesPerBlock * tpq;
  const Expr n = q.shape[0] * Expr(heads), sq = q.shape[1], skv = k.shape[1];

  Launch launch;
  launch.args = {input(0, "q", dtype), input(1, "k", dtype), input(2, "v", dtype), output("out", dtype),
                 i32("N", n), i32("Sq", sq), i32("Skv", skv), i32("ldq", q.row_stride),
                 i32("ldk", k.row_stride), i32("ldv", v.row_stride), i32("heads", Expr(heads)),
                 i32("ldo", ctx.output.row_stride), f32("scale", sdpa_scale(ctx, head_dim))};
  launch.block = {threads, 1, 1};
  launch.grid = {n * ceil_div(sq, Expr(kQueriesPerBlock)), Expr(1), Expr(1)};
  // The tensor-core kernel's double-buffered K and V tiles, rows padded by 8 elements; the
  // f32 tiled kernel's Q, P and double-buffered K and V: six 64 x 68 float tiles.
  launch.dynamic_smem =
      Expr(tensor_cores ? int64_t{2} * 2 * kMmaKeysPerTile * (head_dim + 8) * static_cast<int64_t>(dtype_size(dtype))
           : f32_tiled  ? int64_t{6} * 64 * 68 * 4
                        : 0);
  const Expr elem(static_cast<int64_t>(dtype_size(dtype)));
  // Per head, whatever the layout: q read and the output written once, k and v read once.
  launch.bytes = (Expr(2) * n * sq * Expr(head_dim) + Expr(2) * n * skv * Expr(head_dim)) * elem;
  // q·kᵀ and p·v, 2 FLOPs per multiply-add; causal does about half.
  const Expr full = Expr(4) * n * sq * skv * Expr(head_dim);
  launch.flops = causal ? full / Expr(2) : full;

  KernelSource kernel;
  kernel.name = fmt::format("sdpa_{}_d{}{}{}", dtype_name(dtype), head_dim, causal ? "_causal" : "",
                            tensor_cores ? "_mma" : f32_tiled ? "_tiled" : "");
  kernel.source = kernel_prelude() + kernel_typedef("T", dtype) + kNegInf + kernel_constant("kDH", head_dim) +
                  kernel_constant("kBQ", kQueriesPerBlock) + kernel_constant("kThreads", threads) +
                  fmt::format("constexpr bool kCausal = {};\n", causal) + kSdpaShared;
  if (tensor_cores) {
    kernel.source += mma_primitives(dtype) + kSdpaCopyTile + kSdpaTreeReduce + kernel_constant("kBKV", kMmaKeysPerTile) +
                     bounded_kernel_entry(launch.args, threads, kMmaBlocksPerSm) + kSdpaMmaBody;
  } else if (f32_tiled) {  // (the f16 primitives only for cp.async)
    kernel.source += mma_primitives(DType::kF16) + kSdpaCopyTile + kernel_constant("kBKV", kMmaKeysPerTile) +
                     bounded_kernel_entry(launch.args, threads, kF32TiledBlocksPerSm) + kSdpaF32TiledBody;
  } else {
    kernel.source += kernel_constant("kTPQ", tpq) + kernel_constant("kBKV", kKeysPerTile) + kSdpaConstants +
                     bounded_kernel_entry(launch.args, threads, 1) + kSdpaBody;
  }
  kernel.file = __FILE__;
  kernel.line = __LINE__;
  return Lowering{{kernel}, {launch}};
}

HostTensor attention_reference(const RefContext& ref, int64_t heads) {
  const HostTensor& q = ref.inputs.at(0);
  const HostTensor& k = ref.inputs.at(1);
  const HostTensor& v = ref.inputs.at(2);
  const int64_t batch = q.shape[0], sq = q.shape[1], width = q.shape[2], skv = k.shape[1];
  const int64_t dh = width / heads;
  const bool causal = ref.op.attrs.b("causal");
  const double scale = sdpa_scale(ref.op, dh);
  HostTensor out{ref.op.output.dtype, ref.output_shape, std::vector<double>(batch * sq * width, 0.0)};
  std::vector<double> scores(skv);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < sq; ++i) {
        const double* qi = &q.data[(b * sq + i) * width + h * dh];
        const int64_t visible = causal ? std::min(skv, i + 1) : skv;
        double max_score = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) {
          const double* kj = &k.data[(b * skv + j) * width + h * dh];
          double dot = 0.0;
          for (int64_t d = 0; d < dh; ++d) dot += qi[d] * kj[d];
          scores[j] = dot * scale;
          max_score = std::max(max_score, scores[j]);
        }
        double total = 0.0;
        for (int64_t j = 0; j < visible; ++j) total += scores[j] = std::exp(scores[j] - max_score);
        double* oi = &out.data[(b * sq + i) * width + h * dh];
        for (int64_t j = 0; j < visible; ++j) {
          const double* vj = &v.data[(b * skv + j) * width + h * dh];
          for (int64_t d = 0; d < dh; ++d) oi[d] += scores[j] / total * vj[d];
        }
      }
    }
  }
  return out;
}

OpDef sdpa_op() {
  OpDef def;
  def.name = "sdpa";
  def.doc = "softmax(q kᵀ · scale [+ causal mask]) v, q/k/v [N, S, Dh]; flash-style tiling, never "
            "materialises S×S";
  def.inputs = {{"q", "[N, Sq, Dh]"}, {"k", "[N, Skv, Dh]"}, {"v", "[N, Skv, Dh]"}};
  def.attrs = sdpa_attr_specs();
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_sdpa(meta, ctx); };
  def.lower = [](const OpContext& ctx) { return lower_attention(ctx, 1); };
  def.reference = [](const RefContext& ref) { return attention_reference(ref, 1); };
  def.conformance_cases = [] {
    std::vector<ConformanceCase> cases;
    const std::vector<Bindings> lengths = {{{"N", 1}, {"S", 1}}, {{"N", 3}, {"S", 17}},
                                           {{"N", 2}, {"S", 100}}, {{"N", 5}, {"S", 257}}};
    for (DType dtype : float_dtypes()) {
      const std::string dt = dtype_name(dtype);
      for (int head_dim : {64, 17, 128, 256}) {
        for (bool causal : {false, true}) {
          const std::string shape = fmt::format("[N, S, {}]", head_dim);
          cases.push_back({fmt::format("[N, S, {}]{} {}", head_dim, causal ? " causal" : "", dt),
                           case_graph({"N", "S"}, {{"q", dtype, shape}, {"k", dtype, shape}, {"v", dtype, shape}},
                                      {{"o", "sdpa", {"q", "k", "v"}, {{"causal", causal}}}}),
                           lengths});
        }
      }
      // Negative and zero scales too: the tensor-core kernel negates Q for the first and keeps
      // masked keys at -inf for the second.
      for (bool causal : {false, true})
        for (double scale : {0.3, -0.5, 0.0}) {
          cases.push_back({fmt::format("q [N, S, 64], k/v [N, T, 64]{} scale {} {}", causal ? " causal" : "", scale, dt),
                           case_graph({"N", "S", "T"},
                                      {{"q", dtype, "[N, S, 64]"}, {"k", dtype, "[N, T, 64]"}, {"v", dtype, "[N, T, 64]"}},
                                      {{"o", "sdpa", {"q", "k", "v"}, {{"causal", causal}, {"scale", scale}}}}),
                           {{{"N", 2}, {"S", 33}, {"T", 70}}, {{"N", 1}, {"S", 70}, {"T", 33}}}});
        }
      cases.push_back({"padded q/k/v (linear 17 of 20/24) " + dt,
                       case_graph({"N", "S"}, {{"x", dtype, "[N, S, 8]"}},
                                  {{"p", "linear", {"x"}, {{"out_features", 17}}},
                                   {"o", "sdpa", {"p", "p", "p"}, {{"causal", true}}}}),
                       {{{"N", 2}, {"S", 100}}}});
    }
    return cases;
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
