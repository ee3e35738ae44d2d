// The kernels core itself runs (core/kernels/*.cuh, e.g. the profiler's clock probe), embedded in
// the binary at build time (cmake/embed_kernels.cmake) and compiled by NVRTC when first needed.
#pragma once

#include <vector>

#include "core/op.h"

namespace teeny {

const std::vector<KernelHeader>& embedded_core_kernels();

}  // namespace teeny
