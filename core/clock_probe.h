// The SM clock a GPU is running at now, measured rather than read from an attribute (which gives
// the maximum): `teeny profile` records it around the timed iterations, so a run slowed by a
// power or thermal limit, or by locked clocks, says so.
#pragma once

#include <memory>
#include <string>

#include "core/driver.h"

namespace teeny {

// The probe's PTX for a device of compute capability major.minor (NVRTC, through the cache).
std::string clock_probe_ptx(int cc_major, int cc_minor);

class ClockProbe {
 public:
  // Compiles core/kernels/clock_probe.cuh with NVRTC for the device (through the kernel cache)
  // and loads it. Throws Error (exit code 3) on a CUDA or NVRTC failure.
  explicit ClockProbe(std::shared_ptr<cuda::Device> device);
  // SM cycles per microsecond over a ~1 ms spin of one thread, synchronised on `stream`.
  double sm_clock_mhz(const cuda::Stream& stream) const;

 private:
  std::shared_ptr<cuda::Device> device_;
  std::unique_ptr<cuda::Module> module_;
  CUfunction function_ = nullptr;
  cuda::DeviceBuffer result_;
};

}  // namespace teeny
