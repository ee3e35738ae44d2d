// The bundle: a self-describing directory (manifest.json, kernels/<k>.ptx, params.bin).
// Everything needed to run is here as data — grids, scalar args, shapes, strides, param
// sizes as expressions over the graph's dims, and grids and split counts that depend on the GPU
// over the device symbols (SMS, ...; core/expr.h) — so any teeny binary runs any bundle, and
// a bundle compiled for an arch on every GPU of that arch.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/expr.h"
#include "core/op.h"

namespace teeny {

// 3: launch expressions may use the device symbols; tensors carry id_bound, params their hints.
inline constexpr int kBundleFormatVersion = 4;

struct BundleDim {
  std::string name;
  int64_t min = 1, max = 0, default_value = 0;
};

struct BundleTensor {
  std::string name;  // graph input or node name
  DType dtype = DType::kF32;
  Shape shape;
  Expr row_stride;       // elements
  std::string producer;  // node name; empty for a graph input
  std::string alias_of;  // views: the tensor whose buffer this one shares
  // Graph inputs of i32 ids: the smallest bound that their consumers declare
  // (InputSpec::id_bound_attr), which random inputs stay below; 0: none.
  int64_t id_bound = 0;
  // A scratch buffer of its producer (Lowering::scratch), named scratch_tensor_name(node, buffer):
  // shape [elements], passed only to the node's own scratch arguments, never an input or output.
  bool scratch = false;
};

// "<node>#<buffer>": a scratch buffer's tensor name, which no node or graph input can take.
std::string scratch_tensor_name(const std::string& node, const std::string& buffer);

struct BundleArg {
  ArgKind kind;
  std::string name;           // C parameter name
  std::string c_type;         // "const float*", "int", ...
  std::string ptx_type;       // ".u64", ".u32", ".f32", ...
  int size = 0;               // bytes in the param buffer
  int offset = 0;             // bytes from the start of the param buffer
  std::string tensor;         // kInput/kOutput/kScratch: tensor name; kParam: param name "<node>.<slot>"
  Expr value;                 // kI32 / kI64
  double fvalue = 0.0;        // kF32
  DType dtype = DType::kF32;  // pointers: the element type
  TensorMapSpec map;          // kTensorMap
};

struct BundleKernel {
  std::string name;    // unique in the bundle; file kernels/<name>.ptx
  std::string entry;   // "<name>_entry_point", present as `.visible .entry` in the PTX
  std::string sha256;  // of the PTX file
  std::string target;  // NVRTC's --gpu-architecture for it: the bundle's arch, or e.g. sm_90a
  std::string source_file;
  int source_line = 0;
  std::string ptx;  // loaded text (not stored in the manifest)
  std::optional<std::array<int, 3>> reqntid, maxntid;
  std::vector<std::string> ptx_params;  // PTX param types in order, e.g. ".u64"
};

struct BundleLaunch {
  std::string node;
  int index = 0;   // launch index within the node
  int kernel = 0;  // index into Bundle::kernels
  std::array<int, 3> block{1, 1, 1};
  std::array<Expr, 3> grid;
  Expr dynamic_smem;
  std::vector<BundleArg> args;
  Expr bytes, flops;
  Expr when{1};  // Launch::when
};

struct BundleParam {
  std::string name;  // "<node>.<slot>"
  std::string node, slot;
  DType dtype = DType::kF32;
  Shape shape;
  ParamInit init = ParamInit::kTrained;
  uint64_t offset = 0, size = 0;  // kHost: byte range in params.bin
  ParamHints hints;
};

// Which variant of a tunable op (OpDef::tuning) a node runs where `when` holds, and why: the
// variant and the tuning record it came from, or "" for the op's own choice and why no record.
struct BundleVariant {
  std::string variant, why;
  Expr when{1};
};

struct BundleNode {
  std::string name, op;
  nlohmann::json attrs;
  std::vector<std::string> inputs;  // tensor names
  std::optional<DType> requested_dtype;
  std::vector<std::string> fused_from;  // fusion: the original node names, if any
  std::vector<BundleVariant> variants;  // tunable ops only
  // Training (core/autodiff.h): the pass, what a backward or update node is for, and the slots
  // bound to params other nodes own.
  NodeRole role = NodeRole::kForward;
  std::string grad_of;
  std::map<std::string, std::string> param_refs;
};

struct Bundle {
  int format_version = kBundleFormatVersion;
  std::string teeny_version, nvrtc_version, arch;
  std::vector<std::string> nvrtc_options;
  std::string graph_name, spec_path;
  std::string tuning;  // the tuning file compile used (TuningFile::source); "": none
  // A training bundle's loss node ("": not one) and gradient tensors: each trained param's (and
  // listed input's), by name.
  std::string loss;
  std::map<std::string, std::string> gradients;
  std::vector<BundleDim> dims;
  Bindings fixed;                    // dims fixed at compile time (compile --bind)
  std::vector<std::string> inputs;   // graph input tensor names
  std::vector<std::string> outputs;  // graph output tensor names
  // Graph inputs first, then node outputs in order, each node's scratch buffers after its output.
  std::vector<BundleTensor> tensors;
  std::vector<BundleNode> nodes;  // topological
  std::vector<BundleKernel> kernels;
  std::vector<BundleLaunch> launches;  // in execution order
  std::vector<BundleParam> params;
  std::vector<uint8_t> param_bytes;  // params.bin

  const BundleTensor& tensor(const std::string& name) const;  // throws if absent
  const BundleNode* find_node(const std::string& name) const;
};

// Writes atomically: a temp directory next to `path`, then rename over it; on failure
// nothing is left and an existing bundle at `path` is untouched.
void write_bundle(const Bundle& bundle, const std::string& path);
// Reads and verifies: format version, every file present, checksums match. Errors name the
// missing or altered file.
Bundle read_bundle(const std::string& path);

nlohmann::json bundle_to_json(const Bundle& bundle);  // the manifest
Bundle bundle_from_json(const nlohmann::json& manifest);

}  // namespace teeny
