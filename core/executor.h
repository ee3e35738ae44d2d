// Running a bundle: bind its dims and evaluate every expression (CPU, testable without a GPU),
// prepare the host data (inputs, params), and execute on the GPU.
//
// Host data conventions (documented for users in README "teeny run"):
//   * random inputs (--seed N): floats uniform in [-1, 1); i32 inputs uniform integers in
//     [0, n) where n is the smallest `num_embeddings` attr among the input's consumers, or
//     8 when no consumer has one. Each tensor has its own stream, seeded from N and the
//     tensor's name (SplitMix64), so values do not depend on the order of tensors.
//   * trained params not loaded from --weights are zero (--init zero, the default) or random
//     (--init random): rank >= 2 params uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)) with
//     fan_in = numel / shape[0] (PyTorch's default for linear/conv weights); rank <= 1 params
//     uniform in [0.5, 1.5) — positive, so variances and norm scales stay valid.
//   * kZero params are zero; kHost params get the bundle's init bytes.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/bundle.h"
#include "core/driver.h"
#include "core/memory_plan.h"
#include "core/op.h"
#include "core/safetensors.h"

namespace teeny {

// ---- binding: everything concrete ------------------------------------------------------

struct BoundTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t row_stride = 1;  // elements between consecutive rows (>= last dim)
  int64_t rows = 1;        // numel / last dim
  uint64_t bytes = 0;      // rows * row_stride * dtype size
  std::string producer;    // node name; empty for a graph input
  std::string alias_of;    // a view: the tensor whose bytes it shares
  int64_t numel() const;
};

// A tensor map's evaluated view, checked against cuTensorMapEncodeTiled's rules and the size of
// the buffer it views; only the global address is left to check when it is encoded.
struct BoundTensorMap {
  size_t of = 0;               // index in BoundLaunch::args of the pointer it views
  DType dtype = DType::kF32;   // that pointer's element type
  int64_t cols = 0, rows = 0, row_stride = 0;  // elements
  int box_cols = 0, box_rows = 0;
  int swizzle = 0;             // bytes
};

struct BoundArg {
  ArgKind kind = ArgKind::kI32;
  std::string name;
  int offset = 0, size = 0;  // in the kernel's parameter buffer
  std::string target;        // tensor (kInput/kOutput) or param (kParam) name
  int64_t ivalue = 0;        // kI32 / kI64
  double fvalue = 0.0;       // kF32
  BoundTensorMap map;        // kTensorMap
};

struct BoundLaunch {
  std::string node;
  size_t node_index = 0;  // into Bundle::nodes
  int index = 0;          // launch index within the node
  int kernel = 0;         // into Bundle::kernels
  std::array<int, 3> block{1, 1, 1};
  std::array<int64_t, 3> grid{1, 1, 1};
  int64_t dynamic_smem = 0;
  std::vector<BoundArg> args;
  size_t param_buffer_bytes = 0;
  int64_t bytes = 0, flops = 0;  // the op's cost
  std::string label() const;     // "fc1" or "cat#1" for a node's second launch
};

struct BoundParam {
  std::string name, node, slot;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  ParamInit init = ParamInit::kTrained;
  uint64_t host_offset = 0;  // kHost: byte offset in Bundle::param_bytes
};

// A bundle with its dims bound. Keeps a pointer to `bundle`, which must outlive it.
struct BoundBundle {
  const Bundle* bundle = nullptr;
  std::string label;  // the bundle's path, for messages
  Bindings bindings;
  std::vector<BoundTensor> tensors;  // Bundle::tensors order
  std::vector<BoundLaunch> launches;
  std::vector<BoundParam> params;
  MemoryPlan plan;  // activations (graph inputs and node outputs)

  const BoundTensor& tensor(const std::string& name) const;  // throws if absent
  const BoundParam& param(const std::string& name) const;
  std::vector<size_t> node_launches(size_t node_index) const;  // indices into launches
  std::vector<ParamShape> param_shapes() const;
};

// `--bind D=N` values against the bundle's dims (range-checked, defaults for the rest); a dim
// fixed at compile time keeps its value, and binding it to another is an error.
Bindings bundle_bindings(const Bundle& bundle, const std::vector<std::string>& binds);
// Evaluates every shape, stride, grid, scalar argument and cost, checks argument layouts and
// launch limits, and plans activation memory. Throws Error naming the tensor/launch/arg.
BoundBundle bind_bundle(const Bundle& bundle, const Bindings& bindings, const std::string& label);

// ---- host data ----------------------------------------------------------------------------

// Contiguous host values <-> the device layout of `tensor` (rows padded to row_stride with
// zeros, elements in the tensor's dtype).
std::vector<uint8_t> pack_tensor(const BoundTensor& tensor, const HostTensor& values);
HostTensor unpack_tensor(const BoundTensor& tensor, const uint8_t* device_bytes);

enum class ParamFill { kZero, kRandom };

struct DataOptions {
  uint64_t seed = 0;
  std::map<std::string, std::string> input_files;  // graph input -> .npy path
  std::string weights_path;                        // safetensors; empty: none
  ParamFill fill = ParamFill::kZero;               // trained params not in the weights
};

struct RunData {
  std::map<std::string, HostTensor> inputs;  // every graph input
  std::map<std::string, HostTensor> params;  // every param
  std::vector<std::string> notes;  // for stderr: "4 trained parameters are zero: ..."
};

// Inputs (random or from .npy, shape- and dtype-checked) and params (weights, bundle init
// bytes, zero or random). Throws Error for unknown input names, bad files, mismatches.
RunData prepare_data(const BoundBundle& bound, const DataOptions& options);
// One random tensor as documented above (exposed for tests).
HostTensor random_input(const BoundBundle& bound, const BoundTensor& tensor, uint64_t seed);

// ---- GPU execution ------------------------------------------------------------------------

struct RunTiming {
  int iterations = 0;
  bool cuda_graph = false;
  double total_ms = 0;  // first launch enqueued to last one finished (CUDA events)
};

class GpuExecutor {
 public:
  // Loads every module (JIT log in errors), resolves entries, allocates the activation arena
  // and the params buffer once, and builds each launch's parameter buffer. `modules`: the
  // bundle's kernels as another executor of the same bundle loaded them (modules()), reused.
  using Modules = std::vector<std::shared_ptr<cuda::Module>>;
  GpuExecutor(std::shared_ptr<cuda::Device> device, const BoundBundle& bound, Modules modules = {});
  // Per bundle kernel. A profile sweep keeps them across its bindings: CUPTI named the kernels
  // of modules loaded after others were unloaded by the unloaded ones' names (H200, CUPTI 13.0).
  const Modules& modules() const { return modules_; }

  void upload(const RunData& data);  // every graph input and param
  void set_input(const std::string& name, const HostTensor& values);
  void set_param(const std::string& name, const HostTensor& values);

  // Enqueue on the executor's stream; nothing synchronises.
  void enqueue(size_t launch_index) const;
  void enqueue_all() const;
  // Runs the whole sequence `iterations` times (captured once and replayed with
  // `cuda_graph`), with one synchronisation at the end.
  RunTiming run(int iterations, bool cuda_graph);
  void synchronize(const std::string& what) const;

  HostTensor read(const std::string& tensor) const;  // after synchronize
  CUfunction function(size_t launch_index) const;
  const cuda::Stream& stream() const { return *stream_; }
  const BoundBundle& bound() const { return bound_; }
  const std::shared_ptr<cuda::Device>& device() const { return device_; }
  uint64_t params_bytes() const { return params_.size(); }

 private:
  CUdeviceptr tensor_ptr(const std::string& name) const;
  CUdeviceptr arg_ptr(const BoundArg& arg) const;  // kInput, kParam, kOutput
  CUtensorMap encode_tensor_map(const BoundLaunch& launch, const BoundArg& arg) const;
  std::string loading(const std::string& what) const;  // "<what> from bundle <label>"

  std::shared_ptr<cuda::Device> device_;
  const BoundBundle& bound_;
  Modules modules_;                                     // per bundle kernel
  std::vector<CUfunction> functions_;                   // per launch
  std::vector<std::vector<uint8_t>> param_buffers_;     // per launch: the packed arguments
  std::vector<std::vector<void*>> arg_pointers_;        // per launch: each argument in its buffer
  cuda::DeviceBuffer arena_, params_;
  std::map<std::string, uint64_t> param_offsets_;
  std::unique_ptr<cuda::Stream> stream_;
};

}  // namespace teeny
