// Gradient checks for the CPU tests: a spec with a `train:` section is compiled as `teeny
// compile` compiles it (backward nodes added, every kernel through NVRTC and verified), bound,
// given seeded random inputs and params, and run by the host reference executor; each gradient
// the bundle lists (Bundle::gradients: trained params and `train: inputs:`) is then compared,
// element by element, with a central finite difference of the loss,
//   (L(v + h) - L(v - h)) / 2h,
// where L is the forward graph alone evaluated by the ops' host references in double precision
// (no rounding to the tensors' dtypes) with that one element of the input or param moved by h.
//
// Use f32 graphs with small shapes. The default tolerance: |analytic - numeric| <= rtol |numeric|
// + atol max|numeric| over the tensor, rtol 1e-4 and atol 1e-5, with h 1e-3. The numeric side is
// exact up to the central difference's truncation error, h^2 / 6 |L'''| (of order 1e-7 of the
// gradient for smooth ops at h 1e-3) and double rounding (1e-16 / h); the analytic side rounds
// every tensor of the run to f32, forward activations included, so it carries a few f32 ulps
// (1e-7 relative) per node, more where a rule subtracts nearly equal terms (softmax's
// dy - sum(dy y)), hence atol relative to the tensor's largest gradient rather than to each
// element. Both are an order of magnitude below the tolerance for graphs of a few nodes, while a
// wrong rule (a lost factor, a sign, a misplaced element, a broadcast dim not summed) is off by
// tens of percent of the gradient at some element. Kinks (relu at 0, a max with a near tie) are
// where a finite difference is meaningless: pick seeds whose values stay h away from them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/binding.h"
#include "core/compile.h"
#include "core/graph.h"
#include "core/host_executor.h"
#include "core/run_data.h"
#include "tests/file_test_util.h"

namespace teeny::testing {

struct GradCheckOptions {
  std::vector<std::string> binds;  // "B=3"; dims not given take their defaults
  uint64_t seed = 1;               // inputs and params (params random, PyTorch's ranges)
  double step = 1e-3;              // h
  double rtol = 1e-4;
  double atol = 1e-5;  // times the tensor's largest |numeric|
};

// One gradient's comparison.
struct GradCheck {
  std::string name;    // the param or graph input
  std::string tensor;  // its gradient's tensor
  size_t elements = 0;
  double max_error = 0;                 // max |analytic - numeric|
  double max_numeric = 0;               // max |numeric|
  std::vector<std::string> mismatches;  // "x[3]: analytic 0.25, numeric 0.5" beyond the tolerance
};

namespace grad_check_detail {

inline const std::string& cache_dir() {
  static const ScratchDir dir;
  static const std::string path = dir.str();
  return path;
}

// The name of the param buffer `node` reads as `slot` (its own, or another node's by ref).
inline std::string param_name(const Bundle& bundle, const BundleNode& node, const std::string& slot) {
  if (auto ref = node.param_refs.find(slot); ref != node.param_refs.end()) return ref->second;
  for (const BundleParam& param : bundle.params)
    if (param.node == node.name && param.slot == slot) return param.name;
  throw Error(fmt::format("grad check: node '{}' has no param for slot '{}'", node.name, slot));
}

// The loss from the forward nodes alone, each op's host reference in double, unrounded.
inline double forward_loss(const BoundBundle& bound, const Registry& registry, const std::string& loss,
                           const std::map<std::string, HostTensor>& inputs,
                           const std::map<std::string, HostTensor>& params) {
  const Bundle& bundle = *bound.bundle;
  std::map<std::string, HostTensor> values = inputs;
  for (const BundleNode& node : bundle.nodes) {
    if (node.role != NodeRole::kForward) continue;
    const OpDef& def = *registry.find(node.op);
    OpContext ctx;
    ctx.node = node.name;
    ctx.attrs = Attrs(node.attrs);
    for (const std::string& input : node.inputs) {
      const BundleTensor& t = bundle.tensor(input);
      ctx.inputs.push_back({t.dtype, t.shape, t.row_stride});
    }
    const BundleTensor& out = bundle.tensor(node.name);
    ctx.output = {out.dtype, out.shape, out.row_stride};
    ctx.requested_dtype = node.requested_dtype;
    std::vector<HostTensor> args, node_params;
    for (const std::string& input : node.inputs) args.push_back(values.at(input));
    if (def.params)
      for (const ParamSpec& spec : def.params(ctx))
        node_params.push_back(params.at(param_name(bundle, node, spec.slot)));
    values[node.name] = def.reference(RefContext{ctx, args, node_params, bound.tensor(node.name).shape});
    if (node.name == loss) return values[node.name].data.at(0);
  }
  throw Error(fmt::format("grad check: no forward node '{}'", loss));
}

}  // namespace grad_check_detail

// Compiles `spec` (a graph with a `train:` section) against `registry`, runs it on the host and
// checks every gradient it computes against finite differences. Throws Error as compile and run
// do.
inline std::vector<GradCheck> check_gradients(const std::string& spec, const Registry& registry,
                                              const GradCheckOptions& options = {}) {
  using namespace grad_check_detail;
  const Graph graph = parse_graph(spec, "grad_check.yaml", registry);
  if (!graph.train) throw Error("grad check: the spec has no train: section");
  CompileOptions compile;
  compile.cache_dir = cache_dir();
  const Bundle bundle = compile_graph(graph, registry, compile);
  const BoundBundle bound = bind_bundle(bundle, bundle_bindings(bundle, options.binds), "grad_check.teeny");
  DataOptions data_options;
  data_options.seed = options.seed;
  data_options.fill = ParamFill::kRandom;
  const RunData data = prepare_data(bound, data_options);
  const std::map<std::string, HostTensor> values = run_host(bound, registry, data);

  std::vector<GradCheck> checks;
  for (const auto& [name, tensor] : bundle.gradients) {
    const bool is_input = data.inputs.count(name) > 0;
    std::map<std::string, HostTensor> inputs = data.inputs, params = data.params;
    HostTensor& variable = is_input ? inputs.at(name) : params.at(name);
    const std::vector<double>& analytic = values.at(tensor).data;
    EXPECT_EQ(analytic.size(), variable.data.size()) << name;
    std::vector<double> numeric(variable.data.size());
    for (size_t i = 0; i < numeric.size(); ++i) {
      const double v = variable.data[i];
      variable.data[i] = v + options.step;
      const double up = forward_loss(bound, registry, graph.train->loss, inputs, params);
      variable.data[i] = v - options.step;
      const double down = forward_loss(bound, registry, graph.train->loss, inputs, params);
      variable.data[i] = v;
      numeric[i] = (up - down) / (2 * options.step);
    }
    GradCheck check{name, tensor, numeric.size(), 0, 0, {}};
    for (double n : numeric) check.max_numeric = std::max(check.max_numeric, std::abs(n));
    for (size_t i = 0; i < numeric.size() && i < analytic.size(); ++i) {
      const double error = std::abs(analytic[i] - numeric[i]);
      check.max_error = std::max(check.max_error, error);
      if (!(error <= options.rtol * std::abs(numeric[i]) + options.atol * check.max_numeric))
        check.mismatches.push_back(fmt::format("{}[{}]: analytic {}, numeric {}", name, i, analytic[i], numeric[i]));
    }
    checks.push_back(std::move(check));
  }
  return checks;
}

// check_gradients, expecting gradients for exactly `names` (sorted), each within the tolerance
// and not all zero (a check of zeros against zeros would prove nothing).
inline void expect_gradients_match(const std::string& spec, const Registry& registry,
                                   const std::vector<std::string>& names, const GradCheckOptions& options = {}) {
  std::vector<GradCheck> checks;
  try {
    checks = check_gradients(spec, registry, options);
  } catch (const Error& e) {
    ADD_FAILURE() << e.render() << "\n" << spec;
    return;
  }
  std::vector<std::string> found;
  for (const GradCheck& check : checks) {
    found.push_back(check.name);
    SCOPED_TRACE(fmt::format("gradient of '{}' ({}, {} elements): max |error| {:.3g}, max |numeric| {:.3g}", check.name,
                             check.tensor, check.elements, check.max_error, check.max_numeric));
    EXPECT_GT(check.max_numeric, 0.0);
    EXPECT_TRUE(check.mismatches.empty()) << fmt::format("{}", fmt::join(check.mismatches, "\n"));
  }
  EXPECT_EQ(found, names);
}

}  // namespace teeny::testing
