// Helpers shared by the per-op CPU tests: the real registry, an OpContext with its output
// inferred by the op's own shape rule, and the op's host reference on concrete inputs.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/compile.h"
#include "core/graph.h"
#include "core/nvrtc.h"
#include "core/op.h"
#include "core/registry.h"
#include "ops/ops.h"

namespace teeny::op_testing {

inline const Registry& registry() {
  static const Registry r = [] {
    Registry reg;
    ops::register_all(reg);
    return reg;
  }();
  return r;
}

// `kernels` compiled by NVRTC as compile does: each its generated translation unit (entry
// `<name>_entry_point`), with the registry's kernel headers.
inline std::vector<CompiledKernel> nvrtc_compile(std::vector<KernelSource> kernels, NvrtcConfig config) {
  for (KernelSource& kernel : kernels) kernel.source = kernel_translation_unit(kernel, kernel.name + "_entry_point");
  config.headers = registry().kernel_headers();
  return compile_kernels(kernels, config);
}

inline const OpDef& op(const std::string& name) {
  const OpDef* def = registry().find(name);
  if (!def) throw std::runtime_error("op not registered: " + name);
  return *def;
}

// A linear's lowering without its small-M variants (the "_gemv" kernels and their launches, for x with
// few rows), kernel indices renumbered: the tiled GEMM's launches alone.
inline Lowering tiled_linear(Lowering lowering) {
  for (size_t k = lowering.kernels.size(); k-- > 0;) {
    if (lowering.kernels[k].name.find("_gemv") == std::string::npos) continue;
    lowering.kernels.erase(lowering.kernels.begin() + static_cast<long>(k));
    std::vector<Launch> kept;
    for (Launch& launch : lowering.launches) {
      if (launch.kernel == static_cast<int>(k)) continue;
      if (launch.kernel > static_cast<int>(k)) --launch.kernel;
      kept.push_back(std::move(launch));
    }
    lowering.launches = std::move(kept);
  }
  return lowering;
}

inline TensorType tensor(DType dtype, std::vector<Expr> shape) { return contiguous(dtype, std::move(shape)); }

inline OpContext context(const std::string& name, nlohmann::json attrs, std::vector<TensorType> inputs) {
  OpContext ctx;
  ctx.node = "n";
  ctx.attrs = Attrs(std::move(attrs));
  ctx.inputs = std::move(inputs);
  ctx.output = op(name).infer(ctx);
  return ctx;
}

// The message of the OpError the op's shape rule throws (and its key into *key), or
// "(no error)".
inline std::string infer_error(const std::string& name, nlohmann::json attrs, std::vector<TensorType> inputs,
                               std::string* key = nullptr) {
  OpContext ctx;
  ctx.node = "n";
  ctx.attrs = Attrs(std::move(attrs));
  ctx.inputs = std::move(inputs);
  try {
    op(name).infer(ctx);
  } catch (const OpError& e) {
    if (key) *key = e.key;
    return e.message();
  }
  return "(no error)";
}

// The message of the error parsing graph spec `text` (as file `path`) raises, or "(no error)".
inline std::string graph_error(const std::string& text, const std::string& path) {
  try {
    parse_graph(text, path, registry());
  } catch (const Error& e) {
    return e.message();
  }
  return "(no error)";
}

// A concrete input for reference(): shape, values, dtype.
struct HostIn {
  std::vector<int64_t> shape;
  std::vector<double> data;
  DType dtype = DType::kF32;
};

// Runs the op's host reference on concrete inputs and params (shapes taken as constants).
inline HostTensor reference(const std::string& name, nlohmann::json attrs, std::vector<HostIn> inputs,
                            std::vector<std::vector<double>> params = {}) {
  std::vector<TensorType> types;
  for (const HostIn& in : inputs) types.push_back(tensor(in.dtype, {in.shape.begin(), in.shape.end()}));
  const OpContext ctx = context(name, std::move(attrs), types);
  std::vector<HostTensor> host;
  for (const HostIn& in : inputs) host.push_back({in.dtype, in.shape, in.data});
  std::vector<HostTensor> host_params;
  if (op(name).params) {
    const std::vector<ParamSpec> specs = op(name).params(ctx);
    EXPECT_EQ(specs.size(), params.size());
    for (size_t i = 0; i < specs.size() && i < params.size(); ++i)
      host_params.push_back({specs[i].dtype, eval_shape(specs[i].shape, {}), params[i]});
  }
  RefContext ref{ctx, host, host_params, eval_shape(ctx.output.shape, {})};
  return op(name).reference(ref);
}

}  // namespace teeny::op_testing
