#include "core/compare.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <future>
#include <thread>

#include <fmt/format.h>

#include "core/host_executor.h"

namespace teeny {

Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return {1e-4, 1e-3};
    case DType::kF16:
      return {1e-3, 5e-3};
    case DType::kBF16:
      return {1e-2, 1.6e-2};
    case DType::kI32:
      return {0, 0};
  }
  return {0, 0};
}

Comparison compare_values(const HostTensor& got, const HostTensor& expected, Tolerance tolerance) {
  if (got.shape != expected.shape || got.data.size() != expected.data.size()) {
    throw Error(fmt::format("comparing [{}] with [{}]: shapes differ", fmt::join(got.shape, ", "),
                            fmt::join(expected.shape, ", ")));
  }
  Comparison result;
  result.count = static_cast<int64_t>(got.data.size());
  const double rel_floor = tolerance.atol > 0 ? tolerance.atol : 1.0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.data.size(); ++i) {
    const double g = got.data[i], e = expected.data[i];
    double diff = 0, excess = 0;
    bool mismatch = false;
    if (std::isnan(g) || std::isnan(e)) {
      mismatch = std::isnan(g) != std::isnan(e);
      diff = mismatch ? INFINITY : 0;
      excess = diff;
    } else if (std::isinf(g) || std::isinf(e)) {
      mismatch = g != e;
      diff = mismatch ? INFINITY : 0;
      excess = diff;
    } else {
      diff = std::fabs(g - e);
      const double allowed = tolerance.atol + tolerance.rtol * std::fabs(e);
      mismatch = diff > allowed;
      excess = diff - allowed;
    }
    if (mismatch) ++result.mismatches;
    result.max_abs = std::max(result.max_abs, diff);
    result.max_rel = std::max(result.max_rel, diff / std::max(std::fabs(e), rel_floor));
    if (excess > worst_excess) {
      worst_excess = excess;
      result.worst_index = static_cast<int64_t>(i);
      result.worst_got = g;
      result.worst_expected = e;
    }
  }
  return result;
}

bool CheckReport::ok() const {
  if (first_failure >= 0) return false;
  return std::all_of(outputs.begin(), outputs.end(), [](const NodeCheck& c) { return c.result.ok(); });
}

namespace {

constexpr size_t kMaxPendingBytes = size_t{2} << 30;

void add_check(CheckReport& report, const BundleNode& node, const std::string& param, const HostTensor& gpu,
               const HostTensor& reference) {
  NodeCheck check{node.name, node.op,   param,
                  gpu.dtype, gpu.shape, compare_values(gpu, reference, tolerance_for(gpu.dtype))};
  if (!check.result.ok() && report.first_failure < 0) report.first_failure = static_cast<int>(report.nodes.size());
  report.nodes.push_back(std::move(check));
}

}  // namespace

CheckReport check_against_reference(GpuExecutor& executor, const Registry& registry,
                                    const std::map<std::string, HostTensor>& full_run_outputs) {
  const BoundBundle& bound = executor.bound();
  const Bundle& bundle = *bound.bundle;
  CheckReport report;
  std::map<std::string, HostTensor> params;  // as the next node reads them: the GPU's own
  for (const BoundParam& param : bound.params) params[param.name] = executor.read_param(param.name);
  std::map<std::string, HostTensor> node_by_node;
  // A node's reference (in double, often far slower than its kernels) runs on a thread of its own
  // while the GPU goes on with the next nodes: at most a thread a core, holding at most
  // kMaxPendingBytes of copied inputs; checks are added in node order. `pending` is declared after
  // what the threads read, so that an error unwinding from here waits for them first.
  struct PendingCheck {
    size_t node;
    size_t input_bytes;
    std::future<HostTensor> reference;
  };
  std::deque<PendingCheck> pending;
  size_t pending_bytes = 0;
  const size_t max_pending = std::max(1u, std::thread::hardware_concurrency());
  auto finish_oldest = [&] {
    PendingCheck& oldest = pending.front();
    const BundleNode& node = bundle.nodes[oldest.node];
    add_check(report, node, "", node_by_node.at(node.name), oldest.reference.get());
    pending_bytes -= oldest.input_bytes;
    pending.pop_front();
  };
  for (size_t i = 0; i < bundle.nodes.size(); ++i) {
    const BundleNode& node = bundle.nodes[i];
    std::vector<HostTensor> inputs;
    for (const std::string& input : node.inputs) inputs.push_back(executor.read(input));
    for (size_t launch : bound.node_launches(i)) executor.enqueue(launch);
    executor.synchronize(fmt::format("running node '{}' of bundle {} for --check", node.name, bound.label));
    if (node.role == NodeRole::kUpdate && !bound.tensor_index.count(node.name)) {
      while (!pending.empty()) finish_oldest();  // they read the params as they were before this update
      for (auto& [name, reference] : reference_update(bound, registry, i, inputs, params)) {
        params[name] = executor.read_param(name);
        add_check(report, node, name, params[name], reference);
      }
      continue;
    }
    node_by_node[node.name] = executor.read(node.name);
    size_t input_bytes = 0;
    for (const HostTensor& input : inputs) input_bytes += input.data.size() * sizeof(double);
    pending.push_back(
        {i, input_bytes, std::async(std::launch::async, [&bound, &registry, &params, i, in = std::move(inputs)] {
           return reference_node(bound, registry, i, in, params);
         })});
    pending_bytes += input_bytes;
    while (pending.size() >= max_pending || (pending.size() > 1 && pending_bytes > kMaxPendingBytes)) finish_oldest();
  }
  while (!pending.empty()) finish_oldest();
  for (const auto& [name, values] : full_run_outputs) {
    auto it = node_by_node.find(name);
    if (it == node_by_node.end()) continue;  // a graph input passed straight through
    report.outputs.push_back(
        {name, "", "", values.dtype, values.shape, compare_values(values, it->second, tolerance_for(values.dtype))});
  }
  return report;
}

}  // namespace teeny
