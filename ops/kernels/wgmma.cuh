// Hopper's warpgroup MMAs (sm_90a): wgmma with operands in shared memory (described by matrix
// descriptors over tiles in the 128-byte swizzle) or A in registers, and the fences and waits
// around them. ops/kernels/gemm_wgmma.cuh and sdpa_wgmma.cuh build on them.
#ifndef TEENY_WGMMA_CUH
#define TEENY_WGMMA_CUH

#include "prelude.cuh"

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of 128-byte rows in wgmma's
// 128-byte swizzle.
__device__ __forceinline__ unsigned tn_swizzled(int row, int chunk) {
  return (unsigned)(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// Shared-memory matrix descriptor: start address, leading byte offset 16 (unused by swizzled
// K-major layouts), stride byte offset 1024 (between 8-row groups), 128-byte swizzle.
__device__ __forceinline__ unsigned long long tn_wgmma_desc(unsigned addr) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

// The same for an MN-major operand (16-bit only), stored as rows of K, each 64 elements of M or
// N (one 128-byte swizzle row), in atoms of 64 columns `atom_bytes` apart: the leading byte
// offset is the step between atoms along M or N, the stride byte offset 1024 between 8-row
// groups along K (CUTLASS's canonical MN-major SW128 layout, ((8T, m), (8, k)) : ((1, LBO),
// (8T, SBO)) with T the elements of 16 bytes).
__device__ __forceinline__ unsigned long long tn_wgmma_desc_mn(unsigned addr, unsigned atom_bytes) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(atom_bytes >> 4) << 16) | (64ull << 32) |
         (1ull << 62);
}

__device__ __forceinline__ void tn_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void tn_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void tn_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// The wgmma instruction names every accumulator register, so its operand lists are spelled out:
// the registers %0.. of the accumulators, then A's and B's descriptors and the scale-d flag.
// clang-format off
#define TN_WGMMA_D0_15 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define TN_WGMMA_D16_31 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define TN_WGMMA_D32_47 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define TN_WGMMA_D48_63 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define TN_WGMMA_D64_79 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define TN_WGMMA_D80_95 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define TN_WGMMA_D96_111 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define TN_WGMMA_D112_127 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define TN_WGMMA_D64_87 \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87"
#define TN_WGMMA_REGS32 TN_WGMMA_D0_15 ", " TN_WGMMA_D16_31
#define TN_WGMMA_REGS64 TN_WGMMA_D0_15 ", " TN_WGMMA_D16_31 ", " TN_WGMMA_D32_47 ", " TN_WGMMA_D48_63
#define TN_WGMMA_REGS88 TN_WGMMA_REGS64 ", " TN_WGMMA_D64_87
#define TN_WGMMA_REGS96 TN_WGMMA_REGS64 ", " TN_WGMMA_D64_79 ", " TN_WGMMA_D80_95
#define TN_WGMMA_REGS128 TN_WGMMA_REGS96 ", " TN_WGMMA_D96_111 ", " TN_WGMMA_D112_127
#define TN_WGMMA_ACC8(i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define TN_WGMMA_ACC32(i) TN_WGMMA_ACC8(i), TN_WGMMA_ACC8(i + 8), TN_WGMMA_ACC8(i + 16), TN_WGMMA_ACC8(i + 24)
#define TN_WGMMA_ACC64 TN_WGMMA_ACC32(0), TN_WGMMA_ACC32(32)
#define TN_WGMMA_ACC88 TN_WGMMA_ACC64, TN_WGMMA_ACC8(64), TN_WGMMA_ACC8(72), TN_WGMMA_ACC8(80)
#define TN_WGMMA_ACC96 TN_WGMMA_ACC64, TN_WGMMA_ACC32(64)
#define TN_WGMMA_ACC128 TN_WGMMA_ACC96, TN_WGMMA_ACC32(96)
// The instruction text for an m64nNkK MMA of `type` operands; TF32 takes 8 elements of K and no
// transpose operands (both operands K-major). 16-bit types take imm-trans-a and imm-trans-b, the
// immediates ta and tb: 1 where that operand is MN-major.
#define TN_WGMMA_TEXT(n, k, type, transpose, regs, a, b, scale)                                   \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " scale ", 0;\n"                                            \
  "wgmma.mma_async.sync.aligned.m64n" n "k" k ".f32." type "." type " {" regs "}, " a ", " b ", " \
  "p, 1, 1" transpose ";\n}\n"
#define TN_WGMMA_ASM(n, regs, a, b, scale, ta, tb, accumulators)                                           \
  if constexpr (sizeof(T) == 4) {                                                                          \
    asm volatile(TN_WGMMA_TEXT(n, "8", "tf32", "", regs, a, b, scale)                                      \
                 : accumulators : "l"(a_desc), "l"(b_desc), "r"((int)accumulate), "n"(0), "n"(0));                       \
  } else if constexpr (tn_is_bf16<T>::kValue) {                                                            \
    asm volatile(TN_WGMMA_TEXT(n, "16", "bf16", ", " ta ", " tb, regs, a, b, scale)                        \
                 : accumulators : "l"(a_desc), "l"(b_desc), "r"((int)accumulate), "n"((int)kTransA), "n"((int)kTransB)); \
  } else {                                                                                                 \
    asm volatile(TN_WGMMA_TEXT(n, "16", "f16", ", " ta ", " tb, regs, a, b, scale)                         \
                 : accumulators : "l"(a_desc), "l"(b_desc), "r"((int)accumulate), "n"((int)kTransA), "n"((int)kTransB)); \
  }
// The same with A from registers (16-bit only): a thread's four 32-bit pairs of A, in mma.sync's
// m16n8k16 A layout for its warp's 16 rows; only B may be MN-major (tb).
#define TN_WGMMA_RS_TEXT(n, type, regs, a, b, scale, tb)                                          \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " scale ", 0;\n"                                            \
  "wgmma.mma_async.sync.aligned.m64n" n "k16.f32." type "." type " {" regs "}, {" a "}, " b ", " \
  "p, 1, 1, " tb ";\n}\n"
#define TN_WGMMA_RS_ASM(n, regs, a, b, scale, tb, accumulators)                                               \
  if constexpr (tn_is_bf16<T>::kValue) {                                                                      \
    asm volatile(TN_WGMMA_RS_TEXT(n, "bf16", regs, a, b, scale, tb)                                           \
                 : accumulators : "r"(a_frag[0]), "r"(a_frag[1]), "r"(a_frag[2]), "r"(a_frag[3]), "l"(b_desc), \
                   "r"((int)accumulate), "n"((int)kTransB));                                                  \
  } else {                                                                                                    \
    asm volatile(TN_WGMMA_RS_TEXT(n, "f16", regs, a, b, scale, tb)                                            \
                 : accumulators : "r"(a_frag[0]), "r"(a_frag[1]), "r"(a_frag[2]), "r"(a_frag[3]), "l"(b_desc), \
                   "r"((int)accumulate), "n"((int)kTransB));                                                  \
  }
// clang-format on

// D[64 x kN] (+)= A · B, both from shared memory: T is f16 or bf16, each operand K-major or (with
// kTransA, kTransB) MN-major, or f32 read as TF32, K-major. Without `accumulate` D's old values
// are ignored (D = A · B).
template <typename T, int kN, bool kTransA = false, bool kTransB = false>
__device__ __forceinline__ void tn_wgmma(float (&d)[kN / 2], unsigned long long a_desc, unsigned long long b_desc,
                                         bool accumulate = true) {
  static_assert(kN == 64 || kN == 128 || kN == 176 || kN == 192 || kN == 256,
                "the widths of the GEMM and attention tiles");
  static_assert(sizeof(T) == 2 || !(kTransA || kTransB), "TF32 reads K-major operands only");
  if constexpr (kN == 64) {
    TN_WGMMA_ASM("64", TN_WGMMA_REGS32, "%32", "%33", "%34", "%35", "%36", TN_WGMMA_ACC32(0))
  } else if constexpr (kN == 128) {
    TN_WGMMA_ASM("128", TN_WGMMA_REGS64, "%64", "%65", "%66", "%67", "%68", TN_WGMMA_ACC64)
  } else if constexpr (kN == 176) {
    TN_WGMMA_ASM("176", TN_WGMMA_REGS88, "%88", "%89", "%90", "%91", "%92", TN_WGMMA_ACC88)
  } else if constexpr (kN == 192) {
    TN_WGMMA_ASM("192", TN_WGMMA_REGS96, "%96", "%97", "%98", "%99", "%100", TN_WGMMA_ACC96)
  } else {
    TN_WGMMA_ASM("256", TN_WGMMA_REGS128, "%128", "%129", "%130", "%131", "%132", TN_WGMMA_ACC128)
  }
}

// D[64 x kN] (+)= A · B, A [64 x 16] from registers (a_frag: tn_wgmma_rs_a's layout) and B from
// shared memory (16-bit; kTransB: MN-major).
template <typename T, int kN, bool kTransB = false>
__device__ __forceinline__ void tn_wgmma_rs(float (&d)[kN / 2], const unsigned (&a_frag)[4], unsigned long long b_desc,
                                            bool accumulate = true) {
  static_assert(sizeof(T) == 2, "A from registers: 16-bit types");
  if constexpr (kN == 64) {
    TN_WGMMA_RS_ASM("64", TN_WGMMA_REGS32, "%32, %33, %34, %35", "%36", "%37", "%38", TN_WGMMA_ACC32(0))
  } else if constexpr (kN == 128) {
    TN_WGMMA_RS_ASM("128", TN_WGMMA_REGS64, "%64, %65, %66, %67", "%68", "%69", "%70", TN_WGMMA_ACC64)
  } else {
    static_assert(kN == 256, "widths 64, 128 and 256");
    TN_WGMMA_RS_ASM("256", TN_WGMMA_REGS128, "%128, %129, %130, %131", "%132", "%133", "%134", TN_WGMMA_ACC128)
  }
}

// Keeps the compiler from moving reads or writes of these registers across asynchronous MMAs
// that use them (as accumulators, or as A from registers, which must not be reused until the
// MMA has retired).
template <int kN>
__device__ __forceinline__ void tn_wgmma_fence_regs(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int kN>
__device__ __forceinline__ void tn_wgmma_fence_regs(unsigned (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

#endif  // TEENY_WGMMA_CUH
