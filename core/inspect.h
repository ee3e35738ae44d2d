// teeny inspect's data: a bundle's nodes, kernels, argument layouts, grids, params and costs,
// every expression both symbolic and evaluated under the given dims and device symbols. The CLI
// renders it (cli/inspect.cpp: a table, or JSON).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bundle.h"

namespace teeny {

// An expression and its value, or why it has none: device symbols nobody bound (no GPU and no
// --device-* flag: the expression stays symbolic), or an error.
struct InspectedExpr {
  std::string expr;
  std::optional<int64_t> value;
  std::vector<std::string> needs;  // unbound device symbols it uses
  std::string error;
};

struct InspectedShape {
  std::string expr;  // "[B, 784]"
  std::optional<std::vector<int64_t>> value;
  std::string error;
};

struct InspectedTensor {
  std::string name, dtype;
  InspectedShape shape;
  InspectedExpr row_stride;
  std::string alias_of;  // a view: the tensor whose buffer it shares
};

struct InspectedParam {
  std::string name, slot, dtype;
  InspectedShape shape;
  InspectedExpr bytes;
  std::string init;         // "trained", "zero", "host"
  uint64_t init_bytes = 0;  // host: bytes in params.bin
  std::optional<uint64_t> init_offset;
};

// A node's scratch buffer (Lowering::scratch): the tensor "<node>#<buffer>", live only while the
// node runs.
struct InspectedScratch {
  std::string name, dtype;
  InspectedExpr elements, bytes;
};

struct InspectedTensorMap {
  std::string of;
  InspectedExpr cols, rows, row_stride;
  int box_cols = 0, box_rows = 0, swizzle = 0;
};

struct InspectedArg {
  size_t position = 0;
  std::string name, kind, c_type, ptx_type;
  int size = 0, offset = 0;
  std::string bound_to;  // a tensor (or scratch buffer), a param, an expression, "constant", "map of <arg>"
  // What it is bound to: "f32 [64, 784]" for tensors, params and tensor maps, the number for
  // scalars (an expression's error text, or empty while it needs device symbols).
  std::string value;
  std::optional<InspectedExpr> scalar;  // i32 / i64
  std::optional<double> constant;       // f32
  std::optional<InspectedTensorMap> map;
};

struct InspectedLaunch {
  int index = 0;
  std::string kernel, entry, target, source;  // source: "ops/linear.cpp:123"
  std::array<int, 3> block{1, 1, 1};
  std::optional<std::array<int, 3>> reqntid, maxntid;
  std::array<InspectedExpr, 3> grid;
  InspectedExpr dynamic_smem;
  std::vector<InspectedArg> args;
  InspectedExpr bytes, flops;
  InspectedExpr when;  // "1" for a launch that always runs
};

// A tunable node's variant where `when` holds, and why (BundleVariant).
struct InspectedVariant {
  std::string variant, why;  // variant "": the op's heuristic
  InspectedExpr when;
};

struct InspectedNode {
  std::string name, op;
  nlohmann::json attrs;
  std::vector<std::string> inputs;
  InspectedTensor output;
  std::vector<InspectedParam> params;
  std::vector<InspectedScratch> scratch;
  std::vector<InspectedLaunch> launches;  // none for a view
  std::vector<std::string> fused_from;
  std::vector<InspectedVariant> variants;  // tunable ops only
  // Training: the node's pass, what a backward/update node is for, the slots it binds to other
  // nodes' params, and for a forward node the backward nodes its rule added.
  std::string role = "forward";
  std::string grad_of;
  std::map<std::string, std::string> param_refs;
  std::vector<std::string> backward;
};

struct InspectedDim {
  std::string name;
  int64_t min = 0, max = 0, default_value = 0;
  std::optional<int64_t> bound, fixed;
};

// The device symbols an inspection evaluates with, and where they came from.
struct InspectDevice {
  std::string source;  // "--device-* flags", "GPU 0 (NVIDIA H200)"; empty: none bound
  Bindings symbols;    // a subset of SMS, SMEM_PER_BLOCK, L2_BYTES
};

struct Inspection {
  std::string graph, spec, teeny_version, nvrtc_version, arch;
  std::string tuning;  // the tuning file compile used; "": none
  int format_version = 0;
  std::vector<std::string> nvrtc_options, inputs, outputs;
  std::vector<InspectedDim> dims;
  InspectDevice device;
  // The device symbols some expression uses that `device` does not bind, in device_symbols() order.
  std::vector<std::string> unbound_device_symbols;
  size_t node_count = 0, kernel_count = 0, launch_count = 0, param_count = 0;
  InspectedExpr param_bytes, bytes, flops;  // totals over the whole bundle
  uint64_t params_bin_bytes = 0;
  std::vector<InspectedNode> nodes;  // all, or the one asked for
};

// `node` restricts the nodes to one (an unknown name is an error with a suggestion).
Inspection inspect_bundle(const Bundle& bundle, const Bindings& dims, const InspectDevice& device,
                          const std::optional<std::string>& node = std::nullopt);

// The PTX of kernel `name`, or of every kernel launched by node `name` (each preceded by a
// `// kernel <name> (entry <entry>)` line when there are several).
std::string bundle_ptx(const Bundle& bundle, const std::string& name);

}  // namespace teeny
