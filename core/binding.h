// Binding a bundle: its dims (--bind, or the spec's defaults) make every shape, stride and param
// size concrete; the device's facts (the device symbols SMS, SMEM_PER_BLOCK, L2_BYTES) then make
// every launch concrete: grid, shared memory, scalar arguments, tensor maps and cost. All on the
// CPU, so everything here is testable without a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/bundle.h"
#include "core/memory_plan.h"
#include "core/op.h"
#include "core/safetensors.h"

namespace teeny {

struct BoundTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t row_stride = 1;  // elements between consecutive rows (>= last dim)
  int64_t rows = 1;        // numel / last dim
  uint64_t bytes = 0;      // rows * row_stride * dtype size
  std::string producer;    // node name; empty for a graph input
  std::string alias_of;    // a view: the tensor whose bytes it shares
  int64_t id_bound = 0;    // see BundleTensor::id_bound
  int64_t numel() const;
};

// A tensor map's evaluated view, checked against cuTensorMapEncodeTiled's rules and the size of
// the buffer it views; only the global address is left to check when it is encoded.
struct BoundTensorMap {
  size_t of = 0;                               // index in BoundLaunch::args of the pointer it views
  DType dtype = DType::kF32;                   // that pointer's element type
  int64_t cols = 0, rows = 0, row_stride = 0;  // elements
  int box_cols = 0, box_rows = 0;
  int swizzle = 0;  // bytes
};

struct BoundArg {
  ArgKind kind = ArgKind::kI32;
  std::string name;
  int offset = 0, size = 0;  // in the kernel's parameter buffer
  std::string target;        // tensor (kInput/kOutput/kScratch) or param (kParam) name
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
  std::string label() const;     // launch_label(node, index)
};

// "fc1" for a node's first launch, "cat#1" for its second.
std::string launch_label(const std::string& node, int index);

struct BoundParam {
  std::string name, node, slot;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  ParamInit init = ParamInit::kTrained;
  uint64_t host_offset = 0;  // kHost: byte offset in Bundle::param_bytes
  ParamHints hints;
};

// A bundle with its dims bound, and its launches once bound for a device. Keeps a pointer to
// `bundle`, which must outlive it.
struct BoundBundle {
  const Bundle* bundle = nullptr;
  std::string label;                 // the bundle's path, for messages
  Bindings bindings;                 // the dims
  std::vector<BoundTensor> tensors;  // Bundle::tensors order
  std::vector<BoundParam> params;
  MemoryPlan plan;  // activations (graph inputs, node outputs and scratch buffers)
  // Set by bind_launches: the facts the launches were bound for, and the launches.
  std::optional<DeviceFacts> device;
  std::vector<BoundLaunch> launches;
  // Lookups, filled with the lists above: scanning the lists made a 10^5-node bundle quadratic.
  std::unordered_map<std::string, size_t> tensor_index;  // name -> index in tensors
  std::unordered_map<std::string, size_t> param_index;   // name -> index in params
  std::vector<std::vector<size_t>> launches_of_node;     // per node: indices into launches

  const BoundTensor& tensor(const std::string& name) const;  // throws if absent
  const BoundParam& param(const std::string& name) const;
  std::vector<size_t> node_launches(size_t node_index) const;  // indices into launches
  std::vector<ParamShape> param_shapes() const;
};

// `--bind D=N` values against the bundle's dims (range-checked, defaults for the rest); a dim
// fixed at compile time keeps its value, and binding it to another is an error.
Bindings bundle_bindings(const Bundle& bundle, const std::vector<std::string>& binds);
// Evaluates every tensor's shape and row stride and every param's shape, checks host init
// bytes, and plans activation memory: all the host side of a run needs (the host executor,
// inputs, weights). Throws Error naming the bundle and the tensor or param.
BoundBundle bind_bundle(const Bundle& bundle, const Bindings& dims, const std::string& label);
// Evaluates every launch under the dims and the device symbols bound to `device`: grid, block
// and shared-memory limits, argument layouts and values, tensor maps, cost. A launch whose
// `when` is 0 under the dims is left out. Replaces any launches bound before. Throws Error
// naming the bundle, the launch and the argument.
void bind_launches(BoundBundle& bound, const DeviceFacts& device);

}  // namespace teeny
