#include "core/device_batches.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/core_kernels.h"
#include "core/error.h"

namespace teeny {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // the kernel strides over the rest

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
  module_ = std::make_unique<cuda::Module>(device, gather_rows_ptx(device->cc_major(), device->cc_minor()),
                                           "loading the batch gather kernel");
  gather2_ = module_->function("teeny_gather_rows_2", "finding the batch gather kernel");
  gather4_ = module_->function("teeny_gather_rows_4", "finding the batch gather kernel");
}

void DeviceBatches::gather(const GpuExecutor& executor, const std::vector<RowGather>& rows) const {
  std::vector<int64_t> starts;
  for (const RowGather& gather : rows) starts.insert(starts.end(), gather.starts.begin(), gather.starts.end());
  starts_.upload(starts.data(), starts.size() * sizeof(int64_t), 0, "uploading the batch's row starts");
  size_t first = 0;
  for (const RowGather& gather : rows) {
    const BoundTensor& input = executor.bound().tensor(gather.input);
    CUdeviceptr src = sources_.at(gather.source).ptr(), dst = executor.tensor_ptr(gather.input);
    CUdeviceptr row_starts = starts_.ptr() + first * sizeof(int64_t);
    long long row = gather.row, total = gather.row * static_cast<int64_t>(gather.starts.size());
    int last = static_cast<int>(input.shape.back()), stride = static_cast<int>(input.row_stride);
    void* args[] = {&src, &row_starts, &dst, &row, &total, &last, &stride};
    const auto blocks = static_cast<unsigned>(std::clamp<int64_t>((total + kThreads - 1) / kThreads, 1, kMaxBlocks));
    TEENY_CU(executor.device()->driver(), LaunchKernel, fmt::format("gathering the batch of input '{}'", gather.input),
             dtype_size(input.dtype) == 2 ? gather2_ : gather4_, blocks, 1, 1, kThreads, 1, 1, 0,
             executor.stream().handle(), args, nullptr);
    first += gather.starts.size();
  }
}

}  // namespace teeny
