// Opening the GPU in tests: a test without a CUDA driver or device skips with the reason.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/driver.h"
#include "core/error.h"

namespace teeny::gpu_testing {

// The device, or nullptr with the reason in `why`.
inline std::shared_ptr<cuda::Device> open_device(std::string* why) {
  try {
    return cuda::Device::open(cuda::Driver::get());
  } catch (const Error& error) {
    *why = error.message();
    return nullptr;
  }
}

}  // namespace teeny::gpu_testing

// Declares `device` opened, or skips the test saying why.
#define TEENY_GPU_OR_SKIP(device)                                                                \
  std::string device##_skip_reason;                                                              \
  std::shared_ptr<cuda::Device> device = teeny::gpu_testing::open_device(&device##_skip_reason); \
  if (!device) GTEST_SKIP() << "no CUDA driver/device: " << device##_skip_reason
