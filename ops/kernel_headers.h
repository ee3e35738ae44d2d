// The kernel headers (ops/kernels/*.cuh), embedded in the binary at build time
// (cmake/embed_kernels.cmake) and registered with every registry by register_all, so NVRTC
// compiles kernels from them as in-memory headers.
#pragma once

#include <vector>

#include "core/op.h"

namespace teeny::ops {

const std::vector<KernelHeader>& embedded_kernel_headers();

}  // namespace teeny::ops
