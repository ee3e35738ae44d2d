// What every file in ops/kernels/check/ shares. Each file instantiates one kernel header's
// templates with representative arguments (every dtype, functor and tile shape the ops use) for
// the `kernel_check` build target: nvcc -arch=sm_90a with warnings as errors and ptxas's
// -warn-spills, so a header that no longer compiles, warns or spills fails the build on
// machines without a GPU. TN_ENTRY mirrors the entries compile generates
// (kernel_translation_unit in core/compile.cpp): a __global__ function forwarding to a template.
#ifndef TEENY_CHECK_CUH
#define TEENY_CHECK_CUH

#define TN_ENTRY(name, bounds) extern "C" __global__ void __launch_bounds__ bounds name

#endif  // TEENY_CHECK_CUH
