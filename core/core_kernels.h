// The kernels core itself runs (core/kernels/*.cuh, e.g. the profiler's clock probe), embedded in
// the binary at build time (cmake/embed_kernels.cmake) and compiled by NVRTC when first needed.
#pragma once

#include <string>
#include <vector>

#include "core/op.h"

namespace teeny {

const std::vector<KernelHeader>& embedded_core_kernels();

// The PTX of core/kernels/<header> for sm_<major><minor>, through NVRTC (and its cache): the
// header's extern "C" entries, looked up by name after loading.
std::string core_kernel_ptx(const std::string& header, int cc_major, int cc_minor);

}  // namespace teeny
