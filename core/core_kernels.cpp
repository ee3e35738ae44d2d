#include "core/core_kernels.h"

#include <fmt/format.h>

#include "core/nvrtc.h"

namespace teeny {

std::string core_kernel_ptx(const std::string& header, int cc_major, int cc_minor) {
  KernelSource source;
  source.name = header.substr(0, header.find('.'));
  source.source = fmt::format("#include \"{}\"\n", header);
  source.file = "core/kernels/" + header;
  source.line = 1;
  NvrtcConfig config;
  config.arch = fmt::format("sm_{}{}", cc_major, cc_minor);
  config.headers = embedded_core_kernels();
  config.jobs = 1;
  return compile_kernels({source}, config).front().ptx;
}

}  // namespace teeny
