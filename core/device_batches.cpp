#include "core/device_batches.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/core_kernels.h"
#include "core/error.h"

namespace teeny {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxRowBlocks = 65535;  // grid y's limit: the kernel strides over the rest

uint64_t source_bytes(const HostTensor& source) {
  return static_cast<uint64_t>(source.numel()) * dtype_size(source.dtype);
}

}  // namespace

std::string gather_rows_ptx(int cc_major, int cc_minor) {
  return core_kernel_ptx("gather_rows.cuh", cc_major, cc_minor);
}

std::unique_ptr<DeviceBatches> DeviceBatches::make(const GpuExecutor& executor, BatchSource& batches) {
  if (batches.sources().empty()) return nullptr;
  uint64_t bytes = 0;
  for (const HostTensor& source : batches.sources()) bytes += source_bytes(source);
  if (bytes > executor.device()->total_memory() / 4) return nullptr;
  for (const RowGather& gather : batches.rows(batches.step()))
    if (gather.row > std::numeric_limits<int>::max()) return nullptr;  // the kernel counts a row's elements in int
  return std::unique_ptr<DeviceBatches>(new DeviceBatches(executor, batches));
}

DeviceBatches::DeviceBatches(const GpuExecutor& executor, BatchSource& batches) {
  const std::shared_ptr<cuda::Device>& device = executor.device();
  for (const HostTensor& source : batches.sources()) {
    std::vector<uint8_t> packed;
    packed.reserve(source_bytes(source));
    for (double value : source.data) append_element(packed, source.dtype, value);
    sources_.emplace_back(device, packed.size(), "the training data");
    sources_.back().upload(packed.data(), packed.size(), 0, "uploading the training data");
  }
  size_t starts = 0;
  for (const RowGather& gather : batches.rows(batches.step())) starts += gather.starts.size();
  starts_ = cuda::DeviceBuffer(device, starts * sizeof(int64_t), "the batch's row starts");
  staged_starts_ = std::make_unique<cuda::PinnedBuffer>(device, starts * sizeof(int64_t), "the batch's row starts");
  module_ = std::make_unique<cuda::Module>(device, gather_rows_ptx(device->cc_major(), device->cc_minor()),
                                           "loading the batch gather kernel");
  gather2_ = module_->function("teeny_gather_rows_2", "finding the batch gather kernel");
  gather4_ = module_->function("teeny_gather_rows_4", "finding the batch gather kernel");
}

void DeviceBatches::gather(const GpuExecutor& executor, const std::vector<RowGather>& rows) const {
  auto* staged = static_cast<int64_t*>(staged_starts_->data());
  size_t count = 0;
  for (const RowGather& gather : rows) {
    std::copy(gather.starts.begin(), gather.starts.end(), staged + count);
    count += gather.starts.size();
  }
  starts_.upload_async(*staged_starts_, count * sizeof(int64_t), executor.stream(), "uploading the batch's row starts");
  size_t first = 0;
  for (const RowGather& gather : rows) {
    const BoundTensor& input = executor.bound().tensor(gather.input);
    CUdeviceptr src = sources_.at(gather.source).ptr(), dst = executor.tensor_ptr(gather.input);
    CUdeviceptr row_starts = starts_.ptr() + first * sizeof(int64_t);
    long long batch_rows = static_cast<long long>(gather.starts.size());
    int row = static_cast<int>(gather.row);
    int last = static_cast<int>(input.shape.back()), stride = static_cast<int>(input.row_stride);
    void* args[] = {&src, &row_starts, &dst, &batch_rows, &row, &last, &stride};
    const auto blocks_x = static_cast<unsigned>(std::clamp<int64_t>((gather.row + kThreads - 1) / kThreads, 1, 64));
    const auto blocks_y = static_cast<unsigned>(std::clamp<int64_t>(batch_rows, 1, kMaxRowBlocks));
    TEENY_CU(executor.device()->driver(), LaunchKernel, fmt::format("gathering the batch of input '{}'", gather.input),
             dtype_size(input.dtype) == 2 ? gather2_ : gather4_, blocks_x, blocks_y, 1, kThreads, 1, 1, 0,
             executor.stream().handle(), args, nullptr);
    first += gather.starts.size();
  }
}

}  // namespace teeny
