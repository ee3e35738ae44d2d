// The GPU executor: runs a bundle whose launches are bound for its device (core/binding.h) with
// the host data of a run (core/run_data.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/binding.h"
#include "core/driver.h"
#include "core/run_data.h"

namespace teeny {

// ---- GPU execution ------------------------------------------------------------------------

struct RunTiming {
  int iterations = 0;
  bool cuda_graph = false;
  double total_ms = 0;  // first launch enqueued to last one finished (CUDA events)
};

class GpuExecutor {
 public:
  // Loads every module (JIT log in errors), resolves entries, allocates the activation arena
  // and the params buffer once, and builds each launch's parameter buffer. `bound`'s launches
  // must be bound for this device (bind_launches with device->facts()). `modules`: the
  // bundle's kernels as another executor of the same bundle loaded them (modules()), reused.
  using Modules = std::vector<std::shared_ptr<cuda::Module>>;
  GpuExecutor(std::shared_ptr<cuda::Device> device, const BoundBundle& bound, Modules modules = {});
  // Per bundle kernel. A profile sweep keeps them across its bindings: CUPTI named the kernels
  // of modules loaded after others were unloaded by the unloaded ones' names (H200, CUPTI 13.0).
  const Modules& modules() const { return modules_; }

  void upload(const RunData& data);  // every graph input and param
  void set_input(const std::string& name, const HostTensor& values);
  void set_param(const std::string& name, const HostTensor& values);

  // Whether a launch may start while the launch before it finishes (programmatic dependent
  // launch, sm_90+, for kernels whose entry waits for it: core/compile.cpp). On by default; the
  // profiler turns it off, so that each launch's time is its own.
  void overlap_launches(bool on);

  // Enqueue on the executor's stream; nothing synchronises.
  void enqueue(size_t launch_index) const;
  void enqueue_all() const;
  // Launches [begin, end) spread over streams so that those that touch none of each other's
  // bytes run side by side (core/launch_graph.h), joined back on the executor's stream. Meant
  // for capture into a CUDA graph, where the streams and events cost nothing at replay.
  void enqueue_concurrent(size_t begin, size_t end);
  // Runs the whole sequence `iterations` times (captured once, with enqueue_concurrent, and
  // replayed with `cuda_graph`), with one synchronisation at the end.
  RunTiming run(int iterations, bool cuda_graph);
  void synchronize(const std::string& what) const;

  HostTensor read(const std::string& tensor) const;  // after synchronize
  // Enqueues a copy of `tensor` into `to` (page-locked, at least its bytes) on the stream, so that
  // reading it needs no copy after the synchronize; staged() decodes it then.
  void enqueue_read(const std::string& tensor, const cuda::PinnedBuffer& to) const;
  HostTensor staged(const std::string& tensor, const cuda::PinnedBuffer& from) const;
  HostTensor read_param(const std::string& name) const;
  CUfunction function(size_t launch_index) const;
  const cuda::Stream& stream() const { return *stream_; }
  const BoundBundle& bound() const { return bound_; }
  const std::shared_ptr<cuda::Device>& device() const { return device_; }
  uint64_t params_bytes() const { return params_.size(); }
  CUdeviceptr tensor_ptr(const std::string& name) const;  // in the activation arena

 private:
  CUdeviceptr arg_ptr(const BoundArg& arg) const;  // kInput, kParam, kOutput
  CUtensorMap encode_tensor_map(const BoundLaunch& launch, const BoundArg& arg) const;
  void load_modules();
  void resolve_functions();
  void allocate_buffers();
  std::vector<uint8_t> pack_arguments(const BoundLaunch& launch) const;
  void enqueue_on(size_t launch_index, const cuda::Stream& stream) const;
  std::string loading(const std::string& what) const;  // "<what> from bundle <label>"

  std::shared_ptr<cuda::Device> device_;
  const BoundBundle& bound_;
  Modules modules_;                    // per bundle kernel
  std::vector<CUfunction> functions_;  // per launch
  std::vector<bool> waits_;            // per launch: its entry waits for the one before
  bool overlap_ = false;
  std::vector<std::vector<uint8_t>> param_buffers_;  // per launch: the packed arguments
  std::vector<std::vector<void*>> arg_pointers_;     // per launch: each argument in its buffer
  cuda::DeviceBuffer arena_, params_;
  std::map<std::string, uint64_t> param_offsets_;
  std::unique_ptr<cuda::Stream> stream_;
  std::vector<std::unique_ptr<cuda::Stream>> side_streams_;  // enqueue_concurrent's, made on first use
  std::vector<std::unique_ptr<cuda::Event>> events_;         // enqueue_concurrent's, one per launch or stream
};

}  // namespace teeny
