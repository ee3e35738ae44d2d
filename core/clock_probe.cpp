#include "core/clock_probe.h"

#include <array>

#include "core/core_kernels.h"

namespace teeny {
namespace {

constexpr const char* kEntry = "teeny_clock_probe";
// About 1 ms at H100/H200 boost clocks: long against %globaltimer's update interval (up to a
// microsecond on some GPUs), short against the timed iterations.
constexpr long long kCycles = 1 << 21;

}  // namespace

std::string clock_probe_ptx(int cc_major, int cc_minor) {
  return core_kernel_ptx("clock_probe.cuh", cc_major, cc_minor);
}

ClockProbe::ClockProbe(std::shared_ptr<cuda::Device> device)
    : device_(std::move(device)), result_(device_, 2 * sizeof(uint64_t), "the clock probe's result") {
  module_ = std::make_unique<cuda::Module>(device_, clock_probe_ptx(device_->cc_major(), device_->cc_minor()),
                                           "loading the SM clock probe");
  function_ = module_->function(kEntry, "finding the SM clock probe's entry");
}

double ClockProbe::sm_clock_mhz(const cuda::Stream& stream) const {
  long long cycles = kCycles;
  CUdeviceptr out = result_.ptr();
  void* args[] = {&cycles, &out};
  TEENY_CU(device_->driver(), LaunchKernel, "launching the SM clock probe", function_, 1, 1, 1, 1, 1, 1, 0,
           stream.handle(), args, nullptr);
  stream.synchronize("running the SM clock probe");
  std::array<uint64_t, 2> cycles_and_ns{};
  result_.download(cycles_and_ns.data(), sizeof(cycles_and_ns), 0, "reading the SM clock probe's result");
  return cycles_and_ns[1] > 0 ? 1e3 * static_cast<double>(cycles_and_ns[0]) / static_cast<double>(cycles_and_ns[1]) : 0;
}

}  // namespace teeny
