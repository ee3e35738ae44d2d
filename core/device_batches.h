// Training batches gathered on the GPU: the data set's arrays are uploaded once, rounded to their
// inputs' dtypes, and each step's batch is copied out of them by a kernel
// (core/kernels/gather_rows.cuh) straight into the inputs' buffers. A step then moves only the
// batch's row starts across the bus and does no per-element work on the host, which for large
// float inputs would otherwise take longer than the step's kernels.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/driver.h"
#include "core/executor.h"
#include "core/train_data.h"

namespace teeny {

// The gather kernels' PTX for sm_<major><minor> (entries teeny_gather_rows_2 and _4, by element size).
std::string gather_rows_ptx(int cc_major, int cc_minor);

class DeviceBatches {
 public:
  // nullptr when the batches must come from the host: their sources are not held in memory (a
  // .bin token file), or would take more than a quarter of the device's memory.
  static std::unique_ptr<DeviceBatches> make(const GpuExecutor& executor, BatchSource& batches);
  // Enqueues the copies of `rows` into their inputs on the executor's stream.
  void gather(const GpuExecutor& executor, const std::vector<RowGather>& rows) const;

 private:
  DeviceBatches(const GpuExecutor& executor, BatchSource& batches);

  std::vector<cuda::DeviceBuffer> sources_;
  cuda::DeviceBuffer starts_;  // every input's row starts of one batch, int64, input after input
  std::unique_ptr<cuda::PinnedBuffer> staged_starts_;  // their host copy, uploaded asynchronously
  std::unique_ptr<cuda::Module> module_;
  CUfunction gather2_ = nullptr, gather4_ = nullptr;  // by element size
};

}  // namespace teeny
